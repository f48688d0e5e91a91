"""Shared fixtures: small Synthetic datasets and simple components."""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import pytest  # noqa: E402

from fedjax_sel.data.synthetic import synthetic  # noqa: E402


@pytest.fixture(scope="session")
def small_synthetic():
  """Synthetic(0.5, 0.5) with 12 clients of unequal sizes (kept small for speed)."""
  return synthetic(0.5, 0.5, num_clients=12, seed=3)

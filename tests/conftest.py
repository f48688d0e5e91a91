"""Shared fixtures: small Synthetic datasets and simple components."""

import os
import shutil
import tempfile

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# One persistent XLA compilation cache for the whole run, made by the first process that
# loads this file (xdist's controller; its workers and every subprocess a test starts
# inherit it): tests build many programs that are equal (each cell of a study binary, each
# Simulation), and a cache hit skips their compilation (the Clustered Sampling --quick test:
# 78 s -> 50 s from an empty cache). A cache hit returns the same executable, so no result
# changes. Set JAX_COMPILATION_CACHE_DIR to use a cache of your own.
_OWN_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _OWN_CACHE = tempfile.mkdtemp(prefix="fedjax_sel_test_xla_cache_")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import pytest  # noqa: E402

from fedjax_sel.data.synthetic import synthetic  # noqa: E402


@pytest.fixture(scope="session")
def small_synthetic():
  """Synthetic(0.5, 0.5) with 12 clients of unequal sizes (kept small for speed)."""
  return synthetic(0.5, 0.5, num_clients=12, seed=3)


def pytest_unconfigure(config):
  """The process that made the run's compilation cache removes it at the end."""
  if _OWN_CACHE is not None:
    shutil.rmtree(_OWN_CACHE, ignore_errors=True)

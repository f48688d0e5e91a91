"""Shared fixtures for the availability tests."""

import jax.numpy as jnp
import pytest

from fedjax_sel.core.types import ClientInfo


@pytest.fixture
def info6() -> ClientInfo:
  """Six clients, three classes, unequal sizes and label sets (one client has no data)."""
  return ClientInfo(
    num_examples=jnp.array([10, 40, 90, 160, 1, 0], jnp.int32),
    label_counts=jnp.array(
      [[1, 9, 0], [0, 20, 20], [0, 0, 90], [100, 0, 60], [0, 1, 0], [0, 0, 0]], jnp.int32
    ),
  )

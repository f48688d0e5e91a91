"""A small fake world for selection tests: ``fedjax_sel.testing``'s, under short names."""

from __future__ import annotations

import jax
import pytest

from fedjax_sel import testing
from fedjax_sel.core.types import ClientInfo, SelectionContext

NUM_CLIENTS = 12
NUM_CLASSES = 4


def make_info(
  num_clients: int = NUM_CLIENTS, num_classes: int = NUM_CLASSES, seed: int = 0
) -> ClientInfo:
  """Clients with 1..40 examples spread unevenly over the classes (``toy_client_info``)."""
  return testing.toy_client_info(num_clients, num_classes, seed)


def fixed_losses(num_clients: int = NUM_CLIENTS) -> jax.Array:
  """The toy context's ``client_losses``: ((7 i) mod N) / N + 0.1 for client i."""
  return testing.toy_client_losses(num_clients)


eval_value = testing.toy_eval_value  # 1 / (1 + ||w - 1||^2), the toy context's


def make_ctx(info: ClientInfo, t=0, seed: int = 0) -> SelectionContext:
  """``toy_selection_context``: callables that are plain functions of fixed arrays."""
  return testing.toy_selection_context(info, t, seed)


def fake_deltas(cohort: jax.Array) -> dict:
  """Per-slot updates pointing client i towards w = 1 with strength (i + 1) / N."""
  return testing.toy_deltas(cohort, NUM_CLIENTS)


@pytest.fixture
def info() -> ClientInfo:
  return make_info()

"""Fixtures shared by the aggregation tests."""

import chex
import pytest


@pytest.fixture(autouse=True)
def _clear_chex_trace_counter():
  """Each test counts its own traces (see aggregation_testlib.jitted_apply)."""
  chex.clear_trace_counter()
  yield

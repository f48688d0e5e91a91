"""FedAvg's ``weighting``: the selection's weights, or the plain mean of the valid slots."""

import jax.numpy as jnp
import pytest

from fedjax_sel import aggregation
from fedjax_sel.core.types import Selection


def _apply(weighting, avail):
  agg = aggregation.make("fedavg", weighting=weighting)
  deltas = {"w": jnp.array([[1.0], [2.0], [4.0]])}
  sel = Selection(
    cohort=jnp.array([0, 1, 2]),
    valid=jnp.array([True, True, False]),
    weights=jnp.array([0.5, 0.3, 0.2]),
  )
  state = agg.init({"w": jnp.zeros((1,))}, None)
  update, _ = agg.apply(state, deltas, sel, jnp.asarray(avail), jnp.int32(0))
  return float(update["w"][0])


def test_selection_weights_by_hand():
  # 0.5 * 1 + 0.3 * 2 (the invalid slot's 4 and weight 0.2 count for nothing)
  assert _apply("selection", [True, True, True]) == pytest.approx(1.1)
  # slot 1 unavailable: 0.5 rescaled to the valid total 0.8 -> 0.8 * 1
  assert _apply("selection", [True, False, True]) == pytest.approx(0.8)


def test_uniform_is_the_plain_mean_of_valid_slots():
  assert _apply("uniform", [True, True, True]) == pytest.approx(1.5)  # (1 + 2) / 2
  # slot 1 unavailable: its 1/2 goes to slot 0 (rescaled to the valid total 1)
  assert _apply("uniform", [True, False, True]) == pytest.approx(1.0)


def test_bad_weighting():
  with pytest.raises(ValueError, match=r"weighting='size'.*'selection', 'uniform'"):
    aggregation.make("fedavg", weighting="size")


def test_uniform_with_one_valid_slot_is_that_slot():
  """One valid slot: weight 1 (the plain mean of one model), whatever the selection says."""
  agg = aggregation.make("fedavg", weighting="uniform")
  deltas = {"w": jnp.array([[3.0], [5.0]])}
  sel = Selection(
    cohort=jnp.array([0, 1]), valid=jnp.array([True, False]), weights=jnp.array([0.2, 0.8])
  )
  state = agg.init({"w": jnp.zeros((1,))}, None)
  update, _ = agg.apply(state, deltas, sel, jnp.array([True, True]), jnp.int32(0))
  assert float(update["w"][0]) == pytest.approx(3.0)


@pytest.mark.parametrize("weighting", ["selection", "uniform"])
def test_state_counts_rounds(weighting):
  agg = aggregation.make("fedavg", weighting=weighting)
  deltas = {"w": jnp.array([[1.0]])}
  sel = Selection(cohort=jnp.array([0]), valid=jnp.array([True]), weights=jnp.array([1.0]))
  state = agg.init({"w": jnp.zeros((1,))}, None)
  for t in range(3):
    _, state = agg.apply(state, deltas, sel, jnp.array([True]), jnp.int32(t))
  assert int(state.rounds) == 3

"""Dropout, Full and Stale on hand-computed cases: who counts, with which weight, and the
round counter (FL-FDMS Sec. 6 baselines)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from fedjax_sel import aggregation
from tests.aggregation.aggregation_testlib import aux_of, make_info, selection_of

SIZES = [1.0, 2.0, 3.0, 4.0]  # n_i of clients 0..3


def _round(agg, state, cohort, rows, avail):
  deltas = {"w": jnp.asarray(rows, jnp.float32)[:, None]}
  aux = aux_of(4, len(cohort), num_examples=SIZES)
  return agg.apply(state, deltas, selection_of(cohort), jnp.asarray(avail), jnp.int32(0), aux)


@pytest.mark.parametrize(
  "name,weighting,want",
  [
    # Cohort (0, 3, 2) with updates 1, 3, 100; client 2 is unavailable this round.
    ("dropout", "uniform", (1 + 3) / 2),
    ("dropout", "num_examples", (1 * 1 + 4 * 3) / (1 + 4)),
    ("full", "uniform", (1 + 3) / 2),
    ("full", "num_examples", (1 * 1 + 4 * 3) / (1 + 4)),
  ],
)
def test_average_of_the_received_updates(name, weighting, want):
  agg = aggregation.make(name, weighting=weighting)
  state = agg.init({"w": jnp.zeros((1,))}, None)
  for rounds in (1, 2):
    update, state = _round(agg, state, [0, 3, 2], [1.0, 3.0, 100.0], [True, True, False, True])
    assert float(update["w"][0]) == pytest.approx(want, rel=1e-6)
    assert int(state.rounds) == rounds


def test_defaults_follow_the_paper():
  """FL-FDMS Sec. 6: Dropout and Stale average 1/S_t and 1/K, Full weighs by n_i."""
  import inspect

  from fedjax_sel.aggregation import dropout, full, stale

  for make, want in (
    (dropout.make_dropout, "uniform"),
    (stale.make_stale, "uniform"),
    (full.make_full, "num_examples"),
  ):
    assert inspect.signature(make).parameters["weighting"].default == want


@pytest.mark.parametrize(
  "weighting,want1,want2",
  [
    ("uniform", (1 + 3) / 2, (1 + 3 + 5) / 3),
    ("num_examples", (1 * 1 + 2 * 3) / 3, (1 * 1 + 2 * 3 + 3 * 5) / (1 + 2 + 3)),
  ],
)
def test_stale_reuses_the_last_update_of_a_dropped_client(weighting, want1, want2):
  """Round 1: clients 0 and 1 answer 1 and 3. Round 2: client 0 drops (its 1 is reused),
  client 2 answers 5; client 3 never answers and counts for nothing."""
  agg = aggregation.make("stale", weighting=weighting)
  state = agg.init({"w": jnp.zeros((1,))}, make_info([1, 2, 3, 4]))
  update, state = _round(agg, state, [0, 1], [1.0, 3.0], [True, True, True, True])
  assert float(update["w"][0]) == pytest.approx(want1, rel=1e-6)
  update, state = _round(agg, state, [0, 2], [50.0, 5.0], [False, True, True, True])
  assert float(update["w"][0]) == pytest.approx(want2, rel=1e-6)
  assert state.seen.tolist() == [True, True, True, False] and int(state.rounds) == 2


def test_safe_divide_is_zero_where_the_denominator_is_zero():
  from fedjax_sel.aggregation._common import safe_divide

  out = safe_divide(jnp.asarray([1.0, 2.0, 3.0]), jnp.asarray([2.0, 0.0, -1.0]))
  assert out.tolist() == [0.5, 0.0, 0.0]  # a non-positive denominator gives 0
  assert safe_divide(jnp.asarray([4.0, 0.0]), jnp.asarray(0.0)).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("self_normalize,want", [(False, 1 * 1 + 0.5 * 2), (True, (1 + 1) / 1.5)])
def test_fedavg_is_by_hand(self_normalize, want):
  """n = (1, 1, 2) -> shares (.25, .25, .5); p = (.25, .25, 1); client 1 is away. The
  received weights are .25 / .25 = 1 and .5 / 1 = .5 on updates 1 and 2 (Horvitz-Thompson),
  divided by their sum 1.5 when self-normalized (Hajek); the away client counts for nothing."""
  agg = aggregation.make("fedavg_is", self_normalize=self_normalize)
  state = agg.init({"w": jnp.zeros((1,))}, None)
  aux = aux_of(3, 3, probs=[0.25, 0.25, 1.0], num_examples=[1.0, 1.0, 2.0])
  deltas = {"w": jnp.asarray([[1.0], [5.0], [2.0]])}
  for rounds in (1, 2):
    update, state = agg.apply(
      state, deltas, selection_of([0, 1, 2]), jnp.asarray([True, False, True]), jnp.int32(0), aux
    )
    assert float(update["w"][0]) == pytest.approx(want, rel=1e-6)
    assert int(state.rounds) == rounds


def test_fedavg_is_ranges():
  for bad in ({"min_prob": 0.0}, {"min_prob": 1.5}, {"self_normalize": 1}):
    with pytest.raises(ValueError, match=next(iter(bad))):
      aggregation.make("fedavg_is", **bad)
  aggregation.make("fedavg_is", min_prob=1.0)

"""The memories hold G_i = delta_i / eta and the update is eta_t times their weighted sum
(FedAR Eq. 4 and 7, MIFA Algorithm 1): hand-computed values under a decaying lr with a client
absent for several rounds, the numpy reference (tests/reference/numpy_fl.py) under a decaying
lr, and bit-for-bit equality with the plain delta memory under a constant lr."""

from __future__ import annotations

import aggregation_testlib as lib
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_reference_aggregators as tra
from reference import numpy_fl as ref

from fedjax_sel import aggregation

N = 3
LR0, DECAY = 0.1, 0.9
# rows of the 'b' leaf per round; client 2 answers in round 0 only
ROWS = {
  0: [[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]],
  1: [[2.0, 2.0], [4.0, 0.0], [9.0, 9.0]],
  2: [[0.0, 1.0], [1.0, 1.0], [9.0, 9.0]],
  3: [[3.0, 0.0], [0.0, 3.0], [9.0, 9.0]],
  4: [[1.0, 2.0], [2.0, 4.0], [9.0, 9.0]],
}


def _run(name, hp, decay=DECAY, rounds=5):
  """Client 2 available in round 0 only (its row of later rounds, 9s, must never arrive)."""
  agg = aggregation.make(name, **hp)
  apply = jax.jit(agg.apply)
  state = agg.init(lib.make_params(), lib.make_info(np.ones(N)))
  updates = []
  for t in range(rounds):
    avail = jnp.array([True, True, t == 0])
    aux = lib.aux_of(N, N, lr=LR0 * decay**t)
    sel = lib.selection_of(jnp.arange(N), avail)
    update, state = apply(state, lib.deltas_from_b(ROWS[t]), sel, avail, jnp.int32(t), aux)
    updates.append(np.asarray(update["b"], np.float64))
  return updates, state


def _b(t, i):
  return np.asarray(ROWS[t][i], np.float64)


def test_mifa_steps_by_the_current_lr_times_the_mean_of_g():
  """Round 4: G_0 = D_0/eta_4, G_1 = D_1/eta_4, G_2 = D_2(round 0)/eta_0, so
  eta_4 (1/3) sum G = (D_0 + D_1 + 0.9^4 D_2(round 0)) / 3; a delta memory would give
  (D_0 + D_1 + D_2(round 0)) / 3."""
  updates, state = _run("mifa", {})
  want = (_b(4, 0) + _b(4, 1) + DECAY**4 * _b(0, 2)) / 3
  np.testing.assert_allclose(updates[4], want, rtol=1e-6)
  assert np.abs(want - (_b(4, 0) + _b(4, 1) + _b(0, 2)) / 3).max() > 0.5
  # the stored lr of each row: client 2's is round 0's
  np.testing.assert_allclose(state.memory_lr, [LR0 * DECAY**4] * 2 + [LR0], rtol=1e-6)
  for t in range(1, 4):  # every round: fresh rows as they are, client 2's scaled by 0.9^t
    want = (_b(t, 0) + _b(t, 1) + DECAY**t * _b(0, 2)) / 3
    np.testing.assert_allclose(updates[t], want, rtol=1e-6)


def test_fedar_eq7_under_a_decaying_lr():
  """Round 4 with rho 0.5 and no cutoff: tau_2 = 4, psi_2 = min(sqrt(5), 2) = 2, N_t = 3:
  eta_4 / 3 (G_0 + G_1 + 2 G_2) = (D_0 + D_1 + 2 x 0.9^4 D_2(round 0)) / 3."""
  updates, state = _run("fedar", {"rho": 0.5, "cutoff": "none"})
  want = (_b(4, 0) + _b(4, 1) + 2.0 * DECAY**4 * _b(0, 2)) / 3
  np.testing.assert_allclose(updates[4], want, rtol=1e-6)
  assert int(state.staleness[2]) == 4


def test_fedvarp_under_a_decaying_lr():
  """Round 4, S = {0, 1}: memory y_0, y_1 from round 3 (eta_3), y_2 from round 0 (eta_0);
  update = (1/3) sum_j (eta_4/eta_j) y_j + (1/2) sum_{m in S} (D_m - (eta_4/eta_m) y_m)."""
  updates, _ = _run("fedvarp", {})
  mem = (DECAY * _b(3, 0) + DECAY * _b(3, 1) + DECAY**4 * _b(0, 2)) / 3
  corr = ((_b(4, 0) - DECAY * _b(3, 0)) + (_b(4, 1) - DECAY * _b(3, 1))) / 2
  np.testing.assert_allclose(updates[4], mem + corr, rtol=1e-6)


@pytest.mark.parametrize(
  "name,hp",
  [
    ("mifa", {}),
    ("mifa", {"average_over": "seen", "weighting": "num_examples"}),
    ("fedar", tra.FEDAR_HP),
    ("fedvarp", {}),
    ("fedvarp", {"weighting": "num_examples"}),
  ],
)
def test_constant_lr_is_bit_for_bit_the_delta_memory(name, hp):
  """With one lr every round, eta_t / eta_i = 1 exactly: the updates and memories equal
  those without any lr (aux.lr None, the delta memory) bit for bit, over the 8-round
  schedule of every way a slot can fail to arrive."""
  agg = lib.build(name, hp)
  apply = jax.jit(agg.apply)
  states = [agg.init(lib.make_params(), lib.make_info(tra.SIZES)) for _ in range(2)]
  for t, (deltas, sel, avail, aux, _) in enumerate(tra.rounds()):
    got = []
    for k, a in enumerate((aux, aux._replace(lr=jnp.full((tra.N,), 0.1, jnp.float32)))):
      update, states[k] = apply(states[k], deltas, sel, avail, jnp.int32(t), aux=a)
      got.append(update)
    for leaf0, leaf1 in zip(jax.tree_util.tree_leaves(got[0]), jax.tree_util.tree_leaves(got[1])):
      np.testing.assert_array_equal(np.asarray(leaf0), np.asarray(leaf1))
  np.testing.assert_array_equal(states[0].memory["b"], states[1].memory["b"])


REFERENCE_CASES = [
  ("mifa", {"weighting": "uniform"}),
  ("mifa", {"weighting": "num_examples"}),
  ("mifa", {"weighting": "uniform", "average_over": "seen"}),
  ("fedar", dict(tra.FEDAR_HP, weighting="uniform")),
  ("fedar", dict(tra.FEDAR_HP, weighting="num_examples")),
]


@pytest.mark.parametrize(
  "name,hp",
  REFERENCE_CASES,
  ids=[f"{n}-{'-'.join(map(str, h.values()))}" for n, h in REFERENCE_CASES],
)
def test_decaying_lr_equals_numpy_reference(name, hp):
  """The 8-round schedule with eta_t = 0.3 x 0.8^t, against numpy that stores G = delta/eta
  and steps by eta_t (client 2 is away in rounds 4-7, client 4 in 4-6)."""
  sizes = tra.SIZES if hp.get("weighting") == "num_examples" else None
  params = {"w": np.zeros((3, 2)), "b": np.zeros(2)}
  if name == "mifa":
    rule = ref.MIFA(params, tra.N, sizes, seen_only=hp.get("average_over") == "seen")
  else:
    fhp = {k: v for k, v in tra.FEDAR_HP.items() if k != "cutoff"}
    rule = ref.FedAR(params, tra.N, sizes=sizes, **fhp)
  agg = lib.build(name, hp)
  apply = jax.jit(agg.apply)
  state = agg.init(lib.make_params(), lib.make_info(tra.SIZES))
  for t, (deltas, sel, avail, aux, facts) in enumerate(tra.rounds()):
    lr = 0.3 * 0.8**t
    update, state = apply(
      state,
      deltas,
      sel,
      avail,
      jnp.int32(t),
      aux=aux._replace(lr=jnp.full((tra.N,), lr, jnp.float32)),
    )
    np_deltas, cohort, _, _, received = facts
    want = rule(np_deltas, cohort, received, t, [lr] * tra.N)
    for k in want:
      np.testing.assert_allclose(
        np.asarray(update[k], np.float64), want[k], rtol=1e-5, atol=1e-6, err_msg=f"round {t}"
      )


def test_per_client_lrs_rescale_each_row_by_its_own_ratio():
  """aux.lr per client (a per-client schedule): round 1 gives client 0 lr 0.5 (it trained
  with 0.25 in round 0 and is away now) and client 1 lr 0.1 (fresh); MIFA's update is
  (1/2) (0.5/0.25 D_0 + D_1)."""
  agg = aggregation.make("mifa")
  state = agg.init(lib.make_params(), lib.make_info(np.ones(2)))
  sel = lib.selection_of(jnp.arange(2))
  d0 = lib.deltas_from_b([[1.0, 2.0], [0.0, 0.0]])
  _, state = agg.apply(state, d0, sel, jnp.array([True, True]), 0, lib.aux_of(2, 2, lr=0.25))
  d1 = lib.deltas_from_b([[7.0, 7.0], [3.0, -1.0]])
  aux = lib.aux_of(2, 2, lr=jnp.array([0.5, 0.1]))
  update, _ = agg.apply(state, d1, sel, jnp.array([False, True]), 1, aux)
  np.testing.assert_allclose(update["b"], [(2.0 * 1.0 + 3.0) / 2, (2.0 * 2.0 - 1.0) / 2])

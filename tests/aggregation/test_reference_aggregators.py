"""FedAvg, MIFA, Stale and FedAR over eight rounds against numpy written from their equations.

The reference (tests/reference/numpy_fl.py) shares no code with ``fedjax_sel``. The schedule
is built so that every way a slot can fail to arrive occurs: a valid slot whose client is
unavailable (it trained but its update must not refresh any memory), a valid slot flagged
non-finite in ``aux``, a slot whose delta holds a NaN, an invalid slot naming a real client,
and a round in which nothing arrives. FedAR's hyper-parameters put a client exactly between
g(t) and g(t + 1) in three rounds (FedAR's round is 1-based), so the staleness weight taken
at the wrong round changes the update.
"""

from __future__ import annotations

import aggregation_testlib as lib
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from reference import numpy_fl as ref

N, M, T = 6, 3, 8
SIZES = np.array([5, 1, 3, 8, 2, 4])
#               cohort      valid      finite flag  client availability (N = 6)
SCHEDULE = [
  ([0, 1, 2], [1, 1, 1], [1, 1, 1], [1, 1, 1, 1, 1, 0]),
  ([3, 4, 0], [1, 1, 1], [1, 1, 1], [0, 1, 1, 1, 1, 1]),  # 0 unavailable, valid
  ([1, 5, 2], [1, 1, 0], [1, 0, 1], [1, 1, 1, 1, 1, 1]),  # 5 flagged non-finite; 2 invalid
  ([2, 3, 4], [1, 1, 1], [1, 1, 1], [1, 1, 1, 1, 1, 1]),  # slot 1 (client 3) holds a NaN
  ([5, 0, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1, 1, 1, 1]),
  ([0, 1, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1, 0, 1, 1]),  # 3 unavailable, valid
  ([0, 1, 2], [0, 0, 0], [1, 1, 1], [1, 1, 1, 1, 1, 1]),  # nobody
  ([3, 5, 4], [1, 1, 1], [1, 1, 1], [1, 1, 1, 1, 1, 1]),
]
NAN_AT = (3, 1)  # (round, slot)
FEDAR_HP = dict(rho=0.5, cutoff="convex", t0=0.5, b=2.5, psi_max=1.5)


def rounds():
  """Per round: (deltas pytree [M, ...], Selection, avail, aux, numpy facts)."""
  key = jax.random.PRNGKey(42)
  out = []
  for t, (cohort, valid, finite, avail) in enumerate(SCHEDULE):
    deltas = lib.random_deltas(jax.random.fold_in(key, t), M)
    if t == NAN_AT[0]:
      deltas["b"] = deltas["b"].at[NAN_AT[1], 0].set(jnp.nan)
    valid_a = np.asarray(valid, bool)
    w = np.where(valid_a, SIZES[cohort], 0.0)
    w = w / w.sum() if w.sum() else w
    sel = lib.selection_of(cohort, valid_a, w)
    aux = lib.aux_of(N, M, num_examples=SIZES, finite=finite)
    np_deltas = [
      {k: np.asarray(v[m], np.float64) for k, v in jax.device_get(deltas).items()} for m in range(M)
    ]
    received = [
      bool(valid[m] and finite[m] and avail[cohort[m]] and (t, m) != NAN_AT) for m in range(M)
    ]
    facts = (np_deltas, cohort, valid, w, received)
    out.append((deltas, sel, jnp.asarray(avail, bool), aux, facts))
  return out


def reference(name, weighting):
  sizes = SIZES if weighting == "num_examples" else None
  params = {"w": np.zeros((3, 2)), "b": np.zeros(2)}
  if name == "fedavg":
    return lambda d, c, v, w, r, t: ref.fedavg(d, w, v, r)
  if name == "mifa":
    rule = ref.MIFA(params, N, sizes)
  elif name == "stale":
    rule = Stale(params, sizes)
  else:
    hp = {k: v for k, v in FEDAR_HP.items() if k != "cutoff"}
    rule = ref.FedAR(params, N, sizes=sizes, **hp)
  return lambda d, c, v, w, r, t: rule(d, c, r, t)


class Stale:
  """Stale substitution (FL-FDMS's baseline): the mean (q-weighted) of the latest update of
  every client that ever answered."""

  def __init__(self, params, sizes):
    self.memory, self.seen = {}, set()
    self.q = np.ones(N) if sizes is None else np.asarray(sizes, np.float64)
    self.zero = ref.zeros_like(params)

  def __call__(self, deltas, cohort, received, t):
    for m, d in enumerate(deltas):
      if received[m]:
        self.memory[cohort[m]] = d
    if not self.memory:
      return self.zero
    total = sum(self.q[i] for i in self.memory)
    out = self.zero
    for i, g in self.memory.items():
      out = ref.tmap(lambda o, g_, c=self.q[i] / total: o + c * g_, out, g)
    return out


CASES = [
  ("fedavg", {}),
  ("mifa", {"weighting": "uniform"}),
  ("mifa", {"weighting": "num_examples"}),
  ("stale", {"weighting": "uniform"}),
  ("stale", {"weighting": "num_examples"}),
  ("fedar", dict(FEDAR_HP, weighting="uniform")),
  ("fedar", dict(FEDAR_HP, weighting="num_examples")),
]


IDS = [f"{n}-{h.get('weighting', '')}" for n, h in CASES]


@pytest.mark.parametrize("name,hp", CASES, ids=IDS)
def test_aggregator_equals_numpy_reference(name, hp):
  agg = lib.build(name, hp)
  apply = jax.jit(agg.apply)
  state = agg.init(lib.make_params(), lib.make_info(SIZES))
  want_rule = reference(name, hp.get("weighting", "uniform"))
  for t, (deltas, sel, avail, aux, facts) in enumerate(rounds()):
    update, state = apply(state, deltas, sel, avail, jnp.int32(t), aux=aux)
    np_deltas, cohort, valid, w, received = facts
    want = want_rule(np_deltas, cohort, valid, w, received, t)
    for k in want:
      np.testing.assert_allclose(
        np.asarray(update[k], np.float64), want[k], rtol=1e-5, atol=1e-6, err_msg=f"round {t}"
      )


def test_fedar_staleness_and_weights_by_hand():
  """The FedAR state over the schedule, worked out by hand from Eq. (5)-(6).

  g(s) = 0.5 + s / 2.5 at the paper's round s = t + 1: 0.9, 1.3, 1.7, 2.1, 2.5, 2.9, 3.3, 3.7.
  Arrivals: t0 {0,1,2}; t1 {3,4}; t2 {1}; t3 {2,4}; t4 {5,0,1}; t5 {0,1}; t6 {}; t7 {3,5,4}.
  """
  tau = [
    [0, 0, 0, 1, 1, 1],
    [1, 1, 1, 0, 0, 2],
    [2, 0, 2, 1, 1, 3],
    [3, 1, 0, 2, 0, 4],
    [0, 0, 1, 3, 1, 0],
    [0, 0, 2, 4, 2, 1],
    [1, 1, 3, 5, 3, 2],
    [2, 2, 4, 0, 0, 0],
  ]
  seen = [
    [1, 1, 1, 0, 0, 0],
    [1, 1, 1, 1, 1, 0],
    [1, 1, 1, 1, 1, 0],
    [1, 1, 1, 1, 1, 0],
    [1, 1, 1, 1, 1, 1],
    [1, 1, 1, 1, 1, 1],
    [1, 1, 1, 1, 1, 1],
    [1, 1, 1, 1, 1, 1],
  ]
  # N_t: seen clients with tau < g(t + 1). t1: g = 1.3 keeps tau 1 (g(1) = 0.9 would not);
  # t3: g = 2.1 keeps tau 2 (g(3) = 1.7 would not); t6: g = 3.3 keeps tau 3 (2.9 would not).
  contributing = [3, 5, 3, 4, 5, 5, 5, 5]
  agg = lib.build("fedar", dict(FEDAR_HP, weighting="uniform"))
  apply = jax.jit(agg.apply)
  state = agg.init(lib.make_params(), lib.make_info(SIZES))
  for t, (deltas, sel, avail, aux, _) in enumerate(rounds()):
    _, state = apply(state, deltas, sel, avail, jnp.int32(t), aux=aux)
    np.testing.assert_array_equal(np.asarray(state.staleness), tau[t], err_msg=f"round {t}")
    np.testing.assert_array_equal(np.asarray(state.seen), np.asarray(seen[t], bool))
    assert int(state.rounds) == t + 1
    assert float(state.num_contributing) == contributing[t], t


def test_unreceived_valid_slot_leaves_memory_alone():
  """Round 1 trains client 0 in a valid slot while it is unavailable: MIFA's memory row 0
  must still hold its round-0 update, and round 2's non-finite-flagged client 5 stays zero."""
  agg = lib.build("mifa", {"weighting": "uniform"})
  apply = jax.jit(agg.apply)
  state = agg.init(lib.make_params(), lib.make_info(SIZES))
  data = rounds()
  for t in range(3):
    deltas, sel, avail, aux, _ = data[t]
    _, state = apply(state, deltas, sel, avail, jnp.int32(t), aux=aux)
  r0 = data[0][0]
  for k in ("w", "b"):
    np.testing.assert_array_equal(np.asarray(state.memory[k][0]), np.asarray(r0[k][0]))
    np.testing.assert_array_equal(np.asarray(state.memory[k][5]), 0.0)


def test_fedar_default_constants():
  """FedAR's defaults: rho = 0.1, psi_max = 2, convex g(t) = 10 + t / 4, non-convex
  g(t) = 1 * sqrt(max(t, 10))."""
  from fedjax_sel.aggregation.fedar import staleness_cutoff, staleness_weight

  assert float(staleness_cutoff(8)) == pytest.approx(12.0)
  assert float(staleness_cutoff(16, "nonconvex")) == pytest.approx(4.0)
  assert float(staleness_cutoff(3, "nonconvex")) == pytest.approx(10**0.5)
  assert float(staleness_weight(3, 1)) == pytest.approx(4**0.1, rel=1e-6)
  assert float(staleness_weight(0, 1)) == 1.0
  # the default convex cutoff at its boundary: g(8) = 12 drops tau 12, g(20) = 15 keeps 14
  assert float(staleness_weight(12, 8)) == 0.0
  assert float(staleness_weight(14, 20)) == pytest.approx(min(15**0.1, 2.0), rel=1e-6)


@pytest.mark.parametrize(
  "cutoff,last_kept",
  [
    # convex: tau = t is kept while t < 10 + (t + 1) / 4, i.e. up to t = 13
    ("convex", 13),
    # non-convex: g = sqrt(10) = 3.16 for the paper's rounds up to 10: kept up to t = 3
    ("nonconvex", 3),
  ],
)
def test_fedar_defaults_drop_a_stale_client(cutoff, last_kept):
  """Client 1 answers only in round 0, client 0 every round: client 1's update counts with
  psi = (t + 1)^0.1 (default rho) until its staleness reaches g, then N_t drops to 1."""
  agg = lib.build("fedar", {"cutoff": cutoff})
  apply = jax.jit(agg.apply)
  n = 2
  state = agg.init(lib.make_params(), lib.make_info(np.ones(n)))
  d1 = np.array([0.0, 3.0])
  for t in range(last_kept + 2):
    avail = jnp.array([True, t == 0])
    deltas = lib.deltas_from_b([[1.0, 0.0], d1])
    update, state = apply(
      state, deltas, lib.selection_of(jnp.arange(n), avail), avail, jnp.int32(t)
    )
    if t <= last_kept:
      want = (np.array([1.0, 0.0]) + min((t + 1.0) ** 0.1, 2.0) * d1) / 2
    else:
      want = np.array([1.0, 0.0])
    np.testing.assert_allclose(np.asarray(update["b"]), want, rtol=1e-6, err_msg=f"t={t}")


@pytest.mark.parametrize(
  "hp,match",
  [
    ({"rho": 1.5}, "rho=1.5"),
    ({"rho": -0.1}, "rho=-0.1"),
    ({"t0": 0.0}, "t0=0.0"),
    ({"b": 2.0}, "b=2.0"),
    ({"scale": 0.0}, "scale=0.0"),
    ({"scale": -1.0}, "scale=-1.0"),
    ({"psi_max": 0.5}, "psi_max=0.5"),
    ({"cutoff": "linear"}, "cutoff='linear'"),
    ({"weighting": "size"}, "weighting='size'"),
  ],
)
def test_fedar_rejects_bad_constants(hp, match):
  from fedjax_sel import aggregation

  with pytest.raises(ValueError, match=match.replace("(", r"\(")):
    aggregation.make("fedar", **hp)


def test_fedar_default_psi_cap():
  """rho = 1 makes (tau + 1)^rho exceed the default cap psi_max = 2 from tau = 2 on."""
  agg = lib.build("fedar", {"rho": 1.0})
  apply = jax.jit(agg.apply)
  state = agg.init(lib.make_params(), lib.make_info(np.ones(2)))
  d1 = np.array([0.0, 3.0])
  for t in range(4):
    avail = jnp.array([True, t == 0])
    deltas = lib.deltas_from_b([[1.0, 0.0], d1])
    update, state = apply(state, deltas, lib.selection_of(jnp.arange(2), avail), avail, t)
    want = (np.array([1.0, 0.0]) + [1.0, 2.0, 2.0, 2.0][t] * d1) / 2
    np.testing.assert_allclose(np.asarray(update["b"]), want, rtol=1e-6, err_msg=f"t={t}")

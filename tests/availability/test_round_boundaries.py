"""Round-indexed availability formulas at their first rounds and period boundaries, against
values worked out by hand here (FedGS Table 1; the trace replay)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import availability
from fedjax_sel.core.types import ClientInfo

# 5 clients, C = 4 labels. Held labels: {0}, {1, 3}, {2}, {} (no data), {0, 1, 2, 3}.
LABELS = np.array([[3, 0, 0, 0], [0, 2, 0, 5], [0, 0, 4, 0], [0, 0, 0, 0], [1, 1, 1, 1]], np.int32)
SIZES = np.array([4, 8, 2, 1, 16], np.int32)
INFO = ClientInfo(num_examples=jnp.asarray(SIZES), label_counts=jnp.asarray(LABELS))


def probs_at(model, rounds, key=0):
  state = model.init(jax.random.PRNGKey(key), INFO)
  return np.stack([np.asarray(model.probs(state, jnp.int32(t))) for t in rounds])


def test_yc_phase_label_at_every_round_of_two_periods():
  """T = 8, C = 4: the phase (1 + t % 8) / 8 falls in label bin floor(4 (1 + t % 8) / 8):
  t % 8 = 0 -> 0 (r = 1/8), 1, 2 -> 1, 3, 4 -> 2, 5, 6 -> 3, 7 -> none (r = 1)."""
  beta = 0.6
  phase = {0: 0, 1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3, 7: None}
  rounds = list(range(17)) + [23, 24]
  got = probs_at(availability.make("yc", beta=beta, period=8), rounds)
  for row, t in zip(got, rounds):
    label = phase[t % 8]
    boosted = [label is not None and LABELS[k, label] > 0 for k in range(5)]
    want = [1.0 if b else 1.0 - beta for b in boosted]
    np.testing.assert_allclose(row, want, rtol=1e-6, err_msg=f"round {t}")
  # spelled out for client 1 (labels 1 and 3) over the first period
  np.testing.assert_allclose(got[:8, 1], [0.4, 1, 1, 0.4, 0.4, 1, 1, 0.4], rtol=1e-6)
  # the all-label client is boosted except at the period's last round
  np.testing.assert_allclose(got[:9, 4], [1, 1, 1, 1, 1, 1, 1, 0.4, 1], rtol=1e-6)


def test_yc_period_one_never_boosts():
  # T = 1: the phase is always r = 1, outside every bin.
  got = probs_at(availability.make("yc", beta=0.3, period=1), [0, 1, 5])
  np.testing.assert_allclose(got, 0.7, rtol=1e-6)


def test_sln_sine_factor_at_quarter_periods():
  """T = 4: 0.4 sin(2 pi (1 + t % 4) / 4) + 0.5 = 0.9, 0.5, 0.1, 0.5, then again 0.9."""
  model = availability.make("sln", beta=0.5, period=4)
  rounds = [0, 1, 2, 3, 4, 5, 7, 8]
  got = probs_at(model, rounds)
  factor = {0: 0.9, 1: 0.5, 2: 0.1, 3: 0.5}
  base = got[0] / 0.9
  assert float(base.max()) == pytest.approx(1.0, rel=1e-6)  # c_k / max c: the largest is 1
  for row, t in zip(got, rounds):
    np.testing.assert_allclose(row, base * factor[t % 4], rtol=1e-5, atol=1e-7)


def test_sln_period_24_first_rounds():
  model = availability.make("sln", beta=0.0, period=24)  # beta 0: every c_k = 1
  got = probs_at(model, [0, 5, 11, 17, 23, 24])
  want = [0.4 * math.sin(2 * math.pi * (1 + t % 24) / 24) + 0.5 for t in [0, 5, 11, 17, 23, 24]]
  np.testing.assert_allclose(got[:, 0], want, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(got[:, 0], [0.6035276, 0.9, 0.5, 0.1, 0.5, 0.6035276], rtol=1e-5)


@pytest.mark.parametrize(
  "name,beta,want",
  [
    # YMF: beta * min held label / max label present (3) + 1 - beta; no data: min label 0
    ("ymf", 0.9, [0.1, 0.1 + 0.9 / 3, 0.1 + 0.9 * 2 / 3, 0.1, 0.1]),
    # LDF: (min n / n_k)^beta, min n = 1
    ("ldf", 0.5, [4**-0.5, 8**-0.5, 2**-0.5, 1.0, 16**-0.5]),
    # MDF: (n_k / max n)^beta, max n = 16
    ("mdf", 0.5, [0.5, (8 / 16) ** 0.5, (2 / 16) ** 0.5, (1 / 16) ** 0.5, 1.0]),
  ],
)
def test_fixed_rates_by_hand_at_first_and_late_rounds(name, beta, want):
  got = probs_at(availability.make(name, beta=beta), [0, 1, 23, 24, 1000])
  for row in got:
    np.testing.assert_allclose(row, want, rtol=1e-6)


def test_trace_replays_rows_cyclically():
  trace = np.array([[1, 0, 0, 1, 1], [0, 1, 0, 0, 1], [1, 1, 1, 0, 0]], bool)
  model = availability.make("trace", trace=trace)
  state = model.init(jax.random.PRNGKey(0), INFO)
  for t, row in [(0, 0), (1, 1), (2, 2), (3, 0), (4, 1), (5, 2), (6, 0), (299, 2), (300, 0)]:
    got, _ = model.sample(state, jax.random.PRNGKey(t), jnp.int32(t))
    np.testing.assert_array_equal(np.asarray(got), trace[row], err_msg=f"round {t}")
    np.testing.assert_array_equal(np.asarray(model.probs(state, jnp.int32(t))), trace[row] * 1.0)


def test_yc_sample_follows_probs_at_the_boundary():
  """At t % T = T - 1 nobody is boosted (every rate 1 - beta); at t % T = 0 the label-0
  holders are active with probability 1 in every draw."""
  model = availability.make("yc", beta=0.999, period=8)
  state = model.init(jax.random.PRNGKey(0), INFO)
  on_boundary = np.stack(
    [np.asarray(model.sample(state, jax.random.PRNGKey(s), jnp.int32(7))[0]) for s in range(40)]
  )
  at_start = np.stack(
    [np.asarray(model.sample(state, jax.random.PRNGKey(s), jnp.int32(8))[0]) for s in range(40)]
  )
  assert on_boundary.mean() < 0.05  # rate 0.001 for everyone
  assert at_start[:, 0].all() and at_start[:, 4].all()  # holders of label 0: rate 1
  assert at_start[:, [1, 2, 3]].mean() < 0.05


def sizes_info(sizes):
  sizes = jnp.asarray(sizes, jnp.int32)
  return ClientInfo(num_examples=sizes, label_counts=jnp.ones((sizes.shape[0], 2), jnp.int32))


@pytest.mark.parametrize(
  "name,sizes,want",
  [
    # the smallest client holds 2 (not 1): (2 / n_k)^0.5
    ("ldf", [2, 3, 6, 12], [1.0, (2 / 3) ** 0.5, (1 / 3) ** 0.5, (1 / 6) ** 0.5]),
    # a client without data counts as n = 1
    ("ldf", [0, 4, 2], [1.0, 0.5, 0.5**0.5]),
    ("mdf", [0, 4, 16], [0.25, 0.5, 1.0]),
    ("mdf", [3, 12, 6], [0.5, 1.0, 0.5**0.5]),
  ],
)
def test_size_rates_by_hand(name, sizes, want):
  model = availability.make(name, beta=0.5)
  state = model.init(jax.random.PRNGKey(0), sizes_info(sizes))
  for t in (0, 7):
    np.testing.assert_allclose(np.asarray(model.probs(state, jnp.int32(t))), want, rtol=1e-6)


@pytest.mark.parametrize("initial", ["on", "off"])
def test_markov_chain_from_its_initial_state(initial):
  """Deterministic chains: client 0 flips every round (p10 = p01 = 1), client 1 turns on and
  stays on (p10 = 0, p01 = 1), client 2 stays off once off (p10 = 1/2, p01 = 0)."""
  model = availability.make(
    "markov", p_on_to_off=[1.0, 0.0, 0.5], p_off_to_on=[1.0, 1.0, 0.0], initial=initial
  )
  info = sizes_info([1, 1, 1])
  state = model.init(jax.random.PRNGKey(0), info)
  start = initial == "on"
  want_probs0 = [0.0, 1.0, 0.5] if start else [1.0, 1.0, 0.0]
  np.testing.assert_allclose(np.asarray(model.probs(state, jnp.int32(0))), want_probs0)
  for t in range(6):
    on, state = model.sample(state, jax.random.PRNGKey(t), jnp.int32(t))
    on = np.asarray(on)
    assert on[0] == (not start if t % 2 == 0 else start), t  # flips from the initial state
    assert on[1], t
    if not start:
      assert not on[2], t


def test_defaults_are_fedgs_table2_settings():
  """YC0.9 / SLN0.5 with FLGo's period T = 24, YMF0.9, LDF0.7, MDF0.7 (FedGS Table 2)."""
  yc = probs_at(availability.make("yc"), [22, 23, 24])
  # t = 23 is the period's last round (phase r = 1: no label bin): everyone at 1 - 0.9
  np.testing.assert_allclose(yc[1], 0.1, rtol=1e-6)
  # t = 22: bin floor(4 * 23 / 24) = 3 (client 1 and 4 hold label 3); t = 24: bin 0
  np.testing.assert_allclose(yc[0], [0.1, 1.0, 0.1, 0.1, 1.0], rtol=1e-6)
  np.testing.assert_allclose(yc[2], [1.0, 0.1, 0.1, 0.1, 1.0], rtol=1e-6)
  sln = availability.make("sln")
  state = sln.init(jax.random.PRNGKey(0), INFO)
  p5, p17 = (np.asarray(sln.probs(state, jnp.int32(t))) for t in (5, 17))
  np.testing.assert_allclose(p5 / p17, 9.0, rtol=1e-5)  # T = 24: factors 0.9 and 0.1
  np.testing.assert_allclose(probs_at(availability.make("ymf"), [0])[0, 0], 0.1, rtol=1e-6)
  np.testing.assert_allclose(probs_at(availability.make("ldf"), [0])[0, 0], 4**-0.7, rtol=1e-6)
  np.testing.assert_allclose(
    probs_at(availability.make("mdf"), [0])[0, 0], (4 / 16) ** 0.7, rtol=1e-6
  )


def labels_info(label_counts):
  lc = jnp.asarray(label_counts, jnp.int32)
  return ClientInfo(num_examples=lc.sum(1), label_counts=lc)


@pytest.mark.parametrize(
  "label_counts,want",
  [
    # C = 4, labels 0 and 2 held: the largest held label is 2, not C - 1 = 3
    ([[1, 0, 0, 0], [0, 0, 2, 0], [1, 0, 1, 0]], [0.4, 1.0, 0.4]),
    # labels 0 and 1 of C = 3: min label / 1
    ([[2, 0, 0], [0, 3, 0]], [0.4, 1.0]),
    # only label 0 anywhere: every rate is 1 - beta (0 / max(0, 1), not 0 / 0)
    ([[2, 0, 0], [1, 0, 0]], [0.4, 0.4]),
  ],
)
def test_ymf_largest_held_label(label_counts, want):
  model = availability.make("ymf", beta=0.6)
  state = model.init(jax.random.PRNGKey(0), labels_info(label_counts))
  np.testing.assert_allclose(np.asarray(model.probs(state, jnp.int32(0))), want, rtol=1e-6)


def test_sln_keeps_empty_rounds_by_default():
  """At t = 17 (factor 0.1) with beta = 0.9, every rate is at most 0.1: an empty active set
  comes up, and stays empty by default (the paper); redraw_empty=True draws again."""
  empty = {}
  for redraw in (False, True):
    kw = {} if not redraw else {"redraw_empty": True}
    model = availability.make("sln", beta=0.9, **kw)
    state = model.init(jax.random.PRNGKey(0), INFO)
    assert float(np.max(np.asarray(model.probs(state, jnp.int32(17))))) == pytest.approx(0.1)
    draws = [
      np.asarray(model.sample(state, jax.random.PRNGKey(s), jnp.int32(17))[0]) for s in range(30)
    ]
    empty[redraw] = sum(not d.any() for d in draws)
  assert empty[False] > 0 and empty[True] == 0, empty

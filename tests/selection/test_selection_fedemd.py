"""FedEMD: EMD, normalization, the t * beta schedule and A-Res sampling by Proba^t."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import fedjax_sel.selection as selection
from fedjax_sel.core.types import ClientInfo
from fedjax_sel.selection import fedemd
from tests.selection.conftest import make_ctx

# 6 clients, 3 classes; client 5 is an exclusive Maverick owning all of class 2.
COUNTS = np.array(
  [
    [10, 10, 0],
    [12, 8, 0],
    [5, 15, 0],
    [10, 10, 0],
    [20, 0, 0],
    [0, 0, 30],
  ]
)


def _info():
  return ClientInfo(
    num_examples=jnp.asarray(COUNTS.sum(1), jnp.int32), label_counts=jnp.asarray(COUNTS, jnp.int32)
  )


def test_emd_hand_values():
  np.testing.assert_allclose(fedemd.emd(jnp.asarray([1.0, 0.0]), jnp.asarray([0.5, 0.5])), 1.0)
  p, q = jnp.asarray([4.0, 0.0, 0.0]), jnp.asarray([0.0, 0.0, 2.0])  # counts are normalized
  np.testing.assert_allclose(fedemd.emd(p, q), 2.0)
  np.testing.assert_allclose(fedemd.emd(p, q, "wasserstein"), 2.0)  # mass moves 2 classes
  np.testing.assert_allclose(
    fedemd.emd(jnp.asarray([1.0, 0.0, 0.0]), jnp.asarray([0.0, 1.0, 0.0]), "wasserstein"), 1.0
  )


def test_init_global_distance_and_normalizer_by_hand():
  state = selection.make("fedemd", num_selected=2).init(jax.random.PRNGKey(0), _info())
  props = COUNTS / COUNTS.sum(1, keepdims=True)
  global_p = COUNTS.sum(0) / COUNTS.sum()
  # c1 = class held by most clients = class 0 (5 holders); normalizer = mean_i P^i(y=0).
  normalizer = props[:, 0].mean()
  np.testing.assert_allclose(float(state.normalizer), normalizer, rtol=1e-6)
  expected = np.abs(props - global_p).sum(1) / normalizer
  np.testing.assert_allclose(np.asarray(state.emd_global), expected, rtol=1e-5)
  assert int(np.argmax(np.asarray(state.emd_global))) == 5  # the Maverick is farthest


def test_temperature_schedule_is_linear_in_round():
  """Proba^t = softmax(alpha emd_g - t beta emd_c): check against a numpy softmax at
  t = 0, 7, 150 and that log-odds change by exactly -(t2 - t1) beta (emd_c,i - emd_c,j)."""
  alpha, beta = 0.15, 0.0015
  state = selection.make("fedemd", num_selected=2, alpha=alpha, beta=beta).init(
    jax.random.PRNGKey(0), _info()
  )
  state = state._replace(current=jnp.asarray([30.0, 5.0, 5.0]))
  avail = jnp.ones((6,), bool)
  props = COUNTS / COUNTS.sum(1, keepdims=True)
  cur = np.array([30.0, 5.0, 5.0]) / 40.0
  emd_c = np.abs(props - cur).sum(1) / float(state.normalizer)
  emd_g = np.asarray(state.emd_global)
  for t in (0, 7, 150):
    logits = alpha * emd_g - t * beta * emd_c
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    got = np.asarray(fedemd.selection_probs(state, avail, t, alpha, beta))
    np.testing.assert_allclose(got, expected, rtol=1e-5)
  p1 = np.asarray(fedemd.selection_probs(state, avail, 10, alpha, beta))
  p2 = np.asarray(fedemd.selection_probs(state, avail, 110, alpha, beta))
  shift = np.log(p2[5] / p2[0]) - np.log(p1[5] / p1[0])
  np.testing.assert_allclose(shift, -100 * beta * (emd_c[5] - emd_c[0]), rtol=1e-4)
  # Round decay: the Maverick (far from what was trained so far) is favoured at t = 0 and
  # penalized later.
  p0 = np.asarray(fedemd.selection_probs(state, avail, 0, alpha, beta))
  p_late = np.asarray(fedemd.selection_probs(state, avail, 1000, alpha, beta))
  assert p0[5] == p0.max() and p_late[5] < p0[5]


def test_first_pick_frequencies_match_proba():
  """A-Res first pick ~ Proba^t over the available clients (chi-square, level 1e-3)."""
  alpha, beta = 3.0, 0.05  # large coefficients so the probabilities differ clearly
  strategy = selection.make("fedemd", num_selected=2, alpha=alpha, beta=beta)
  info = _info()
  state = strategy.init(jax.random.PRNGKey(0), info)
  state = state._replace(current=jnp.asarray([30.0, 20.0, 10.0]))
  avail = jnp.asarray([True, True, False, True, True, True])
  t = 4
  ctx = make_ctx(info)
  probs = np.asarray(fedemd.selection_probs(state, avail, t, alpha, beta), np.float64)
  assert probs[2] == 0.0
  draws = 20000
  keys = jax.random.split(jax.random.PRNGKey(5), draws)
  first = jax.jit(jax.vmap(lambda k: strategy.select(state, k, avail, t, ctx)[0].cohort[0]))(keys)
  counts = np.bincount(np.asarray(first), minlength=6)
  support = probs > 0
  chi2 = (((counts - draws * probs) ** 2)[support] / (draws * probs[support])).sum()
  assert chi2 < stats.chi2.ppf(0.999, df=support.sum() - 1)


@pytest.mark.parametrize("current", ["distribution", "counts"])
def test_select_accumulates_the_current_distribution(current):
  """D_c adds each selected client's label distribution (default) or raw counts, once."""
  strategy = selection.make("fedemd", num_selected=2, current=current)
  info = _info()
  state = strategy.init(jax.random.PRNGKey(0), info)
  sel, new_state = strategy.select(
    state, jax.random.PRNGKey(1), jnp.ones((6,), bool), 0, make_ctx(info)
  )
  rows = COUNTS[np.asarray(sel.cohort)]
  if current == "distribution":
    rows = rows / rows.sum(1, keepdims=True)
  np.testing.assert_allclose(np.asarray(new_state.current), rows.sum(0), rtol=1e-6)
  n = COUNTS.sum(1)[np.asarray(sel.cohort)]
  np.testing.assert_allclose(np.asarray(sel.weights), n / n.sum(), rtol=1e-6)
  # A second round adds to what the first left (the Maverick, 30 of class 2, counts 1 or 30).
  maverick = jnp.asarray([False] * 5 + [True])
  _, after = strategy.select(new_state, jax.random.PRNGKey(2), maverick, 1, make_ctx(info))
  added = np.asarray(after.current) - np.asarray(new_state.current)
  np.testing.assert_allclose(added, [0, 0, 1.0 if current == "distribution" else 30.0])


def test_current_reading_changes_the_current_distance():
  """Counts vs distributions: after one big and one small client the readings differ by hand.
  Counts: D_c = (0, 0, 30) + (20, 0, 0) -> (0.4, 0, 0.6); distributions: (1, 0, 1) / 2."""
  info = _info()
  state = selection.make("fedemd", num_selected=2).init(jax.random.PRNGKey(0), info)
  pair = jnp.asarray([False, False, False, False, True, True])  # clients 4 (20 ex.), 5 (30)
  for current, d_c in (("counts", [0.4, 0.0, 0.6]), ("distribution", [0.5, 0.0, 0.5])):
    strategy = selection.make("fedemd", num_selected=2, current=current)
    _, after = strategy.select(state, jax.random.PRNGKey(3), pair, 0, make_ctx(info))
    np.testing.assert_allclose(fedemd._normalize(after.current), d_c, rtol=1e-6)


def test_rejects_bad_hparams():
  with pytest.raises(ValueError, match="ground_metric"):
    selection.make("fedemd", num_selected=2, ground_metric="kl")
  with pytest.raises(ValueError, match="alpha"):
    selection.make("fedemd", num_selected=2, alpha=-1.0)
  with pytest.raises(ValueError, match="current"):
    selection.make("fedemd", num_selected=2, current="count")


# Mutation-testing survivors (issue 22): values by hand at the formulas' edges.

# 5 clients, 3 classes. Class 2 has the most holders (4) but only one example at each, so
# "most holders" (c1 = 2) differs from "most holders with > 1 example" (class 0) and from a
# count over the wrong axis (client 1 holds the most classes).
EDGE_COUNTS = np.array([[3, 0, 1], [3, 3, 1], [0, 2, 1], [0, 2, 1], [9, 0, 0]])


def test_normalizer_uses_the_class_with_most_holders():
  info = ClientInfo(
    num_examples=jnp.asarray(EDGE_COUNTS.sum(1), jnp.int32),
    label_counts=jnp.asarray(EDGE_COUNTS, jnp.int32),
  )
  state = selection.make("fedemd", num_selected=2).init(jax.random.PRNGKey(0), info)
  # mean_i P^i(y=2) = (1/4 + 1/7 + 1/3 + 1/3 + 0) / 5
  normalizer = (1 / 4 + 1 / 7 + 1 / 3 + 1 / 3) / 5
  np.testing.assert_allclose(float(state.normalizer), normalizer, rtol=1e-6)
  props = EDGE_COUNTS / EDGE_COUNTS.sum(1, keepdims=True)
  global_p = EDGE_COUNTS.sum(0) / EDGE_COUNTS.sum()
  expected = np.abs(props - global_p).sum(1) / normalizer
  np.testing.assert_allclose(np.asarray(state.emd_global), expected, rtol=1e-5)


def test_no_labels_at_all_stays_finite():
  info = ClientInfo(
    num_examples=jnp.zeros((3,), jnp.int32), label_counts=jnp.zeros((3, 4), jnp.int32)
  )
  state = selection.make("fedemd", num_selected=2).init(jax.random.PRNGKey(0), info)
  assert float(state.normalizer) == 1.0
  np.testing.assert_array_equal(np.asarray(state.emd_global), np.zeros(3))


def test_emd_of_single_example_and_empty_clients():
  one_a, one_b = jnp.asarray([1.0, 0.0, 0.0]), jnp.asarray([0.0, 1.0, 0.0])
  np.testing.assert_allclose(fedemd.emd(one_a, one_b), 2.0)  # one example: a one-hot
  # An empty client is the zero vector: its L1 distance to a distribution is 1.
  np.testing.assert_allclose(fedemd.emd(jnp.zeros(3), jnp.asarray([2.0, 1.0, 1.0])), 1.0)


def test_wasserstein_is_per_row_on_a_batch():
  p = jnp.asarray([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
  q = jnp.asarray([0.0, 1.0, 0.0])
  # W1 = sum_c |F_p(c) - F_q(c)|, row by row:
  # row 0: F_p = (1, 1, 1), F_q = (0, 1, 1): 1 + 0 + 0 = 1
  # row 1: F_p = (0, 0, 1), F_q = (0, 1, 1): 0 + 1 + 0 = 1
  # against q' = (1, 0, 0), F_q' = (1, 1, 1): row 0 gives 0, row 1 gives 1 + 1 + 0 = 2
  np.testing.assert_allclose(fedemd.emd(p, q, "wasserstein"), [1.0, 1.0])
  np.testing.assert_allclose(fedemd.emd(p, jnp.asarray([1.0, 0.0, 0.0]), "wasserstein"), [0.0, 2.0])


def _state():
  return selection.make("fedemd", num_selected=2).init(jax.random.PRNGKey(0), _info())


def test_probs_with_one_or_no_available_client():
  state = _state()
  one = jnp.asarray([False, False, True, False, False, False])
  np.testing.assert_array_equal(
    np.asarray(fedemd.selection_probs(state, one, 3, 0.15, 0.0015)), one.astype(np.float32)
  )
  none = jnp.zeros((6,), bool)
  np.testing.assert_array_equal(np.asarray(fedemd.selection_probs(state, none, 3, 0.15, 0.0015)), 0)


def test_probs_do_not_underflow_late():
  """Late rounds make every logit very negative; with a client unavailable the softmax
  must still be the softmax over the available ones (not all zeros)."""
  state = _state()._replace(current=jnp.asarray([0.0, 0.0, 30.0]))
  avail = jnp.asarray([True, True, True, True, True, False])
  t, alpha, beta = 200000, 0.15, 0.0015
  props = COUNTS / COUNTS.sum(1, keepdims=True)
  emd_c = np.abs(props - np.array([0.0, 0.0, 1.0])).sum(1) / float(state.normalizer)
  logits = alpha * np.asarray(state.emd_global, np.float64) - t * beta * emd_c
  assert logits[:5].max() < -200  # exp underflows in float32 without the shift
  w = np.exp(logits[:5] - logits[:5].max())
  expected = np.append(w / w.sum(), 0.0)
  got = np.asarray(fedemd.selection_probs(state, avail, t, alpha, beta))
  np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-7)


def test_invalid_slots_add_nothing_to_current_counts():
  strategy = selection.make("fedemd", num_selected=3, current="counts")
  info = _info()
  avail = jnp.asarray([False, True, False, False, False, False])  # 1 client, 3 slots
  sel, new_state = strategy.select(
    strategy.init(jax.random.PRNGKey(0), info), jax.random.PRNGKey(1), avail, 0, make_ctx(info)
  )
  assert np.asarray(sel.valid).tolist() == [True, False, False]
  np.testing.assert_array_equal(np.asarray(new_state.current), COUNTS[1])


def test_defaults_are_the_papers_fashion_mnist_row():
  import inspect

  params = inspect.signature(fedemd.make_fedemd).parameters
  assert (params["alpha"].default, params["beta"].default) == (0.15, 0.0015)
  assert params["ground_metric"].default == "l1"
  assert params["current"].default == "distribution"  # issue 41: the reading that fades
  with pytest.raises(ValueError, match="beta"):
    selection.make("fedemd", num_selected=2, beta=-0.001)

"""Power-of-Choice keeps the highest-loss candidates."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_sel.selection as selection
from tests.selection.conftest import fixed_losses, make_ctx, make_info


def test_default_d_picks_top_losses_among_available():
  info = make_info()
  ctx = make_ctx(info)
  strategy = selection.make("power_of_choice", num_selected=3)
  avail = np.ones(12, bool)
  avail[[1, 3]] = False  # loss[i] = ((7 i) mod 12) / 12 + 0.1; by loss the clients rank
  #                        5, 10, 3, 8, 1, ...; with 3 and 1 away the top 3 are 5, 10, 8.
  state = strategy.init(jax.random.PRNGKey(0), info)
  sel, _ = strategy.select(state, jax.random.PRNGKey(0), jnp.asarray(avail), 0, ctx)
  losses = np.asarray(fixed_losses())
  expected = np.argsort(-np.where(avail, losses, -np.inf))[:3]
  np.testing.assert_array_equal(np.asarray(sel.cohort), expected)  # in loss order
  np.testing.assert_array_equal(expected, [5, 10, 8])


def test_candidate_set_of_m_plus_one_drops_lowest_loss():
  """d = M + 1 = |available|: every available client is a candidate, the lowest-loss one
  (client 0, loss 0.1) is the only one left out, whatever the key."""
  info = make_info()
  ctx = make_ctx(info)
  strategy = selection.make("power_of_choice", num_selected=3, d=4)
  avail = jnp.asarray(np.isin(np.arange(12), [0, 2, 6, 11]))
  state = strategy.init(jax.random.PRNGKey(0), info)
  select = jax.jit(lambda k: strategy.select(state, k, avail, 0, ctx)[0].cohort)
  for seed in range(5):
    assert set(np.asarray(select(jax.random.PRNGKey(seed))).tolist()) == {2, 6, 11}


def test_rejects_d_below_num_selected():
  with pytest.raises(ValueError, match="d="):
    selection.make("power_of_choice", num_selected=4, d=3)


def test_fedgs_code_protocol_local_test_losses_and_equal_weights():
  """loss_split='local_test' ranks by ctx.client_test_losses (here the reverse order of the
  training losses), weights='equal' gives 1/3 each; the defaults keep n_k / sum n."""
  info = make_info()
  train_losses = fixed_losses()
  test_losses = 2.0 - train_losses  # ranks reversed: the lowest training losses lead
  ctx = make_ctx(info)._replace(client_test_losses=lambda ids: test_losses[ids])
  avail = jnp.ones(12, bool)
  key = jax.random.PRNGKey(0)
  paper = selection.make(
    "power_of_choice", num_selected=3, loss_split="local_test", weights="equal"
  )
  sel, _ = paper.select(paper.init(key, info), key, avail, 0, ctx)
  # loss[i] = ((7 i) mod 12) / 12 + 0.1 is lowest for i = 0 (0), 7 (1/12), 2 (2/12).
  np.testing.assert_array_equal(np.asarray(sel.cohort), [0, 7, 2])
  np.testing.assert_allclose(np.asarray(sel.weights), [1 / 3] * 3, rtol=1e-6)
  ours = selection.make("power_of_choice", num_selected=3)
  sel, _ = ours.select(ours.init(key, info), key, avail, 0, ctx)
  np.testing.assert_array_equal(np.asarray(sel.cohort), [5, 10, 3])
  n = np.asarray(info.num_examples)[[5, 10, 3]].astype(np.float64)
  np.testing.assert_allclose(np.asarray(sel.weights), n / n.sum(), rtol=1e-6)


def test_rejects_unknown_protocol_options():
  with pytest.raises(ValueError, match="loss_split='valid'.*train, local_test"):
    selection.make("power_of_choice", num_selected=3, loss_split="valid")
  with pytest.raises(ValueError, match="weights='uniform'.*fedavg, equal"):
    selection.make("power_of_choice", num_selected=3, weights="uniform")


def test_d_validation_and_defaults():
  """d: an integer >= M (bools, fractions and strings refused), or None; the documented
  defaults follow Cho et al. (d = every available client, train losses, FedAvg weights)."""
  import inspect

  defaults = {
    k: p.default for k, p in inspect.signature(selection.make_power_of_choice).parameters.items()
  }
  assert defaults == {
    "num_selected": inspect.Parameter.empty,
    "d": None,
    "loss_split": "train",
    "weights": "fedavg",
  }
  assert selection.make("power_of_choice", num_selected=3, d=3).num_selected == 3
  assert selection.make("power_of_choice", num_selected=3, d=4.0).num_selected == 3
  for d in (2, True, 3.5, "4", [4], float("inf"), float("nan"), "x"):
    with pytest.raises(ValueError, match="d="):
      selection.make("power_of_choice", num_selected=3, d=d)
  for bad in ({"loss_split": 1}, {"weights": None}):
    with pytest.raises(ValueError, match=next(iter(bad))):
      selection.make("power_of_choice", num_selected=3, **bad)


def test_d_larger_than_the_population_uses_everyone():
  """d > N: every available client is a candidate, as with d=None (top-M losses)."""
  info = make_info()
  ctx = make_ctx(info)
  avail = jnp.ones(info.num_examples.shape[0], bool)
  key = jax.random.PRNGKey(2)
  big = selection.make("power_of_choice", num_selected=3, d=10_000)
  default = selection.make("power_of_choice", num_selected=3)
  got = big.select(big.init(key, info), key, avail, jnp.int32(0), ctx)[0]
  want = default.select(default.init(key, info), key, avail, jnp.int32(0), ctx)[0]
  assert sorted(np.asarray(got.cohort).tolist()) == sorted(np.asarray(want.cohort).tolist())

"""markov_dropout: on/off chains parametrised by the dropout ratio and the mean absence."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import availability
from fedjax_sel.core.types import ClientInfo

NUM_CLIENTS = 8
NUM_ROUNDS = 4000
INFO8 = ClientInfo(
  num_examples=jnp.full((NUM_CLIENTS,), 10, jnp.int32),
  label_counts=jnp.ones((NUM_CLIENTS, 2), jnp.int32),
)


@functools.cache
def long_rollout(alpha, mean_absence):
  model = availability.make("markov_dropout", dropout_rate=alpha, mean_absence=mean_absence)
  active, probs = availability.rollout(model, INFO8, jax.random.key(38), NUM_ROUNDS)
  return np.asarray(active), np.asarray(probs)


def absences(active):
  """Lengths of the off runs that start and end inside the window (censored runs dropped)."""
  out = []
  for column in active.T:
    off = np.concatenate([[False], ~column, [False]]).astype(np.int8)
    starts = np.flatnonzero(np.diff(off) == 1)
    ends = np.flatnonzero(np.diff(off) == -1)
    for s, e in zip(starts, ends, strict=True):
      if s > 0 and e < len(column):
        out.append(e - s)
  return np.asarray(out)


def test_transitions_by_hand():
  # alpha = 0.5, 4 rounds away: q = 1/4, p = 0.5 * 0.25 / 0.5 = 0.25 (a symmetric chain).
  assert availability.dropout_transitions(0.5, 4.0) == pytest.approx((0.25, 0.25))
  # alpha = 0.7, 10 rounds away: q = 0.1, p = 0.07 / 0.3 = 0.2333; p / (p + q) = 0.7.
  p, q = availability.dropout_transitions(0.7, 10.0)
  assert (p, q) == pytest.approx((0.7 / 3.0, 0.1))
  assert p / (p + q) == pytest.approx(0.7)
  state = availability.make("markov_dropout", dropout_rate=0.7, mean_absence=10.0).init(
    jax.random.key(0), INFO8
  )
  np.testing.assert_allclose(state.p_on_to_off, np.full(NUM_CLIENTS, 0.7 / 3.0), rtol=1e-6)
  np.testing.assert_allclose(state.p_off_to_on, np.full(NUM_CLIENTS, 0.1), rtol=1e-6)


@pytest.mark.parametrize(
  "alpha,mean_absence",
  [
    (0.7, 5.0),  # p = 0.7 / (5 * 0.3) = 0.4667, q = 0.2: lambda = 1 - p - q = 1/3
    (0.3, 8.0),  # p = 0.3 / (8 * 0.7) = 0.0536, q = 0.125: lambda = 0.8214
  ],
)
def test_long_run_dropout_ratio_and_mean_absence(alpha, mean_absence):
  """Measured over 8 clients x 4000 rounds, the off share equals alpha and the mean
  absence equals mean_absence.

  Off share: the indicator's lag-1 autocorrelation is lambda = 1 - p - q, so the mean over
  N T chain steps has std sqrt(alpha (1 - alpha) (1 + lambda) / ((1 - lambda) N T)); the chain
  starts stationary (no burn-in). Absences: about N T alpha q runs, each geometric with mean
  1/q and variance (1 - q) / q^2; the mean's std is sqrt((1 - q) / q^2 / runs). Tolerance 5
  std for both."""
  p, q = availability.dropout_transitions(alpha, mean_absence)
  lam = 1.0 - p - q
  active, _ = long_rollout(alpha, mean_absence)
  off_share = 1.0 - active.mean()
  std = math.sqrt(alpha * (1 - alpha) * (1 + lam) / ((1 - lam) * active.size))
  assert abs(off_share - alpha) < 5 * std, (off_share, std)
  runs = absences(active)
  expected_runs = active.size * alpha * q
  assert 0.8 * expected_runs < len(runs) < 1.2 * expected_runs
  run_std = math.sqrt((1 - q) / q**2 / len(runs))
  assert abs(runs.mean() - mean_absence) < 5 * run_std, (runs.mean(), run_std)
  # Presences: geometric with mean 1 / p = mean_absence (1 - alpha) / alpha.
  presences = absences(~active)
  pres_std = math.sqrt((1 - p) / p**2 / len(presences))
  assert abs(presences.mean() - 1.0 / p) < 5 * pres_std


def test_absences_are_longer_than_in_the_redrawn_process():
  """The point of the model: at alpha = 0.7 the redrawn fl_fdms process keeps a client away
  for 1 / (1 - P(dropped)) rounds on average (each round a fresh draw), about 3.3, whatever
  the horizon; markov_dropout with mean_absence = 10 keeps it away 10 rounds on average."""
  redrawn = availability.make("cluster_dropout", mode="fl_fdms", dropout_rate=0.7, num_clusters=1)
  active, _ = availability.rollout(redrawn, INFO8, jax.random.key(1), NUM_ROUNDS)
  # 5 of 8 drop each round; one client is protected: P(dropped) = (7/8) (5/7) = 5/8.
  assert absences(np.asarray(active)).mean() == pytest.approx(1.0 / (1.0 - 5.0 / 8.0), rel=0.1)
  persistent, _ = long_rollout(0.7, 10.0)
  assert absences(persistent).mean() == pytest.approx(10.0, rel=0.1)


def test_jit_and_vmap_over_alphas():
  """The swept hyper-parameters can be traced (one program for every alpha): a vmapped init
  over alpha gives each alpha's own transition probabilities."""

  def init(alpha):
    model = availability.make("markov_dropout", dropout_rate=alpha, mean_absence=10.0)
    return model.init(jax.random.key(0), INFO8).p_on_to_off[0]

  alphas = jnp.array([0.3, 0.5, 0.7])
  got = jax.jit(jax.vmap(init))(alphas)
  np.testing.assert_allclose(got, [0.3 / 7.0, 0.1, 0.7 / 3.0], rtol=1e-5)


@pytest.mark.parametrize(
  "hparams,match",
  [
    ({"dropout_rate": 1.0}, "dropout_rate=1.0"),
    ({"dropout_rate": -0.1}, "dropout_rate=-0.1"),
    ({"mean_absence": 0.5}, "mean_absence=0.5"),
    ({"dropout_rate": 0.7, "mean_absence": 2.0}, r"mean_absence=2.0 .*>= 2.333"),
    ({"initial": "maybe"}, "initial='maybe'"),
  ],
)
def test_bad_hyperparameters_are_rejected(hparams, match):
  with pytest.raises(ValueError, match=match):
    availability.make("markov_dropout", **hparams)


def test_keep_per_cluster_passes_the_registry_contract(info6):
  """jit, vmap over seeds, determinism and the probs/sample agreement of every model."""
  from test_availability_contract import test_contract

  test_contract("markov_dropout", {"dropout_rate": 0.7, "keep_per_cluster": 2}, info6)


def test_keep_per_cluster_only_fills_clusters_that_are_all_away():
  """Same chains with and without the option: the protected rollout is the plain one plus
  exactly one client in each round and cluster where the plain one has nobody; its active
  frequency matches its probs (martingale average, std <= 0.5 / sqrt(T), tolerance 5 std)."""
  hp = {"dropout_rate": 0.7, "mean_absence": 5.0}
  plain = availability.make("markov_dropout", **hp)
  kept = availability.make("markov_dropout", keep_per_cluster=2, **hp)
  a_plain, _ = availability.rollout(plain, INFO8, jax.random.key(9), NUM_ROUNDS)
  a_kept, p_kept = availability.rollout(kept, INFO8, jax.random.key(9), NUM_ROUNDS)
  a_plain, a_kept, p_kept = (np.asarray(x) for x in (a_plain, a_kept, p_kept))
  assert np.all(a_kept >= a_plain)
  for cluster in (slice(0, 4), slice(4, 8)):
    empty = ~a_plain[:, cluster].any(1)
    assert empty.mean() > 0.1  # 0.7^4 = 0.24 of the rounds in the stationary law
    added = a_kept[:, cluster].sum(1) - a_plain[:, cluster].sum(1)
    np.testing.assert_array_equal(added, empty.astype(int))
  gap = np.abs(a_kept.mean(0) - p_kept.mean(0))
  assert gap.max() < 5 * 0.5 / math.sqrt(NUM_ROUNDS), gap


@pytest.mark.parametrize("bad", [0, 2.5, "two"])
def test_keep_per_cluster_is_validated(bad):
  with pytest.raises(ValueError, match="keep_per_cluster="):
    availability.make("markov_dropout", keep_per_cluster=bad)
  model = availability.make("markov_dropout", keep_per_cluster=9)
  with pytest.raises(ValueError, match="keep_per_cluster=9 exceeds the number of clients 8"):
    model.init(jax.random.key(0), INFO8)

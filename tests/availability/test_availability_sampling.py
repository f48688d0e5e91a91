"""Sampling: empirical frequencies match probs, seed independence, the Markov chain."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import availability
from fedjax_sel.core.types import ClientInfo

INFO8 = ClientInfo(
  num_examples=jnp.array([5, 10, 20, 40, 80, 160, 320, 640], jnp.int32),
  label_counts=jnp.array(
    [
      [5, 0, 0, 0],
      [5, 5, 0, 0],
      [0, 20, 0, 0],
      [0, 0, 40, 0],
      [0, 40, 0, 40],
      [0, 0, 0, 160],
      [100, 0, 0, 220],
      [0, 0, 640, 0],
    ],
    jnp.int32,
  ),
)
NUM_ROUNDS = 4000
# One case per sampling code path (mdf/ldf/ymf/ln/bernoulli share fixed_rate_model).
CASES = {
  "mdf": {"beta": 0.7},
  "yc": {"beta": 0.9, "period": 10},
  "sln": {"beta": 0.5, "period": 7},
  "markov": {"p_on_to_off": 0.2, "p_off_to_on": 0.3},
  "cluster_dropout": {"dropout_rate": 0.3, "num_clusters": 4},
  "cluster_dropout/fl_fdms": {"dropout_rate": 0.5, "num_clusters": 3, "mode": "fl_fdms"},
}


def build(case):
  return availability.make(case.split("/")[0], **CASES[case])


@functools.cache
def long_rollout(case):
  active, probs = availability.rollout(build(case), INFO8, jax.random.key(2023), NUM_ROUNDS)
  return np.asarray(active), np.asarray(probs)


@pytest.mark.parametrize("case", sorted(CASES))
def test_empirical_frequency_matches_probs(case):
  """(1/T) sum_t (a_t - p_t) is a martingale average: each term has conditional mean 0 and
  variance p_t (1 - p_t) <= 1/4, so its std is <= 0.5 / sqrt(T) = 0.0079 for T = 4000.
  Tolerance: 5 std = 0.0395 per client (8 clients x 6 cases: false alarm < 1e-4)."""
  active, probs = long_rollout(case)
  gap = np.abs(active.mean(0) - probs.mean(0))
  assert gap.max() < 5 * 0.5 / math.sqrt(NUM_ROUNDS), (case, gap)


def test_same_seed_same_sequence_regardless_of_horizon_and_selection():
  """A round loop that also draws selection randomness from a training seed, in amounts that
  depend on that seed, sees exactly the availability of ``rollout`` (T = 4000) over its own
  30 rounds: sample depends only on (state, fold_in(round_key, t), t). Markov: the stateful
  case, where a shared key would show up at once."""
  case = "markov"
  model = build(case)
  num_rounds = 30

  @jax.jit
  def loop(availability_key, training_key):
    init_key, round_key = availability.split_availability_key(availability_key)

    def round_step(carry, t):
      state, train_key = carry
      train_key, sub = jax.random.split(train_key)
      # A "selection" whose amount of randomness depends on the training seed.
      num_draws = jax.random.randint(sub, (), 1, 5)
      scores = jax.random.uniform(jax.random.fold_in(sub, 1), (4, 8))
      used = jnp.where(jnp.arange(4)[:, None] < num_draws, scores, 0.0).sum()
      active, state = model.sample(state, jax.random.fold_in(round_key, t), t)
      return (state, train_key), (active, used)

    carry = (model.init(init_key, INFO8), training_key)
    _, (active, _) = jax.lax.scan(round_step, carry, jnp.arange(num_rounds, dtype=jnp.int32))
    return active

  long_active, _ = long_rollout(case)
  for training_seed in (0, 1, 5):
    active = loop(jax.random.key(2023), jax.random.key(training_seed))
    np.testing.assert_array_equal(active, long_active[:num_rounds])
  # A different availability seed gives a different sequence.
  other = loop(jax.random.key(2024), jax.random.key(0))
  assert not np.array_equal(other, long_active[:num_rounds])


def test_markov_stationary_frequency():
  """pi_on = p_off_to_on / (p_on_to_off + p_off_to_on) = 0.3 / 0.5 = 0.6.

  The on-indicator has lag-1 autocorrelation lambda = 1 - 0.2 - 0.3 = 0.5, so the mean over
  N clients and T rounds has std sqrt(pi (1 - pi) (1 + lambda) / ((1 - lambda) N T))
  = sqrt(0.24 * 3 / 32000) = 0.0047; tolerance 5 std. The chain starts in its stationary
  law, so there is no burn-in bias."""
  active, probs = long_rollout("markov")
  std = math.sqrt(0.24 * 3.0 / active.size)
  assert abs(active.mean() - 0.6) < 5 * std
  # probs is the conditional law given the previous round: 0.8 after on, 0.3 after off.
  np.testing.assert_allclose(probs[1:], np.where(active[:-1], 0.8, 0.3), rtol=1e-6)
  # Empirical transition frequencies: P(off | on) = 0.2, P(on | off) = 0.3; each is a mean
  # of >= 9000 Bernoulli draws, std <= 0.5 / sqrt(9000) = 0.0053, tolerance 5 std.
  prev, cur = active[:-1], active[1:]
  assert abs((~cur[prev]).mean() - 0.2) < 0.027
  assert abs(cur[~prev].mean() - 0.3) < 0.027


def test_markov_initial_state_and_stationary_helper():
  model = availability.make("markov", p_on_to_off=0.5, p_off_to_on=0.25, initial="off")
  state = model.init(jax.random.key(0), INFO8)
  np.testing.assert_array_equal(state.on, np.zeros(8, bool))
  np.testing.assert_allclose(model.probs(state, 0), np.full(8, 0.25))
  np.testing.assert_allclose(availability.stationary_on(0.5, 0.25), 1.0 / 3.0)


def test_markov_rejects_bad_transitions():
  with pytest.raises(ValueError, match="p_on_to_off"):
    availability.make("markov", p_on_to_off=1.2)
  with pytest.raises(ValueError, match="> 0"):
    availability.make("markov", p_on_to_off=0.0, p_off_to_on=0.0)
  with pytest.raises(ValueError, match="initial='sometimes'"):
    availability.make("markov", initial="sometimes")


def test_bernoulli_given_probs_and_fedar_uniform_draw():
  given = availability.make("bernoulli", probs=[0.0, 0.25, 0.5, 1.0, 0.0, 0.25, 0.5, 1.0])
  state = given.init(jax.random.key(0), INFO8)
  np.testing.assert_allclose(given.probs(state, 3), [0, 0.25, 0.5, 1, 0, 0.25, 0.5, 1])
  # FedAR: p_i ~ U[p_min, 1] from the init key; mean (1 + p_min) / 2, within [p_min, 1].
  many = ClientInfo(jnp.ones((20000,), jnp.int32), jnp.ones((20000, 2), jnp.int32))
  drawn = availability.make("bernoulli", p_min=0.5)
  p = np.asarray(drawn.init(jax.random.key(0), many).rate)
  assert p.min() >= 0.5 and p.max() <= 1.0
  # std of the mean: (0.5 / sqrt(12)) / sqrt(20000) = 0.001; tolerance 5 std.
  assert abs(p.mean() - 0.75) < 0.005


def test_bernoulli_rejects_bad_probs():
  with pytest.raises(ValueError, match="probs"):
    availability.make("bernoulli", probs=[0.5, 1.5])
  with pytest.raises(ValueError, match="p_min=-0.1"):
    availability.make("bernoulli", p_min=-0.1)
  model = availability.make("bernoulli", probs=[0.5, 0.5, 0.5])
  with pytest.raises(ValueError, match="3 entries but ClientInfo has 8"):
    model.init(jax.random.key(0), INFO8)


def test_bernoulli_p_min_upper_bound():
  availability.make("bernoulli", p_min=1.0)  # every client always active: allowed
  with pytest.raises(ValueError, match="p_min=1.5"):
    availability.make("bernoulli", p_min=1.5)


def test_probability_array_checks_and_message():
  from fedjax_sel.availability.base import check_probability_array

  np.testing.assert_array_equal(check_probability_array("p", [0.0, 1.0]), [0.0, 1.0])
  with pytest.raises(ValueError, match=r"p must be a scalar or a 1-D array .* shape \(2, 2\)"):
    check_probability_array("p", [[0.5, 0.5], [0.5, 0.5]])
  # The message lists the bad values only (0 and 1 are allowed), at most five of them.
  with pytest.raises(ValueError, match=r"p has value\(s\) \[1\.5, -0\.5, nan\] out of range"):
    check_probability_array("p", [0.0, 1.5, 1.0, -0.5, 0.5, np.nan])
  with pytest.raises(ValueError, match=r"value\(s\) \[-0\.5\] out"):
    check_probability_array("p", [-0.5])
  with pytest.raises(ValueError, match=r"value\(s\) \[2\.0, 3\.0, 4\.0, 5\.0, 6\.0\] out"):
    check_probability_array("p", [2.0, 3.0, 4.0, 5.0, 6.0, 7.0])


def test_check_beta_returns_a_python_float_and_passes_tracers():
  from fedjax_sel.availability.base import check_beta

  assert type(check_beta(np.float32(0.5))) is float and type(check_beta(0)) is float
  # Under jit, beta stays a tracer (float() of a tracer would raise).
  np.testing.assert_allclose(jax.jit(check_beta)(0.25), 0.25)

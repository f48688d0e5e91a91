"""TiFL's adaptive tier selection on small cases worked out by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import aggregation, availability, client, models, selection, testing
from fedjax_sel.core import engine, simulation
from fedjax_sel.core.types import ClientInfo, Selection
from fedjax_sel.data.synthetic import synthetic
from fedjax_sel.selection import common, tifl


def _info(sizes) -> ClientInfo:
  sizes = np.asarray(sizes, np.int32)
  return ClientInfo(jnp.asarray(sizes), jnp.asarray(sizes[:, None], jnp.int32))


def _ctx(info: ClientInfo, losses, t=0):
  losses = jnp.asarray(losses, jnp.float32)
  ctx = testing.toy_selection_context(info, t)
  return ctx._replace(client_losses=lambda ids: losses[ids])


def test_change_probs_ranks_tiers_by_ascending_accuracy():
  """n = 4 tiers with credits, D = 4 * 5 / 2 = 10: the least accurate (tier 1, 0.5) gets
  4/10, then tier 3 (0.7) 3/10, tier 0 (0.8) 2/10, the most accurate (tier 2) 1/10."""
  probs = tifl.tier_probabilities(jnp.array([0.8, 0.5, 0.9, 0.7]), jnp.ones(4, bool))
  np.testing.assert_allclose(np.asarray(probs), [0.2, 0.4, 0.1, 0.3], atol=1e-7)


def test_change_probs_gives_zero_to_a_tier_without_credits():
  """Tier 1 has no credits: n = 3, D = 6; ascending 0.7 (tier 3), 0.8 (tier 0), 0.9
  (tier 2) get 3/6, 2/6, 1/6."""
  probs = tifl.tier_probabilities(
    jnp.array([0.8, 0.5, 0.9, 0.7]), jnp.array([True, False, True, True])
  )
  np.testing.assert_allclose(np.asarray(probs), [2 / 6, 0.0, 1 / 6, 3 / 6], atol=1e-7)


def test_change_probs_ties_go_to_the_lower_tier_first():
  probs = tifl.tier_probabilities(jnp.array([0.5, 0.5]), jnp.ones(2, bool))
  np.testing.assert_allclose(np.asarray(probs), [2 / 3, 1 / 3], atol=1e-7)


def test_tiers_by_data_size_are_equal_groups_of_sorted_sizes():
  """Sizes 5, 1, 3, 2, 4, 6 -> ranks 4, 0, 2, 1, 3, 5 -> tier floor(rank * 3 / 6)."""
  tiers = tifl.tier_assignment(jnp.array([5, 1, 3, 2, 4, 6], jnp.float32), 3)
  np.testing.assert_array_equal(np.asarray(tiers), [2, 0, 1, 0, 1, 2])
  state = selection.make("tifl", num_selected=2, num_tiers=3).init(
    jax.random.PRNGKey(0), _info([5, 1, 3, 2, 4, 6])
  )
  np.testing.assert_array_equal(np.asarray(state.tier), [2, 0, 1, 0, 1, 2])


def test_random_tiers_are_equal_groups():
  state = selection.make("tifl", num_selected=2, num_tiers=3, tier_by="random").init(
    jax.random.PRNGKey(3), _info([5, 1, 3, 2, 4, 6])
  )
  assert np.bincount(np.asarray(state.tier), minlength=3).tolist() == [2, 2, 2]


def test_update_uses_the_tiers_losses_and_draws_accordingly():
  """Tiers by size: clients 0, 1 (tier 0) have loss 2, clients 2, 3 (tier 1) loss 1, so
  tier 0 is the less accurate: at round 1 (interval 1) probs = [2/3, 1/3] and the cohort
  is tier 0's two clients about 2/3 of the time (4000 keys, 5 std = 0.037)."""
  strategy = selection.make("tifl", num_selected=2, num_tiers=2)
  info = _info([1, 2, 3, 4])
  state = strategy.init(jax.random.PRNGKey(0), info)
  ctx = _ctx(info, [2.0, 2.0, 1.0, 1.0], t=1)
  avail = jnp.ones(4, bool)

  def one(key):
    sel, new = strategy.select(state, key, avail, jnp.int32(1), ctx)
    return sel.cohort, new.probs, new.credits

  cohorts, probs, credits = jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(1), 4000))
  np.testing.assert_allclose(np.asarray(probs[0]), [2 / 3, 1 / 3], atol=1e-6)
  in_tier0 = np.all(np.asarray(cohorts) <= 1, axis=1)
  in_tier1 = np.all(np.asarray(cohorts) >= 2, axis=1)
  assert np.all(in_tier0 | in_tier1)  # the cohort is one tier's clients
  assert abs(in_tier0.mean() - 2 / 3) < 0.037
  # the drawn tier paid one credit (40 each before)
  np.testing.assert_array_equal(np.asarray(credits)[in_tier0][0], [39, 40])


def test_round_zero_keeps_uniform_probs():
  strategy = selection.make("tifl", num_selected=2, num_tiers=2)
  info = _info([1, 2, 3, 4])
  state = strategy.init(jax.random.PRNGKey(0), info)
  _, new = strategy.select(
    state, jax.random.PRNGKey(1), jnp.ones(4, bool), jnp.int32(0), _ctx(info, [2, 2, 1, 1])
  )
  np.testing.assert_allclose(np.asarray(new.probs), [0.5, 0.5])


def test_credits_decrement_and_an_exhausted_tier_is_never_drawn():
  """2 tiers of 2 clients, 2 credits each, 4 rounds, everybody available: each round one
  tier pays one credit, and once a tier has none only the other is drawn, so each tier is
  drawn exactly twice, whatever the keys and the losses."""
  strategy = selection.make("tifl", num_selected=2, num_tiers=2, credits=2)
  info = _info([1, 2, 3, 4])
  fn = jax.jit(
    lambda s, k, t: strategy.select(s, k, jnp.ones(4, bool), t, _ctx(info, [3, 1, 2, 4], t))
  )
  for seed in range(5):
    state = strategy.init(jax.random.PRNGKey(seed), info)
    drawn, credits = [], [np.asarray(state.credits).sum()]
    for t in range(4):
      sel, state = fn(state, jax.random.PRNGKey(100 * seed + t), jnp.int32(t))
      cohort = sorted(np.asarray(sel.cohort).tolist())
      assert cohort in ([0, 1], [2, 3]), cohort
      drawn.append(cohort[0] // 2)
      credits.append(np.asarray(state.credits).sum())
    assert sorted(drawn) == [0, 0, 1, 1], (seed, drawn)
    assert credits == [4, 3, 2, 1, 0]


def test_only_available_clients_and_the_tier_first():
  """Tier 0 = clients 0-2 (the smallest), client 1 unavailable; tier 1 (3-5) nobody
  available: tier 0 is drawn and its two available clients fill the two slots."""
  strategy = selection.make("tifl", num_selected=2, num_tiers=2)
  info = _info([1, 2, 3, 4, 5, 6])
  avail = jnp.array([True, False, True, False, False, False])
  state = strategy.init(jax.random.PRNGKey(0), info)
  for seed in range(5):
    sel, new = strategy.select(
      state, jax.random.PRNGKey(seed), avail, jnp.int32(3), _ctx(info, np.ones(6))
    )
    assert sorted(np.asarray(sel.cohort).tolist()) == [0, 2]
    assert np.asarray(sel.valid).all()
    np.testing.assert_array_equal(np.asarray(new.credits), [39, 40])


def test_cohort_reading_measures_the_drawn_tier_only():
  """accuracy_from="cohort": the drawn tier's accuracy becomes minus its clients' mean loss;
  the other tier stays unmeasured (lowest), so it is the likelier one at the next update."""
  strategy = selection.make("tifl", num_selected=2, num_tiers=2, accuracy_from="cohort")
  info = _info([1, 2, 3, 4])
  state = strategy.init(jax.random.PRNGKey(0), info)
  sel, state = strategy.select(
    state, jax.random.PRNGKey(2), jnp.ones(4, bool), jnp.int32(0), _ctx(info, [1, 3, 5, 7])
  )
  tier = int(np.asarray(sel.cohort)[0]) // 2
  expected = -2.0 if tier == 0 else -6.0
  assert float(state.accuracy[tier]) == expected
  assert float(state.accuracy[1 - tier]) < -1e30
  _, state = strategy.select(
    state, jax.random.PRNGKey(3), jnp.ones(4, bool), jnp.int32(1), _ctx(info, [1, 3, 5, 7])
  )
  probs = np.asarray(state.probs)
  assert probs[1 - tier] == pytest.approx(2 / 3) and probs[tier] == pytest.approx(1 / 3)


@pytest.mark.parametrize(
  "hparams, name",
  [
    ({"num_tiers": 0}, "num_tiers"),
    ({"credits": -1}, "credits"),
    ({"interval": 2.5}, "interval"),
    ({"tier_by": "latency"}, "tier_by"),
    ({"accuracy_from": "server"}, "accuracy_from"),
    ({"rule": "foo"}, "rule"),
    ({"short_tier": "bar"}, "short_tier"),
  ],
)
def test_bad_hyperparameter_is_one_line_naming_it(hparams, name):
  with pytest.raises(ValueError) as err:
    selection.make("tifl", num_selected=5, **hparams)
  message = str(err.value)
  assert message.startswith(f"{name}=") and "allowed" in message and "\n" not in message


def test_defaults_construct():
  s = selection.make("tifl", num_selected=5)
  assert s.num_selected == 5 and not s.with_replacement


def test_bad_rule_names_the_value_and_the_allowed_ones():
  with pytest.raises(ValueError) as err:
    selection.make("tifl", num_selected=5, rule="foo")
  assert str(err.value) == "rule='foo'; allowed: tiers, accuracy_weighted"


# ---------------------------------------------------------------- short_tier


def _short_tier_cohorts(short_tier: str, seeds: int = 40):
  """Sizes 1..12 in T = 5 tiers by size: tiers {0,1,2}, {3,4}, {5,6,7}, {8,9}, {10,11}
  (``floor(rank * 5 / 12)``), every tier shorter than M = 4, everybody available."""
  strategy = selection.make("tifl", num_selected=4, num_tiers=5, short_tier=short_tier)
  info = _info(np.arange(1, 13))
  state = strategy.init(jax.random.PRNGKey(0), info)
  np.testing.assert_array_equal(np.asarray(state.tier), [0, 0, 0, 1, 1, 2, 2, 2, 3, 3, 4, 4])
  ctx = _ctx(info, np.ones(12))
  fn = jax.jit(lambda k: strategy.select(state, k, jnp.ones(12, bool), jnp.int32(0), ctx))
  out = []
  for seed in range(seeds):
    sel, new = fn(jax.random.PRNGKey(seed))
    drawn = int(np.flatnonzero(np.asarray(new.credits) < np.asarray(state.credits))[0])
    out.append((set(np.asarray(sel.cohort)[np.asarray(sel.valid)].tolist()), drawn))
  return strategy, np.asarray(state.tier), out


def test_short_tier_fill_completes_the_cohort_from_other_tiers():
  """``"fill"``: the drawn tier's 2 or 3 clients all, then other clients up to M = 4 slots,
  though every client is available (N / T < M)."""
  strategy, tier, out = _short_tier_cohorts("fill")
  assert not strategy.leaves_slots_empty
  for picked, drawn in out:
    members = set(np.flatnonzero(tier == drawn).tolist())
    assert len(picked) == 4 and members <= picked, (picked, drawn)
    assert {int(tier[i]) for i in picked - members} and drawn not in {
      int(tier[i]) for i in picked - members
    }


def test_short_tier_tier_only_keeps_the_cohort_within_the_drawn_tier():
  """``"tier_only"`` (TiFL's Algorithm 2): the cohort is exactly the drawn tier's clients
  (2 or 3 of the 4 slots), the other slots empty; the contract knows it may be."""
  strategy, tier, out = _short_tier_cohorts("tier_only")
  assert strategy.leaves_slots_empty
  sizes = set()
  for picked, drawn in out:
    assert picked == set(np.flatnonzero(tier == drawn).tolist()), (picked, drawn)
    sizes.add(len(picked))
  assert sizes == {2, 3}


def test_short_tier_choices_agree_when_the_tier_is_large_enough():
  """Tiers of 10 (the FedEMD study: 50 clients, 5 tiers, 5 slots, always available): the
  same key gives the same cohort under both choices."""
  info = _info(np.arange(1, 51))
  ctx = _ctx(info, np.ones(50))
  avail = jnp.ones(50, bool)
  cohorts = {}
  for short_tier in ("fill", "tier_only"):
    strategy = selection.make("tifl", num_selected=5, num_tiers=5, short_tier=short_tier)
    state = strategy.init(jax.random.PRNGKey(0), info)
    cohorts[short_tier] = [
      np.asarray(strategy.select(state, jax.random.PRNGKey(s), avail, jnp.int32(0), ctx)[0])
      for s in range(5)
    ]
  for a, b in zip(cohorts["fill"], cohorts["tier_only"]):
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- the authors' TiFL


def _acc_weighted(num_selected: int):
  return selection.make("tifl", num_selected=num_selected, rule="accuracy_weighted")


def _pick_frequencies(accuracy, num_selected: int, num_keys: int = 20000) -> np.ndarray:
  """f64[N], how often each client is in the cohort over ``num_keys`` keys."""
  accuracy = jnp.asarray(accuracy, jnp.float32)
  n = accuracy.shape[0]
  strategy = _acc_weighted(num_selected)
  state = tifl.AccuracyWeightedState(accuracy=accuracy)
  ctx = _ctx(_info(np.ones(n, np.int32)), np.ones(n))
  avail = jnp.ones(n, bool)

  def one(key):
    sel, _ = strategy.select(state, key, avail, jnp.int32(0), ctx)
    return jnp.zeros(n, jnp.int32).at[sel.cohort].add(sel.valid.astype(jnp.int32))

  keys = jax.random.split(jax.random.PRNGKey(11), num_keys)
  counts = np.asarray(jax.jit(jax.vmap(one))(keys))
  assert counts.max() == 1 and np.all(counts.sum(1) == min(num_selected, n))  # distinct
  return counts.mean(0)


def _within_binomial(freq, prob, num_keys: int = 20000, sds: float = 5.0) -> None:
  prob = np.asarray(prob, np.float64)
  tol = sds * np.sqrt(prob * (1 - prob) / num_keys)
  assert np.all(np.abs(freq - prob) <= tol), (freq, prob, tol)


def test_accuracy_weighted_first_pick_of_two_clients():
  """Weights w = -a (the released ``select_round_workers_TiFL``), key u^(1/w) = u^(-1/a):
  the larger key is the larger of two exponentials of rates a_1 = 1, a_2 = 3, so client 0
  is picked with probability a_2 / (a_1 + a_2) = 3/4 (20000 keys, 5 std = 0.015)."""
  _within_binomial(_pick_frequencies([1.0, 3.0], 1), [0.75, 0.25])


def test_accuracy_weighted_first_pick_of_three_clients():
  """Accuracies 1, 2, 4 and M = 1: P(i first) = sum over subsets S of the others of
  (-1)^|S| a_i / (a_i + sum_S a_j): 1 - 1/3 - 1/5 + 1/7 = 64/105, 1 - 2/3 - 2/6 + 2/7 =
  30/105, 1 - 4/5 - 4/6 + 4/7 = 11/105. (A-Res with w = 1/a would give 4/7, 2/7, 1/7: the
  first differs by 0.038, 11 std.)"""
  _within_binomial(_pick_frequencies([1.0, 2.0, 4.0], 1), np.array([64, 30, 11]) / 105)


def test_accuracy_weighted_leaves_out_a_client_with_probability_proportional_to_accuracy():
  """M = N - 1 = 2, accuracies 1, 2, 4: the client left out is the smallest E_i / a_i, i.e.
  i with probability a_i / sum a = 1/7, 2/7, 4/7; so each is in the cohort with 6/7, 5/7,
  3/7."""
  _within_binomial(_pick_frequencies([1.0, 2.0, 4.0], 2), np.array([6, 5, 3]) / 7)


def test_accuracy_weighted_equal_accuracies_give_distinct_clients_uniformly():
  """Six clients of equal accuracy, M = 3: the released reservoir would return the first
  client three times; here three distinct clients, each with probability 1/2."""
  _within_binomial(_pick_frequencies(np.full(6, 50.0), 3), np.full(6, 0.5))


def test_accuracy_weighted_zero_accuracy_is_picked_first():
  freq = _pick_frequencies([0.0, 50.0, 60.0, 70.0], 1, num_keys=2000)
  assert freq[0] == 1.0


def test_accuracy_weighted_starts_below_two_percent():
  """Every client starts at 0.8 + U[0, 1) percent (the released ``run_machine_learning``)."""
  strategy = _acc_weighted(4)
  acc = np.asarray(strategy.init(jax.random.PRNGKey(3), _info(np.ones(500))).accuracy)
  assert acc.shape == (500,) and acc.min() >= 0.8 and acc.max() < 1.8
  assert abs(acc.mean() - 1.3) < 0.05 and len(np.unique(acc)) == 500


def test_accuracy_weighted_observe_records_the_local_models_test_accuracy():
  """observe sets a_i = 100 x ctx.eval_value(params + delta_i) for the valid slots only
  (toy eval 1 / (1 + ||w - 1||^2), params 0, delta_i = (i + 1) / 12 in each of 3 dims);
  other clients and an invalid slot keep their values."""
  strategy = _acc_weighted(3)
  info = _info(np.ones(12))
  state = strategy.init(jax.random.PRNGKey(0), info)
  sel = Selection(
    cohort=jnp.array([4, 7, 9], jnp.int32),
    valid=jnp.array([True, True, False]),
    weights=jnp.array([0.5, 0.5, 0.0], jnp.float32),
  )
  ctx = testing.toy_selection_context(info)
  deltas = testing.toy_deltas(sel.cohort, 12)
  new = jax.jit(lambda st: strategy.observe(st, sel, deltas, None, ctx))(state)
  want = np.asarray(state.accuracy).copy()
  for i in (4, 7):
    want[i] = 100.0 / (1.0 + 3 * (1.0 - (i + 1) / 12) ** 2)
  np.testing.assert_allclose(np.asarray(new.accuracy), want, rtol=1e-6)


def _coverage_rounds(num_clients: int, num_selected: int, seeds: int, rounds: int):
  """i32[seeds], the round (1-based) by which every client has been selected (rounds + 1 if
  never), with every trained client measured at 80 %."""
  strategy = _acc_weighted(num_selected)
  info = _info(np.ones(num_clients))
  ctx = testing.toy_selection_context(info)._replace(
    eval_value=lambda p: 0.8 + 0.0 * jnp.sum(p["w"])
  )
  avail = jnp.ones(num_clients, bool)

  def run(key):
    state = strategy.init(key, info)

    def step(carry, t):
      state, seen = carry
      sel, state = strategy.select(state, jax.random.fold_in(key, t), avail, t, ctx)
      state = strategy.observe(state, sel, testing.toy_deltas(sel.cohort, num_clients), None, ctx)
      seen = seen.at[sel.cohort].set(True)
      return (state, seen), jnp.all(seen)

    _, done = jax.lax.scan(step, (state, jnp.zeros(num_clients, bool)), jnp.arange(rounds))
    return jnp.where(jnp.any(done), jnp.argmax(done) + 1, rounds + 1)

  return np.asarray(jax.jit(jax.vmap(run))(jax.random.split(jax.random.PRNGKey(5), seeds)))


def test_accuracy_weighted_picks_never_tested_clients_first():
  """N = 12, M = 4, trained clients at 80 % against the untested ones' 0.8 + U[0, 1): a
  tested client's key beats an untested one's with probability a / (a + 80) < 2.2 %, so
  every client has been picked by round N / M = 3 in 83 % of runs, by round 4 in 99.6 %,
  by round 5 in 99.995 % (numpy, 20000 runs). 50 seeds: all by round 5, at least 30 by
  round 3 (mean 41.7, 4.5 std above 30)."""
  done = _coverage_rounds(12, 4, seeds=50, rounds=8)
  assert done.max() <= 5, done
  assert np.sum(done <= 3) >= 30, done


def test_accuracy_weighted_in_a_simulation_measures_the_cohorts_local_models():
  """In the round loop: after one round the cohort's a_i are 100 x the global test accuracy
  of their local models (the same numbers as ``Simulation.global_eval`` of params +
  delta), the others keep their start (< 1.8); the context's ``eval_values`` (and its
  fallback, ``eval_value`` vmapped) give the one-by-one values."""
  data = synthetic(0.5, 0.5, 20, recipe="fedgs")
  model = models.make("logreg", data.input_shape, data.num_classes)
  strategy = _acc_weighted(3)
  sim = simulation.Simulation(
    data,
    model,
    availability.make("always"),
    strategy,
    aggregation.make("fedavg"),
    client.make("sgd"),
    simulation.SimulationConfig(
      client_lr=0.1, engine=engine.EngineConfig(batch_size=10, local_steps=2)
    ),
  )
  old = np.asarray(sim.init(0).selection_state.accuracy)
  new, _ = sim.run_rounds(sim.init(0), 1)  # donates its state
  cohort = np.flatnonzero(np.asarray(new.sampling_counts))
  acc = np.asarray(new.selection_state.accuracy)
  assert len(cohort) == 3
  others = np.setdiff1d(np.arange(20), cohort)
  np.testing.assert_array_equal(acc[others], old[others])
  assert np.all(acc[cohort] >= 0.0) and np.all(acc[cohort] <= 100.0)
  assert np.all(acc[cohort] != old[cohort])
  # local_model_values against global_eval one model at a time
  state = sim.init(0)
  ctx = sim.context(state, jnp.ones(20))
  deltas = jax.tree_util.tree_map(
    lambda p: jnp.stack([0.05 * (i + 1) * jnp.ones_like(p) for i in range(3)]), state.params
  )
  got = np.asarray(jax.jit(lambda d: common.local_model_values(ctx, d))(deltas))
  vmapped = ctx._replace(eval_values=None)  # the fallback: ctx.eval_value vmapped
  again = np.asarray(jax.jit(lambda d: common.local_model_values(vmapped, d))(deltas))
  np.testing.assert_allclose(again, got, rtol=1e-6)
  for i in range(3):
    local = jax.tree_util.tree_map(lambda p, d, i=i: p + d[i], state.params, deltas)
    np.testing.assert_allclose(got[i], float(sim.global_eval(local)[1]), rtol=1e-6)

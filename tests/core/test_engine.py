"""The cohort engine equals a per-client sequential loop; masked slots change nothing."""

import functools
import json
import os
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import client, models
from fedjax_sel.core import engine
from fedjax_sel.core.simulation import make_client_optimizer
from fedjax_sel.data.federated import split_from_lists


def _trainer(data, rule, cfg, m, model_name="logreg", momentum=0.0):
  model = models.make(model_name, data.input_shape, data.num_classes)
  tr = engine.make_cohort_trainer(
    model.apply,
    rule,
    make_client_optimizer("sgd", momentum),
    jnp.asarray(data.train.x),
    jnp.asarray(data.train.y),
    data.train.offsets,
    data.train.counts,
    cfg,
    m,
  )
  return model, tr


def _random_clients(sizes, dim, num_classes, seed=0):
  """A dataset-like object of random clients of the given sizes (its ``train`` only)."""
  rng = np.random.default_rng(seed)
  split = split_from_lists(
    [rng.normal(size=(n, dim)).astype(np.float32) for n in sizes],
    [rng.integers(0, num_classes, n) for n in sizes],
  )
  return types.SimpleNamespace(train=split, input_shape=(dim,), num_classes=num_classes)


def _equals_loop(tr, params, cohort, valid, key):
  """Runs the jitted cohort call and the per-client loop; asserts they agree; returns the call."""
  out = jax.jit(tr)(params, cohort, valid, key, 0.05, cohort)
  ref = tr.per_client_loop(params, cohort, valid, key, 0.05, cohort)
  assert _max_diff(out.deltas, ref.deltas) < 1e-5
  np.testing.assert_allclose(out.loss, ref.loss, atol=1e-5)
  np.testing.assert_array_equal(out.num_steps, ref.num_steps)
  return out


def _max_diff(a, b):
  return max(
    float(jnp.max(jnp.abs(x - y)))
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
  )


@pytest.mark.parametrize(
  "rule_name,hp,parallelism,steps",
  [
    ("sgd", {}, "vmap", None),
    ("sgd", {}, "map", None),
    ("sgd", {}, "chunked", None),
    ("sgd", {}, "chunked", 7),
    ("fedprox", {"mu": 0.1}, "vmap", None),
    ("fedprox", {"mu": 0.1}, "chunked", 7),
    ("fedprox", {"mu": 0.1}, "map", 7),
    ("sgd", {}, "lanes", None),
    ("sgd", {}, "lanes", 7),
    ("fedprox", {"mu": 0.1}, "lanes", None),
  ],
)
def test_cohort_equals_per_client_loop(small_synthetic, rule_name, hp, parallelism, steps):
  data = small_synthetic
  assert len(set(data.train.counts.tolist())) > 3  # unequal client sizes
  cfg = engine.EngineConfig(
    batch_size=8, local_epochs=2, local_steps=steps, parallelism=parallelism, chunk_size=3
  )
  model, tr = _trainer(data, client.make(rule_name, **hp), cfg, 5)
  params = model.init(jax.random.PRNGKey(0))
  cohort = jnp.array([0, 7, 3, 11, 5])
  valid = jnp.array([True, True, False, True, True])
  out = _equals_loop(tr, params, cohort, valid, jax.random.PRNGKey(4))
  # padding happened (unequal sizes, epochs mode) except in map mode, which never pads
  if steps is None and parallelism == "vmap":
    assert float(out.padded_steps) > float(jnp.sum(out.num_steps))
  if parallelism == "map":
    assert float(out.padded_steps) == float(jnp.sum(out.num_steps))
    # map on one device is one flat loop over (client, step) pairs, not a loop of loops
    assert tr.__name__ == "train_flat"


@pytest.mark.parametrize("num_lanes", [1, 2, 3, 5, 8])
def test_lanes_with_momentum_equal_loop(small_synthetic, num_lanes):
  # momentum state must restart for each client a lane picks up; more lanes than clients
  # leaves lanes idle; a lane of one runs every client in turn
  cfg = engine.EngineConfig(batch_size=8, local_epochs=2, parallelism="lanes", chunk_size=num_lanes)
  model, tr = _trainer(small_synthetic, client.make("sgd"), cfg, 5, momentum=0.9)
  params = model.init(jax.random.PRNGKey(0))
  cohort = jnp.array([3, 0, 11, 7, 5])
  valid = jnp.array([True, True, True, False, True])
  out = _equals_loop(tr, params, cohort, valid, jax.random.PRNGKey(9))
  steps = np.asarray(out.num_steps)
  lanes = tr.chunk_size
  assert lanes == min(num_lanes, 5)  # never more lanes than cohort slots
  # the loop ran max(lane load) iterations of every lane
  load, _, _ = engine.assign_lanes(jnp.asarray(steps), lanes)
  assert float(out.padded_steps) == float(np.max(np.asarray(load))) * lanes


@pytest.mark.parametrize("local_steps", [1, 17])
def test_lanes_loop_runs_its_last_partial_block(small_synthetic, local_steps):
  # the lanes loop runs blocks of LANE_BLOCK = 16 iterations: a makespan of 1 or 17 ends in a
  # block of one iteration
  cfg = engine.EngineConfig(
    batch_size=8, local_steps=local_steps, parallelism="lanes", chunk_size=2
  )
  model, tr = _trainer(small_synthetic, client.make("sgd"), cfg, 2)
  params = model.init(jax.random.PRNGKey(0))
  cohort, valid = jnp.array([3, 0]), jnp.array([True, True])
  out = _equals_loop(tr, params, cohort, valid, jax.random.PRNGKey(9))
  assert tr.kind == "lanes" and float(out.padded_steps) == 2 * local_steps


@pytest.mark.parametrize("num_lanes", [1, 3, 4, 16])
def test_assign_lanes_is_longest_first_to_least_loaded(num_lanes):
  steps = np.array([5, 0, 17, 3, 3, 9, 1, 0, 12, 4], np.int32)
  load, lane_client, lane_start = (
    np.asarray(a) for a in engine.assign_lanes(jnp.asarray(steps), num_lanes)
  )
  m = len(steps)
  placed = lane_client[lane_client < m]
  # every client with steps is placed exactly once, clients without steps nowhere
  assert sorted(placed.tolist()) == sorted(np.flatnonzero(steps).tolist())
  assert load.sum() == steps.sum()
  for lane in range(num_lanes):
    clients = lane_client[lane][lane_client[lane] < m]
    # a lane's clients run back to back from iteration 0
    ends = np.cumsum(steps[clients])
    np.testing.assert_array_equal(lane_start[lane][: len(clients)], ends - steps[clients])
    assert load[lane] == (ends[-1] if len(clients) else 0)
  # Graham's LPT bound: makespan <= mean load + the longest client (and >= both)
  assert load.max() <= steps.sum() / num_lanes + steps.max()
  assert load.max() >= max(steps.max(), steps.sum() / num_lanes)
  # the host-side estimate the auto rule uses is the same LPT
  assert engine.lpt_makespan(steps, num_lanes) == load.max()
  # a hand-checked case: [17, 12, 9, 5, 4, 3, 3, 1] on 3 lanes -> {17, 1}, {12, 4, 3}, {9, 5, 3}
  if num_lanes == 3:
    assert sorted(load.tolist()) == [17, 18, 19]


def test_epoch_steps_match_sizes(small_synthetic):
  cfg = engine.EngineConfig(batch_size=10, local_epochs=3)
  steps = engine.steps_per_client(small_synthetic.train.counts, cfg)
  expected = 3 * np.ceil(small_synthetic.train.counts / 10)
  np.testing.assert_array_equal(np.asarray(steps), expected)


def test_empty_clients_train_zero_steps_and_their_loss_is_zero():
  # an empty client trains no step, in either mode; a population of empty clients still
  # builds a one-step loop
  for cfg in [engine.EngineConfig(local_steps=3), engine.EngineConfig(local_epochs=2)]:
    np.testing.assert_array_equal(np.asarray(engine.steps_per_client([0, 5, 0], cfg))[[0, 2]], 0)
  assert engine.max_steps(0, engine.EngineConfig(batch_size=4)) == 1
  assert engine.max_steps(0, engine.EngineConfig(batch_size=1)) == 1
  assert engine.max_steps(1, engine.EngineConfig(batch_size=1)) == 1
  # a client of one example trains its fixed steps (only an empty one trains none)
  np.testing.assert_array_equal(
    np.asarray(engine.steps_per_client([0, 1, 2], engine.EngineConfig(local_steps=3))), [0, 3, 3]
  )
  assert engine.max_steps(9, engine.EngineConfig(batch_size=4, local_epochs=2)) == 6
  data = _random_clients([0, 5, 0], 3, 2)
  for parallelism in ("lanes", "vmap"):
    cfg = engine.EngineConfig(batch_size=2, parallelism=parallelism)
    model, tr = _trainer(data, client.make("sgd"), cfg, 3)
    params = model.init(jax.random.PRNGKey(0))
    cohort, valid = jnp.array([0, 2, 1]), jnp.array([True, True, True])
    out = _equals_loop(tr, params, cohort, valid, jax.random.PRNGKey(1))
    for leaf in jax.tree_util.tree_leaves(out.deltas):
      assert float(jnp.max(jnp.abs(leaf[:2]))) == 0.0 and float(jnp.max(jnp.abs(leaf[2]))) > 0
    np.testing.assert_array_equal(np.asarray(out.num_steps), [0, 0, 3])
  # the masked mean of no example is 0, not 0 / 0
  model = models.make("logreg", (3,), 2)
  loss = engine.cross_entropy_loss(model.apply)(
    model.init(jax.random.PRNGKey(0)),
    (jnp.ones((4, 3)), jnp.zeros(4, jnp.int32), jnp.zeros(4, bool)),
  )
  assert float(loss) == 0.0


def test_trainer_refuses_what_it_cannot_train():
  # a population without a training example, no cohort slot, a divisor of 0: one message
  # naming the value each, not an error from inside JAX
  cfg = engine.EngineConfig(batch_size=2)
  with pytest.raises(ValueError, match="counts: all of its 3 clients have 0 training examples"):
    _trainer(_random_clients([0, 0, 0], 3, 2), client.make("sgd"), cfg, 2)
  data = _random_clients([0, 1, 0], 3, 2)
  with pytest.raises(ValueError, match="num_selected=0"):
    _trainer(data, client.make("sgd"), cfg, 0)
  model = models.make("logreg", (3,), 2)
  for bad in (0.0, -255.0):
    with pytest.raises(ValueError, match=f"x_divisor={bad}"):
      engine.make_cohort_trainer(
        model.apply,
        client.make("sgd"),
        make_client_optimizer("sgd", 0.0),
        jnp.asarray(data.train.x),
        jnp.asarray(data.train.y),
        data.train.offsets,
        data.train.counts,
        cfg,
        2,
        x_divisor=bad,
      )
  # one client with one example and one slot are enough
  _trainer(data, client.make("sgd"), cfg, 1)


def test_engine_defaults_are_the_command_lines():
  from fedjax_sel import experiment

  c = experiment.default_config()
  assert engine.EngineConfig() == engine.EngineConfig(
    batch_size=c.batch_size,
    local_epochs=c.local_epochs,
    local_steps=c.local_steps or None,
    parallelism=c.parallelism,
    chunk_size=c.chunk_size,
  )


def test_bucketing_reduces_padding():
  # 8 clients: four with 100 examples, four with 10 -> vmap pads everyone to 10 steps.
  sizes = [100, 10, 100, 10, 100, 10, 100, 10]
  D = _random_clients(sizes, dim=5, num_classes=3)

  useful = float(np.sum(np.ceil(np.array(sizes) / 10)))
  fracs = {}
  for mode in ["vmap", "chunked"]:
    cfg = engine.EngineConfig(batch_size=10, parallelism=mode, chunk_size=4)
    model, tr = _trainer(D, client.make("sgd"), cfg, 8)
    out = tr(
      model.init(jax.random.PRNGKey(0)),
      jnp.arange(8),
      jnp.ones(8, bool),
      jax.random.PRNGKey(1),
      0.1,
      jnp.arange(8),
    )
    fracs[mode] = useful / float(out.padded_steps)
  assert fracs["vmap"] == pytest.approx(44 / 80)
  assert fracs["chunked"] == pytest.approx(1.0)  # sorted: one chunk of 10s, one of 1s


def test_masked_slots_change_nothing(small_synthetic):
  cfg = engine.EngineConfig(batch_size=8, local_epochs=1, parallelism="vmap")
  model, tr = _trainer(small_synthetic, client.make("sgd"), cfg, 4)
  params = model.init(jax.random.PRNGKey(0))
  valid = jnp.array([True, False, True, False])
  key = jax.random.PRNGKey(2)
  a = tr(params, jnp.array([1, 2, 3, 4]), valid, key, 0.1, jnp.zeros(4))
  b = tr(params, jnp.array([1, 9, 3, 0]), valid, key, 0.1, jnp.zeros(4))
  assert _max_diff(a.deltas, b.deltas) == 0.0
  for leaf in jax.tree_util.tree_leaves(a.deltas):
    assert float(jnp.max(jnp.abs(leaf[1]))) == 0.0 and float(jnp.max(jnp.abs(leaf[3]))) == 0.0
  assert int(a.num_steps[1]) == 0


@pytest.mark.parametrize("parallelism", ["vmap", "map", "lanes"])
def test_scaffold_equals_loop(small_synthetic, parallelism):
  cfg = engine.EngineConfig(batch_size=8, local_steps=5, parallelism=parallelism)
  rule = client.make("scaffold")
  model, tr = _trainer(small_synthetic, rule, cfg, 3)
  params = model.init(jax.random.PRNGKey(0))
  state = rule.init(params, small_synthetic.num_clients)
  state = state._replace(
    client_c=jax.tree_util.tree_map(
      lambda c: jax.random.normal(jax.random.PRNGKey(5), c.shape) * 0.1, state.client_c
    )
  )
  cohort = jnp.array([2, 4, 6])
  aux = rule.prepare(state, cohort)
  out = tr(params, cohort, jnp.ones(3, bool), jax.random.PRNGKey(1), 0.1, aux)
  ref = tr.per_client_loop(params, cohort, jnp.ones(3, bool), jax.random.PRNGKey(1), 0.1, aux)
  assert _max_diff(out.deltas, ref.deltas) < 1e-5
  # option II control-variate update: c_i+ = c_i - c - delta / (K lr)
  new = rule.finish(state, cohort, jnp.ones(3, bool), out.deltas, aux, out.num_steps, 0.1)
  for c_new, c_old, c_srv, d in zip(
    *(
      jax.tree_util.tree_leaves(t)
      for t in (new.client_c, state.client_c, state.server_c, out.deltas)
    )
  ):
    np.testing.assert_allclose(c_new[cohort], c_old[cohort] - c_srv[None] - d / 0.5, atol=1e-5)


def test_bad_engine_config():
  with pytest.raises(ValueError, match="batch_size=0"):
    engine.validate_engine_config(engine.EngineConfig(batch_size=0))
  with pytest.raises(ValueError, match="parallelism='fast'"):
    engine.validate_engine_config(engine.EngineConfig(parallelism="fast"))
  with pytest.raises(ValueError, match="local_epochs=-1"):
    engine.validate_engine_config(engine.EngineConfig(local_epochs=-1))


def test_auto_chunk_size_rule():
  # Equal step counts: padding costs nothing, so the widest batch (vmap) wins.
  assert engine.auto_chunk_size(np.full(50, 10), 20) == 20
  # Heavy-tailed steps: (2 + c) * sum of chunk maxima. Hand-computed for steps
  # [100, 1, 1, 1] and M = 4: c=1 -> 103 * 3 = 309, c=2 -> 101 * 4 = 404, c=4 -> 100 * 6 = 600.
  assert engine.auto_chunk_size(np.array([100, 1, 1, 1]), 4) == 1
  # A large per-iteration overhead moves the optimum to wider chunks: with 64 lanes
  # c=1 -> 103 * 65 = 6695, c=2 -> 101 * 66 = 6666, c=4 -> 100 * 68 = 6800; with 1000 lanes
  # c=4 (100 * 1004) beats c=2 (101 * 1002).
  assert engine.auto_chunk_size(np.array([100, 1, 1, 1]), 4, overhead_lanes=64.0) == 2
  assert engine.auto_chunk_size(np.array([100, 1, 1, 1]), 4, overhead_lanes=1000.0) == 4
  # a tie goes to the narrower chunk: no overhead, 4 x 10 steps -> c=1, 2, 4 all cost 40
  assert engine.auto_chunk_size(np.full(4, 10), 4, overhead_lanes=0.0) == 1
  # empty clients cost as one step each: [1, 1, 1, 1] -> c=1 12, c=2 8, c=4 6
  assert engine.auto_chunk_size(np.zeros(4, np.int64), 4) == 4
  # the default overhead of two lanes: [5, 2] -> c=1 7 x 3 = 21 > c=2 5 x 4 = 20
  assert engine.auto_chunk_size(np.array([5, 2]), 2) == 2
  # ... and not three: [10, 3] -> c=1 13 x 3 = 39 < c=2 10 x 4 = 40 (with 3: 52 > 50)
  assert engine.auto_chunk_size(np.array([10, 3]), 2) == 1
  # empty clients are left out of the typical cohort when others have steps: [0, 0, 0, 10]
  # is four clients of 10 steps (c=4 10 x 6 = 60), not [10, 0, 0, 0] (c=1 10 x 3 = 30)
  assert engine.auto_chunk_size(np.array([0, 0, 0, 10]), 4) == 4
  # chunks of the cohort sorted longest first, the padding last: [10, 5, 1] -> c=1 16 x 3 =
  # 48, c=2 chunks [10, 5] [1, pad] (10 + 1) x 4 = 44, c=3 10 x 5 = 50
  assert engine.auto_chunk_size(np.array([10, 5, 1]), 3) == 2


def test_auto_parallelism_picks_chunks_for_unequal_sizes_on_cpu():
  cfg = engine.EngineConfig(parallelism="auto", batch_size=10)
  steps = np.array([1] * 90 + [30] * 10)
  assert engine.resolve_chunk_size(cfg, 20, False, "cpu", steps) < 20
  assert engine.resolve_chunk_size(cfg, 20, False, "cpu", np.full(100, 5)) == 20
  assert (
    engine.resolve_chunk_size(cfg, 20, True, "cpu", np.full(100, 5)) == 1
  )  # map for CNNs on CPU


def test_client_permutations_are_uniform_permutations_of_the_first_n():
  n_max, num_perms = 37, 2000
  for n in (1, 5, 37):
    perm = np.asarray(
      engine.client_permutations(jax.random.PRNGKey(n), jnp.int32(n), n_max, num_perms)
    )
    assert perm.shape == (num_perms, n_max)
    np.testing.assert_array_equal(
      np.sort(perm[:, :n], axis=1), np.tile(np.arange(n), (num_perms, 1))
    )
    np.testing.assert_array_equal(perm[:, n:], np.tile(np.arange(n, n_max), (num_perms, 1)))
  # n = 5: where example 0 lands is uniform over the 5 positions (chi-square, 4 dof, p ~ 1e-4)
  perm = np.asarray(engine.client_permutations(jax.random.PRNGKey(9), jnp.int32(5), n_max, 5000))
  counts = np.bincount(np.argmax(perm[:, :5] == 0, axis=1), minlength=5)
  chi2 = float(np.sum((counts - 1000.0) ** 2 / 1000.0))
  assert chi2 < 23.5, counts


def _permutations_by_hand(raw: np.ndarray, n: int, n_max: int) -> np.ndarray:
  """client_permutations from the same random words, in numpy: each row sorted by (the
  word's high bits, position), positions >= n last; the low ceil(log2 n_max) bits (at least
  one) are left for the position."""
  bits = max(1, int(np.ceil(np.log2(max(n_max, 1)))))
  high = (raw >> np.uint32(bits)).astype(np.int64)
  high[:, n:] = 1 << 40  # after every drawn word
  pos = np.broadcast_to(np.arange(n_max), high.shape)
  return np.stack([np.lexsort((p, h)) for h, p in zip(high, pos)]).astype(np.int32)


def test_client_permutations_equal_a_numpy_sort_of_the_same_words():
  for n, n_max in [(1, 1), (1, 2), (2, 2), (3, 3), (3, 5), (29, 37), (37, 37), (300, 1000)]:
    key = jax.random.PRNGKey(n_max + n)
    got = np.asarray(engine.client_permutations(key, jnp.int32(n), n_max, 64))
    raw = np.asarray(jax.random.bits(key, (64, n_max), jnp.uint32))
    np.testing.assert_array_equal(got, _permutations_by_hand(raw, n, n_max), err_msg=f"{n}/{n_max}")


def test_client_permutations_of_the_largest_clients_sort_float_keys():
  # n_max = 2**23 + 1 needs 24 index bits, leaving 8 random bits in a uint32 word (ties in
  # 1 of 256): such clients sort one uniform float key per example instead
  n_max, n = 2**23 + 1, 2**23 - 4
  key = jax.random.PRNGKey(3)
  got = np.asarray(engine.client_permutations(key, jnp.int32(n), n_max, 1))[0]
  u = np.array(jax.random.uniform(key, (1, n_max)))[0]
  u[n:] = 2.0
  np.testing.assert_array_equal(got, np.argsort(u, kind="stable"))


def test_client_permutations_of_23_index_bits_sort_packed_words():
  # n_max = 2**23 needs 23 index bits and still sorts packed words: 9 random high bits, ties
  # in index order, i.e. a lexicographic sort by (random bits, index)
  n_max, n = 2**23, 2**23 - 4
  key = jax.random.PRNGKey(3)
  got = np.asarray(engine.client_permutations(key, jnp.int32(n), n_max, 1))[0]
  r = np.asarray(jax.random.bits(key, (1, n_max), jnp.uint32))[0] >> 23
  r[n:] = 0xFFFFFFFF >> 23  # past the client's examples: last
  np.testing.assert_array_equal(got, np.lexsort((np.arange(n_max), r)))


def test_tiny_clients_with_fixed_steps_equal_the_loop():
  # clients of fewer than 4 examples: the permutation count's divisor n_max // 4 is 0
  data = _random_clients([1, 3, 2], 3, 2)
  for parallelism in ("lanes", "vmap"):
    cfg = engine.EngineConfig(batch_size=2, local_steps=3, parallelism=parallelism)
    model, tr = _trainer(data, client.make("sgd"), cfg, 3)
    out = _equals_loop(
      tr,
      model.init(jax.random.PRNGKey(0)),
      jnp.array([0, 1, 2]),
      jnp.ones(3, bool),
      jax.random.PRNGKey(1),
    )
    np.testing.assert_array_equal(np.asarray(out.num_steps), [3, 3, 3])


def test_auto_chunks_on_accelerators():
  cfg = engine.EngineConfig(parallelism="auto", batch_size=10)
  assert engine.resolve_kind(cfg, False, "gpu") == "chunked"
  steps = np.concatenate([np.full(60, 5), np.full(30, 20), np.full(10, 200)])
  chunk = engine.resolve_chunk_size(cfg, 100, False, "gpu", steps, 610)
  assert chunk == engine.auto_chunk_size(steps, 100, engine.AUTO_OVERHEAD_LANES_ACCELERATOR)
  # equal sizes: no padding to lose, so vmap
  assert engine.resolve_chunk_size(cfg, 100, False, "gpu", np.full(100, 5), 14_210) == 100
  assert engine.resolve_chunk_size(cfg, 1, False, "gpu", np.full(100, 5), 14_210) == 1
  # (64 + c) x the sum of chunk maxima: [131, 2] c=1 133 x 65 = 8645 < c=2 131 x 66 = 8646;
  # [129, 2] c=1 131 x 65 = 8515 > c=2 129 x 66 = 8514
  assert engine.resolve_chunk_size(cfg, 2, False, "gpu", np.array([131, 2])) == 1
  assert engine.resolve_chunk_size(cfg, 2, False, "gpu", np.array([129, 2])) == 2


def test_auto_lanes_on_one_cpu_device():
  cfg = engine.EngineConfig(parallelism="auto", batch_size=10)
  assert engine.resolve_kind(cfg, False, "cpu") == "lanes"
  assert engine.resolve_kind(cfg, True, "cpu") == "flat"  # CNNs: one client at a time
  # ... per device on several: one lane each
  assert engine.resolve_kind(cfg, True, "cpu", num_devices=2) == "lanes"
  assert engine.resolve_chunk_size(cfg, 10, True, "cpu", np.full(10, 5), 1_663_370, 2) == 1
  assert engine.resolve_chunk_size(cfg, 10, True, "cpu", np.full(10, 5), 610, 2) == 1  # small CNN
  for mode, kind in [("map", "flat"), ("vmap", "chunked"), ("chunked", "chunked")]:
    assert engine.resolve_kind(cfg._replace(parallelism=mode), False, "cpu") == kind
  # LPT makespan by hand: [17, 12, 9, 5, 4, 3, 3, 1] on 3 lanes -> loads 18, 19, 17
  assert engine.lpt_makespan([17, 12, 9, 5, 4, 3, 3, 1], 3) == 19
  assert engine.lpt_makespan([3, 4], 0) == 7  # fewer than one lane is one
  # a lane-step's fixed part is one client-step: [10, 4] -> L=1 14 x 2 = 28 < L=2 10 x 3 = 30
  assert engine.auto_lane_count(np.array([10, 4]), 2) == 1
  # cost = makespan x (1 + L): [100, 1, 1, 1] -> L=1: 103 x 2 = 206 < L=2: 100 x 3
  assert engine.auto_lane_count(np.array([100, 1, 1, 1]), 4) == 1
  # four equal clients of 10 steps: L=1 80, L=2 60, L=3 80, L=4 50
  assert engine.auto_lane_count(np.full(4, 10), 4) == 4
  # [10, 10, 10, 1]: L=1 31 x 2 = 62, L=2 20 x 3 = 60, L=3 11 x 4 = 44, L=4 10 x 5 = 50
  assert engine.auto_lane_count(np.array([10, 10, 10, 1]), 4) == 3
  # a population of empty clients costs as one step each: [1, 1, 1, 1] -> L=4 1 x 5 = 5
  assert engine.auto_lane_count(np.zeros(4, np.int64), 4) == 4
  # empty clients are left out of the typical cohort when others have steps: [0, 0, 0, 10]
  # costs as four clients of 10 steps (L=4), not as [0, 0, 0, 10] (makespan 10: L=1)
  assert engine.auto_lane_count(np.array([0, 0, 0, 10]), 4) == 4
  # [10, 10, 1] (M = 3): L=1 21 x 2 = 42, L=2 11 x 3 = 33, L=3 10 x 4 = 40
  assert engine.auto_lane_count(np.array([10, 10, 1]), 3) == 2
  # ... unless the lanes' parameters pass the budget (32k floats): 20,000 params -> 1 lane
  assert engine.auto_lane_count(np.full(4, 10), 4, num_params=20_000) == 1
  assert engine.auto_lane_count(np.full(100, 5), 100, num_params=14_210) == 2
  # a model larger than the whole budget (40,000 > 32,768) still gets one lane, not 0
  assert engine.auto_lane_count(np.full(4, 10), 4, num_params=40_000) == 1
  # the Synthetic-like heavy tail with logistic regression: a handful of lanes
  steps = np.concatenate([np.full(60, 5), np.full(30, 20), np.full(10, 200)])
  lanes = engine.resolve_chunk_size(cfg, 100, False, "cpu", steps, num_params=610)
  assert 2 < lanes < 32
  # on several devices: lanes per device, for its share of the cohort
  per_device = engine.resolve_chunk_size(cfg, 100, False, "cpu", steps, 610, num_devices=2)
  assert per_device == engine.auto_lane_count(steps, 50, 610, param_budget=2 * (1 << 15))
  # the lane-parameter budget grows with the devices in use: the MLP gets up to 4 per device
  assert engine.lane_param_budget(2) == 2 * engine.lane_param_budget(1)
  assert engine.lane_param_budget(0) == engine.lane_param_budget(1)  # at least one device
  assert engine.auto_lane_count(np.full(100, 5), 50, 14_210, param_budget=1 << 16) == 4


CNN_ENGINE_SCRIPT = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
sys.path.insert(0, {tests!r})
from core.test_engine import cnn_engine_run
print(json.dumps(cnn_engine_run({parallelism!r})))
"""


def cnn_engine_run(parallelism: str) -> dict:
  """The MNIST CNN (8x8 images, canonical convs) on 4 clients of unequal sizes, momentum
  SGD, batch 4: the engine's deltas and losses against its per-client loop."""
  rng = np.random.default_rng(0)
  counts = np.array([9, 3, 14, 6], np.int32)
  x = rng.normal(size=(int(counts.sum()), 8, 8, 1)).astype(np.float32)
  y = rng.integers(0, 10, int(counts.sum())).astype(np.int32)
  offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
  model = models.make("cnn_mnist", (8, 8, 1), 10)
  cfg = engine.EngineConfig(batch_size=4, local_epochs=2, parallelism=parallelism)
  tr = engine.make_cohort_trainer(
    model.apply,
    client.make("sgd"),
    make_client_optimizer("sgd", 0.9),
    jnp.asarray(x),
    jnp.asarray(y),
    offsets,
    counts,
    cfg,
    4,
    conv=True,
  )
  params = model.init(jax.random.PRNGKey(0))
  cohort = jnp.array([2, 0, 3, 1])
  valid = jnp.array([True, True, False, True])
  args = (params, cohort, valid, jax.random.PRNGKey(3), 0.05, cohort)
  out = jax.jit(tr)(*args)
  ref = tr.per_client_loop(*args)
  return {
    "devices": jax.device_count(),
    "kind": tr.kind,
    "lanes": int(tr.chunk_size),
    "max_diff": _max_diff(out.deltas, ref.deltas),
    "loss_diff": float(jnp.max(jnp.abs(out.loss - ref.loss))),
    "steps": np.asarray(out.num_steps).tolist(),
    "padded": float(out.padded_steps),
    "deltas": [np.asarray(d).ravel()[:64].tolist() for d in jax.tree_util.tree_leaves(out.deltas)],
  }


@functools.cache
def _cnn_engine_run(n, parallelism):
  """CNN_ENGINE_SCRIPT's result on ``n`` CPU devices (a subprocess; once per test process)."""
  env = dict(
    os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n}", JAX_PLATFORMS="cpu"
  )
  tests = os.path.dirname(os.path.dirname(__file__))
  script = CNN_ENGINE_SCRIPT.format(tests=tests, parallelism=parallelism)
  out = subprocess.run(
    [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
  )
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("devices", [1, 2])
def test_cnn_auto_one_client_per_device_equals_per_client_loop(devices):
  """auto for CNNs on CPU: the flat loop on one device, one lane per device on two (each a
  flat loop over its share of the cohort); both equal the per-client loop and each other
  (the one-device run is computed once for both cases)."""
  got = _cnn_engine_run(devices, "auto")
  assert got["devices"] == devices
  assert (got["kind"], got["lanes"]) == (("flat", 1) if devices == 1 else ("lanes", 1))
  assert got["max_diff"] < 1e-5 and got["loss_diff"] < 1e-5
  # 2 local epochs of ceil(n / 4) steps; the invalid slot runs none; no padding
  assert got["steps"] == [8, 6, 0, 2] and got["padded"] == 16.0
  if devices == 2:
    one = _cnn_engine_run(1, "auto")
    assert one["devices"] == 1 and one["kind"] == "flat"
    for a, b in zip(got["deltas"], one["deltas"]):
      np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize(
  "parallelism,steps,lanes",
  [("vmap", None, 3), ("map", None, 3), ("chunked", 7, 2), ("lanes", None, 2), ("lanes", 7, 1)],
)
def test_per_slot_lr_equals_each_slot_at_its_own_lr(small_synthetic, parallelism, steps, lanes):
  """``lr`` f32[M] (a per-client schedule): slot i trains exactly as a cohort run at the
  scalar lr[i] does, in every loop (momentum and weight decay on, so the lr is not just a
  factor of the delta), and equals the per-client loop."""
  data = small_synthetic
  cfg = engine.EngineConfig(
    batch_size=8, local_epochs=2, local_steps=steps, parallelism=parallelism, chunk_size=lanes
  )
  model = models.make("logreg", data.input_shape, data.num_classes)
  tr = engine.make_cohort_trainer(
    model.apply,
    client.make("sgd"),
    make_client_optimizer("sgd", 0.9, 0.01),
    jnp.asarray(data.train.x),
    jnp.asarray(data.train.y),
    data.train.offsets,
    data.train.counts,
    cfg,
    5,
  )
  params = model.init(jax.random.PRNGKey(0))
  cohort = jnp.array([0, 7, 3, 11, 5])
  valid = jnp.array([True, True, False, True, True])
  key = jax.random.PRNGKey(4)
  lrs = jnp.array([0.05, 0.2, 0.1, 0.005, 0.05], jnp.float32)
  out = jax.jit(tr)(params, cohort, valid, key, lrs, cohort)
  loop = tr.per_client_loop(params, cohort, valid, key, lrs, cohort)
  assert _max_diff(out.deltas, loop.deltas) < 1e-5
  for i, lr in enumerate(np.asarray(lrs)):
    alone = jax.jit(tr)(params, cohort, valid, key, jnp.float32(lr), cohort)
    slot = lambda t, i=i: jax.tree_util.tree_map(lambda a: a[i], t)
    assert _max_diff(slot(out.deltas), slot(alone.deltas)) < 1e-6
    np.testing.assert_allclose(out.loss[i], alone.loss[i], atol=1e-6)
  # the lrs differ enough to matter: slot 1 (lr 0.2) moved far more than slot 3 (0.005)
  norm = lambda i: float(sum(jnp.sum(jnp.abs(a[i])) for a in jax.tree_util.tree_leaves(out.deltas)))
  assert norm(1) > 5 * norm(3) > 0


def test_resolve_chunk_size_of_each_explicit_mode():
  """What each mode means (``train.chunk_size``): map one client at a time, vmap the whole
  cohort, chunked ``chunk_size`` clients (0: 8, at most M), lanes that many per device's
  share of the cohort."""
  cfg = engine.EngineConfig(batch_size=10)
  steps = np.array([3, 1, 7, 2])

  def size(mode, m, chunk_size=0, devices=1):
    c = cfg._replace(parallelism=mode, chunk_size=chunk_size)
    return engine.resolve_chunk_size(c, m, False, "cpu", steps, 610, devices)

  assert size("map", 20) == 1
  assert size("vmap", 20) == 20
  assert (size("chunked", 20), size("chunked", 5), size("chunked", 20, 3)) == (8, 5, 3)
  assert (size("chunked", 20, 1), size("chunked", 1)) == (1, 1)
  # chunks of one client run the flat loop; of two, the chunked one
  data = _random_clients([3, 5, 2], 3, 2)
  for chunk_size, kind in [(1, "flat"), (2, "chunked")]:
    c = cfg._replace(parallelism="chunked", chunk_size=chunk_size)
    assert _trainer(data, client.make("sgd"), c, 3)[1].kind == kind
  # a trainer is for a dense model unless told conv=True: auto runs lanes on one CPU device
  assert _trainer(data, client.make("sgd"), cfg._replace(parallelism="auto"), 3)[1].kind == "lanes"
  assert (size("lanes", 20), size("lanes", 5), size("lanes", 20, 3)) == (8, 5, 3)
  assert size("lanes", 10, devices=2) == 5 and size("lanes", 9, devices=2) == 5  # ceil(M / d)
  assert size("lanes", 20, 3, devices=2) == 3
  assert engine.resolve_chunk_size(cfg._replace(parallelism="auto"), 7, False, "cpu") == 7


def _passes(tr, client, steps, key):
  fidx, mask = jax.jit(tr.client_batches)(tr.data, key, jnp.int32(client), jnp.int32(steps))
  fidx, mask = np.asarray(fidx)[:steps], np.asarray(mask)[:steps]
  assert mask.all()
  n = int(tr.data.counts[client])
  start = int(tr.data.offsets[client])
  order = fidx.reshape(-1) - start
  assert len(order) % n == 0
  return order.reshape(-1, n)  # one row per pass over the client's data


@pytest.mark.parametrize(
  "sizes,batch,local_steps,cid,num_perms",
  [
    # n_max // 4 = 5: ceil(45 / 5) = 9 passes, capped at 8 permutations (client 0: 9 passes)
    ([5, 20], 1, 45, 0, 8),
    # n_max // 4 = 10: ceil(10 / 10) = 1, every pass in the same order (client 0: 5 passes)
    ([2, 40], 2, 5, 0, 1),
    # ceil(12 / 10) = 2 (client 0: 4 passes)
    ([3, 40], 3, 4, 0, 2),
    # n_max // 4 = 10, not 10.5: ceil(21 / 10) = 3 (client 0: 7 passes)
    ([3, 42], 3, 7, 0, 3),
    # n_max // 4 = 1 (n_max < 8): ceil(9 / 1) = 9, capped at 8 (client 0: 3 passes)
    ([3, 6], 3, 3, 0, 8),
    # a client of one example at batch 1: every step reads that example (3 passes)
    ([1, 40], 1, 3, 0, 1),
  ],
)
def test_fixed_steps_passes_cycle_through_num_perms_permutations(
  sizes, batch, local_steps, cid, num_perms
):
  """With ``local_steps``, pass p over a client's data uses permutation p mod num_perms,
  num_perms = min(8, max(1, ceil(K B / max(1, n_max // 4)))) (hand-computed per case);
  each pass is a permutation of the client's examples."""
  D = _random_clients(sizes, dim=3, num_classes=2)
  cfg = engine.EngineConfig(batch_size=batch, local_steps=local_steps, parallelism="vmap")
  _, tr = _trainer(D, client.make("sgd"), cfg, 2)
  assert tr.num_perms == num_perms
  passes = _passes(tr, cid, local_steps, jax.random.PRNGKey(4))
  n = sizes[cid]
  for row in passes:
    np.testing.assert_array_equal(np.sort(row), np.arange(n))
  for p in range(num_perms, len(passes)):
    np.testing.assert_array_equal(passes[p], passes[p - num_perms])
  # within a cycle the permutations differ (for this key): the cycle is not shorter
  for p in range(1, min(num_perms, len(passes))):
    assert not np.array_equal(passes[p], passes[0]), p

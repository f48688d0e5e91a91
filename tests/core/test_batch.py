"""Many experiments as one vmapped program: each equals its own sequential run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import aggregation, availability, client, models, selection
from fedjax_sel.core import batch, engine, simulation


def make_sim(data, sel="uniform", sel_hp=None, avail="ln", avail_hp=None, lr=0.1):
  model = models.make("logreg", data.input_shape, data.num_classes)
  cfg = simulation.SimulationConfig(
    client_lr=lr,
    lr_decay=0.998,
    engine=engine.EngineConfig(batch_size=10, local_steps=5, parallelism="vmap"),
  )
  return simulation.Simulation(
    data,
    model,
    availability.make(avail, **(avail_hp or {"beta": 0.5})),
    selection.make(sel, num_selected=4, **(sel_hp or {})),
    aggregation.make("fedavg"),
    client.make("sgd"),
    cfg,
  )


def sequential(sim, seed, num_evals, every):
  """The reference: one experiment, run_rounds then evaluate, as experiment.run does."""
  state = sim.init(seed)
  losses, accs = [], []
  for _ in range(num_evals):
    state, _ = sim.run_rounds(state, every)
    ev = sim.evaluate(state)
    losses.append(float(ev["test_loss"]))
    accs.append(float(ev["test_accuracy"]))
  return state, np.array(losses), np.array(accs)


def assert_same_experiment(ref_state, ref_losses, ref_accs, states, ev, k):
  # discrete outcomes identical; the round itself is bit for bit; evaluation to float rounding
  np.testing.assert_array_equal(
    np.asarray(ref_state.sampling_counts), np.asarray(states.sampling_counts[k])
  )
  assert int(states.round[k]) == int(ref_state.round)
  for a, b in zip(
    jax.tree_util.tree_leaves(ref_state.params), jax.tree_util.tree_leaves(states.params)
  ):
    np.testing.assert_allclose(np.asarray(b[k]), np.asarray(a), rtol=0, atol=1e-6)
  np.testing.assert_allclose(np.asarray(ev["test_loss"][k]), ref_losses, rtol=0, atol=1e-5)
  np.testing.assert_allclose(np.asarray(ev["test_accuracy"][k]), ref_accs, rtol=0, atol=1e-6)


@pytest.mark.parametrize("loop", ["vmap", "map"])
def test_seeds_batched_equal_sequential(small_synthetic, loop):
  sim = make_sim(small_synthetic)
  b = batch.BatchedSimulation(sim, loop=loop)
  seeds = [0, 1, 5]
  states, rm, ev = b.run_evals(b.init(seeds), {}, 3, 4)
  assert rm["train_loss"].shape == (3, 3, 4)
  assert ev["test_loss"].shape == (3, 3)
  for k, s in enumerate(seeds):
    assert_same_experiment(*sequential(sim, s, 3, 4), states, ev, k)
  # the seeds really differ (a batch of copies would pass the loop above only for seed 0)
  assert not np.array_equal(
    np.asarray(states.sampling_counts[0]), np.asarray(states.sampling_counts[1])
  )
  # run_rounds + evaluate on the batch agree with the fused program
  s2, m2 = b.run_rounds(b.init(seeds), {}, 4)
  ev2 = b.evaluate(s2, {})
  assert m2["num_selected"].shape == (3, 4)
  np.testing.assert_allclose(
    np.asarray(ev2["test_loss"]), np.asarray(ev["test_loss"][:, 0]), atol=1e-5
  )


@pytest.mark.parametrize(
  "sweep",
  [
    # two values: each a concrete FedGS program to compile for the reference runs
    ("fedgs alpha", [0.0, 5.0]),
    pytest.param(("ln beta", [0.1, 0.5, 0.9]), marks=pytest.mark.slow),
    pytest.param(("client lr", [0.02, 0.1, 0.3]), marks=pytest.mark.slow),
  ],
)
def test_swept_hparams_equal_sequential(small_synthetic, sweep):
  """A traced hyper-parameter per experiment gives each experiment's concrete-valued run."""
  what, values = sweep
  data = small_synthetic
  sel = "fedgs" if what == "fedgs alpha" else "uniform"
  fedgs_hp = {"scale": "reference_code", "kernel": "reference_code", "sigma2": 0.1, "epsilon": 0.01}

  def concrete(v):
    if what == "fedgs alpha":
      return make_sim(data, sel, {**fedgs_hp, "alpha": v})
    if what == "ln beta":
      return make_sim(data, avail_hp={"beta": v})
    return make_sim(data, lr=v)

  def parts(v):
    if what == "fedgs alpha":
      return {"selection": selection.make("fedgs", num_selected=4, alpha=v, **fedgs_hp)}
    if what == "ln beta":
      return {"availability": availability.make("ln", beta=v)}
    return {"client_lr": v}

  base = make_sim(data, sel, {**fedgs_hp, "alpha": 1.0} if sel == "fedgs" else None)
  b = batch.BatchedSimulation(base, lambda hp: parts(hp["v"]), loop="vmap")
  hps = {"v": jnp.asarray(values, jnp.float32)}
  seeds = [0, 1, 2][: len(values)]
  states0 = b.init(seeds, parts=[parts(v) for v in values])
  assert b.trace_error(states0, hps) is None
  states, _, ev = b.run_evals(states0, hps, 3, 3)
  for k, (s, v) in enumerate(zip(seeds, values)):
    assert_same_experiment(*sequential(concrete(v), s, 3, 3), states, ev, k)


def test_untraceable_hparam_is_reported(small_synthetic):
  """A constructor that needs a concrete value (SLN's integer period) fails while tracing;
  trace_error returns the error (run_batch then runs the values apart)."""
  sim = make_sim(small_synthetic, avail="sln", avail_hp={"beta": 0.5, "period": 24})
  b = batch.BatchedSimulation(
    sim, lambda hp: {"availability": availability.make("sln", beta=0.5, period=hp["v"])}
  )
  states = b.init([0, 1])
  assert b.trace_error(states, {"v": jnp.asarray([24.0, 12.0])}) is not None
  assert batch.BatchedSimulation(sim).trace_error(states, {}) is None


def test_stack_take_put_back():
  trees = [{"a": jnp.full((2,), i), "b": jnp.int32(i)} for i in range(4)]
  s = batch.stack(trees)
  assert s["a"].shape == (4, 2)
  np.testing.assert_array_equal(batch.unstack(s, 2)["a"], [2, 2])
  part = batch.take(s, [3, 1])
  np.testing.assert_array_equal(part["b"], [3, 1])
  back = batch.put_back(s, [0, 2], batch.take(s, [3, 1]))
  np.testing.assert_array_equal(back["b"], [3, 1, 1, 3])


def test_map_loop_is_bit_for_bit(small_synthetic):
  """loop="map" runs each experiment's own kernels inside the one program: the sequential
  runs bit for bit (Power-of-Choice ranks clients by float losses, the most sensitive)."""
  sim = make_sim(small_synthetic, "power_of_choice")
  b = batch.BatchedSimulation(sim, loop="map")
  seeds = [0, 1, 2]
  states, _, ev = b.run_evals(b.init(seeds), {}, 3, 4)
  for k, s in enumerate(seeds):
    ref_state, ref_losses, _ = sequential(sim, s, 3, 4)
    np.testing.assert_array_equal(
      np.asarray(states.sampling_counts[k]), np.asarray(ref_state.sampling_counts)
    )
    for a, x in zip(
      jax.tree_util.tree_leaves(ref_state.params), jax.tree_util.tree_leaves(states.params)
    ):
      np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(a))
    np.testing.assert_array_equal(np.asarray(ev["test_loss"][k]), ref_losses.astype(np.float32))
  with pytest.raises(ValueError, match="loop='scan'; allowed: vmap, map"):
    batch.BatchedSimulation(sim, loop="scan")


def test_stack_of_typed_keys_and_of_python_scalars():
  """Typed PRNG keys cannot go through numpy: they take the jnp.stack path."""
  keys = [jax.random.key(0), jax.random.key(1)]
  s = batch.stack([{"k": k, "x": float(i)} for i, k in enumerate(keys)])
  assert jax.dtypes.issubdtype(s["k"].dtype, jax.dtypes.prng_key)
  np.testing.assert_array_equal(
    jax.random.key_data(s["k"]), np.stack([jax.random.key_data(k) for k in keys])
  )
  np.testing.assert_array_equal(s["x"], [0.0, 1.0])


def test_init_with_parts_and_length_checks(small_synthetic):
  """parts[k] replaces experiment k's components at init (here its availability rates)."""
  sim = make_sim(small_synthetic)
  b = batch.BatchedSimulation(sim)
  other = {"availability": availability.make("bernoulli", probs=0.3)}
  states = b.init([0, 0], parts=[other, {}])
  want_other = sim.replace_parts(**other).init(0)
  want_plain = sim.init(0)
  for k, want in ((0, want_other), (1, want_plain)):
    for a, x in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(states)):
      np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(a))
  with pytest.raises(ValueError, match="2 seeds, 1 availability seeds and 2 parts"):
    b.init([0, 1], availability_seeds=[0])
  with pytest.raises(ValueError, match="2 seeds, 2 availability seeds and 3 parts"):
    b.init([0, 1], parts=[{}, {}, {}])


@pytest.mark.parametrize(
  "args, bad", [((0, 2), "num_evals=0"), ((2, -1), "eval_every=-1"), ((1.5, 2), "num_evals=1.5")]
)
def test_run_evals_checks_its_counts(small_synthetic, args, bad):
  """A block count < 1 or a non-integer is named at the call, not failed inside XLA."""
  b = batch.BatchedSimulation(make_sim(small_synthetic))
  with pytest.raises(ValueError, match=rf"{bad} is out of range; allowed: integers >= 1"):
    b.run_evals(b.init([0]), {}, *args)


def test_rounds_consume_the_states_not_the_data(small_synthetic):
  """run_rounds and run_evals donate the old stacked states (their buffers are reused)
  and leave the device data and the hyper-parameters usable for the next call."""
  # the programs of test_seeds_batched_equal_sequential[map] (3 seeds, 4 rounds, 3 x 4
  # rounds): compiled once for both through the run's compilation cache
  b = batch.BatchedSimulation(make_sim(small_synthetic))
  states = b.init([0, 1, 5])
  hp = {}
  new, _ = b.run_rounds(states, hp, 4)
  assert all(x.is_deleted() for x in jax.tree_util.tree_leaves(states))
  assert not any(x.is_deleted() for x in jax.tree_util.tree_leaves(b.sim.device_data))
  new, _ = b.run_rounds(new, hp, 4)
  assert int(new.round[0]) == 8
  last, _, _ = b.run_evals(new, hp, 3, 4)  # the same for run_evals
  assert all(x.is_deleted() for x in jax.tree_util.tree_leaves(new))
  assert not any(x.is_deleted() for x in jax.tree_util.tree_leaves(b.sim.device_data))
  assert int(b.run_rounds(last, hp, 4)[0].round[1]) == 24


def test_make_parts_is_used_only_with_hparams(small_synthetic):
  """With make_parts but no swept values, every experiment is the base simulation (the
  callback is not called); without make_parts, swept values are ignored."""
  sim = make_sim(small_synthetic)

  def make_parts(hp):
    return {"availability": availability.make("ln", beta=hp["beta"])}

  plain = batch.BatchedSimulation(sim)
  ref, _ = plain.run_rounds(plain.init([0, 1, 5]), {}, 4)  # test_seeds_batched_equal_sequential's
  for b, hp in (
    (batch.BatchedSimulation(sim, make_parts), {}),
    (plain, {"beta": jnp.asarray([0.1, 0.5, 0.9])}),
  ):
    got, _ = b.run_rounds(b.init([0, 1, 5]), hp, 4)
    for a, x in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(got)):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(a))

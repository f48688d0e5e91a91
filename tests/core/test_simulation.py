"""The round loop: traced once, deterministic, 1 device == 4 devices, FedAvg learns."""

import functools
import json
import os
import subprocess
import sys
import textwrap

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import aggregation, availability, client, models, selection
from fedjax_sel.core import engine, simulation


def make_sim(data, m=4, sel="uniform", avail="idl", agg="fedavg", rule="sgd", **kw):
  model = models.make("logreg", data.input_shape, data.num_classes)
  mode, _, chunk = kw.pop("par", "vmap").partition(":")  # "chunked:3": chunks of 3 clients
  cfg = simulation.SimulationConfig(
    client_lr=0.1,
    lr_decay=0.998,
    engine=engine.EngineConfig(
      batch_size=10, local_steps=5, parallelism=mode, chunk_size=int(chunk or 0)
    ),
  )
  return simulation.Simulation(
    data,
    model,
    availability.make(avail, **kw.pop("avail_hp", {})),
    selection.make(sel, num_selected=m),
    aggregation.make(agg),
    client.make(rule),
    cfg,
  )


def test_round_step_traced_once(small_synthetic):
  sim = make_sim(small_synthetic, avail="ln", avail_hp={"beta": 0.5})
  step = jax.jit(chex.assert_max_traces(sim._round_step, n=1))
  state = sim.init(0)
  for _ in range(4):
    state, _ = step(state)
  assert int(state.round) == 4
  # scanned chunks of the same length and evaluation compile once too
  state, _ = sim.run_rounds(state, 3)
  state, _ = sim.run_rounds(state, 3)
  sim.evaluate(state)
  sim.evaluate(state)
  assert sim.run_rounds._cache_size() == 1
  assert sim.evaluate._cache_size() == 1
  # the once-traced programs compute the rounds themselves: 4 single steps and two scans
  # of 3 equal one scan of 10 from the same start (same params, counts, availability)
  ref, ref_metrics = sim.run_rounds(sim.init(0), 10)
  assert int(ref.round) == 10
  np.testing.assert_array_equal(np.asarray(state.sampling_counts), np.asarray(ref.sampling_counts))
  for a, b in zip(jax.tree_util.tree_leaves(state.params), jax.tree_util.tree_leaves(ref.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
  assert int(jnp.sum(state.sampling_counts)) == int(jnp.sum(ref_metrics["num_selected"])) > 0


def test_same_seed_same_result(small_synthetic):
  a = make_sim(small_synthetic)
  sa, _ = a.run_rounds(a.init(7), 6)
  sb, _ = a.run_rounds(a.init(7), 6)
  sc, _ = a.run_rounds(a.init(8), 6)
  for x, y in zip(jax.tree_util.tree_leaves(sa.params), jax.tree_util.tree_leaves(sb.params)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  assert not np.allclose(
    np.asarray(sa.params["Dense_0"]["kernel"]), np.asarray(sc.params["Dense_0"]["kernel"])
  )


def test_only_selected_available_clients_count(small_synthetic):
  sim = make_sim(small_synthetic, m=4, avail="ln", avail_hp={"beta": 0.9})
  state = sim.init(0)
  total = 0
  for _ in range(10):
    state, m = sim.round_step(state)
    assert int(m["num_selected"]) <= min(4, int(m["num_available"]))
    total += int(m["num_selected"])
  assert int(jnp.sum(state.sampling_counts)) == total


def test_fedavg_loss_falls(small_synthetic):
  """The test loss falls every 15 rounds, from above the best constant predictor's loss (the
  entropy of the test labels) to below it, and evaluate's value is the cross-entropy of the
  final params computed here in numpy."""
  data = small_synthetic
  sim = make_sim(data, m=6)
  state = sim.init(0)
  losses = [float(sim.evaluate(state)["test_loss"])]
  for _ in range(3):
    state, _ = sim.run_rounds(state, 15)
    losses.append(float(sim.evaluate(state)["test_loss"]))
  assert all(b < a for a, b in zip(losses, losses[1:])), losses
  freq = np.bincount(data.test_y, minlength=data.num_classes) / len(data.test_y)
  entropy = float(-np.sum(freq[freq > 0] * np.log(freq[freq > 0])))
  assert losses[0] > entropy > losses[-1], (losses, entropy)
  w = np.asarray(state.params["Dense_0"]["kernel"], np.float64)
  b = np.asarray(state.params["Dense_0"]["bias"], np.float64)
  logits = np.asarray(data.test_x, np.float64).reshape(len(data.test_y), -1) @ w + b
  logits -= logits.max(axis=1, keepdims=True)
  log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
  want = -log_p[np.arange(len(data.test_y)), data.test_y].mean()
  assert losses[-1] == pytest.approx(want, rel=1e-5)


def test_nonfinite_update_is_masked_and_counted(small_synthetic):
  sim = make_sim(small_synthetic, m=4)
  state = sim.init(0)
  # A huge client lr makes updates overflow to inf/nan: they must be masked, not applied.
  sim2 = simulation.Simulation(
    sim.data,
    sim.model,
    sim.availability,
    sim.selection,
    sim.aggregator,
    sim.client_update,
    sim.config._replace(client_lr=1e38, lr_decay=1.0),
  )
  state2, m = sim2.round_step(sim2.init(0))
  assert int(m["num_nonfinite"]) > 0
  for leaf in jax.tree_util.tree_leaves(state2.params):
    assert bool(jnp.all(jnp.isfinite(leaf)))
  assert int(state2.nonfinite_updates) == int(m["num_nonfinite"])
  del state


MULTI_DEVICE_SCRIPT = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    sys.path.insert(0, {tests!r})
    from core.test_simulation import make_sim
    from fedjax_sel.data.synthetic import synthetic
    data = synthetic(0.5, 0.5, num_clients=12, seed=3)
    out = {{"n": jax.device_count()}}
    for par in {pars!r}:
      sim = make_sim(data, m=4, par=par)
      state, _ = sim.run_rounds(sim.init(0), 5)
      out[par] = [np.asarray(x).ravel().tolist() for x in jax.tree_util.tree_leaves(state.params)]
    print(json.dumps(out))
""")
SEVERAL_DEVICES = [("vmap", 4), ("auto", 2), ("lanes", 3), ("chunked:3", 2)]


@functools.cache
def _run_devices(n):
  """The parallelisms of SEVERAL_DEVICES run on ``n`` devices (every one of them on 1), in
  one subprocess per device count (computed once per test process)."""
  pars = [p for p, k in SEVERAL_DEVICES if n in (1, k)]
  env = dict(
    os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n}", JAX_PLATFORMS="cpu"
  )
  script = MULTI_DEVICE_SCRIPT.format(tests=os.path.dirname(os.path.dirname(__file__)), pars=pars)
  out = subprocess.run(
    [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
  )
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("par,n", SEVERAL_DEVICES)
def test_one_device_equals_several_devices(par, n):
  # auto on CPU: lanes; on several devices each runs lanes on its share of the cohort
  # (3 devices for 4 slots: one padded slot); chunks of 3 for 4 slots: two chunks, 2 padded
  # slots, whatever the device count
  ones, severals = _run_devices(1), _run_devices(n)
  assert ones["n"] == 1 and severals["n"] == n
  assert len(ones[par]) == len(severals[par]) > 0
  for a, b in zip(ones[par], severals[par]):
    np.testing.assert_allclose(a, b, atol=1e-5)


TRAIN_LOSS_SCRIPT = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    sys.path.insert(0, {tests!r})
    from core.test_simulation import make_sim
    from fedjax_sel.core import simulation
    from fedjax_sel.data.synthetic import synthetic
    data = synthetic(0.5, 0.5, num_clients=12, seed=3)
    sim = make_sim(data, m=4, par="lanes")
    parts = (sim.availability, sim.selection, sim.aggregator, sim.client_update)
    config = sim.config._replace(global_train_loss=True, eval_chunk=64)
    sim = simulation.Simulation(data, sim.model, *parts, config)
    state, _ = sim.run_rounds(sim.init(0), 3)
    ev = simulation.to_host(sim.evaluate(state))
    params = jax.tree_util.tree_map(lambda a: np.asarray(a).tolist(), state.params)
    print(json.dumps({{"n": jax.device_count(), "mesh": sim._mesh is not None, "ev": ev,
                      "params": params}}))
""")


def test_global_train_loss_on_several_devices():
  """With 2 devices the training split's chunks are dealt over the client mesh: the same
  value as on one device, and numpy's mean loss over every training example."""
  from fedjax_sel.data.synthetic import synthetic

  runs = {}
  for n in (1, 2):
    env = dict(
      os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n}", JAX_PLATFORMS="cpu"
    )
    script = TRAIN_LOSS_SCRIPT.format(tests=os.path.dirname(os.path.dirname(__file__)))
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    runs[n] = json.loads(run.stdout.strip().splitlines()[-1])
  assert (runs[1]["n"], runs[2]["n"], runs[2]["mesh"]) == (1, 2, True)
  data = synthetic(0.5, 0.5, num_clients=12, seed=3)
  dense = runs[2]["params"]["Dense_0"]
  logits = data.train.x.astype(np.float64) @ np.asarray(dense["kernel"]) + dense["bias"]
  logp = logits - logits.max(1, keepdims=True)
  logp -= np.log(np.exp(logp).sum(1, keepdims=True))
  y = data.train.y
  assert data.train.x.shape[0] > 64  # several chunks, the last one overlapping
  for n in (1, 2):
    ev = runs[n]["ev"]
    assert ev["global_train_loss"] == pytest.approx(-logp[np.arange(len(y)), y].mean(), rel=1e-5)
    assert ev["global_train_accuracy"] == pytest.approx(np.mean(logits.argmax(1) == y), abs=1e-6)
  assert runs[1]["ev"]["global_train_loss"] == pytest.approx(
    runs[2]["ev"]["global_train_loss"], rel=1e-5
  )


def test_availability_matches_rollout_and_ignores_selection(small_synthetic):
  """Every method sees the same active clients: the rollout of the availability seed."""
  from fedjax_sel.availability.rollout import rollout

  seen = {}
  for sel in ("uniform", "md"):
    sim = make_sim(small_synthetic, sel=sel, avail="ln", avail_hp={"beta": 0.7})
    _, metrics = sim.run_rounds(sim.init(seed=11, availability_seed=5), 8)
    seen[sel] = np.asarray(metrics["num_available"])
  active, _ = rollout(sim.availability, sim.info, jax.random.PRNGKey(5), 8)
  np.testing.assert_array_equal(seen["uniform"], np.asarray(active).sum(1))
  np.testing.assert_array_equal(seen["md"], seen["uniform"])


PLACEMENT_SCRIPT = textwrap.dedent("""
    import json, sys
    import jax
    from jax.sharding import PartitionSpec as P
    sys.path.insert(0, {tests!r})
    from core.test_simulation import make_sim
    from fedjax_sel.data.synthetic import synthetic
    name = lambda spec: {{P(): "replicated", P("clients"): "split"}}.get(spec, str(spec))
    out = {{}}
    for n in (12, 13):
      sim = make_sim(synthetic(0.5, 0.5, num_clients=n, seed=3), m=4, par="auto", agg="mifa")
      state = sim.init(0)
      specs = sim.state_shardings(state)
      out[n] = {{
        "params": sorted({{name(s.spec) for s in jax.tree_util.tree_leaves(specs.params)}}),
        "memory": sorted({{name(s.spec) for s in jax.tree_util.tree_leaves(
          specs.aggregation_state)}}),
        "placed": sorted({{name(x.sharding.spec) for x in jax.tree_util.tree_leaves(
          sim.place_state(state).aggregation_state) if x.ndim >= 2}}),
        "round": name(specs.round.spec),
      }}
    print(json.dumps(out))
""")


def test_per_client_state_is_split_over_the_client_mesh():
  """With 2 devices, MIFA's [N, ...] memory is split along its client axis when N is a
  multiple of 2 and replicated otherwise; the model and the counters are replicated."""
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
  env["JAX_PLATFORMS"] = "cpu"
  script = PLACEMENT_SCRIPT.format(tests=os.path.dirname(os.path.dirname(__file__)))
  run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
  assert run.returncode == 0, run.stderr[-2000:]
  out = json.loads(run.stdout.strip().splitlines()[-1])
  assert out["12"]["params"] == ["replicated"]
  assert "split" in out["12"]["memory"]
  assert out["12"]["placed"] == ["split"]
  assert out["12"]["round"] == "replicated"
  assert out["13"]["memory"] == ["replicated"]
  assert out["13"]["placed"] == ["replicated"]


def test_all_finite_per_slot_with_one_leaf_and_several():
  from fedjax_sel.core.finite import all_finite_per_slot as _all_finite_per_slot
  from fedjax_sel.core.finite import mask_slots as _mask_slots

  # a dropped slot's delta reaches the aggregator and the client rule as exact zeros
  masked = _mask_slots(
    {"w": jnp.array([[1.0, 2.0], [jnp.nan, 3.0]]), "b": jnp.array([4.0, jnp.inf])},
    jnp.array([True, False]),
  )
  np.testing.assert_array_equal(masked["w"], [[1.0, 2.0], [0.0, 0.0]])
  np.testing.assert_array_equal(masked["b"], [4.0, 0.0])

  one = {"w": jnp.array([[1.0, 2.0], [jnp.nan, 0.0], [0.0, jnp.inf]])}
  np.testing.assert_array_equal(_all_finite_per_slot(one), [True, False, False])
  two = dict(one, b=jnp.array([jnp.inf, 0.0, 0.0]))
  np.testing.assert_array_equal(_all_finite_per_slot(two), [False, False, False])


def test_update_sketch_has_the_sketch_dim(small_synthetic):
  """Strategies that learn from updates keep f32[N, d] sketches, d = min(sketch_dim, P),
  and f32[N, num_noise_inputs x classes] embeddings; the others keep f32[N, 0] of both."""
  sim = make_sim(small_synthetic)
  n = sim.num_clients
  state = sim.init(0)
  assert state.update_sketch.shape == (n, 0) and state.embeddings.shape == (n, 0)
  sim = rebuild(
    sim,
    selection=selection.make("clustered_similarity", num_selected=4),
    config=sim.config._replace(sketch_dim=8, num_noise_inputs=3, loss_examples=1),
  )
  n_classes = small_synthetic.num_classes
  state = sim.init(0)
  assert state.update_sketch.shape == (n, 8) and state.embeddings.shape == (n, 3 * n_classes)
  state, _ = sim.round_step(state)
  assert state.update_sketch.shape == (n, 8)
  # the rows of the round's cohort (sampled with replacement: its distinct clients)
  np.testing.assert_array_equal(
    np.asarray(jnp.any(state.update_sketch != 0, axis=1)), np.asarray(state.sampling_counts > 0)
  )
  # functional embeddings: per noise input, a softmax over the classes (rows sum to 1)
  seen = np.asarray(state.sampling_counts > 0)
  emb = np.asarray(state.embeddings)[seen].reshape(int(seen.sum()), -1, n_classes)
  np.testing.assert_allclose(emb.sum(-1), 1.0, rtol=1e-5)


def test_simulation_config_defaults():
  assert simulation.SimulationConfig()._asdict() == dict(
    simulation.SimulationConfig()._asdict(),
    client_lr=0.1,
    lr_decay=1.0,
    client_optimizer="sgd",
    client_momentum=0.0,
    client_weight_decay=0.0,
    lr_schedule="exponential",
    lr_step_size=0,
    lr_step_gamma=0.1,
    lr_schedule_unit="round",
    server_optimizer="sgd",
    server_lr=1.0,
    server_momentum=0.9,
    sketch_dim=256,
    sketch_seed=0,
    num_noise_inputs=16,
    loss_examples=64,
    eval_chunk=0,
    eval_memory_mb=512,
  )


@pytest.mark.parametrize(
  "name, want",
  [
    # FedAdam with tau = 1e-3, first step from a gradient of 1: -lr * m / (sqrt(v) + tau)
    # with m = g and v = g^2 after bias correction (float32: within 1e-5)
    ("adam", -0.5 / 1.001),
    ("sgd", -0.5),
    ("momentum", -0.5),
  ],
)
def test_server_optimizer_first_step(name, want):
  opt = simulation.make_server_optimizer(name, 0.5)
  params = {"w": jnp.zeros(())}
  updates, _ = opt.update({"w": jnp.ones(())}, opt.init(params), params)
  assert float(updates["w"]) == pytest.approx(want, rel=1e-5)


def test_clients_per_round_bounds_of_a_custom_strategy(small_synthetic):
  """The round loop checks M itself (a strategy built by hand skips make's checks)."""
  from fedjax_sel.core.types import Selection, SelectionStrategy

  def strategy(m):
    def select(state, key, avail, t, ctx):
      return Selection(jnp.zeros((m,), jnp.int32), jnp.ones((m,), bool), jnp.ones((m,))), state

    return SelectionStrategy(init=lambda key, info: (), select=select, num_selected=m)

  sim = make_sim(small_synthetic)
  n = sim.num_clients
  for m in (1, n):
    assert rebuild(sim, selection=strategy(m)).num_selected == m
  for m in (0, n + 1):
    with pytest.raises(ValueError, match=rf"clients_per_round={m} is out of range"):
      rebuild(sim, selection=strategy(m))


def rebuild(sim, **parts):
  """A new Simulation from ``sim``'s parts, some replaced (construction runs its checks)."""
  names = ("data", "model", "availability", "selection", "aggregator", "client_update")
  args = {k: parts.get(k, getattr(sim, k)) for k in names}
  return simulation.Simulation(**args, config=parts.get("config", sim.config))


def test_smallest_sketch_dim_is_one(small_synthetic):
  sim = make_sim(small_synthetic)
  assert rebuild(sim, config=sim.config._replace(sketch_dim=1)).config.sketch_dim == 1


def test_replace_parts_replaces_what_it_is_given(small_synthetic):
  sim = make_sim(small_synthetic)
  same = sim.replace_parts()
  assert same.selection is sim.selection and same.availability is sim.availability
  assert float(same._client_lr(0)) == pytest.approx(0.1)
  other = selection.make("md", num_selected=4)
  new = sim.replace_parts(selection=other, client_lr=0.5)
  assert new.selection is other and sim.selection is not other
  assert float(new._client_lr(0)) == pytest.approx(0.5)
  assert float(new._client_lr(2)) == pytest.approx(0.5 * 0.998**2)
  with pytest.raises(ValueError, match="selection num_selected=3; allowed: 4"):
    sim.replace_parts(selection=selection.make("md", num_selected=3))


def test_eval_chunk_follows_the_memory_budget(small_synthetic):
  """eval_memory_mb MiB over the forward's bytes per example, as a power of two."""
  from fedjax_sel.core import evaluation

  model = models.make(
    "mlp", small_synthetic.input_shape, small_synthetic.num_classes, hidden=(4096,)
  )
  per = evaluation.bytes_per_example(
    model.apply, jax.eval_shape(model.init, jax.random.PRNGKey(0)), model.input_shape
  )
  sim = make_sim(small_synthetic)
  sim = rebuild(sim, model=model, config=sim.config._replace(eval_memory_mb=1))
  want = 1 << ((1 << 20) // per).bit_length() - 1
  assert want < 1024 and sim.eval_chunk == want


def test_seed_streams_are_the_documented_ones(small_synthetic):
  """init's key derivation is part of the reproducibility contract (a seed gives the same
  run in every version): model and selection from split(PRNGKey(seed)), rounds from
  fold_in(PRNGKey(seed), 1), availability from PRNGKey(availability_seed)."""
  from fedjax_sel.availability.rollout import split_availability_key

  sim = make_sim(small_synthetic, avail="ln", avail_hp={"beta": 0.5})
  state = sim.init(seed=7, availability_seed=9)
  key = jax.random.PRNGKey(7)
  k_model, _ = jax.random.split(key)
  np.testing.assert_array_equal(state.key, jax.random.fold_in(key, 1))
  for a, b in zip(
    jax.tree_util.tree_leaves(state.params), jax.tree_util.tree_leaves(sim.model.init(k_model))
  ):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(
    state.availability_key, split_availability_key(jax.random.PRNGKey(9))[1]
  )


def test_evaluation_before_any_round_and_losses_of_an_empty_client(small_synthetic):
  """Before round 0 nothing ran: the useful-step fraction is 0, not 0 / 0 (after one
  executed step that was useful, 1). A client without examples has mean loss 0 (the masked
  sum over max(count, 1)); one with a single example its own loss (not halved)."""
  from fedjax_sel.core.evaluation import mean_client_losses as _mean_client_losses

  sim = make_sim(small_synthetic)
  ev = sim.evaluate(sim.init(0))
  assert float(ev["useful_step_fraction"]) == 0.0
  assert float(ev["sampling_count_mean"]) == 0.0 and float(ev["sampling_count_var"]) == 0.0
  one = sim.init(0).replace(useful_steps=jnp.float32(1.0), executed_steps=jnp.float32(1.0))
  assert float(sim.evaluate(one)["useful_step_fraction"]) == 1.0
  apply = lambda p, x: x @ p
  x = jnp.array([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0]])
  y = jnp.array([0, 1, 1], jnp.int32)
  table = jnp.arange(256, dtype=jnp.float32)  # unused for float inputs
  ids, offsets, counts = jnp.array([0, 1, 2]), jnp.array([0, 2, 2]), jnp.array([2, 0, 1])
  losses = _mean_client_losses(apply, jnp.eye(2), ids, x, y, offsets, counts, 2, table)
  lse = np.log(np.exp(1.0) + 1.0)
  np.testing.assert_allclose(losses, [lse - 1.0, 0.0, np.log(np.exp(2.0) + 1.0)], rtol=1e-6)


def test_optimizer_and_schedule_defaults_by_value():
  # FedYogi's first step from a gradient of 1: v = 1e-6 + 0.001 (optax's initial 1e-6),
  # bias-corrected 1.001; -lr / (sqrt(1.001) + tau)
  opt = simulation.make_server_optimizer("yogi", 0.5)
  params = {"w": jnp.zeros(())}
  updates, _ = opt.update({"w": jnp.ones(())}, opt.init(params), params)
  assert float(updates["w"]) == pytest.approx(-0.5 / (1.001**0.5 + 1e-3), rel=1e-5)
  # FedAdagrad's (optax's adagrad): accumulator 0.1 + g^2, step -lr g / sqrt(acc + tau)
  opt = simulation.make_server_optimizer("adagrad", 0.5)
  updates, _ = opt.update({"w": jnp.ones(())}, opt.init(params), params)
  assert float(updates["w"]) == pytest.approx(-0.5 / (0.1 + 1.0 + 1e-3) ** 0.5, rel=1e-5)
  # the client optimizer's defaults: plain SGD, no momentum, no weight decay
  tx = simulation.make_client_optimizer("sgd")(0.5)
  params = {"w": jnp.full((), 2.0)}
  updates, _ = tx.update({"w": jnp.ones(())}, tx.init(params), params)
  assert float(updates["w"]) == pytest.approx(-0.5)
  # schedules: exponential with decay 1 by default; StepLR's gamma 0.1 by default
  assert float(simulation.make_client_lr_schedule(0.3)(7)) == pytest.approx(0.3)
  step = simulation.make_client_lr_schedule(0.3, "step", step_size=2)
  assert [float(step(t)) for t in (0, 1, 2, 4)] == pytest.approx([0.3, 0.3, 0.03, 0.003])
  with pytest.raises(ValueError, match="lr_step_size=2.0 is out of range"):
    simulation.make_client_lr_schedule(0.3, "step", step_size=2.0)


def test_a_round_without_clients_is_counted_and_reports_the_scalar_lr(small_synthetic):
  """Nobody available: no client trains, the round counts as empty, the model is unchanged,
  train_loss is 0 (not 0 / 0) and client_lr reports the round's (scalar) lr; with per-client
  schedules (lr_schedule_unit="participation") client_lr is the mean over trained slots,
  0 here."""
  sim = make_sim(small_synthetic, avail="bernoulli", avail_hp={"probs": 0.0})
  state0 = sim.init(0)
  params0 = jax.device_get(state0.params)
  state, metrics = sim.round_step(state0)
  assert int(state.empty_rounds) == 1 and int(metrics["num_selected"]) == 0
  assert float(metrics["client_lr"]) == pytest.approx(0.1)
  assert float(metrics["train_loss"]) == 0.0
  for a, b in zip(jax.tree_util.tree_leaves(params0), jax.tree_util.tree_leaves(state.params)):
    np.testing.assert_array_equal(a, b)
  per_slot = rebuild(sim, config=sim.config._replace(lr_schedule_unit="participation"))
  _, metrics = per_slot.round_step(per_slot.init(0))
  assert float(metrics["client_lr"]) == 0.0 and float(metrics["train_loss"]) == 0.0


def test_remember_stores_the_sketch_and_embedding_of_each_local_model(small_synthetic):
  """A strategy that learns from updates gets, for each valid slot's client, the sketch of
  its update and the embedding softmax(f(global + delta, noise)) (functional embedding)."""
  from fedjax_sel.core.types import Selection
  from fedjax_sel.similarity.sketch import flatten_stacked, sketch

  sim = make_sim(small_synthetic)
  sim = rebuild(sim, selection=selection.make("clustered_similarity", num_selected=4))
  state = sim.init(0)
  data = sim.device_data
  # random deltas (a delta constant over the classes would leave every softmax unchanged)
  leaves, treedef = jax.tree_util.tree_flatten(state.params)
  keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
  deltas = jax.tree_util.tree_unflatten(
    treedef, [jax.random.normal(k, (4,) + p.shape) for k, p in zip(keys, leaves)]
  )
  used = Selection(
    jnp.array([3, 1, 5, 0], jnp.int32), jnp.array([True, True, False, True]), jnp.ones((4,))
  )
  sk, emb, seen = sim._remember(data, state, used, deltas)
  np.testing.assert_array_equal(np.flatnonzero(np.asarray(seen)), [0, 1, 3])
  want_sketch = sketch(flatten_stacked(deltas), data.projection)
  for slot, client_id in ((0, 3), (1, 1), (3, 0)):
    local = jax.tree_util.tree_map(lambda g, d, s=slot: g + d[s], state.params, deltas)
    want = jax.nn.softmax(sim.model.apply(local, data.noise), -1).reshape(-1)
    np.testing.assert_allclose(emb[client_id], want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(sk[client_id], want_sketch[slot], rtol=1e-5, atol=1e-7)
  assert not bool(jnp.any(emb[5] != 0))  # the invalid slot's client is untouched


def _spy_aggregator(m, nan_update_at=None):
  """FedAvg whose state keeps the weights and ``finite`` flags of the last round's M slots,
  and whose global update is NaN in round ``nan_update_at``."""
  from fedjax_sel.core.types import Aggregator

  fedavg = aggregation.make("fedavg")

  def init(params, info):
    return fedavg.init(params, info), jnp.zeros((m,)), jnp.zeros((m,), bool)

  def apply(state, deltas, sel, avail, t, aux=None):
    update, inner = fedavg.apply(state[0], deltas, sel, avail, t, aux=aux)
    if nan_update_at is not None:
      update = jax.tree_util.tree_map(lambda u: jnp.where(t == nan_update_at, jnp.nan, u), update)
    return update, (inner, sel.weights, aux.finite)

  return Aggregator(init, apply)


def test_a_nonfinite_client_gets_weight_0_and_a_nonfinite_update_is_skipped(small_synthetic):
  """Client 0 trains on NaN inputs: its slot reaches the aggregator as not finite with
  weight 0 (its delta zeroed). A global update that is not finite (round 1) is skipped and
  counted: params and server optimizer state stay as they were."""
  x = np.array(small_synthetic.train.x)
  x[: int(small_synthetic.train.counts[0])] = np.nan  # client 0's examples come first
  data = small_synthetic._replace(train=small_synthetic.train._replace(x=x))
  n = data.train.num_clients
  sim = make_sim(small_synthetic)
  sim = rebuild(
    sim,
    data=data,
    selection=selection.make("full", num_selected=n),
    aggregator=_spy_aggregator(n, nan_update_at=1),
    config=sim.config._replace(server_optimizer="momentum"),
  )
  state = sim.init(0)
  for t in range(3):
    before = state
    state, metrics = sim.round_step(state)
    _, weights, finite = state.aggregation_state
    assert int(metrics["num_nonfinite"]) == 1 and not bool(finite[0])
    np.testing.assert_array_equal(np.asarray(weights)[~np.asarray(finite)], 0.0)
    assert float(np.sum(weights)) > 0
    assert int(state.skipped_updates) == (1 if t >= 1 else 0)
    pairs = zip(
      jax.tree_util.tree_leaves((before.params, before.server_opt_state)),
      jax.tree_util.tree_leaves((state.params, state.server_opt_state)),
    )
    same = [np.array_equal(np.asarray(a), np.asarray(b)) for a, b in pairs]
    assert all(same) if t == 1 else not all(same), t


def test_init_defaults_to_seed_0_and_checks_its_seeds(small_synthetic):
  sim = make_sim(small_synthetic)
  a, b = sim.init(), sim.init(0)
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  for bad in (-1, 1.5, 2.0, True, "0"):
    with pytest.raises(ValueError, match=f"seed={bad!r} is out of range"):
      sim.init(bad)
  with pytest.raises(ValueError, match="availability_seed=-2 is out of range"):
    sim.init(0, availability_seed=-2)


def test_context_eval_value_is_the_global_test_accuracy(small_synthetic):
  sim = make_sim(small_synthetic)
  state = sim.init(0)
  ctx = sim.context(state, jnp.ones((sim.num_clients,)))
  assert float(ctx.eval_value(state.params)) == pytest.approx(
    float(sim.global_eval(state.params)[1])
  )


def test_replace_parts_replaces_the_aggregator_only_when_given(small_synthetic):
  sim = make_sim(small_synthetic)
  assert sim.replace_parts().aggregator is sim.aggregator
  other = aggregation.make("fedavg")
  assert sim.replace_parts(aggregator=other).aggregator is other


def test_config_lower_bounds_of_evaluation_and_embeddings(small_synthetic):
  sim = make_sim(small_synthetic)
  with pytest.raises(ValueError, match="eval_memory_mb=0 is out of range"):
    rebuild(sim, config=sim.config._replace(eval_memory_mb=0))
  ok = rebuild(sim, config=sim.config._replace(eval_memory_mb=1, num_noise_inputs=1))
  assert ok.config.num_noise_inputs == 1

"""Runs that survive: SIGKILL + --resume, SIGINT/SIGTERM, reproducibility, crash-safe
checkpoints, and rounds with no available client or a NaN client update.

The subprocess tests share one persistent XLA compilation cache (a temporary folder), so
only the first run of the small config pays the compile; a cached executable is the same
program, so the comparisons stay bit-exact.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import aggregation, availability, client, data, experiment, selection
from fedjax_sel.core import checkpoint
from fedjax_sel.core.types import ClientInfo
from fedjax_sel.experiment import loop as experiment_loop
from fedjax_sel.metrics import results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = [
  "--num_clients=8",
  "--clients_per_round=3",
  "--rounds=100",
  "--eval_every=5",
  "--local_steps=2",
  "--progress=false",
]
NUM_ROUNDS = 100
NUM_EVALS = 20  # 100 rounds / eval_every 5


def _without_seconds(records):
  return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("xla_cache"))


def _env(cache_dir):
  return dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    JAX_COMPILATION_CACHE_DIR=cache_dir,
    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1",
  )


def _start(out, cache_dir, *extra):
  log = open(f"{out}.stderr", "w")  # noqa: SIM115 (closed by _finish)
  proc = subprocess.Popen(
    [sys.executable, "-m", "experiments.run", *SMALL, f"--output_dir={out}", *extra],
    cwd=ROOT,
    env=_env(cache_dir),
    stdout=subprocess.DEVNULL,
    stderr=log,
  )
  proc.log = log
  return proc


def _finish(proc, timeout=300):
  rc = proc.wait(timeout=timeout)
  proc.log.close()
  with open(proc.log.name) as f:
    return rc, f.read()


def _wait_for_records(proc, out, count, timeout=300):
  """Polls metrics.jsonl until it holds ``count`` complete lines (or the run ends)."""
  path = os.path.join(out, "metrics.jsonl")
  deadline = time.time() + timeout
  while time.time() < deadline and proc.poll() is None:
    if len(results.read_jsonl(path)) >= count and checkpoint.latest_round(out) is not None:
      return
    time.sleep(0.005)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, compile_cache):
  """metrics.jsonl and summary.json of an uninterrupted run of the small config."""
  out = str(tmp_path_factory.mktemp("reference") / "run")
  rc, err = _finish(_start(out, compile_cache))
  assert rc == 0, err[-2000:]
  with open(os.path.join(out, "summary.json")) as f:
    summary = json.load(f)
  return results.read_jsonl(os.path.join(out, "metrics.jsonl")), summary


def test_sigkill_at_a_random_round_then_resume_equals_uninterrupted(
  tmp_path, compile_cache, reference
):
  ref_records, ref_summary = reference
  assert [r["round"] for r in ref_records] == [5 * (i + 1) for i in range(NUM_EVALS)]
  seed = int.from_bytes(os.urandom(4), "little")
  rng = random.Random(seed)
  kill_after = rng.randint(1, NUM_EVALS // 2)  # evaluations seen before the kill
  delay = rng.uniform(0.0, 0.02)  # then anywhere inside the next chunk (or a write)
  for attempt in range(2):
    out = str(tmp_path / f"run{attempt}")
    proc = _start(out, compile_cache)
    _wait_for_records(proc, out, kill_after)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    rc, err = _finish(proc)
    if rc != 0:
      break
    kill_after, delay = 1, 0.0  # the run was faster than the kill: kill at once
  assert rc == -signal.SIGKILL, (seed, rc, err[-2000:])
  killed_at = checkpoint.latest_round(out)
  assert killed_at is not None and 5 <= killed_at < NUM_ROUNDS, (seed, killed_at)
  assert not os.path.exists(os.path.join(out, "summary.json"))

  rc, err = _finish(_start(out, compile_cache, "--resume"))
  assert rc == 0, (seed, err[-2000:])
  resumed = results.read_jsonl(os.path.join(out, "metrics.jsonl"))
  assert _without_seconds(resumed) == _without_seconds(ref_records), (seed, killed_at)
  with open(os.path.join(out, "summary.json")) as f:
    summary = json.load(f)
  assert summary["complete"] and summary["rounds"] == NUM_ROUNDS
  assert summary["sampling_counts"] == ref_summary["sampling_counts"]
  assert summary["final_test_loss"] == ref_summary["final_test_loss"]


def test_sigint_leaves_a_checkpoint_and_complete_result_files(tmp_path, compile_cache, reference):
  ref_records, _ = reference
  out = str(tmp_path / "run")
  proc = _start(out, compile_cache)
  _wait_for_records(proc, out, 1)
  proc.send_signal(signal.SIGINT)
  rc, err = _finish(proc)
  assert rc == 128 + signal.SIGINT, err[-2000:]
  assert "Traceback" not in err
  stopped_at = checkpoint.latest_round(out)
  assert f"interrupted by signal {int(signal.SIGINT)} after round {stopped_at}" in err
  assert 5 <= stopped_at < NUM_ROUNDS
  with open(os.path.join(out, "metrics.jsonl")) as f:
    text = f.read()
  assert text.endswith("\n")
  lines = text.splitlines()
  records = [json.loads(line) for line in lines]  # every line is one complete object
  assert records[-1]["round"] == stopped_at
  assert _without_seconds(records) == _without_seconds(ref_records[: len(records)])
  with open(os.path.join(out, "summary.json")) as f:
    summary = json.load(f)
  assert summary["rounds"] == stopped_at and summary["complete"] is False
  assert summary["stopped"] == f"signal {int(signal.SIGINT)}"
  with open(os.path.join(out, "config.json")) as f:
    assert json.load(f)["config"]["rounds"] == NUM_ROUNDS
  assert not [f for f in os.listdir(out) if f.startswith(".tmp-")]


# ------------------------------------------------------------------ in-process runs


def _small_config(**overrides):
  c = experiment.default_config()
  c.num_clients = 8
  c.clients_per_round = 3
  c.rounds = 20
  c.eval_every = 5
  c.local_steps = 2
  for k, v in overrides.items():
    c[k] = v
  return c


@pytest.fixture(scope="module")
def small_sim():
  """One Simulation of the small config, shared so its compiled functions are reused."""
  return experiment.build(_small_config())[0]


@pytest.fixture(scope="module")
def in_process_reference(small_sim, tmp_path_factory):
  out = str(tmp_path_factory.mktemp("inproc") / "ref")
  summary = experiment.run(_small_config(), out, simulation=small_sim, write_plots=False)
  return out, summary, results.read_jsonl(os.path.join(out, "metrics.jsonl"))


def test_sigterm_then_resume_in_process_is_exact(small_sim, in_process_reference, tmp_path):
  _, ref_summary, ref_records = in_process_reference
  out = str(tmp_path / "run")
  sigterm_before = signal.getsignal(signal.SIGTERM)

  def send_sigterm_at_round_10(done, total, record):
    if done == 10:
      os.kill(os.getpid(), signal.SIGTERM)

  with pytest.raises(experiment.Interrupted) as err:
    experiment.run(
      _small_config(),
      out,
      simulation=small_sim,
      progress=send_sigterm_at_round_10,
      write_plots=False,
    )
  assert err.value.signum == signal.SIGTERM and err.value.round_index == 10
  assert checkpoint.latest_round(out) == 10
  with open(os.path.join(out, "summary.json")) as f:
    assert json.load(f)["complete"] is False
  assert signal.getsignal(signal.SIGTERM) is sigterm_before  # handler restored

  summary = experiment.run(
    _small_config(), out, resume=True, simulation=small_sim, write_plots=False
  )
  records = results.read_jsonl(os.path.join(out, "metrics.jsonl"))
  assert _without_seconds(records) == _without_seconds(ref_records)
  assert summary["sampling_counts"] == ref_summary["sampling_counts"]
  assert summary["final_test_accuracy"] == ref_summary["final_test_accuracy"]


def test_same_seed_same_metrics_and_config_json_records_versions(
  small_sim, in_process_reference, tmp_path
):
  ref_out, _, ref_records = in_process_reference
  again = str(tmp_path / "again")
  experiment.run(_small_config(), again, simulation=small_sim, write_plots=False)
  records = results.read_jsonl(os.path.join(again, "metrics.jsonl"))
  assert _without_seconds(records) == _without_seconds(ref_records)
  other_seed = str(tmp_path / "seed1")
  experiment.run(_small_config(seed=1), other_seed, simulation=small_sim, write_plots=False)
  records = results.read_jsonl(os.path.join(other_seed, "metrics.jsonl"))
  assert records[-1]["test_loss"] != ref_records[-1]["test_loss"]

  with open(os.path.join(ref_out, "config.json")) as f:
    cfg = json.load(f)
  import fedjax_sel

  env = cfg["environment"]
  assert env["fedjax_sel"] == fedjax_sel.__version__
  assert env["jax"] == jax.__version__ and env["jaxlib"]
  assert env["backend"] == jax.default_backend()
  assert env["devices"] == [str(d) for d in jax.devices()]
  assert env["cpu"] == experiment.cpu_info()
  expected = _small_config().to_dict()
  expected["output_dir"] = ref_out
  assert cfg["config"] == json.loads(results.dumps_line(expected))


def test_resume_refuses_another_config_and_fresh_run_drops_old_checkpoints(
  small_sim, in_process_reference, tmp_path
):
  ref_out, ref_summary, _ = in_process_reference
  out = str(tmp_path / "run")
  # A stale checkpoint from some older run must not be resumed by a fresh run's --resume.
  os.makedirs(checkpoint.checkpoint_dir(out))
  with open(os.path.join(checkpoint.checkpoint_dir(out), "ckpt_00000999.npz"), "wb") as f:
    f.write(b"stale")
  experiment.run(_small_config(rounds=10), out, simulation=small_sim, write_plots=False)
  assert checkpoint.all_rounds(out) == [5, 10]
  with pytest.raises(experiment.ConfigError, match=r"client_lr: 0\.1 -> 0\.5"):
    experiment.run(
      _small_config(client_lr=0.5), out, resume=True, simulation=small_sim, write_plots=False
    )
  # rounds may change on resume: extend the 10-round run to 20 = the reference run.
  summary = experiment.run(
    _small_config(), out, resume=True, simulation=small_sim, write_plots=False
  )
  assert summary["final_test_loss"] == ref_summary["final_test_loss"]
  assert summary["rounds"] == 20 and summary["complete"]


def test_non_finite_model_stops_with_results_and_no_checkpoint(
  small_sim, in_process_reference, tmp_path, monkeypatch
):
  """When the global model turns non-finite (here: reported so at round 10), the run writes
  metrics and summary up to that round, keeps the last good checkpoint, and raises."""
  _, _, ref_records = in_process_reference
  real = experiment_loop._params_finite
  seen = []

  def finite_until_round_10(params):
    seen.append(real(params))
    return len(seen) < 2

  monkeypatch.setattr(experiment_loop, "_params_finite", finite_until_round_10)
  out = str(tmp_path / "run")
  with pytest.raises(experiment.NonFiniteModelError, match="non-finite at round 10;"):
    experiment.run(_small_config(), out, simulation=small_sim, write_plots=False)
  assert seen == [True, True]  # the real check passed on the real (finite) params
  assert checkpoint.all_rounds(out) == [5]
  records = results.read_jsonl(os.path.join(out, "metrics.jsonl"))
  assert _without_seconds(records) == _without_seconds(ref_records[:2])
  with open(os.path.join(out, "summary.json")) as f:
    summary = json.load(f)
  assert summary["stopped"] == "non-finite model" and summary["rounds"] == 10
  assert not summary["complete"]


def test_params_finite_checks_every_leaf():
  ok = {"a": np.ones(3, np.float32), "b": np.zeros((2, 2), np.float32)}
  assert experiment_loop._params_finite(ok)
  assert not experiment_loop._params_finite(dict(ok, b=np.array([[0.0, np.inf], [0, 0]])))
  assert not experiment_loop._params_finite(dict(ok, a=np.array([1.0, np.nan, 0.0])))


def _handmade_data(num_clients=6, dim=5, num_classes=3):
  """Client 2 holds a NaN feature (its update is NaN); client 5 holds no examples."""
  rng = np.random.default_rng(0)

  def one(n, nan=False):
    x = rng.normal(size=(n, dim)).astype(np.float32)
    if nan:
      x[0, 0] = np.nan
    return x, rng.integers(0, num_classes, n).astype(np.int32)

  train = [one(8, nan=(k == 2)) for k in range(num_clients)]
  train[5] = (np.zeros((0, dim), np.float32), np.zeros((0,), np.int32))
  test = [one(3) for _ in range(num_clients)]
  tr = data.split_from_lists([x for x, _ in train], [y for _, y in train])
  te = data.split_from_lists([x for x, _ in test], [y for _, y in test])
  return data.FederatedData(tr, te, te.x, te.y, num_classes, "handmade")


def test_empty_round_and_nan_client_are_counted_and_the_run_goes_on(tmp_path, caplog):
  num_clients = 6
  trace = np.ones((4, num_clients), bool)
  trace[1] = False  # rounds 1 and 5: nobody is available
  trace_path = str(tmp_path / "trace.npy")
  np.save(trace_path, trace)
  c = _small_config(
    num_clients=num_clients,
    clients_per_round=num_clients,
    rounds=8,
    eval_every=1,
    availability="trace",
    selection="full",
  )
  c.availability_hparams.trace = trace_path
  sim, _ = experiment.build(c, _handmade_data(num_clients))
  state = sim.init(0)
  for t in range(3):
    before = jax.device_get(state.params)
    state, metrics = sim.run_rounds(state, 1)
    after = jax.device_get(state.params)
    same = [np.array_equal(a, b) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after))]
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(after))
    if t == 1:  # everyone unavailable: nothing trains, the model is exactly unchanged
      assert all(same) and int(metrics["num_selected"][0]) == 0
      assert int(metrics["num_nonfinite"][0]) == 0
    else:  # client 2's NaN update is dropped, the other 4 with data move the model
      assert not any(same) and int(metrics["num_nonfinite"][0]) == 1
  assert int(state.empty_rounds) == 1 and int(state.nonfinite_updates) == 2

  out = str(tmp_path / "run")
  with caplog.at_level(logging.WARNING):
    summary = experiment.run(c, out, simulation=sim, write_plots=False)
  assert summary["complete"] and summary["rounds"] == 8
  assert summary["empty_rounds"] == 2  # rounds 1 and 5
  assert summary["nonfinite_updates"] == 6  # client 2 in the 6 rounds with anyone available
  records = results.read_jsonl(os.path.join(out, "metrics.jsonl"))
  assert all(np.isfinite(r["test_loss"]) and np.isfinite(r["train_loss"]) for r in records)
  assert [r["num_selected_mean"] for r in records] == [6, 0, 6, 6, 6, 0, 6, 6]
  warnings = [
    r.getMessage() for r in caplog.records if "non-finite client update" in r.getMessage()
  ]
  assert len(warnings) == 6 and "rounds 1-1: 1 non-finite" in warnings[0]


# ------------------------------------------------------------------ checkpoint files


def _tree():
  return {
    "key": jax.random.PRNGKey(3),
    "w": jnp.arange(6, dtype=jnp.float32).reshape(2, 3) / 7,
    "mask": jnp.array([True, False, True]),
    "count": jnp.asarray(5, jnp.int32),
    "weak": jnp.asarray(0.25),  # a weakly typed float scalar
    "weak_vec": jnp.asarray(-0.5) * jnp.arange(3),  # a weakly typed vector, distinct values
    "half": jnp.asarray([1.5, -2.25], jnp.bfloat16),
  }


def _avals(tree):
  return [(x.shape, x.dtype, x.weak_type) for x in jax.tree.leaves(tree)]


@pytest.mark.parametrize("fmt", ["npz", "orbax"])  # orbax: the format of several processes
def test_checkpoint_round_trip_is_exact_and_keeps_the_newest_two(tmp_path, fmt):
  out = str(tmp_path)
  tree = _tree()
  for r in (1, 2, 3):
    bumped = dict(tree, count=tree["count"] + r)
    checkpoint.save(out, bumped, r, {"seconds": 1.5 * r}, fmt=fmt)
  assert checkpoint.all_rounds(out) == [2, 3]
  restored, extra = checkpoint.restore(out, tree)
  assert extra == {"seconds": 4.5}
  assert int(restored["count"]) == 8
  assert _avals(restored) == _avals(tree)
  for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(dict(tree, count=tree["count"] + 3))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_checkpoint_falls_back_past_a_torn_file_and_ignores_temp_files(tmp_path, caplog):
  out = str(tmp_path)
  tree = _tree()
  checkpoint.save(out, tree, 5)
  checkpoint.save(out, dict(tree, count=tree["count"] + 1), 10)
  newest = os.path.join(checkpoint.checkpoint_dir(out), "ckpt_00000010.npz")
  with open(newest, "r+b") as f:  # as if the disk lost the end of the newest file
    f.truncate(os.path.getsize(newest) // 2)
  leftover = os.path.join(checkpoint.checkpoint_dir(out), ".tmp-abc")
  with open(leftover, "wb") as f:
    f.write(b"half a checkpoint")
  with caplog.at_level(logging.WARNING):
    restored, _ = checkpoint.restore(out, tree)
  assert int(restored["count"]) == 5
  assert any("unreadable" in r.getMessage() for r in caplog.records)
  checkpoint.save(out, tree, 15)
  assert not os.path.exists(leftover)
  for r in checkpoint.all_rounds(out):
    os.truncate(os.path.join(checkpoint.checkpoint_dir(out), f"ckpt_{r:08d}.npz"), 10)
  with pytest.raises(FileNotFoundError, match="no readable checkpoint"):
    checkpoint.restore(out, tree)


@pytest.mark.parametrize("fmt", ["npz", "orbax"])
def test_checkpoint_of_another_config_is_refused(tmp_path, fmt):
  out = str(tmp_path)
  checkpoint.save(out, _tree(), 1, fmt=fmt)
  with pytest.raises(checkpoint.CheckpointMismatchError, match=r"expects float32\[3, 3\]"):
    checkpoint.restore(out, dict(_tree(), w=jnp.zeros((3, 3))))
  with pytest.raises(checkpoint.CheckpointMismatchError, match="has 7 arrays"):
    checkpoint.restore(out, dict(_tree(), extra=jnp.zeros(2)))


_WRITER = """
import sys, numpy as np
from fedjax_sel.core import checkpoint
state = {"big": np.arange(4_000_000, dtype=np.float32), "r": np.zeros((), np.int32)}
r = 0
print("ready", flush=True)
while True:
  r += 1
  state["r"] = np.asarray(r, np.int32)
  state["big"][0] = r
  checkpoint.save(sys.argv[1], state, r, {"r": r})
"""


def test_sigkill_during_checkpoint_writes_leaves_only_readable_checkpoints(tmp_path):
  """A writer saving 16 MB checkpoints back to back is killed at random moments; every
  checkpoint name on disk must hold a complete, self-consistent checkpoint."""
  rng = random.Random(int.from_bytes(os.urandom(4), "little"))
  template = {"big": np.zeros(4_000_000, np.float32), "r": np.zeros((), np.int32)}
  for attempt in range(2):
    out = str(tmp_path / f"w{attempt}")
    proc = subprocess.Popen(
      [sys.executable, "-c", _WRITER, out],
      cwd=ROOT,
      env=dict(os.environ, JAX_PLATFORMS="cpu"),
      stdout=subprocess.PIPE,
      text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.time() + 60
    while checkpoint.latest_round(out) is None and time.time() < deadline:
      time.sleep(0.005)
    time.sleep(rng.uniform(0.0, 0.3))
    proc.kill()
    proc.wait()
    proc.stdout.close()
    rounds = checkpoint.all_rounds(out)
    assert rounds
    for r in rounds:
      state, extra = checkpoint.restore(out, template, r)
      assert extra == {"r": r} and int(state["r"]) == r and state["big"][0] == r


@pytest.mark.parametrize("fmt", ["npz", "orbax"])
def test_every_registered_components_state_round_trips_exactly(tmp_path, fmt):
  """Checkpointing is exact for any component's state: random values of the shapes, dtypes
  and weak types each registered component's ``init`` returns (found with eval_shape)."""
  n = 6
  info = ClientInfo(jnp.arange(1, n + 1, dtype=jnp.int32), jnp.ones((n, 3), jnp.int32))
  params = {"w": jnp.ones((3, 2)), "b": jnp.zeros((2,))}
  key = jax.random.PRNGKey(0)
  shapes = {}  # component -> the ShapeDtypeStructs of its init state (no compile)
  for name in selection.names():
    init = selection.make(name, num_selected=2).init
    shapes["selection/" + name] = jax.eval_shape(init, key, info)
  for name in aggregation.names():
    shapes["aggregation/" + name] = jax.eval_shape(aggregation.make(name).init, params, info)
  for name in availability.names():
    hp = {"trace": np.ones((3, n), bool)} if name == "trace" else {}
    shapes["availability/" + name] = jax.eval_shape(availability.make(name, **hp).init, key, info)
  for name in client.names():
    hp = {"client_counts": list(range(n))} if name == "fedsgd" else {}
    init = client.make(name, **hp).init
    shapes["client/" + name] = jax.eval_shape(lambda p, init=init: init(p, n), params)
  rng = np.random.default_rng(0)

  def fill(s):
    value = rng.normal(size=s.shape) * 100
    x = jnp.asarray(value.astype(s.dtype) if s.dtype != bool else value > 0)
    return jax.lax.full_like(x, 0, s.dtype) + x if s.weak_type else x.astype(s.dtype)

  states = jax.tree.map(fill, shapes)
  out = str(tmp_path)
  checkpoint.save(out, states, 1, fmt=fmt)
  restored, _ = checkpoint.restore(out, states)
  assert jax.tree.structure(restored) == jax.tree.structure(states)
  assert _avals(restored) == _avals(states)
  for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(states)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("fmt", ["npz", "orbax"])
def test_checkpoint_keep_and_rounds_saved_twice_or_out_of_order(tmp_path, fmt):
  """keep < 1 keeps the newest one; a round saved twice is not an error (a stop right after
  a resume saves the round it resumed from); a round below the newest is written too."""
  tree = _tree()
  out = str(tmp_path / "keep0")
  for r in (1, 2, 3):
    checkpoint.save(out, tree, r, keep=0, fmt=fmt)
  assert checkpoint.all_rounds(out) == [3]
  out = str(tmp_path / "keep3")
  for r in (1, 2, 3, 4):
    checkpoint.save(out, tree, r, keep=3, fmt=fmt)
  assert checkpoint.all_rounds(out) == [2, 3, 4]
  out = str(tmp_path / "twice")
  checkpoint.save(out, tree, 5, {"seconds": 1.0}, fmt=fmt)
  checkpoint.save(out, tree, 5, {"seconds": 2.0}, fmt=fmt)
  assert checkpoint.all_rounds(out) == [5]
  checkpoint.save(out, tree, 3, fmt=fmt)
  assert checkpoint.all_rounds(out) == [3, 5]
  restored, _ = checkpoint.restore(out, tree)
  assert _avals(restored) == _avals(tree)


def test_checkpoint_format_choice(monkeypatch):
  """orbax when asked, or automatically when several processes run; npz otherwise."""
  assert checkpoint.use_orbax("orbax") and not checkpoint.use_orbax("npz")
  assert not checkpoint.use_orbax(None)  # one process
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  assert checkpoint.use_orbax(None) and checkpoint.use_orbax("orbax")
  assert not checkpoint.use_orbax("npz")
  with pytest.raises(ValueError, match="checkpoint format 'zip'; allowed: orbax, npz"):
    checkpoint.use_orbax("zip")


def test_npz_leaf_of_another_dtype_same_width_is_refused(tmp_path):
  """float32 saved, int32 expected (both 4 bytes): refused, not reinterpreted; only raw
  bytes (npz's storage of bfloat16 and other ml_dtypes) are viewed as the template's dtype."""
  out = str(tmp_path)
  checkpoint.save(out, {"a": jnp.ones((2,), jnp.float32)}, 1, fmt="npz")
  with pytest.raises(checkpoint.CheckpointMismatchError, match=r"leaf 0 is float32\[2\]"):
    checkpoint.restore(out, {"a": jnp.zeros((2,), jnp.int32)})


_THREADED_STOP = r"""
import json, os, signal, sys, threading, time
from fedjax_sel import experiment

out = sys.argv[1]
c = experiment.default_config()
c.num_clients, c.clients_per_round, c.rounds, c.eval_every, c.local_steps = 8, 3, 20, 5, 2
sent = threading.Event()

def run(name):
  def progress(done, total, record):
    if name == "a" and done == 10:
      os.kill(os.getpid(), signal.SIGTERM)  # from a worker thread, as `kill` would
      time.sleep(1)  # the main thread's handler runs
      sent.set()
    if name == "b" and done == 5:
      assert sent.wait(120)
  return experiment.run(c, os.path.join(out, name), progress=progress, write_plots=False)

try:
  experiment.run_in_threads(run, ["a", "b", "c"], workers=2)
except experiment.Interrupted as e:
  print("interrupted", e.signum)
"""


def test_sigterm_stops_runs_in_worker_threads_with_checkpoints(tmp_path, compile_cache):
  """Runs in a thread pool (how ``run_cells`` and the atlas run programs) stop on SIGTERM
  at their next round with a checkpoint and a summary, and a waiting run never starts:
  Python installs handlers only on the main thread, where ``run_in_threads`` puts one."""
  out = str(tmp_path)
  proc = subprocess.run(
    [sys.executable, "-c", _THREADED_STOP, out],
    env=_env(compile_cache),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.split() == ["interrupted", str(int(signal.SIGTERM))]
  for name, stopped_at in (("a", 10), ("b", 5)):
    run = os.path.join(out, name)
    assert checkpoint.latest_round(run) == stopped_at
    with open(os.path.join(run, "summary.json")) as f:
      summary = json.load(f)
    assert summary["rounds"] == stopped_at and summary["complete"] is False
    assert summary["stopped"] == f"signal {int(signal.SIGTERM)}"
  assert not os.path.exists(os.path.join(out, "c"))  # waiting in the pool: never started

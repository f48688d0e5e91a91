r"""Seconds per round of local training: our engine vs per-client loops, side by side.

  python -m benchmarks.round_speed --json                       # the full grid
  python -m benchmarks.round_speed --json --quick               # tiny settings (smoke test)
  python -m benchmarks.round_speed --json --models=mlp --cohorts=100 --repeats=7
  python -m benchmarks.round_speed --json --cpu_devices=2 --models=logreg,mlp --cohorts=100
  python -m benchmarks.round_speed --half_precision --models=cnn_mnist --batch_size=32

For each (model, cohort size M), on the same data, initial params, batch order and
hyper-parameters (Synthetic(0.5, 0.5) for logreg/mlp; random 28x28x1 / 32x32x3 images for
the CNNs; batch 10, 1 local epoch, plain SGD), it first checks that every implementation
returns the same deltas (max abs difference <= 1e-4), then times, interleaved, the median
of ``--repeats`` calls after a warm-up (compile time reported separately):

* ``modes``: the engine's jitted cohort call in each parallelism mode (vmap, map,
  chunked_c for a few chunk sizes c, lanes_L for a few lane counts L, and auto =
  ``EngineConfig(parallelism="auto")``, whose loop and size are in ``kind_by_mode`` and
  ``chunk_size_by_mode``);
* ``per_client_loop_s``: the engine's own reference, one jitted lax loop per client;
* ``per_step_loop_s``: one jitted SGD step per dispatch on host-gathered numpy batches
  (the way FedJAX trains a client);
* ``torch_loop_s``: a PyTorch per-client loop (null when torch is not importable).

``useful_gflops`` = (real local steps x XLA's FLOPs of one step) / ours_s;
``matmul_gflops`` = a dense f32 matmul of comparable total FLOPs timed in the same run.
A mode whose padding (masked steps) exceeds ``--max_mode_gflop`` is not run (null, with the
reason).
``--round_level`` adds one line per model comparing the full ``Simulation.run_rounds``
(uniform selection, idl availability, fedavg) with the engine alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks import _common as C
from fedjax_sel.core import engine

MODELS = ("logreg", "mlp", "cnn_mnist", "cnn_cifar")


def _mode_list(
  num_selected: int, chunk_sizes: list[int], lane_counts: list[int] = ()
) -> list[tuple[str, str, int]]:
  out = [("vmap", "vmap", 0), ("map", "map", 0)]
  for c in chunk_sizes:
    if 1 < c < num_selected:
      out.append((f"chunked_{c}", "chunked", c))
  for c in lane_counts:
    if 1 < c <= num_selected:
      out.append((f"lanes_{c}", "lanes", c))
  out.append(("auto", "auto", 0))
  return out


def parse_mode(name: str) -> tuple[str, str, int]:
  """``vmap``, ``map``, ``auto``, ``chunked_C`` or ``lanes_L`` -> (name, parallelism, size)."""
  if name in ("vmap", "map", "auto"):
    return name, name, 0
  mode, _, size = name.partition("_")
  if mode in ("chunked", "lanes") and size.isdigit() and int(size) >= 1:
    return name, mode, int(size)
  raise SystemExit(
    f"engine mode {name!r}; allowed: vmap, map, auto, chunked_C or lanes_L (C, L >= 1)"
  )


def _padded_lane_steps(steps: np.ndarray, chunk: int, sort: bool = True) -> float:
  m = len(steps)
  num_chunks = -(-m // chunk)
  s = np.sort(steps)[::-1] if (sort and chunk < m) else steps
  s = np.concatenate([s, np.zeros(num_chunks * chunk - m)])
  return float(np.sum(s.reshape(num_chunks, chunk).max(axis=1)) * chunk)


def _variants(model_name: str, data, num_selected: int, args) -> list[tuple[str, object, list]]:
  """(prefix, model, modes): the model as a user gets it (``conv_impl="auto"``) in every
  mode asked for, then each other convolution implementation of ``--cnn_impls`` in
  ``auto`` mode (their names prefixed ``<impl>_``)."""
  model = C.make_model(model_name, data)
  if not model.conv:
    return [("", model, _mode_list(num_selected, args.chunk_sizes, args.lane_counts))]
  out = [("", model, [parse_mode(m) for m in args.cnn_modes])]
  for impl in args.cnn_impls:
    out.append((f"{impl}_", C.make_model(model_name, data, impl), [("auto", "auto", 0)]))
  return out


def _inputs(model, data, num_selected: int, args):
  """(params, cohort, valid, key, lr, train_x, train_y) of one benchmark configuration: the
  model's initial params, the whole cohort 0..M-1 valid, the seed's key and ``--lr``."""
  params = model.init(jax.random.PRNGKey(args.seed))
  cohort = np.arange(num_selected, dtype=np.int32)
  valid = np.ones(num_selected, bool)
  key = jax.random.PRNGKey(args.seed + 1)
  train_x, train_y = jnp.asarray(data.x), jnp.asarray(data.y)
  return params, cohort, valid, key, jnp.float32(args.lr), train_x, train_y


def bench_config(model_name: str, num_selected: int, args) -> dict:
  """One (model, cohort) configuration: equivalence check, then interleaved timings."""
  data = C.make_data(model_name, num_selected, seed=args.seed)
  variants = _variants(model_name, data, num_selected, args)
  model = variants[0][1]
  params, cohort, valid, key, lr, train_x, train_y = _inputs(model, data, num_selected, args)
  b, e = args.batch_size, args.local_epochs
  batches = C.engine_batches(data, cohort, key, b, e)
  steps = batches[2]
  useful_steps = float(steps.sum())
  step_flops = C.flops_per_step(model, b)

  record: dict = {
    "kind": "engine",
    "model": model_name,
    "conv_impl": getattr(model, "conv_impl", None),
    "clients_per_round": num_selected,
    "local_epochs": e,
    "batch_size": b,
    "examples": int(data.counts.sum()),
    "useful_steps": useful_steps,
    "max_steps": int(steps.max()),
    "flops_per_step": step_flops,
    "modes": {},
    "compile_s": {},
    "useful_step_fraction_by_mode": {},
    "chunk_size_by_mode": {},
    "kind_by_mode": {},
    "skipped": {},
    "max_abs_diff": {},
    "variant_max_abs_diff": {},
  }

  # Past --check_max_steps local steps the deltas are compared but not asserted: float32 sums
  # in another order (a batched dot vs single dots) drift apart over thousands of non-convex
  # SGD steps (MLP, 2,750 steps: 0.02); tests/core checks the equivalence to 1e-5.
  record["equivalence_asserted"] = bool(steps.max() <= args.check_max_steps)
  references: dict = {}  # prefix -> the first deltas of that implementation

  def compare(prefix, name, out):
    """Each implementation's outputs are asserted equal to its own first output; another
    convolution implementation (same sums in another order: float rounding, which a ReLU or
    max-pool choice can grow over steps) is compared with the main one, recorded only."""
    if prefix not in references:
      references[prefix] = out
      if prefix and "" in references:
        record["variant_max_abs_diff"][prefix.rstrip("_")] = C.tree_max_abs_diff(
          out, references[""]
        )
      return
    if record["equivalence_asserted"]:
      record["max_abs_diff"][name] = C.assert_close(name, out, references[prefix], args.atol)
    else:
      record["max_abs_diff"][name] = C.tree_max_abs_diff(out, references[prefix])

  fns: dict = {}
  aux = jnp.asarray(cohort)
  call_args = (params, jnp.asarray(cohort), jnp.asarray(valid), key, lr, aux)
  loops: dict = {}
  mode_names = []
  for prefix, variant, modes in variants:
    per_client = None
    for base, mode, chunk in modes:
      name = prefix + base
      mode_names.append(name)
      trainer = C.build_trainer(
        variant, data, num_selected, mode, chunk, b, e, train_x=train_x, train_y=train_y
      )
      per_client = per_client or trainer.per_client_loop
      record["chunk_size_by_mode"][name] = int(trainer.chunk_size)
      record["kind_by_mode"][name] = trainer.kind
      if trainer.kind == "lanes":
        lane_steps = float(engine.lpt_makespan(steps, trainer.chunk_size) * trainer.chunk_size)
      else:
        lane_steps = _padded_lane_steps(steps, trainer.chunk_size)
      wasted_gflop = (lane_steps - useful_steps) * step_flops / 1e9
      if wasted_gflop > args.max_mode_gflop:
        record["modes"][name] = None
        record["skipped"][name] = f"padding {wasted_gflop:.0f} GFLOP > --max_mode_gflop"
        record["useful_step_fraction_by_mode"][name] = useful_steps / lane_steps
        continue
      compiled, secs = C.compile_timed(trainer, *call_args)
      record["compile_s"][name] = round(secs, 3)
      out = C.block(compiled(*call_args))
      record["useful_step_fraction_by_mode"][name] = useful_steps / float(out.padded_steps)
      compare(prefix, name, out.deltas)
      fns[name] = lambda compiled=compiled: compiled(*call_args)
    if per_client is None:
      per_client = C.build_trainer(
        variant, data, num_selected, "map", 0, b, e, train_x=train_x, train_y=train_y
      ).per_client_loop
    loops[prefix + "per_client_loop"] = (
      prefix,
      lambda pc=per_client: pc(params, cohort, valid, key, lr, cohort).deltas,
    )

  if useful_steps <= args.max_loop_steps:
    per_step = C.make_per_step_loop(model, data, batches, args.lr)
    loops["per_step_loop"] = ("", lambda: per_step(params, cohort))
  else:
    record["skipped"]["per_step_loop"] = f"{useful_steps:.0f} steps > --max_loop_steps"
  if C.torch_available() and not args.no_torch and useful_steps <= args.max_loop_steps:
    thread_counts = args.torch_threads or ([1] if not model.conv else [1, os.cpu_count() or 1])
    record["torch_threads_tried"] = sorted(set(thread_counts))
    for t in record["torch_threads_tried"]:
      run, _ = C.make_torch_loop(model_name, data, batches, args.lr, t)
      loops[f"torch_loop_{t}"] = ("", lambda run=run: run(params, cohort))
  elif not C.torch_available():
    record["skipped"]["torch_loop"] = "torch not importable"
  for name, (prefix, fn) in loops.items():
    t0 = time.perf_counter()
    out = fn()
    record["compile_s"][name] = round(time.perf_counter() - t0, 3)  # first call (+compile)
    compare(prefix, name, out)
    fns[name] = fn
  matmul, record["matmul_n"] = C.matmul_fn(useful_steps * step_flops)
  fns["matmul"] = matmul

  timings = C.interleaved_medians(fns, args.repeats, warmup=1)
  for name in mode_names:
    if name in timings:
      record["modes"][name] = timings[name]["median_s"]
  record["samples_s"] = {k: v["samples_s"] for k, v in timings.items()}
  get = lambda k: timings[k]["median_s"] if k in timings else None
  record["ours_s"] = get("auto")
  record["per_client_loop_s"] = get("per_client_loop")
  for prefix, _, _ in variants[1:]:
    record[f"{prefix}per_client_loop_s"] = get(f"{prefix}per_client_loop")
    record[f"{prefix}s"] = get(f"{prefix}auto")
  record["per_step_loop_s"] = get("per_step_loop")
  torch_times = {t: get(f"torch_loop_{t}") for t in record.get("torch_threads_tried", [])}
  torch_times = {t: v for t, v in torch_times.items() if v}
  record["torch_loop_s_by_threads"] = torch_times
  record["torch_loop_s"] = min(torch_times.values()) if torch_times else None
  record["torch_threads"] = min(torch_times, key=torch_times.get) if torch_times else None
  record["useful_step_fraction"] = record["useful_step_fraction_by_mode"].get("auto")
  useful_flops = useful_steps * step_flops
  ours = record["ours_s"]
  record["useful_gflops"] = useful_flops / ours / 1e9 if ours else None
  record["useful_gflops_by_mode"] = {
    k: (useful_flops / v / 1e9 if v else None) for k, v in record["modes"].items()
  }
  record["matmul_gflops"] = 2.0 * record["matmul_n"] ** 3 / get("matmul") / 1e9
  record["useful_vs_matmul"] = (
    record["useful_gflops"] / record["matmul_gflops"] if record["useful_gflops"] else None
  )
  best = min(((v, k) for k, v in record["modes"].items() if v), default=(None, None))
  record["best_mode"], record["best_mode_s"] = best[1], best[0]

  def ratio(a, bkey):
    return record[a] / record[bkey] if record.get(a) and record.get(bkey) else None

  record["speedup_vs_per_client_loop"] = ratio("per_client_loop_s", "ours_s")
  record["speedup_vs_per_step_loop"] = ratio("per_step_loop_s", "ours_s")
  record["speedup_vs_torch"] = ratio("torch_loop_s", "ours_s")
  record["machine"] = C.machine_info(with_torch=True)
  return record


def bench_half_precision(model_name: str, num_selected: int, args) -> dict:
  """float32 against ``half_precision`` (bfloat16 compute, float32 params), interleaved in
  one process on the same data, params and batch order: one local SGD step at batch B, the
  engine's cohort call (``auto``), and a forward pass over ``--eval_examples`` examples.
  CNNs add ``half_precision`` with each convolution of ``--cnn_impls`` (e.g. im2col:
  patches @ kernel as bfloat16 matmuls). ``*_speedup`` = float32 seconds / bfloat16 seconds.
  """
  data = C.make_data(model_name, num_selected, seed=args.seed)
  variants = {"float32": C.make_model(model_name, data)}
  variants["bfloat16"] = C.make_model(model_name, data, half_precision=True)
  if model_name.startswith("cnn"):
    for impl in args.cnn_impls:
      variants[f"bfloat16_{impl}"] = C.make_model(model_name, data, impl, half_precision=True)
  params, cohort, valid, key, lr, train_x, train_y = _inputs(
    variants["float32"], data, num_selected, args
  )
  b, e = args.batch_size, args.local_epochs
  xb, yb = train_x[:b], train_y[:b]
  xe = jnp.asarray(np.resize(data.x, (args.eval_examples, *data.x.shape[1:])))
  call_args = (params, jnp.asarray(cohort), jnp.asarray(valid), key, lr, jnp.asarray(cohort))
  fns: dict = {}
  deltas: dict = {}
  for name, model in variants.items():

    def step(p, x, y, apply=model.apply):
      loss = lambda p: optax.softmax_cross_entropy_with_integer_labels(apply(p, x), y).mean()
      return jax.tree.map(lambda w, g: w - lr * g, p, jax.grad(loss)(p))

    step_fn = jax.jit(step)
    fns[f"step/{name}"] = lambda f=step_fn: f(params, xb, yb)
    trainer = C.build_trainer(model, data, num_selected, "auto", 0, b, e, train_x, train_y)
    compiled, _ = C.compile_timed(trainer, *call_args)
    deltas[name] = C.block(compiled(*call_args)).deltas
    fns[f"cohort/{name}"] = lambda c=compiled: c(*call_args)
    fwd = jax.jit(model.apply)
    fns[f"eval/{name}"] = lambda f=fwd: f(params, xe)
  timings = C.interleaved_medians(fns, args.repeats, warmup=1)
  record: dict = {
    "kind": "half_precision",
    "model": model_name,
    "clients_per_round": num_selected,
    "batch_size": b,
    "local_epochs": e,
    "eval_examples": args.eval_examples,
    "conv_impl": getattr(variants["float32"], "conv_impl", None),
    "seconds": {k: v["median_s"] for k, v in timings.items()},
    "samples_s": {k: v["samples_s"] for k, v in timings.items()},
  }
  for part in ("step", "cohort", "eval"):
    full = timings[f"{part}/float32"]["median_s"]
    for name in variants:
      if name != "float32":
        suffix = "" if name == "bfloat16" else name[len("bfloat16") :]
        record[f"{part}{suffix}_speedup"] = full / timings[f"{part}/{name}"]["median_s"]
  # how far bfloat16 compute moves one round's client deltas, relative to their size
  scale = max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(deltas["float32"]))
  full = deltas.pop("float32")
  record["delta_rel_diff"] = {k: C.tree_max_abs_diff(v, full) / scale for k, v in deltas.items()}
  record["host"] = C.host_simd()
  record["machine"] = C.machine_info()
  return record


def bench_round_level(model_name: str, args) -> dict:
  """Seconds per round of ``Simulation.run_rounds`` vs the engine's cohort call alone."""
  from fedjax_sel import experiment

  num_clients, num_selected = args.round_clients, args.round_selected
  c = experiment.default_config()
  c.model = model_name
  c.dataset = "synthetic" if model_name in ("logreg", "mlp") else c.dataset
  c.num_clients = num_clients
  c.clients_per_round = num_selected
  c.availability, c.selection, c.aggregator = "idl", "uniform", "fedavg"
  c.batch_size, c.local_epochs = args.batch_size, args.local_epochs
  c.client_lr, c.lr_decay = args.lr, 1.0
  sim, _ = experiment.build(c)
  state = sim.init(args.seed)
  rounds = args.round_rounds
  t0 = time.perf_counter()
  state, _ = sim.run_rounds(state, rounds)
  C.block(state)
  compile_s = time.perf_counter() - t0
  trainer = jax.jit(sim.trainer)
  rng = np.random.default_rng(args.seed)
  cohort = jnp.asarray(rng.choice(num_clients, num_selected, replace=False).astype(np.int32))
  valid = jnp.ones(num_selected, bool)
  key = jax.random.PRNGKey(3)
  lr = jnp.float32(args.lr)
  C.block(trainer(state.params, cohort, valid, key, lr, cohort))
  holder = {"state": state}

  def run_block():
    holder["state"], m = sim.run_rounds(holder["state"], rounds)
    return holder["state"].params

  timings = C.interleaved_medians(
    {
      "run_rounds": run_block,
      "engine": lambda: trainer(holder["state"].params, cohort, valid, key, lr, cohort),
    },
    args.repeats,
    warmup=0,
  )
  per_round = timings["run_rounds"]["median_s"] / rounds
  engine_s = timings["engine"]["median_s"]
  return {
    "kind": "round",
    "model": model_name,
    "num_clients": num_clients,
    "clients_per_round": num_selected,
    "local_epochs": args.local_epochs,
    "availability": "idl",
    "selection": "uniform",
    "aggregator": "fedavg",
    "rounds_per_call": rounds,
    "round_s": per_round,
    "engine_s": engine_s,
    "overhead_fraction": (per_round - engine_s) / per_round,
    "compile_s": round(compile_s, 3),
    "chunk_size": int(sim.trainer.chunk_size),
    "machine": C.machine_info(),
  }


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--models", default=",".join(MODELS), help="comma-separated model names")
  p.add_argument(
    "--cpu_devices",
    type=int,
    default=0,
    help="expose this many CPU cores as JAX devices (jax_num_cpu_devices; 0: JAX's default)",
  )
  p.add_argument("--cohorts", default="10,100,1000", help="cohort sizes M for logreg/mlp")
  p.add_argument("--cnn_cohorts", default="10", help="cohort sizes M for the CNNs")
  p.add_argument("--chunk_sizes", default="4,8,16,32", help="chunk sizes for chunked mode")
  p.add_argument(
    "--cnn_modes",
    default="map,lanes_1,auto",
    help="engine modes of the CNNs as users get them (conv_impl=auto): vmap, map, auto, "
    "chunked_C, lanes_L",
  )
  p.add_argument(
    "--cnn_impls",
    default="im2col",
    help="other convolution implementations timed in auto mode with their own per-client "
    "loop (any of: xla, canonical, im2col)",
  )
  p.add_argument(
    "--lane_counts", default="2,4,8,16", help="lane counts L for lanes mode (comma-separated)"
  )
  p.add_argument("--batch_size", type=int, default=10)
  p.add_argument("--local_epochs", type=int, default=1)
  p.add_argument("--lr", type=float, default=0.05)
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--atol", type=float, default=1e-4)
  p.add_argument(
    "--check_max_steps",
    type=int,
    default=300,
    help="assert the deltas agree only when no client runs more local steps than this",
  )
  p.add_argument(
    "--max_mode_gflop",
    type=float,
    default=40.0,
    help="skip a mode whose padding (masked steps) costs more than this many GFLOP",
  )
  p.add_argument("--max_loop_steps", type=float, default=40000)
  p.add_argument("--no_torch", action="store_true")
  p.add_argument(
    "--torch_threads",
    default="",
    help="torch intra-op thread counts to try, comma-separated; the fastest is compared "
    "('': 1 for dense models, 1 and nproc for CNNs)",
  )
  p.add_argument(
    "--half_precision",
    action="store_true",
    help="time float32 against half_precision (bfloat16 compute over float32 params) side by "
    "side instead of the engine's modes: a local step, the cohort call and a forward pass; "
    "prints the ratios and the host's SIMD flags",
  )
  p.add_argument(
    "--eval_examples", type=int, default=1024, help="examples of --half_precision's forward pass"
  )
  p.add_argument("--round_level", action="store_true", help="also time Simulation.run_rounds")
  p.add_argument("--round_clients", type=int, default=1000)
  p.add_argument("--round_selected", type=int, default=100)
  p.add_argument("--round_rounds", type=int, default=10)
  p.add_argument("--quick", action="store_true", help="tiny settings for a smoke test")
  p.add_argument("--json", action="store_true", help="one JSON object per configuration")
  args = p.parse_args(argv)
  args.models = [m for m in args.models.split(",") if m]
  args.cohorts = [int(v) for v in args.cohorts.split(",") if v]
  args.cnn_cohorts = [int(v) for v in args.cnn_cohorts.split(",") if v]
  args.chunk_sizes = [int(v) for v in args.chunk_sizes.split(",") if v]
  args.lane_counts = [int(v) for v in args.lane_counts.split(",") if v]
  args.cnn_modes = [v for v in args.cnn_modes.split(",") if v]
  for name in args.cnn_modes:
    parse_mode(name)
  args.cnn_impls = [v for v in args.cnn_impls.split(",") if v]
  bad = [v for v in args.cnn_impls if v not in ("xla", "canonical", "im2col")]
  if bad:
    raise SystemExit(f"--cnn_impls: {bad}; allowed: any of xla, canonical, im2col")
  try:
    args.torch_threads = [int(v) for v in args.torch_threads.split(",") if v]
  except ValueError:
    raise SystemExit(f"--torch_threads={args.torch_threads!r}; allowed: integers >= 1") from None
  if any(t < 1 for t in args.torch_threads):
    raise SystemExit(f"--torch_threads={args.torch_threads}; allowed: integers >= 1")
  if not args.cnn_modes or "auto" not in args.cnn_modes:
    args.cnn_modes.append("auto")
  if args.eval_examples < 1:
    raise SystemExit(f"--eval_examples={args.eval_examples}; allowed: an integer >= 1")
  if args.quick:
    args.cohorts, args.cnn_cohorts, args.chunk_sizes = [4], [2], []
    args.eval_examples = min(args.eval_examples, 64)
    args.repeats, args.round_clients, args.round_selected, args.round_rounds = 1, 8, 4, 2
  for m in args.models:
    if m not in MODELS:
      raise SystemExit(f"unknown model {m!r}; allowed: {', '.join(MODELS)}")
  return args


def _emit(record: dict, as_json: bool) -> None:
  if as_json:
    print(json.dumps(record), flush=True)
  else:
    keys = (
      "model",
      "clients_per_round",
      "step_speedup",
      "cohort_speedup",
      "eval_speedup",
      "step_im2col_speedup",
      "cohort_im2col_speedup",
      "eval_im2col_speedup",
      "host",
      "ours_s",
      "per_client_loop_s",
      "per_step_loop_s",
      "torch_loop_s",
      "useful_step_fraction",
      "useful_gflops",
      "matmul_gflops",
      "round_s",
      "engine_s",
    )
    print("  ".join(f"{k}={record[k]}" for k in keys if k in record), flush=True)


def main(argv=None) -> int:
  args = parse_args(argv)
  if args.cpu_devices:
    C.set_cpu_devices(args.cpu_devices)
  for model_name in args.models:
    cohorts = args.cnn_cohorts if model_name.startswith("cnn") else args.cohorts
    for m in cohorts:
      if args.half_precision:
        _emit(bench_half_precision(model_name, m, args), args.json)
        continue
      _emit(bench_config(model_name, m, args), args.json)
    if args.round_level and model_name in ("logreg", "mlp"):
      _emit(bench_round_level(model_name, args), args.json)
  return 0


if __name__ == "__main__":
  sys.exit(main())

r"""Where a round's local-training time goes on this backend: a cost model and a trace.

  python -m benchmarks.step_profile --json
  python -m benchmarks.step_profile --json --models=mlp --widths=1,4,16,64
  python -m benchmarks.step_profile --quick --json        # tiny settings (smoke test)

Two measurements per model (Synthetic(0.5, 0.5), batch 10, 1 local epoch, plain SGD):

1. **Cost of one local-step iteration vs the number of clients c batched in it.** Every
   client gets the same number of examples (no padding), the engine runs in ``lanes``
   mode with c lanes (``--sweep_mode=chunked``: chunks of c), and the time per loop
   iteration (one SGD step of c clients) is
   ``t / (M / c * steps)``. A least-squares fit ``t_iter(c) = a + b c`` gives the fixed
   per-iteration overhead ``a`` and the marginal cost of one client-step ``b``; their ratio
   ``a / b`` is the fixed overhead in client-steps (``engine.LANE_OVERHEAD_CPU`` of the
   ``auto`` lanes rule, :func:`fedjax_sel.core.engine.auto_lane_count`).
2. **A trace** (``jax.profiler``, perfetto JSON) of the engine's ``auto`` cohort call on the
   Synthetic population's unequal sizes: total time per XLA thunk (op or fusion), its count
   and time per call, so the top ops show where a step's time goes.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import _common as C


def iteration_cost(model_name: str, num_selected: int, width: int, args) -> dict:
  """Seconds per loop iteration (one SGD step of ``width`` clients), no padding."""
  data = C.make_data(model_name, num_selected, seed=args.seed, examples_per_client=args.examples)
  model = C.make_model(model_name, data)
  params = model.init(jax.random.PRNGKey(args.seed))
  mode = args.sweep_mode
  if mode == "chunked" and width >= num_selected:
    mode = "vmap"
  trainer = C.build_trainer(model, data, num_selected, mode, width, args.batch_size, 1)
  cohort = jnp.arange(num_selected, dtype=jnp.int32)
  call = (params, cohort, jnp.ones(num_selected, bool), jax.random.PRNGKey(1), 0.05, cohort)
  fn = jax.jit(trainer)
  C.block(fn(*call))
  times = []
  for _ in range(args.repeats):
    t0 = time.perf_counter()
    C.block(fn(*call))
    times.append(time.perf_counter() - t0)
  steps = -(-args.examples // args.batch_size)
  iterations = -(-num_selected // trainer.chunk_size) * steps
  return {"width": trainer.chunk_size, "s_per_iteration": float(np.median(times)) / iterations}


def fit_overhead(points: list[dict]) -> dict:
  """Least squares t_iter = a + b c; returns a, b and a / b (overhead in client-steps)."""
  c = np.array([p["width"] for p in points], np.float64)
  t = np.array([p["s_per_iteration"] for p in points], np.float64)
  a, b = np.linalg.lstsq(np.stack([np.ones_like(c), c], 1), t, rcond=None)[0]
  return {
    "overhead_us": float(a * 1e6),
    "per_client_step_us": float(b * 1e6),
    "overhead_lanes": float(a / b) if b > 0 else None,
  }


def trace_ops(model_name: str, num_selected: int, args, top: int) -> dict:
  """Per-thunk totals from a jax.profiler trace of the engine's auto cohort call."""
  data = C.make_data(model_name, num_selected, seed=args.seed)
  model = C.make_model(model_name, data)
  params = model.init(jax.random.PRNGKey(args.seed))
  trainer = C.build_trainer(
    model, data, num_selected, args.trace_mode, args.trace_chunk, args.batch_size, 1
  )
  cohort = jnp.arange(num_selected, dtype=jnp.int32)
  call = (params, cohort, jnp.ones(num_selected, bool), jax.random.PRNGKey(1), 0.05, cohort)
  fn = jax.jit(trainer)
  C.block(fn(*call))
  with tempfile.TemporaryDirectory() as log_dir:
    jax.profiler.start_trace(log_dir, create_perfetto_trace=True)
    t0 = time.perf_counter()
    out = C.block(fn(*call))
    wall = time.perf_counter() - t0
    jax.profiler.stop_trace()
    files = glob.glob(os.path.join(log_dir, "**", "*perfetto_trace.json.gz"), recursive=True)
    if not files:
      return {"error": "jax.profiler wrote no perfetto trace"}
    with gzip.open(files[0], "rt") as f:
      trace = json.load(f)
  events = trace["traceEvents"] if isinstance(trace, dict) else trace
  total, count = collections.Counter(), collections.Counter()
  skip = (
    "ThunkExecutor",
    "CommonPjRt",
    "while",
    "PjitFunction",
    "$",
    "end:",
    "call",
    "conditional",
  )
  for e in events:
    name = e.get("name", "")
    if e.get("ph") == "X" and not name.startswith(skip):
      total[name] += e.get("dur", 0.0)
      count[name] += 1
  op_time = sum(total.values())
  padded = float(out.padded_steps)
  iterations = padded / trainer.chunk_size
  return {
    "chunk_size": trainer.chunk_size,
    "wall_s": wall,
    "op_time_s": op_time / 1e6,
    "loop_iterations": iterations,
    "us_per_iteration": wall * 1e6 / max(iterations, 1),
    "top_ops": [
      {
        "op": name,
        "share": t / op_time,
        "calls": count[name],
        "us_per_call": t / count[name],
      }
      for name, t in total.most_common(top)
    ],
  }


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--models", default="logreg,mlp")
  p.add_argument("--clients", type=int, default=128, help="cohort size M for the width sweep")
  p.add_argument("--widths", default="1,2,4,8,16,32,64,128")
  p.add_argument("--examples", type=int, default=100, help="examples per client (sweep)")
  p.add_argument("--trace_clients", type=int, default=100, help="cohort size for the trace")
  p.add_argument(
    "--sweep_mode", default="lanes", choices=("lanes", "chunked"), help="engine mode of the sweep"
  )
  p.add_argument("--trace_mode", default="auto", help="engine parallelism mode to trace")
  p.add_argument("--trace_chunk", type=int, default=0, help="its chunk size / lane count")
  p.add_argument("--batch_size", type=int, default=10)
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--top", type=int, default=8)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--quick", action="store_true")
  p.add_argument("--json", action="store_true")
  args = p.parse_args(argv)
  if args.quick:
    args.clients, args.widths, args.examples, args.trace_clients, args.repeats = 8, "1,8", 20, 8, 1
  args.widths = [int(w) for w in args.widths.split(",") if w]
  bad = [w for w in args.widths if w < 1 or w > args.clients]
  if bad:
    p.error(f"--widths {bad} must lie in [1, --clients={args.clients}]")
  return args


def main(argv=None) -> int:
  args = parse_args(argv)
  for model_name in args.models.split(","):
    widths = args.widths or []
    points = [iteration_cost(model_name, args.clients, w, args) for w in widths]
    record = {
      "kind": "step_profile",
      "model": model_name,
      "width_sweep": points,
      "fit": fit_overhead(points) if len(points) > 1 else None,
      "trace": trace_ops(model_name, args.trace_clients, args, args.top),
      "machine": C.machine_info(),
    }
    if args.json:
      print(json.dumps(record), flush=True)
    else:
      print(f"{model_name}: fit {record['fit']}")
      for p in points:
        print(f"  c={p['width']:4d}  {p['s_per_iteration'] * 1e6:9.1f} us / iteration")
      for op in record["trace"].get("top_ops", []):
        print(f"  {op['share']:6.1%}  {op['us_per_call']:8.2f} us x {op['calls']:6d}  {op['op']}")
      t = record["trace"]
      if "wall_s" in t:
        print(
          f"  wall {t['wall_s'] * 1e3:.1f} ms, ops {t['op_time_s'] * 1e3:.1f} ms, "
          f"{t['us_per_iteration']:.1f} us per loop iteration"
        )
  return 0


if __name__ == "__main__":
  sys.exit(main())

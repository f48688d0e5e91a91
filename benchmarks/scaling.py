r"""Time per round split by part, and peak memory, as the number of clients N grows.

  python -m benchmarks.scaling --json --output_dir=/tmp/scaling
  python -m benchmarks.scaling --json --quick --output_dir=/tmp/scaling_quick
  python -m benchmarks.scaling --json --acceptance_only --output_dir=/tmp/accept

Set-up (the issue's scale experiment): Synthetic(0.5, 0.5) logistic regression with
``--examples_per_client`` (20) examples per client, M = 10 % of N per round, uniform
selection, LN availability (beta 0.5), FedAvg, batch 10, 1 local epoch. For each N (each
in a fresh subprocess, so ``ru_maxrss`` is that N's peak resident memory) it times each
jitted part separately on the same inputs (availability sample, selection, local
training, aggregation) and one whole ``round_step``, median of ``--repeats`` after
warm-up. The O(N^2)/O(N^3) similarity parts (cosine similarity of [N, 256] update
sketches, the FedGS 3DG: adjacency + blocked Floyd-Warshall) are timed separately for
N up to ``--max_quadratic_n``.

The acceptance run: N = 100,000 clients, 100 rounds of ``Simulation.run_rounds`` (in
blocks of 10 rounds), with wall-clock from start (data generation and compile included)
and peak memory. Writes ``scaling.jsonl`` and ``scaling.png`` (log-log) to --output_dir.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

DEFAULT_NS = "10,100,1000,10000,100000"
DEFAULT_QUAD_NS = "100,300,1000,2000"
PARTS = ("availability", "selection", "local_training", "aggregation", "round")


def _maxrss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _build(num_clients: int, examples_per_client: int, seed: int):
  from fedjax_sel import experiment

  c = experiment.default_config()
  c.dataset, c.model = "synthetic", "logreg"
  c.num_clients = num_clients
  c.clients_per_round = max(1, num_clients // 10)
  c.examples_per_client = examples_per_client
  c.availability, c.selection, c.aggregator = "ln", "uniform", "fedavg"
  c.batch_size, c.local_epochs, c.lr_decay = 10, 1, 1.0
  c.data_seed = seed
  sim, dataset = experiment.build(c)
  return sim, dataset, c


def measure_parts(num_clients: int, args) -> dict:
  """One N: seconds of each jitted part of a round and of a whole round; peak memory."""
  import jax
  import jax.numpy as jnp

  from benchmarks import _common as C
  from fedjax_sel.core.types import AggregationAux

  rss_before_build = _maxrss_mb()
  t0 = time.perf_counter()
  sim, _, c = _build(num_clients, args.examples_per_client, args.seed)
  build_s = time.perf_counter() - t0
  rss_after_build = _maxrss_mb()
  state = sim.init(args.seed)
  t = jnp.asarray(0, jnp.int32)
  key = jax.random.PRNGKey(1)
  k_sel, k_train = jax.random.split(key)

  probs_f = jax.jit(sim.availability.probs)
  sample_f = jax.jit(sim.availability.sample)
  probs = probs_f(state.availability_state, t)
  avail, _ = sample_f(state.availability_state, key, t)

  def select(state, avail, probs):
    return sim.selection.select(state.selection_state, k_sel, avail, t, sim.context(state, probs))

  select_f = jax.jit(select)
  selection, _ = select_f(state, avail, probs)
  aux = sim.client_update.prepare(state.client_state, selection.cohort)
  lr = jnp.float32(c.client_lr)
  train_f = jax.jit(sim.trainer)
  result = train_f(state.params, selection.cohort, selection.valid, k_train, lr, aux)
  agg_aux = AggregationAux(
    avail_probs=probs,
    num_examples=jnp.asarray(sim.info.num_examples, jnp.float32),
    finite=selection.valid,
  )

  def aggregate(agg_state, deltas, selection, avail):
    return sim.aggregator.apply(agg_state, deltas, selection, avail, t, aux=agg_aux)

  agg_f = jax.jit(aggregate)
  round_f = jax.jit(sim._round_step)  # not donating: the same state is reused
  # XLA's own accounting of one round: the temporaries it allocates beside the state
  mem = round_f.lower(state).compile().memory_analysis()
  round_temp = int(getattr(mem, "temp_size_in_bytes", -1)) if mem is not None else -1
  num_params = sum(int(x.size) for x in jax.tree_util.tree_leaves(state.params))

  fns = {
    "availability": lambda: sample_f(state.availability_state, key, t),
    "selection": lambda: select_f(state, avail, probs),
    "local_training": lambda: train_f(
      state.params, selection.cohort, selection.valid, k_train, lr, aux
    ),
    "aggregation": lambda: agg_f(state.aggregation_state, result.deltas, selection, avail),
    "round": lambda: round_f(state),
  }
  timings = C.interleaved_medians(fns, args.repeats, warmup=1)
  record = {
    "kind": "parts",
    "num_clients": num_clients,
    "clients_per_round": c.clients_per_round,
    "examples_per_client": args.examples_per_client,
    "num_available": int(jnp.sum(avail)),
    "num_selected": int(jnp.sum(selection.valid)),
    "build_s": round(build_s, 3),
    "chunk_size": int(sim.trainer.chunk_size),
    "peak_rss_mb": round(_maxrss_mb(), 1),
    "rss_after_imports_mb": round(rss_before_build, 1),
    "peak_rss_after_build_mb": round(rss_after_build, 1),
    "state_mb": round(sum(x.nbytes for x in jax.tree_util.tree_leaves(state)) / 2**20, 2),
    "round_temp_mb": round(round_temp / 2**20, 2),
    "m_times_p_mb": round(4 * c.clients_per_round * num_params / 2**20, 2),
    "num_params": num_params,
    "machine": C.machine_info(),
  }
  for part in PARTS:
    record[part + "_s"] = timings[part]["median_s"]
  record["parts_sum_s"] = sum(record[p + "_s"] for p in PARTS[:-1])
  return record


def measure_quadratic(num_clients: int, args) -> dict:
  """Cosine similarity of [N, d] sketches and the 3DG (adjacency + Floyd-Warshall)."""
  import jax

  from benchmarks import _common as C
  from fedjax_sel import similarity

  sketch = jax.random.normal(jax.random.PRNGKey(0), (num_clients, args.sketch_dim))
  sim_matrix = similarity.cosine(sketch)
  fns = {
    "cosine": lambda: similarity.cosine(sketch),
    "build_3dg": lambda: similarity.build_3dg(sim_matrix, 0.01, 0.1),
  }
  timings = C.interleaved_medians(fns, max(1, args.repeats // 2), warmup=1)
  return {
    "kind": "quadratic",
    "num_clients": num_clients,
    "sketch_dim": args.sketch_dim,
    "cosine_s": timings["cosine"]["median_s"],
    "build_3dg_s": timings["build_3dg"]["median_s"],
    "peak_rss_mb": round(_maxrss_mb(), 1),
    "machine": C.machine_info(),
  }


def acceptance(args) -> dict:
  """N = 100,000 (``--acceptance_clients``), 10 % per round, LN, uniform: 100 rounds."""
  import jax

  from benchmarks import _common as C

  start = time.perf_counter()
  sim, _, c = _build(args.acceptance_clients, args.examples_per_client, args.seed)
  built = time.perf_counter()
  state = sim.init(args.seed)
  block_rounds = min(10, args.acceptance_rounds)
  done, first_block_s, block_s = 0, None, []
  while done < args.acceptance_rounds:
    n = min(block_rounds, args.acceptance_rounds - done)
    t0 = time.perf_counter()
    state, metrics = sim.run_rounds(state, n)
    jax.block_until_ready(state)
    dt = time.perf_counter() - t0
    if first_block_s is None:
      first_block_s = dt
    else:
      block_s.append(dt / n)
    done += n
  ev = jax.device_get(sim.evaluate(state))
  total = time.perf_counter() - start
  return {
    "kind": "acceptance",
    "num_clients": args.acceptance_clients,
    "clients_per_round": c.clients_per_round,
    "rounds": done,
    "examples_per_client": args.examples_per_client,
    "wall_clock_s": total,
    "data_and_build_s": built - start,
    "first_block_s_with_compile": first_block_s,
    "steady_round_s": float(np.median(block_s)) if block_s else None,
    "mean_available": float(np.mean(np.asarray(metrics["num_available"]))),
    "mean_selected": float(np.mean(np.asarray(metrics["num_selected"]))),
    "test_accuracy": float(ev["test_accuracy"]),
    "peak_rss_mb": round(_maxrss_mb(), 1),
    "target_s": 600,
    "meets_target": bool(total < 600),
    "machine": C.machine_info(),
  }


def _child(flag: str, value: int, args) -> dict:
  """Runs one measurement in a fresh Python process; returns its JSON record."""
  cmd = [
    sys.executable,
    "-m",
    "benchmarks.scaling",
    f"--{flag}={value}",
    f"--examples_per_client={args.examples_per_client}",
    f"--repeats={args.repeats}",
    f"--seed={args.seed}",
    f"--sketch_dim={args.sketch_dim}",
    f"--acceptance_rounds={args.acceptance_rounds}",
  ]
  env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
  out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
  if out.returncode != 0:
    return {"kind": flag, "value": value, "error": out.stderr[-2000:]}
  return json.loads(out.stdout.strip().splitlines()[-1])


def plot(records: list[dict], path: str) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  parts = sorted((r for r in records if r.get("kind") == "parts"), key=lambda r: r["num_clients"])
  quad = sorted(
    (r for r in records if r.get("kind") == "quadratic"), key=lambda r: r["num_clients"]
  )
  fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
  ax = axes[0]
  for part in PARTS:
    ns = [r["num_clients"] for r in parts]
    ax.loglog(ns, [r[part + "_s"] for r in parts], marker="o", label=part.replace("_", " "))
  ax.set_xlabel("clients N (10 % selected per round)")
  ax.set_ylabel("seconds per round")
  ax.set_title("Time per round by part")
  ax.legend()
  ax.grid(True, which="both", alpha=0.3)
  ax = axes[1]
  ax.loglog([r["num_clients"] for r in parts], [r["peak_rss_mb"] for r in parts], marker="o")
  ax.set_xlabel("clients N")
  ax.set_ylabel("peak resident memory (MiB)")
  ax.set_title("Peak memory (fresh process per N)")
  ax.grid(True, which="both", alpha=0.3)
  ax = axes[2]
  if quad:
    ns = [r["num_clients"] for r in quad]
    ax.loglog(ns, [r["cosine_s"] for r in quad], marker="o", label="cosine similarity [N, N]")
    ax.loglog(ns, [r["build_3dg_s"] for r in quad], marker="o", label="3DG (Floyd-Warshall)")
    ax.legend()
  ax.set_xlabel("clients N")
  ax.set_ylabel("seconds per call")
  ax.set_title("Similarity parts (O(N^2) / O(N^3))")
  ax.grid(True, which="both", alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--ns", default=DEFAULT_NS, help="numbers of clients N")
  p.add_argument("--quadratic_ns", default=DEFAULT_QUAD_NS)
  p.add_argument("--examples_per_client", type=int, default=20)
  p.add_argument("--sketch_dim", type=int, default=256)
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--acceptance_clients", type=int, default=100_000)
  p.add_argument("--acceptance_rounds", type=int, default=100)
  p.add_argument("--no_acceptance", action="store_true")
  p.add_argument("--acceptance_only", action="store_true")
  p.add_argument("--output_dir", default="", help="where scaling.jsonl / scaling.png go")
  p.add_argument("--quick", action="store_true")
  p.add_argument("--json", action="store_true")
  # internal: one measurement in this process
  p.add_argument("--parts_n", type=int, default=0, help=argparse.SUPPRESS)
  p.add_argument("--quadratic_n", type=int, default=0, help=argparse.SUPPRESS)
  p.add_argument("--acceptance_n", type=int, default=0, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  args.ns = [int(v) for v in args.ns.split(",") if v]
  args.quadratic_ns = [int(v) for v in args.quadratic_ns.split(",") if v]
  if args.quick:  # tiny defaults; explicit --ns / --quadratic_ns still win
    if args.ns == [int(v) for v in DEFAULT_NS.split(",")]:
      args.ns = [10, 100]
    if args.quadratic_ns == [int(v) for v in DEFAULT_QUAD_NS.split(",")]:
      args.quadratic_ns = [20, 50]
    args.repeats, args.acceptance_clients, args.acceptance_rounds = 2, 200, 3
  return args


def main(argv=None) -> int:
  args = parse_args(argv)
  if args.parts_n:
    print(json.dumps(measure_parts(args.parts_n, args)))
    return 0
  if args.quadratic_n:
    print(json.dumps(measure_quadratic(args.quadratic_n, args)))
    return 0
  if args.acceptance_n:
    args.acceptance_clients = args.acceptance_n
    print(json.dumps(acceptance(args)))
    return 0
  records = []
  jobs = []
  if not args.acceptance_only:
    jobs += [("parts_n", n) for n in args.ns] + [("quadratic_n", n) for n in args.quadratic_ns]
  if not args.no_acceptance:
    jobs.append(("acceptance_n", args.acceptance_clients))
  out_dir = args.output_dir
  if out_dir:
    os.makedirs(out_dir, exist_ok=True)
  for flag, value in jobs:
    record = _child(flag, value, args)
    records.append(record)
    line = json.dumps(record)
    print(line if args.json else f"{flag}={value}: {line[:300]}", flush=True)
    if out_dir:
      with open(os.path.join(out_dir, "scaling.jsonl"), "a") as f:
        f.write(line + "\n")
  if out_dir and any(r.get("kind") == "parts" for r in records):
    plot(records, os.path.join(out_dir, "scaling.png"))
  return 0


if __name__ == "__main__":
  sys.exit(main())

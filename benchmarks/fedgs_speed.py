r"""FedGS server cost: 3DG construction and one selection, after compilation.

  python -m benchmarks.fedgs_speed --json                 # N = 1000, M = 100
  python -m benchmarks.fedgs_speed --json --quick         # N = 100, M = 10 (smoke test)
  python -m benchmarks.fedgs_speed --json --num_clients=3000 --clients_per_round=300

Prints one JSON object per measured configuration (``--json``), each with the median and
minimum of ``--repeats`` timed calls after a warm-up, the compile time, and the machine:

* ``3dg_build``: oracle similarity from label counts (``label_distribution``) + 3DG
  adjacency + Floyd-Warshall (blocked, ``block_size``) + normalization;
* ``floyd_warshall``: the shortest paths alone for block sizes 1 (the textbook loop) and
  16 (the default);
* ``select``: one FedGS selection (``fedgs.solve``: greedy + 1-swap local search,
  ``num_restarts`` starts, alpha = 1) with half the clients available and sampling counts
  from a few earlier rounds, for both ``scale="paper"`` and ``"reference_code"``;
  ``value`` is its objective, compared with the pure greedy construction
  (``greedy_value``: 1 restart, no swaps) to show what the local search adds.

* ``cosine_chunked``: the update-similarity matrix of ``--large_n`` clients (10,000) from
  their [N, d] update sketches (d = ``--sketch_dim``, 256), ``chunk`` rows at a time, with
  XLA's own memory analysis of the compiled call: the temporaries stay O(chunk x N + N x d)
  beside the [N, N] output, never O(N^2 x d).

Label counts are FashionMNIST-like (each client holds two of ten classes; FedGS Appendix C).
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import _common as C
from fedjax_sel.selection import fedgs
from fedjax_sel.similarity import (
  build_3dg,
  floyd_warshall,
  label_distribution,
  scaled_adjacency_3dg,
)


def two_label_counts(num_clients: int, seed: int) -> np.ndarray:
  """i32[N, 10]: each client holds examples of two random distinct classes."""
  rng = np.random.default_rng(seed)
  counts = np.zeros((num_clients, 10), np.int32)
  for k in range(num_clients):
    a, b = rng.choice(10, 2, replace=False)
    counts[k, a], counts[k, b] = rng.integers(10, 60, 2)
  return counts


def measure(num_clients: int, num_selected: int, repeats: int, seed: int) -> list[dict]:
  label_counts = jnp.asarray(two_label_counts(num_clients, seed))
  rng = np.random.default_rng(seed + 1)
  avail = jnp.asarray(rng.random(num_clients) < 0.5)
  counts = jnp.asarray(rng.integers(0, 4, num_clients).astype(np.int32))
  key = jax.random.PRNGKey(seed)
  machine = C.machine_info()
  base = {"num_clients": num_clients, "clients_per_round": num_selected, "machine": machine}
  rows = []

  build_fn = lambda lc: build_3dg(label_distribution(lc), 0.01, 0.1).distances
  build, build_compile = C.compile_timed(build_fn, label_counts)
  distances = build(label_counts)
  # the float32-safe edge lengths that build_3dg runs Floyd-Warshall on
  adjacency = scaled_adjacency_3dg(label_distribution(label_counts), 0.01, 0.1)
  fw = {}
  fw_compile = {}
  for b in (1, 16):
    fw[b], fw_compile[b] = C.compile_timed(lambda a, b=b: floyd_warshall(a, b), adjacency)

  def solver(num_iters, num_restarts, scale):
    fn = lambda h, c, av, k: fedgs.solve(
      h, c, av, num_selected, 1.0, k, num_iters, num_restarts, scale
    )
    return C.compile_timed(fn, distances, counts, avail, key)

  select, select_compile = solver(100, 4, "paper")
  greedy, _ = solver(0, 1, "paper")
  select_ref, select_ref_compile = solver(100, 4, "reference_code")
  greedy_ref, _ = solver(0, 1, "reference_code")

  times = C.interleaved_medians(
    {
      "3dg_build": lambda: build(label_counts),
      "fw_block1": lambda: fw[1](adjacency),
      "fw_block16": lambda: fw[16](adjacency),
      "select": lambda: select(distances, counts, avail, key),
      "select_ref": lambda: select_ref(distances, counts, avail, key),
    },
    repeats,
  )
  rows.append(
    dict(base, op="3dg_build", compile_s=round(build_compile, 3), **_t(times["3dg_build"]))
  )
  for b in (1, 16):
    rows.append(
      dict(
        base,
        op="floyd_warshall",
        block_size=b,
        compile_s=round(fw_compile[b], 3),
        **_t(times[f"fw_block{b}"]),
      )
    )
  for scale, fn, gfn, comp, name in (
    ("paper", select, greedy, select_compile, "select"),
    ("reference_code", select_ref, greedy_ref, select_ref_compile, "select_ref"),
  ):
    result = fn(distances, counts, avail, key)
    greedy_result = gfn(distances, counts, avail, key)
    rows.append(
      dict(
        base,
        op="select",
        scale=scale,
        alpha=1.0,
        num_iters=100,
        num_restarts=4,
        available=int(avail.sum()),
        compile_s=round(comp, 3),
        value=float(result.value),
        greedy_value=float(greedy_result.value),
        **_t(times[name]),
      )
    )
  return rows


def measure_large_similarity(n: int, d: int, chunk: int, repeats: int, seed: int) -> dict:
  """Time and compiled memory of ``cosine_chunked`` on f32[n, d] update sketches."""
  from fedjax_sel.similarity import cosine_chunked

  updates = jax.random.normal(jax.random.PRNGKey(seed), (n, d))
  fn = lambda u: cosine_chunked(u, chunk)
  compiled, compile_s = C.compile_timed(fn, updates)
  mem = compiled.memory_analysis()
  temp = int(getattr(mem, "temp_size_in_bytes", -1)) if mem is not None else -1
  out = int(getattr(mem, "output_size_in_bytes", -1)) if mem is not None else -1
  times = C.interleaved_medians({"cos": lambda: compiled(updates)}, repeats)
  return {
    "num_clients": n,
    "op": "cosine_chunked",
    "sketch_dim": d,
    "chunk": chunk,
    "compile_s": round(compile_s, 3),
    "temp_mb": round(temp / 2**20, 1),
    "output_mb": round(out / 2**20, 1),
    "n2d_mb": round(4.0 * n * n * d / 2**20, 1),
    "machine": C.machine_info(),
    **_t(times["cos"]),
  }


def _t(t: dict) -> dict:
  return {"median_ms": round(1e3 * t["median_s"], 3), "min_ms": round(1e3 * t["min_s"], 3)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--num_clients", type=int, default=1000)
  parser.add_argument("--clients_per_round", type=int, default=100)
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--quick", action="store_true", help="N = 100, M = 10, 3 repeats")
  parser.add_argument("--json", action="store_true", help="one JSON object per line")
  parser.add_argument("--large_n", type=int, default=10_000, help="N for cosine_chunked (0: skip)")
  parser.add_argument("--sketch_dim", type=int, default=256)
  parser.add_argument("--chunk", type=int, default=256)
  args = parser.parse_args(argv)
  n, m, repeats = args.num_clients, args.clients_per_round, args.repeats
  if args.quick:
    n, m, repeats = 100, 10, 3
  rows = measure(n, m, repeats, args.seed)
  large_n = min(args.large_n, 1000) if args.quick else args.large_n
  if large_n > 0:
    rows.append(measure_large_similarity(large_n, args.sketch_dim, args.chunk, repeats, args.seed))
  for row in rows:
    if args.json:
      print(json.dumps(row), flush=True)
    else:
      extra = f" block={row['block_size']}" if "block_size" in row else ""
      extra += f" scale={row['scale']}" if "scale" in row else ""
      extra += f" N={row['num_clients']} temp={row['temp_mb']} MB" if "temp_mb" in row else ""
      print(f"{row['op']}{extra}: median {row['median_ms']} ms (min {row['min_ms']} ms)")
  return 0


if __name__ == "__main__":
  sys.exit(main())

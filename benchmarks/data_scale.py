r"""Compile time, seconds per round and peak memory as the dataset grows (issue 23).

  python -m benchmarks.data_scale --json
  python -m benchmarks.data_scale --json --sizes=10000,100000 --models=logreg --shapes=femnist

Each case runs in a fresh process (``--case``), so its peak resident memory (``ru_maxrss``)
and its compile time are its own. A case builds random images of one shape, stored as uint8
(``--dtype=float32`` stores them as floats in [0, 1]):

* ``femnist``: 28x28x1, 3,500 clients of uneven sizes (lognormal weights, sigma 1, at least
  one example each), FEMNIST's shape (about 3,500 writers, 800k images);
* ``cifar10``: 32x32x3, 1,000 clients of uneven sizes, CIFAR-10's shape.

Of the n examples 80 % are the clients' training data, 10 % their local test data and 10 %
the global test set. The round is the same at every size: 10 clients per round, 5 local
steps of batch 10, uniform selection, always available, FedAvg, so compile time and seconds
per round should not depend on n; memory should be the data (n x H x W x C bytes as uint8)
plus a constant.

Measured per case: ``gen_s`` (making the data), ``build_s`` (``Simulation`` + ``init``:
data to the device), ``first_round_s`` (the first ``run_rounds(state, 1)``: compile + one
round), ``round_s`` (median of the next rounds), ``compile_s`` = first - median,
``eval_compile_s`` (``evaluate.lower(state).compile()``), ``eval_s`` (one call of that
compiled evaluation; only up to ``--time_eval_up_to`` examples: a CNN on 160k test images
takes minutes on 2 cores, and without the call the peak memory is the training's),
``rss_after_data_gb`` (peak RSS once the data exist) and ``peak_rss_gb`` (at the end).
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

SHAPES = {"femnist": ((28, 28, 1), 3500), "cifar10": ((32, 32, 3), 1000)}
MODELS = ("logreg", "cnn_mnist")


def _sizes(total: int, num_clients: int, rng: np.random.Generator) -> np.ndarray:
  """``num_clients`` uneven sizes >= 1 summing to ``total`` (lognormal(0, 1) weights)."""
  w = rng.lognormal(0.0, 1.0, num_clients)
  rest = total - num_clients
  raw = w / w.sum() * rest
  sizes = np.floor(raw).astype(np.int64)
  extra = rest - int(sizes.sum())
  sizes[np.argsort(raw - sizes)[::-1][:extra]] += 1
  return (sizes + 1).astype(np.int32)


def _split(rng, counts, shape, dtype):
  from fedjax_sel.data.federated import ClientSplit, aligned_empty

  n = int(np.sum(counts))
  # generated in blocks straight into an aligned buffer (as the loaders store data: see
  # federated.aligned), so making the data never holds two copies of it
  x = aligned_empty((n, *shape), np.uint8 if dtype == "uint8" else np.float32)
  for s in range(0, n, 65536):
    block = rng.integers(0, 256, (min(65536, n - s), *shape), dtype=np.uint8)
    x[s : s + block.shape[0]] = block if dtype == "uint8" else block / np.float32(255.0)
  y = rng.integers(0, 10, n).astype(np.int32)
  offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
  return ClientSplit(x, y, offsets, np.asarray(counts, np.int32))


def make_dataset(shape_name: str, n: int, dtype: str, seed: int = 0):
  from fedjax_sel.data.federated import FederatedData

  shape, num_clients = SHAPES[shape_name]
  rng = np.random.default_rng(seed)
  n_global = n // 10
  per_client = _sizes(n - n_global, num_clients, rng)
  local_test = per_client // 9  # ~10 % of n over all clients
  train = _split(rng, per_client - local_test, shape, dtype)
  test = _split(rng, local_test, shape, dtype)
  glob = _split(rng, np.array([n_global]), shape, dtype)
  kw = {}
  if dtype == "uint8" and "x_divisor" in FederatedData._fields:
    kw["x_divisor"] = 255.0
  return FederatedData(train, test, glob.x, glob.y, 10, f"{shape_name}-shaped random", **kw)


def _peak_rss_gb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux


def run_case(
  shape_name: str,
  n: int,
  model_name: str,
  dtype: str,
  rounds: int,
  time_eval_up_to: int,
  eval_chunk: int = 0,
) -> dict:
  import jax

  from fedjax_sel import aggregation, availability, client, models, selection
  from fedjax_sel.core import engine, simulation

  t0 = time.perf_counter()
  data = make_dataset(shape_name, n, dtype)
  gen_s = time.perf_counter() - t0
  rss_data = _peak_rss_gb()
  t0 = time.perf_counter()
  cfg = simulation.SimulationConfig(
    client_lr=0.05,
    engine=engine.EngineConfig(batch_size=10, local_steps=5),
    **({"eval_chunk": eval_chunk} if eval_chunk else {}),
  )
  sim = simulation.Simulation(
    data,
    models.make(model_name, data.input_shape, data.num_classes),
    availability.make("idl"),
    selection.make("uniform", num_selected=10),
    aggregation.make("fedavg"),
    client.make("sgd"),
    cfg,
  )
  state = sim.init(0)
  jax.block_until_ready(state)
  build_s = time.perf_counter() - t0

  def timed(fn):
    t = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - t

  (state, _), first = timed(lambda: sim.run_rounds(state, 1))
  times = []
  for _ in range(rounds):
    (state, _), dt = timed(lambda s=state: sim.run_rounds(s, 1))
    times.append(dt)
  # evaluation: compile time ahead of time; one timed call where the test sets are small
  # enough (a CNN on 160k test images takes minutes on 2 cores)
  t = time.perf_counter()
  compiled_eval = sim.evaluate.lower(state).compile()
  eval_compile = time.perf_counter() - t
  eval_s = None
  if n <= time_eval_up_to:
    eval_s = timed(lambda: compiled_eval(sim.device_data, state))[1]
  round_s = float(np.median(times))
  x = data.train.x
  data_bytes = sum(a.nbytes for a in (x, data.test.x, data.test_x))
  return {
    "shape": shape_name,
    "examples": n,
    "num_clients": data.num_clients,
    "largest_client": int(data.train.counts.max()),
    "model": model_name,
    "dtype": str(x.dtype),
    "data_gb": data_bytes / 1e9,
    "gen_s": gen_s,
    "build_s": build_s,
    "first_round_s": first,
    "round_s": round_s,
    "compile_s": first - round_s,
    "eval_s": eval_s,
    "eval_compile_s": eval_compile,
    "rss_after_data_gb": rss_data,
    "peak_rss_gb": _peak_rss_gb(),
    "parallelism": sim.trainer.kind,
    "eval_chunk": sim.eval_chunk,
  }


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--shapes", default="femnist,cifar10")
  p.add_argument("--sizes", default="10000,100000,800000", help="examples per case (femnist)")
  p.add_argument("--cifar_sizes", default="10000,50000", help="examples per case (cifar10)")
  p.add_argument("--models", default=",".join(MODELS))
  p.add_argument("--dtype", default="uint8", choices=("uint8", "float32"))
  p.add_argument("--rounds", type=int, default=5, help="timed rounds after the first")
  p.add_argument("--time_eval_up_to", type=int, default=100_000, help="time evaluate() up to n")
  p.add_argument(
    "--eval_chunk", type=int, default=0, help="SimulationConfig.eval_chunk (0: automatic)"
  )
  p.add_argument("--timeout", type=int, default=1800, help="seconds per case")
  p.add_argument("--json", action="store_true", help="one JSON line per case")
  p.add_argument("--case", default="", help=argparse.SUPPRESS)  # shape:n:model (child)
  a = p.parse_args(argv)
  if a.case:
    shape, n, model = a.case.split(":")
    row = run_case(shape, int(n), model, a.dtype, a.rounds, a.time_eval_up_to, a.eval_chunk)
    print(json.dumps(row))
    return
  shapes = [s for s in a.shapes.split(",") if s]
  models = [m for m in a.models.split(",") if m]
  for s in shapes:
    if s not in SHAPES:
      raise SystemExit(f"--shapes: {s!r}; allowed: {', '.join(SHAPES)}")
  for m in models:
    if m not in MODELS:
      raise SystemExit(f"--models: {m!r}; allowed: {', '.join(MODELS)}")
  rows = []
  for shape in shapes:
    sizes = a.sizes if shape == "femnist" else a.cifar_sizes
    for model in models:
      for n in [int(v) for v in sizes.split(",") if v]:
        cmd = [sys.executable, "-m", "benchmarks.data_scale", f"--case={shape}:{n}:{model}"]
        cmd += [f"--dtype={a.dtype}", f"--rounds={a.rounds}"]
        cmd += [f"--time_eval_up_to={a.time_eval_up_to}"]
        cmd += [f"--eval_chunk={a.eval_chunk}"]
        env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
        try:
          out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired:
          row = {"shape": shape, "examples": n, "model": model, "error": "timeout"}
        else:
          if out.returncode != 0:
            row = {"shape": shape, "examples": n, "model": model, "error": out.stderr[-2000:]}
          else:
            row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        if a.json:
          print(json.dumps(row), flush=True)
        else:
          print(
            "{shape} {model} n={examples}: ".format(**row)
            + (
              "compile {compile_s:.2f} s, round {round_s:.4f} s, eval compile "
              "{eval_compile_s:.2f} s, eval {eval_s} s, data {data_gb:.3f} GB, "
              "peak RSS {peak_rss_gb:.2f} GB".format(**row)
              if "error" not in row
              else "error " + row["error"][-300:]
            ),
            flush=True,
          )


if __name__ == "__main__":
  main()

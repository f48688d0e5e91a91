r"""Seconds per evaluation of a CNN on a test set, beside a dense matmul of the same run.

  python -m benchmarks.eval_speed --json --cpu_devices=2                 # cnn_mnist, 10,000
  python -m benchmarks.eval_speed --json --models=cnn_cifar --chunks=256,1024
  python -m benchmarks.eval_speed --quick --json                         # smoke test

What ``Simulation.evaluate`` runs for the global test set (``evaluation.global_stats``:
per-example loss and correctness, ``--chunks`` examples per model call), on random images
stored as uint8 (as the real loaders store them), for each variant:

* ``<impl>_<chunk>``: the model with convolutions ``impl`` (``auto`` is what a user gets;
  ``im2col`` was the CPU default before issue 16; ``xla`` is ``lax.conv``) on one device;
* ``<impl>_<chunk>_mesh``: the same with the chunks dealt to every device (the mesh the
  engine uses when it trains on several devices).

Before timing, every variant's per-example losses are checked against the first one's
(max abs difference recorded; asserted <= ``--atol``; correctness counts must agree except
where two logits tie within float rounding). ``useful_gflops`` = n x XLA's forward FLOPs of
one example / seconds; ``matmul_gflops`` = a dense f32 matmul of about the same FLOPs,
timed interleaved with the variants (so both see the same machine load).
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import _common as C
from fedjax_sel import models
from fedjax_sel.core import engine, evaluation

MODELS = ("cnn_mnist", "cnn_cifar")
IMPLS = ("auto", "canonical", "im2col", "xla")


def forward_flops(model: models.Model, n: int = 64) -> float:
  """XLA's FLOP count of the forward pass of one example (from a batch of ``n``)."""
  x = jnp.zeros((n, *model.input_shape), jnp.float32)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0))
  cost = jax.jit(model.apply).lower(params, x).compile().cost_analysis()
  if isinstance(cost, (list, tuple)):
    cost = cost[0]
  return float(cost.get("flops", float("nan"))) / n


def bench(model_name: str, args) -> dict:
  shape = C.IMAGE_SHAPES[model_name]
  rng = np.random.default_rng(args.seed)
  x = rng.integers(0, 256, size=(args.examples, *shape), dtype=np.uint8)
  y = rng.integers(0, 10, args.examples).astype(np.int32)
  mesh = jax.sharding.Mesh(jax.devices(), ("clients",)) if jax.device_count() > 1 else None
  base = models.make(model_name, shape, 10, conv_impl="xla")
  params = base.init(jax.random.PRNGKey(args.seed))
  flops = forward_flops(base) * args.examples
  record: dict = {
    "kind": "eval",
    "model": model_name,
    "examples": args.examples,
    "gflop": flops / 1e9,
    "devices": jax.device_count(),
    "seconds": {},
    "useful_gflops": {},
    "max_abs_loss_diff": {},
    "accuracy_diff": {},
    "conv_impl_of": {},
  }
  fns, ref = {}, None
  for impl in args.impls:
    model = models.make(model_name, shape, 10, conv_impl=impl)
    for chunk in args.chunks:
      for on_mesh in (False, True) if mesh is not None else (False,):
        name = f"{impl}_{chunk}" + ("_mesh" if on_mesh else "")
        put = engine.replicated_put(mesh if on_mesh else None)
        data = evaluation.eval_arrays(x, y, 255.0, put)
        m = mesh if on_mesh else None

        @jax.jit
        def run(params, data, apply=model.apply, chunk=chunk, m=m):
          return evaluation.example_stats(apply, params, data, chunk, 255.0, m)

        loss, correct = C.block(run(params, data))
        record["conv_impl_of"][name] = model.conv_impl
        if ref is None:
          ref = (np.asarray(loss), np.asarray(correct))
        else:
          diff = float(np.max(np.abs(np.asarray(loss) - ref[0])))
          record["max_abs_loss_diff"][name] = diff
          record["accuracy_diff"][name] = float(np.mean(np.asarray(correct)) - ref[1].mean())
          if not diff <= args.atol:
            raise AssertionError(f"{name}: per-example losses differ by {diff:.3g} > {args.atol}")
        fns[name] = lambda run=run, data=data: run(params, data)
  matmul, n = C.matmul_fn(flops)
  fns["matmul"] = matmul
  timings = C.interleaved_medians(fns, args.repeats, warmup=1)
  record["matmul_n"] = n
  record["matmul_samples_s"] = timings["matmul"]["samples_s"]
  record["matmul_gflops"] = 2.0 * n**3 / timings.pop("matmul")["median_s"] / 1e9
  for name, t in timings.items():
    record["seconds"][name] = t["median_s"]
    record["useful_gflops"][name] = flops / t["median_s"] / 1e9
  best = min(record["seconds"], key=record["seconds"].get)
  record["best"] = best
  record["best_vs_matmul"] = record["useful_gflops"][best] / record["matmul_gflops"]
  default = f"auto_{args.default_chunk}" + ("_mesh" if mesh is not None else "")
  if default in record["seconds"]:
    record["default"] = default
    record["default_vs_matmul"] = record["useful_gflops"][default] / record["matmul_gflops"]
  record["machine"] = C.machine_info()
  return record


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--models", default="cnn_mnist", help=f"any of {', '.join(MODELS)}")
  p.add_argument("--cpu_devices", type=int, default=0, help="expose this many CPU cores as devices")
  p.add_argument("--examples", type=int, default=10_000, help="test images")
  p.add_argument("--impls", default="auto,im2col", help=f"conv impls, any of {', '.join(IMPLS)}")
  p.add_argument("--chunks", default="256,1024", help="examples per model call")
  p.add_argument("--default_chunk", type=int, default=1024, help="the simulation's eval_chunk")
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--atol", type=float, default=1e-4)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--quick", action="store_true", help="tiny settings for a smoke test")
  p.add_argument("--json", action="store_true")
  a = p.parse_args(argv)
  a.models = [s for s in a.models.split(",") if s]
  a.impls = [s for s in a.impls.split(",") if s]
  try:
    a.chunks = [int(s) for s in a.chunks.split(",") if s]
  except ValueError:
    p.error(f"--chunks={a.chunks!r}; allowed: comma-separated integers >= 1")
  if not a.models or set(a.models) - set(MODELS):
    p.error(f"--models={','.join(a.models)!r}; allowed: any of {', '.join(MODELS)}")
  if not a.impls or set(a.impls) - set(IMPLS):
    p.error(f"--impls={','.join(a.impls)!r}; allowed: any of {', '.join(IMPLS)}")
  if not a.chunks or min(a.chunks) < 1:
    p.error(f"--chunks={a.chunks}; allowed: comma-separated integers >= 1")
  if a.examples < 1 or a.repeats < 1:
    p.error(f"--examples={a.examples}, --repeats={a.repeats}; allowed: integers >= 1")
  if a.quick:
    a.examples, a.chunks, a.repeats, a.default_chunk = 64, [32], 1, 32
  return a


def main(argv=None) -> int:
  args = parse_args(argv)
  if args.cpu_devices:
    C.set_cpu_devices(args.cpu_devices)
  for name in args.models:
    record = bench(name, args)
    if args.json:
      print(json.dumps(record), flush=True)
    else:
      print(
        f"{name}: best {record['best']} {record['seconds'][record['best']]:.3f} s "
        f"({record['best_vs_matmul']:.0%} of matmul {record['matmul_gflops']:.0f} GFLOP/s)",
        flush=True,
      )
  return 0


if __name__ == "__main__":
  sys.exit(main())

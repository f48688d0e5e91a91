r"""Which XLA ops run faster in bfloat16 on this host: float32 vs bfloat16, side by side.

  python -m benchmarks.bf16_ops --json                 # every op family
  python -m benchmarks.bf16_ops --json --quick         # tiny shapes (smoke test)

``--half_precision`` of ``round_speed`` / ``real_data_round`` times whole steps, cohorts and
rounds; this benchmark takes them apart into the op families a local step is made of, at the
shapes the models use, so that a whole-step ratio can be read off its parts:

* ``matmul``: ``[B, K] @ [K, N]``, bfloat16 operands (cast beforehand) with a float32
  result (``precision.mixed_matmul``'s product) against float32;
* ``batched_matmul``: the same with a leading client axis (what ``vmap`` over a cohort's
  per-client kernels makes of a dense layer), operands cast inside the timed call as a
  step does it;
* ``elementwise``: ``relu(x + b)`` on activations (a dense or conv layer's epilogue);
* ``patches``: the im2col patch matrix (25 shifted slices, concatenated), in bfloat16, and
  the same bytes moved as uint16 (a bitcast): data movement without bfloat16 arithmetic;
* ``conv``: ``lax.conv_general_dilated`` forward, and forward + both gradients, bfloat16
  operands with a float32 result against float32.

Each line: float32 seconds / bfloat16 seconds (> 1: bfloat16 faster), medians of
``--repeats`` interleaved calls, plus the host's SIMD flags (the ratios depend on them:
``amx_bf16`` / ``avx512_bf16`` are the bfloat16 units).
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp
from jax import lax

from benchmarks import _common as C
from fedjax_sel.models.im2col import image_patches

F32, BF16 = jnp.float32, jnp.bfloat16
NHWC = ("NHWC", "HWIO", "NHWC")


def _mm(lhs, rhs):
  return lax.dot_general(lhs, rhs, (((lhs.ndim - 1,), (rhs.ndim - 2,)), ((), ())))


def _mixed_mm(lhs, rhs):
  return lax.dot_general(
    lhs, rhs, (((lhs.ndim - 1,), (rhs.ndim - 2,)), ((), ())), preferred_element_type=F32
  )


def _batched(lhs, rhs, cast):
  dn = (((2,), (1,)), ((0,), (0,)))
  if cast:
    return lax.dot_general(lhs.astype(BF16), rhs.astype(BF16), dn, preferred_element_type=F32)
  return lax.dot_general(lhs, rhs, dn)


def _patches(x):
  """The im2col patches of a 5x5 SAME convolution, as the CNNs build them."""
  return image_patches(x, (5, 5), (1, 1), "SAME")


def _patches_u16(x):
  bits = lax.bitcast_convert_type(x, jnp.uint16)
  return lax.bitcast_convert_type(_patches(bits), BF16)


def _conv(x, w, out=None):
  dn = lax.conv_dimension_numbers(x.shape, w.shape, NHWC)
  return lax.conv_general_dilated(
    x, w, (1, 1), "SAME", dimension_numbers=dn, preferred_element_type=out
  )


def _conv_grads(cast):
  def loss(x, w):
    if cast:
      return _conv(x.astype(BF16), w.astype(BF16), F32).sum()
    return _conv(x, w).sum()

  return jax.grad(loss, argnums=(0, 1))


def cases(quick: bool) -> list[tuple[str, str, dict, callable, callable, tuple, tuple]]:
  """(family, shape label, flops info, float32 fn, bfloat16 fn, float32 args, bfloat16 args)."""
  b = 4 if quick else 1
  keys = iter(jax.random.split(jax.random.key(0), 64))

  def ones(shape):  # random normal inputs, so that max_abs_diff measures the rounding
    return jax.random.normal(next(keys), shape, F32)

  out = []
  for m, k, n in [(10, 784, 200), (50, 784, 200), (500, 784, 200), (50, 3136, 512)][
    : 2 if quick else 4
  ]:
    m = max(m // b, 2)
    x, w = ones((m, k)), ones((k, n))
    out.append(("matmul", f"{m}x{k}x{n}", _mm, _mixed_mm, (x, w), (x.astype(BF16), w.astype(BF16))))
  for c, m, k, n in [(10, 10, 784, 200), (10, 50, 784, 200)][: 1 if quick else 2]:
    x, w = ones((c, max(m // b, 2), k)), ones((c, k, n))
    out.append(
      (
        "batched_matmul",
        f"{c}x{x.shape[1]}x{k}x{n}",
        lambda x, w: _batched(x, w, False),
        lambda x, w: _batched(x, w, True),
        (x, w),
        (x, w),
      )
    )
  relu = lambda x, bias: jax.nn.relu(x + bias)  # noqa: E731
  for shape in [(10, 50, 200), (32, 14, 14, 64)][: 1 if quick else 2]:
    x, bias = ones(shape), ones(shape[-1:])
    out.append(
      (
        "elementwise",
        "x".join(map(str, shape)),
        relu,
        relu,
        (x, bias),
        (x.astype(BF16), bias.astype(BF16)),
      )
    )
  x = ones((max(32 // b, 2), 14, 14, 32))
  out.append(
    ("patches", "bf16 " + "x".join(map(str, x.shape)), _patches, _patches, (x,), (x.astype(BF16),))
  )
  out.append(
    (
      "patches",
      "uint16 " + "x".join(map(str, x.shape)),
      _patches,
      _patches_u16,
      (x,),
      (x.astype(BF16),),
    )
  )
  w = ones((5, 5, 32, 64))
  out.append(
    (
      "conv",
      "fwd " + "x".join(map(str, x.shape)),
      _conv,
      lambda x, w: _conv(x, w, F32),
      (x, w),
      (x.astype(BF16), w.astype(BF16)),
    )
  )
  out.append(
    (
      "conv",
      "fwd+grads " + "x".join(map(str, x.shape)),
      _conv_grads(False),
      _conv_grads(True),
      (x, w),
      (x, w),
    )
  )
  return out


def measure(quick: bool, repeats: int) -> list[dict]:
  rows = []
  for family, label, f32_fn, bf16_fn, f32_args, bf16_args in cases(quick):
    f, g = jax.jit(f32_fn), jax.jit(bf16_fn)
    ref, got = C.block(f(*f32_args)), C.block(g(*bf16_args))
    diff = max(
      float(jnp.max(jnp.abs(jnp.asarray(a, F32) - jnp.asarray(b_, F32))))
      for a, b_ in zip(jax.tree.leaves(ref), jax.tree.leaves(got))
    )
    t = C.interleaved_medians(
      {
        "float32": lambda f=f, a=f32_args: f(*a),
        "bfloat16": lambda g=g, a=bf16_args: g(*a),
      },
      repeats,
    )
    f32_s, bf16_s = t["float32"]["median_s"], t["bfloat16"]["median_s"]
    rows.append(
      {
        "family": family,
        "shape": label,
        "float32_s": f32_s,
        "bfloat16_s": bf16_s,
        "speedup": f32_s / bf16_s,
        "max_abs_diff": diff,
      }
    )
  return rows


def parse_args(argv):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--json", action="store_true", help="one JSON record on stdout")
  p.add_argument("--quick", action="store_true", help="tiny shapes, 3 repeats (smoke test)")
  p.add_argument(
    "--repeats",
    type=int,
    default=None,
    help="interleaved calls per op (default 15; 3 with --quick)",
  )
  args = p.parse_args(argv)
  if args.repeats is not None and args.repeats < 1:
    p.error(f"--repeats={args.repeats}: give a positive count")
  return args


def main(argv: list[str] | None = None) -> int:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  repeats = args.repeats or (3 if args.quick else 15)
  rows = measure(args.quick, repeats)
  record = {
    "kind": "bf16_ops",
    "host": C.host_simd(),
    "machine": C.machine_info(),
    "repeats": repeats,
    "ops": rows,
  }
  if args.json:
    print(json.dumps(record))
  else:
    print(f"host bfloat16 units: {record['host']['bf16_units'] or 'none'}")
    print(f"{'family':<15} {'shape':<28} {'float32 ms':>11} {'bfloat16 ms':>12} {'speed-up':>9}")
    for r in rows:
      print(
        f"{r['family']:<15} {r['shape']:<28} {1e3 * r['float32_s']:>11.3f}"
        f" {1e3 * r['bfloat16_s']:>12.3f} {r['speedup']:>8.2f}x"
      )
  return 0


if __name__ == "__main__":
  sys.exit(main())

"""Half precision: bfloat16 compute over float32 parameters (mixed precision).

Under ``half_precision`` a model keeps its parameters in float32 (so the optimizer state, the
client deltas, every aggregator and the server's step stay float32) and computes its forward
and backward pass in bfloat16: inputs and parameters are cast to bfloat16 inside ``apply``,
activations are bfloat16, and the logits are cast back to float32, so losses, metrics and
softmaxes are float32. This is how flax's examples train (``dtype=bfloat16``,
``param_dtype=float32``); the gradient reaching a float32 parameter is float32 (the cast's
transpose), rounded to bfloat16 on the way like every activation gradient.

:func:`mixed_dot_general` is the dense layers' matmul: bfloat16 operands with float32
accumulation in the forward pass and in both gradients. On XLA:CPU this is the fast path
on hosts with bfloat16 matrix units (AMX / AVX512-BF16): a bfloat16 x bfloat16 matmul with
a float32 result ran 2-10x faster than float32 there, while a matmul whose *result* is
bfloat16, which is what ``nn.Dense(dtype=bfloat16)`` asks for by default and what autodiff's
transposes of a float32-accumulating dot ask for, ran slower than float32
(``benchmarks/round_speed.py --half_precision``; docs/performance.md). Accumulating in
float32 is also the more accurate choice.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

HALF = jnp.bfloat16
FULL = jnp.float32


def compute_dtype(half_precision: bool):
  """The dtype a model computes in: bfloat16 under ``half_precision``, else float32."""
  return HALF if half_precision else FULL


def _dot(lhs, rhs, dimension_numbers):
  return jax.lax.dot_general(
    lhs.astype(HALF), rhs.astype(HALF), dimension_numbers, preferred_element_type=FULL
  )


@jax.custom_vjp
def mixed_matmul(lhs: jax.Array, rhs: jax.Array) -> jax.Array:
  """``lhs @ rhs`` for lhs ``[..., K]`` and rhs ``[K, N]``: bfloat16 operands, float32
  accumulation, a bfloat16 result; both gradients are bfloat16 x bfloat16 matmuls with
  float32 accumulation too (autodiff's own transposes would ask for a bfloat16 result)."""
  return _dot(lhs, rhs, (((lhs.ndim - 1,), (0,)), ((), ()))).astype(HALF)


def _mixed_matmul_fwd(lhs, rhs):
  return mixed_matmul(lhs, rhs), (lhs, rhs)


def _mixed_matmul_bwd(res, g):
  lhs, rhs = res
  d_lhs = _dot(g, rhs, (((g.ndim - 1,), (1,)), ((), ())))  # g @ rhs.T
  flat_lhs = lhs.reshape(-1, lhs.shape[-1])
  flat_g = g.reshape(-1, g.shape[-1])
  d_rhs = _dot(flat_lhs, flat_g, (((0,), (0,)), ((), ())))  # lhs.T @ g, over all rows
  return d_lhs.astype(lhs.dtype), d_rhs.astype(rhs.dtype)


mixed_matmul.defvjp(_mixed_matmul_fwd, _mixed_matmul_bwd)


def _is_matmul(lhs, rhs, dimension_numbers) -> bool:
  (lc, rc), (lb, rb) = dimension_numbers
  return rhs.ndim == 2 and tuple(lc) == (lhs.ndim - 1,) and tuple(rc) == (0,) and not lb and not rb


def mixed_dot_general(
  lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs
):
  """A ``dot_general`` for flax layers (``nn.Dense(dot_general=...)``): the ``[..., K] @
  [K, N]`` contraction of a dense layer runs as :func:`mixed_matmul`; any other contraction
  is ``lax.dot_general`` unchanged."""
  if _is_matmul(lhs, rhs, dimension_numbers) and precision is None:
    return mixed_matmul(lhs, rhs)
  return jax.lax.dot_general(
    lhs, rhs, dimension_numbers, precision, preferred_element_type=preferred_element_type
  )


def dense_kwargs(dtype) -> dict:
  """``nn.Dense`` keyword arguments computing in ``dtype`` over float32 parameters."""
  if jnp.dtype(dtype) == jnp.dtype(FULL):
    return {}
  return {"dtype": dtype, "param_dtype": FULL, "dot_general": mixed_dot_general}


def conv_kwargs(dtype) -> dict:
  """``nn.Conv`` keyword arguments computing in ``dtype`` over float32 parameters."""
  if jnp.dtype(dtype) == jnp.dtype(FULL):
    return {}
  return {"dtype": dtype, "param_dtype": FULL}


__all__ = [
  "FULL",
  "HALF",
  "compute_dtype",
  "conv_kwargs",
  "dense_kwargs",
  "mixed_dot_general",
  "mixed_matmul",
]

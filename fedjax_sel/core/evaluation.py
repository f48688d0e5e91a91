"""Evaluation: global test loss/accuracy and per-client accuracy distributions.

Per-client statistics are computed on the flat local test arrays with segment sums (one
pass over all examples, no loop over clients). Test sets are walked in chunks in place (no
padded copy) and enter the compiled evaluation as arguments (``EvalArrays``).

References: FedAR (Jiang et al.), the bias table (mean, variance, worst 10 %, best 10 % of
client accuracies).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from fedjax_sel.core.engine import decode_inputs, decode_table


class EvalArrays(NamedTuple):
  """A test set as a compiled evaluation reads it: an argument, never a constant.

  Attributes:
    x: [n, ...] examples in their stored dtype (float32, or uint8 images).
    y: i32[n] labels.
    table: the decoding table of ``fedjax_sel.core.engine.decode_table`` (f32[0]: none).
  """

  x: jax.Array
  y: jax.Array
  table: jax.Array


def eval_arrays(x, y, divisor: float = 1.0, put=None) -> EvalArrays:
  """``EvalArrays`` on device (``put``: a ``jax.device_put``-like placement)."""
  put = put or jax.device_put
  x = x if isinstance(x, jax.Array) else np.asarray(x)
  y = jnp.asarray(y, jnp.int32) if isinstance(y, jax.Array) else np.asarray(y, np.int32)
  return EvalArrays(put(x), put(y), put(decode_table(x.dtype, divisor)))


def _jaxpr_bytes(jaxpr) -> int:
  """Bytes of every value a jaxpr's equations produce, sub-jaxprs included."""
  total = 0
  for eqn in jaxpr.eqns:
    for v in eqn.outvars:
      aval = getattr(v, "aval", None)
      if hasattr(aval, "shape") and hasattr(aval, "dtype"):
        total += int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize
    for p in eqn.params.values():
      for sub in p if isinstance(p, (list, tuple)) else (p,):
        sub = getattr(sub, "jaxpr", sub)  # ClosedJaxpr -> Jaxpr
        if hasattr(sub, "eqns"):
          total += _jaxpr_bytes(sub)
  return total


def bytes_per_example(apply_fn: Callable, params, input_shape) -> int:
  """Bytes that a forward pass produces per example (the values of its jaxpr at batch 2
  minus batch 1, so what does not scale with the batch is left out): an upper bound on
  its live temporaries, since XLA fuses elementwise ops and reuses buffers (cnn_mnist: 2.2
  MB estimated, 1.25 MB in XLA:CPU's memory analysis, with the im2col convolution)."""

  def produced(batch):
    x = jax.ShapeDtypeStruct((batch, *input_shape), jnp.float32)
    return _jaxpr_bytes(jax.make_jaxpr(apply_fn)(params, x).jaxpr)

  return max(produced(2) - produced(1), 1)


def auto_chunk(
  apply_fn: Callable, params, input_shape, budget_bytes: int, max_chunk: int = 1024
) -> int:
  """Test examples per model call: ``max_chunk``, or the largest power of two whose
  forward temporaries (:func:`bytes_per_example`) fit in ``budget_bytes``.

  Dense models on 28x28 inputs use a few KB per example and keep 1024; cnn_mnist's
  im2col forward takes 128 at 512 MB (XLA's memory analysis: 1.28 GB of temporaries at
  1024, 0.16 GB at 128, and no slower per example on CPU).
  """
  per = bytes_per_example(apply_fn, params, tuple(input_shape))
  fit = int(budget_bytes) // per
  if fit >= max_chunk:
    return int(max_chunk)
  return 1 << max(fit, 1).bit_length() - 1


def example_stats(
  apply_fn: Callable,
  params,
  data: EvalArrays,
  chunk: int = 1024,
  divisor: float = 1.0,
  mesh: Mesh | None = None,
) -> tuple[jax.Array, jax.Array]:
  """Per-example (loss f32[n], correct f32[n]) over the test set, ``chunk`` examples at a time.

  The set is walked in place: chunk i reads rows ``[s_i, s_i + chunk)`` with a dynamic
  slice, the last chunk starting at ``n - chunk`` (it overlaps the one before), so the set is
  never padded or copied and every model call has the same shape. Examples are decoded to
  float32 per chunk. With a ``mesh`` of several devices (the arrays replicated on it) the
  chunks are dealt to the devices.
  """
  x, y = data.x, data.y
  n = x.shape[0]
  if n == 0:
    return jnp.zeros((0,), jnp.float32), jnp.zeros((0,), jnp.float32)
  chunk = int(max(1, min(chunk, n)))
  num_chunks = max(1, -(-n // chunk))

  def run(params, x, y, table, starts):
    def one(s):
      xc = jax.lax.dynamic_slice_in_dim(x, s, chunk)
      yc = jax.lax.dynamic_slice_in_dim(y, s, chunk)
      logits = apply_fn(params, decode_inputs(xc, table, divisor))
      loss = optax.softmax_cross_entropy_with_integer_labels(logits, yc)
      correct = (jnp.argmax(logits, -1) == yc).astype(jnp.float32)
      return loss, correct

    return jax.lax.map(one, starts)

  num_devices = 1 if mesh is None else mesh.devices.size
  total = -(-num_chunks // num_devices) * num_devices
  # chunk starts (an iota, not a constant); spare ones past the end repeat the last chunk
  starts = jnp.minimum(jnp.arange(total, dtype=jnp.int32) * chunk, n - chunk)
  if num_devices == 1:
    loss, correct = run(params, x, y, data.table, starts)
  else:
    spec = P(mesh.axis_names[0])
    loss, correct = jax.shard_map(
      run,
      mesh=mesh,
      in_specs=(P(), P(), P(), P(), spec),
      out_specs=(spec, spec),
      check_vma=False,
    )(params, x, y, data.table, starts)
  overlap = num_chunks * chunk - n

  def flat(a):
    a = a[:num_chunks]
    if not overlap:
      return a.reshape(-1)
    return jnp.concatenate([a[:-1].reshape(-1), a[-1, overlap:]])

  return flat(loss), flat(correct)


def global_stats(apply_fn, params, data: EvalArrays, chunk=1024, divisor=1.0, mesh=None):
  """(mean loss f32[], accuracy f32[]) over a test set (see :func:`example_stats`)."""
  loss, correct = example_stats(apply_fn, params, data, chunk, divisor, mesh)
  return jnp.mean(loss), jnp.mean(correct)


def client_of_examples(counts) -> np.ndarray:
  """i32[sum(counts)]: the client of each example of a split stored client after client."""
  counts = np.asarray(counts, np.int64)
  return np.repeat(np.arange(counts.shape[0], dtype=np.int32), counts)


def inverse_counts(counts) -> np.ndarray:
  """f32[N]: ``1 / max(counts, 1)`` computed on the host (correctly rounded; XLA:CPU's
  run-time division is not, and the per-client means were a constant's reciprocal times the
  sums before the test sets became arguments: this keeps them bit for bit)."""
  return np.float32(1.0) / np.maximum(np.asarray(counts, np.float32), np.float32(1.0))


def per_client_stats(
  apply_fn,
  params,
  data: EvalArrays,
  counts,
  chunk=1024,
  divisor=1.0,
  mesh=None,
  client_of=None,
  inv_counts=None,
):
  """(loss f32[N], accuracy f32[N], has_data bool[N]) of the clients' local test sets, stored
  client after client in ``data`` with ``counts`` i32[N] examples each (one pass,
  ``segment_sum``). ``client_of``: i32[n] each example's client (:func:`client_of_examples`;
  None computes it from counts in the program, which costs ~0.3 s more compile time on CPU);
  ``inv_counts``: f32[N] :func:`inverse_counts` (None: computed in the program)."""
  num_clients = counts.shape[0]
  counts_f = counts.astype(jnp.float32)
  if data.x.shape[0] == 0:
    z = jnp.zeros((num_clients,), jnp.float32)
    return z, z, counts > 0
  n = data.x.shape[0]
  if client_of is None:
    client_of = jnp.repeat(jnp.arange(num_clients, dtype=jnp.int32), counts, total_repeat_length=n)
  loss, correct = example_stats(apply_fn, params, data, chunk, divisor, mesh)
  if inv_counts is None:
    inv_counts = 1.0 / jnp.maximum(counts_f, 1.0)
  loss_k = jax.ops.segment_sum(loss, client_of, num_clients) * inv_counts
  acc_k = jax.ops.segment_sum(correct, client_of, num_clients) * inv_counts
  return loss_k, acc_k, counts > 0


def make_global_eval(
  apply_fn: Callable, x, y, chunk: int = 1024, x_divisor: float = 1.0
) -> Callable:
  """``eval(params) -> (loss f32[], accuracy f32[])`` on a fixed dataset.

  The arrays are closed over: inside a caller's jit they are constants of its program. The
  round loop (``Simulation``) passes them as arguments instead (:func:`global_stats`).
  """
  data = eval_arrays(x, y, x_divisor)

  def evaluate(params):
    return global_stats(apply_fn, params, data, chunk, x_divisor)

  return evaluate


def make_per_client_eval(
  apply_fn: Callable, x, y, counts, chunk: int = 1024, x_divisor: float = 1.0
) -> Callable:
  """``eval(params) -> (loss f32[N], accuracy f32[N], has_data bool[N])`` (closed over, as
  :func:`make_global_eval`; see :func:`per_client_stats`)."""
  data = eval_arrays(x, y, x_divisor)
  client_of = jnp.asarray(client_of_examples(counts))
  inv = jnp.asarray(inverse_counts(counts))
  counts = jnp.asarray(np.asarray(counts), jnp.int32)

  def evaluate(params):
    return per_client_stats(apply_fn, params, data, counts, chunk, x_divisor, None, client_of, inv)

  return evaluate


def accuracy_distribution(acc: jax.Array, has_data: jax.Array | None) -> dict[str, jax.Array]:
  """Mean, variance, worst-10 % and best-10 % mean of per-client accuracies.

  Args:
    acc: f32[N] per-client accuracy.
    has_data: bool[N], clients to include; None: all of them (known when the program is
      built, as it was when the test sets were constants of the program).

  Returns:
    dict with ``client_acc_mean``, ``client_acc_var``, ``client_acc_worst10``,
    ``client_acc_best10`` (the mean over the lowest / highest ceil(10 %) of clients).
  """
  acc = jnp.asarray(acc, jnp.float32)
  if has_data is None:
    has = np.ones(acc.shape, bool)  # a constant: the selects below fold away
  else:
    has = jnp.asarray(has_data, bool)
  k = jnp.maximum(jnp.sum(has), 1)
  # sums times reciprocals: what XLA made of these divisions when ``has`` was a constant of
  # the program (it rewrites x / c as x * (1 / c)); kept so results stay bit for bit
  inv_k = 1.0 / k.astype(jnp.float32)
  mean = jnp.sum(jnp.where(has, acc, 0.0)) * inv_k
  var = jnp.sum(jnp.where(has, (acc - mean) ** 2, 0.0)) * inv_k
  tail = jnp.maximum(jnp.ceil(0.1 * k), 1)
  inv_tail = 1.0 / tail.astype(jnp.float32)
  asc = jnp.sort(jnp.where(has, acc, jnp.inf))
  desc = jnp.sort(jnp.where(has, acc, -jnp.inf))[::-1]
  rank = jnp.arange(acc.shape[0])
  worst = jnp.sum(jnp.where(rank < tail, jnp.where(jnp.isfinite(asc), asc, 0.0), 0.0)) * inv_tail
  best = jnp.sum(jnp.where(rank < tail, jnp.where(jnp.isfinite(desc), desc, 0.0), 0.0)) * inv_tail
  return {
    "client_acc_mean": mean,
    "client_acc_var": var,
    "client_acc_worst10": worst,
    "client_acc_best10": best,
  }


def mean_client_losses(apply, params, ids, x, y, offsets, counts, width, table, divisor=1.0):
  """f32[K]: mean loss of ``params`` on the first ``width`` examples of each client in ids
  (x decoded to float32 with ``table`` / ``divisor``, see ``engine.decode_inputs``)."""
  n = counts[ids]
  j = jnp.arange(width)
  idx = offsets[ids][:, None] + jnp.minimum(j[None], jnp.maximum(n[:, None] - 1, 0))
  mask = (j[None] < n[:, None]).astype(jnp.float32)
  inputs = decode_inputs(x[idx], table, divisor)
  logits = jax.vmap(apply, in_axes=(None, 0))(params, inputs)
  loss = optax.softmax_cross_entropy_with_integer_labels(logits, y[idx])
  return jnp.sum(loss * mask, -1) / jnp.maximum(jnp.sum(mask, -1), 1.0)

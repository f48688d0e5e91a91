"""Evaluation: global test loss/accuracy and per-client accuracy distributions.

Per-client statistics are computed on the flat local test arrays with segment sums (one
pass over all examples, no loop over clients).

References: FedAR (Jiang et al.), the bias table (mean, variance, worst 10 %, best 10 % of
client accuracies).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax


def _chunked_logits_stats(apply_fn, params, x, y, chunk):
  """Per-example (loss, correct) over x in fixed-size chunks (pads the tail)."""
  n = x.shape[0]
  num_chunks = max(1, -(-n // chunk))
  pad = num_chunks * chunk - n
  xp = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))
  yp = jnp.pad(y, (0, pad))

  def one(args):
    xc, yc = args
    logits = apply_fn(params, xc)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, yc)
    correct = (jnp.argmax(logits, -1) == yc).astype(jnp.float32)
    return loss, correct

  loss, correct = jax.lax.map(
    one, (xp.reshape((num_chunks, chunk) + x.shape[1:]), yp.reshape(num_chunks, chunk))
  )
  return loss.reshape(-1)[:n], correct.reshape(-1)[:n]


def make_global_eval(apply_fn: Callable, x, y, chunk: int = 1024) -> Callable:
  """``eval(params) -> (loss f32[], accuracy f32[])`` on a fixed dataset."""
  x = jnp.asarray(x)
  y = jnp.asarray(y)
  chunk = int(max(1, min(chunk, x.shape[0])))

  def evaluate(params):
    loss, correct = _chunked_logits_stats(apply_fn, params, x, y, chunk)
    return jnp.mean(loss), jnp.mean(correct)

  return evaluate


def make_per_client_eval(apply_fn: Callable, x, y, counts, chunk: int = 1024) -> Callable:
  """``eval(params) -> (loss f32[N], accuracy f32[N], has_data bool[N])``."""
  x = jnp.asarray(x)
  y = jnp.asarray(y)
  counts_np = np.asarray(counts)
  num_clients = counts_np.shape[0]
  client_of = jnp.asarray(np.repeat(np.arange(num_clients), counts_np), jnp.int32)
  counts = jnp.asarray(counts_np, jnp.float32)
  chunk = int(max(1, min(chunk, max(1, x.shape[0]))))

  def evaluate(params):
    if x.shape[0] == 0:
      z = jnp.zeros((num_clients,), jnp.float32)
      return z, z, counts > 0
    loss, correct = _chunked_logits_stats(apply_fn, params, x, y, chunk)
    loss_k = jax.ops.segment_sum(loss, client_of, num_clients) / jnp.maximum(counts, 1.0)
    acc_k = jax.ops.segment_sum(correct, client_of, num_clients) / jnp.maximum(counts, 1.0)
    return loss_k, acc_k, counts > 0

  return evaluate


def accuracy_distribution(acc: jax.Array, has_data: jax.Array) -> dict[str, jax.Array]:
  """Mean, variance, worst-10 % and best-10 % mean of per-client accuracies.

  Args:
    acc: f32[N] per-client accuracy.
    has_data: bool[N], clients to include.

  Returns:
    dict with ``client_acc_mean``, ``client_acc_var``, ``client_acc_worst10``,
    ``client_acc_best10`` (the mean over the lowest / highest ceil(10 %) of clients).
  """
  acc = jnp.asarray(acc, jnp.float32)
  has = jnp.asarray(has_data, bool)
  k = jnp.maximum(jnp.sum(has), 1)
  mean = jnp.sum(jnp.where(has, acc, 0.0)) / k
  var = jnp.sum(jnp.where(has, (acc - mean) ** 2, 0.0)) / k
  tail = jnp.maximum(jnp.ceil(0.1 * k), 1)
  asc = jnp.sort(jnp.where(has, acc, jnp.inf))
  desc = jnp.sort(jnp.where(has, acc, -jnp.inf))[::-1]
  rank = jnp.arange(acc.shape[0])
  worst = jnp.sum(jnp.where(rank < tail, jnp.where(jnp.isfinite(asc), asc, 0.0), 0.0)) / tail
  best = jnp.sum(jnp.where(rank < tail, jnp.where(jnp.isfinite(desc), desc, 0.0), 0.0)) / tail
  return {
    "client_acc_mean": mean,
    "client_acc_var": var,
    "client_acc_worst10": worst,
    "client_acc_best10": best,
  }

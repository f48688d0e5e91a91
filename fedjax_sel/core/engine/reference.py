"""The engine's reference: the same local training as one jitted call per client, one
after another (what the vectorized loops are tested and benchmarked against)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.core.engine.config import CohortResult, TrainArrays, steps_per_client
from fedjax_sel.core.engine.local import LocalTraining, slot_lrs


def make_per_client(
  local: LocalTraining, data: TrainArrays, num_selected: int, steps_np: np.ndarray
) -> tuple[Callable, Callable[..., CohortResult]]:
  """``(train_single, per_client_loop)``: one client's local training as its own jitted
  call, ``train_single(params, client_id, key_i, lr, aux_i) -> (delta, loss)``, and the
  cohort as a Python loop of such calls (``per_client_loop(params, cohort, valid, key, lr,
  aux)``, with the signature of the trainer)."""

  @jax.jit
  def train_single_with(data, global_params, client_id, key_i, lr, aux_i):
    steps = steps_per_client(data.counts, local.cfg)[client_id]
    flat_idx, mask = local.client_batches(data, key_i, client_id, steps)
    return local.train_one(data, global_params, flat_idx, mask, steps, aux_i, lr, steps)

  def train_single(global_params, client_id, key_i, lr, aux_i):
    return train_single_with(data, global_params, client_id, key_i, lr, aux_i)

  def per_client_loop(global_params, cohort, valid, key, lr, aux) -> CohortResult:
    """The same work as ``train``, one jitted client call after another (a reference)."""
    deltas, losses = [], []
    zeros = jax.tree_util.tree_map(jnp.zeros_like, global_params)
    lr = slot_lrs(lr, num_selected)
    for i in range(num_selected):
      if not bool(valid[i]):
        deltas.append(zeros)
        losses.append(jnp.zeros((), jnp.float32))
        continue
      aux_i = jax.tree_util.tree_map(lambda a, i=i: a[i], aux)
      d, loss = train_single(global_params, cohort[i], jax.random.fold_in(key, i), lr[i], aux_i)
      deltas.append(d)
      losses.append(loss)
    steps = jnp.where(valid, steps_np[np.asarray(cohort)], 0)
    return CohortResult(
      deltas=jax.tree_util.tree_map(lambda *a: jnp.stack(a), *deltas),
      loss=jnp.stack(losses),
      num_steps=steps,
      padded_steps=jnp.sum(steps).astype(jnp.float32),
    )

  return train_single, per_client_loop

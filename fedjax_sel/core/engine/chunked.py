"""``chunked`` and ``vmap``: chunks of c clients vmapped, each padded to its own longest client.

The cohort (sorted by step count when bucketing) is cut into chunks of c clients; a
``lax.map`` runs the chunks one after another and each vmaps its c clients inside a loop
whose trip count is the chunk's own largest step count (``auto`` on accelerators, where wide
batches are nearly free; several devices split each chunk). ``vmap`` is one chunk of all M
clients, padded to the cohort's longest client.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from fedjax_sel.core.engine.config import CohortResult
from fedjax_sel.core.engine.local import LocalTraining, cohort_steps, slot_keys, slot_lrs
from fedjax_sel.core.engine.sharding import _shard_leading


def make_train_chunked(
  local: LocalTraining, num_selected: int, chunk: int, mesh: Mesh | None
) -> Callable[..., CohortResult]:
  """``train_chunked(data, global_params, cohort, valid, key, lr, aux)`` in chunks of
  ``chunk`` clients (each chunk split over the devices of ``mesh``, when given)."""
  num_chunks = -(-num_selected // chunk)
  m_pad = num_chunks * chunk

  def train_chunked(data, global_params, cohort, valid, key, lr, aux) -> CohortResult:
    cohort, steps = cohort_steps(local, data, cohort, valid)
    pad = m_pad - num_selected
    cohort_p = jnp.pad(cohort, (0, pad))
    steps_p = jnp.pad(steps, (0, pad))
    lr_p = jnp.pad(slot_lrs(lr, num_selected), (0, pad), constant_values=1.0)
    aux_p = jax.tree_util.tree_map(lambda a: jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1)), aux)
    slot = jnp.arange(m_pad)
    keys = slot_keys(key, m_pad)
    sort = local.cfg.sort_by_steps and chunk < m_pad
    order = jnp.argsort(-steps_p, stable=True) if sort else slot
    shape_chunks = lambda a: a[order].reshape((num_chunks, chunk) + a.shape[1:])
    xs = (
      shape_chunks(cohort_p),
      shape_chunks(steps_p),
      shape_chunks(keys),
      jax.tree_util.tree_map(shape_chunks, aux_p),
      shape_chunks(lr_p),
    )

    def run_chunk(args):
      ids, chunk_steps, chunk_keys, chunk_aux, chunk_lr = args
      flat_idx, mask = jax.vmap(local.client_batches, in_axes=(None, 0, 0, 0))(
        data, chunk_keys, ids, chunk_steps
      )
      flat_idx, mask, chunk_steps_s, chunk_aux, chunk_lr = _shard_leading(
        (flat_idx, mask, chunk_steps, chunk_aux, chunk_lr), mesh
      )
      num_iters = jnp.max(chunk_steps)
      delta, loss = jax.vmap(local.train_one, in_axes=(None, None, 0, 0, 0, 0, 0, None))(
        data, global_params, flat_idx, mask, chunk_steps_s, chunk_aux, chunk_lr, num_iters
      )
      return delta, loss, num_iters * chunk

    if num_chunks == 1:
      out = run_chunk(jax.tree_util.tree_map(lambda a: a[0], xs))
      out = jax.tree_util.tree_map(lambda a: a[None], out)
    else:
      out = jax.lax.map(run_chunk, xs)
    delta_c, loss_c, padded = out
    inverse = jnp.argsort(order)
    unchunk = lambda a: a.reshape((m_pad,) + a.shape[2:])[inverse][:num_selected]
    deltas = jax.tree_util.tree_map(unchunk, delta_c)
    loss = unchunk(loss_c)
    deltas = jax.tree_util.tree_map(
      lambda d: jnp.where(valid.reshape((-1,) + (1,) * (d.ndim - 1)), d, 0.0), deltas
    )
    return CohortResult(
      deltas=deltas,
      loss=jnp.where(valid, loss, 0.0),
      num_steps=steps,
      padded_steps=jnp.sum(padded).astype(jnp.float32),
    )

  return train_chunked

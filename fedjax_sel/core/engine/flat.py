"""``map``: one client at a time inside jit on one device, no padding.

One flat loop over every (client, step) pair of the cohort (``auto`` for CNNs on one CPU
device; one lane of the ``lanes`` loop is this loop too).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from fedjax_sel.core.engine.config import CohortResult
from fedjax_sel.core.engine.local import LocalTraining, cohort_steps, slot_keys, slot_lrs


def flat_loop(local: LocalTraining, data, global_params, cohort, steps, keys, lr, aux):
  """One loop over every (client, step) pair of the m slots given (all of them, or one
  device's share), no padding; ``lr``: f32[m]. Returns (deltas [m, ...], loss f32[m],
  steps run f32[1]).

  A loop over clients around a loop over steps (``lax.map`` of single-client chunks)
  runs its ops without XLA:CPU's intra-op thread pool (profiled: a CNN's convolution
  fusion took 109 ms nested vs 63 ms in a flat loop on 2 cores; equal on one core), so
  here client c's steps are iterations ``starts[c] .. ends[c] - 1`` of one flat loop.
  At a client's last step one ``lax.cond`` writes its delta and resets the params and
  optimizer state to the global ones: passes over the parameters on every step (a
  ``where`` reset, a delta write) cost a CNN's memory bandwidth (1.7M parameters at
  batch 4: 1,079 -> 938 ms for 10 MNIST CNN clients, 143 steps).
  """
  m = cohort.shape[0]
  fidx, mask = jax.vmap(local.client_batches, in_axes=(None, 0, 0, 0))(data, keys, cohort, steps)
  ends = jnp.cumsum(steps)
  starts = ends - steps
  opt_state0 = local.opt_init(global_params)
  out_d = jax.tree_util.tree_map(lambda p: jnp.zeros((m,) + p.shape, p.dtype), global_params)
  out_l = jnp.zeros((m,), jnp.float32)

  def body(i, carry):
    c = jnp.searchsorted(ends, i, side="right")
    j = i - starts[c]
    params, opt_state, loss_sum, out_d, out_l = carry
    aux_c = jax.tree_util.tree_map(lambda a: a[c], aux)
    loss, params, opt_state = local.local_step(
      local.client_optimizer(lr[c]),
      params,
      opt_state,
      global_params,
      local.batch_at(data, fidx[c, j], mask[c, j]),
      aux_c,
    )

    def finish(carry):
      """Client c's last step: write its delta and mean loss, start from the global
      params for the next client."""
      params, _, loss_sum, out_d, out_l = carry
      out_d = jax.tree_util.tree_map(
        lambda o, p, g: o.at[c].set(p - g), out_d, params, global_params
      )
      out_l = out_l.at[c].set(loss_sum / steps[c].astype(jnp.float32))
      return global_params, opt_state0, jnp.zeros((), jnp.float32), out_d, out_l

    carry = (params, opt_state, loss_sum + loss, out_d, out_l)
    return jax.lax.cond(j == steps[c] - 1, finish, lambda a: a, carry)

  init = (global_params, opt_state0, jnp.zeros((), jnp.float32), out_d, out_l)
  total = ends[-1] if m else jnp.zeros((), jnp.int32)
  _, _, _, deltas, loss = jax.lax.fori_loop(0, total, body, init)
  return deltas, loss, total.astype(jnp.float32)[None]


def make_train_flat(local: LocalTraining, num_selected: int) -> Callable[..., CohortResult]:
  """``train_flat(data, global_params, cohort, valid, key, lr, aux)``: :func:`flat_loop`
  over the M slots. One client at a time: no nested loops, no vmap of a single client
  (whose batch dimension of 1 takes XLA:CPU's slower batched-dot path), nothing to shard."""

  def train_flat(data, global_params, cohort, valid, key, lr, aux) -> CohortResult:
    """``map``: one client at a time on one device (:func:`flat_loop`)."""
    cohort, steps = cohort_steps(local, data, cohort, valid)
    keys = slot_keys(key, num_selected)
    lr = slot_lrs(lr, num_selected)
    deltas, loss, padded = flat_loop(local, data, global_params, cohort, steps, keys, lr, aux)
    return CohortResult(
      deltas=deltas,
      loss=jnp.where(valid, loss, 0.0),
      num_steps=steps,
      padded_steps=jnp.sum(padded),
    )

  return train_flat

"""One client's local training, shared by every loop of the engine: its batches (flat
example indices into the training arrays), one local step, and a client's whole run.

``make_local_training`` builds these once per trainer (they close over the static plan:
the longest client, the most steps, the number of permutations); the loops in ``flat``,
``lanes`` and ``chunked`` differ only in how they schedule them over the cohort.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedjax_sel.core.engine.config import (
  EngineConfig,
  cross_entropy_loss,
  decode_inputs,
  max_steps,
  steps_per_client,
)
from fedjax_sel.core.types import ClientUpdate


def client_permutations(key: jax.Array, n: jax.Array, n_max: int, num_perms: int) -> jax.Array:
  """``num_perms`` random permutations of a client's ``n`` examples, as i32[num_perms, n_max].

  The first ``n`` entries of each row are a permutation of 0..n-1 (the rest are n..n_max-1).
  One single-key sort of packed uint32 words (random high bits, the index in the low
  ``ceil(log2 n_max)`` bits) instead of an argsort of float keys: on CPU the argsort was
  44 % of a logistic-regression round (``benchmarks/step_profile.py``) and this is about
  7x faster. Equal random high bits (rare: 32 - log2(n_max) random bits) keep index order.
  """
  bits = max(1, (max(n_max, 1) - 1).bit_length())
  if bits >= 24:  # too few random bits left in a uint32 word: sort float keys
    u = jax.random.uniform(key, (num_perms, n_max))
    return jnp.argsort(jnp.where(jnp.arange(n_max)[None] < n, u, 2.0), axis=-1).astype(jnp.int32)
  r = jax.random.bits(key, (num_perms, n_max), jnp.uint32) >> bits
  i = jnp.arange(n_max, dtype=jnp.uint32)[None]
  r = jnp.where(i < jnp.asarray(n).astype(jnp.uint32), r, jnp.uint32(0xFFFFFFFF) >> bits)
  packed = jnp.sort((r << bits) | i, axis=-1)
  return (packed & jnp.uint32((1 << bits) - 1)).astype(jnp.int32)


def slot_keys(key: jax.Array, num_slots: int) -> jax.Array:
  """One key per cohort slot (``fold_in(key, slot)``): a slot's batch order depends only on
  the round key and the slot, whichever loop trains it."""
  return jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(num_slots))


def slot_lrs(lr: Any, m: int) -> jax.Array:
  """``lr`` (one for the cohort, or one per slot) as f32[m]."""
  return jnp.broadcast_to(jnp.asarray(lr, jnp.float32), (m,))


class LocalTraining(NamedTuple):
  """The per-client pieces every loop schedules (see ``make_local_training``).

  Attributes:
    cfg: the EngineConfig.
    n_max: examples of the longest client the plan was made for.
    s_max: the most local steps any client runs (S).
    num_perms: permutations of a client's examples drawn per round (a fixed-steps run's
      p-th pass over a client's data uses permutation p mod ``num_perms``).
    client_optimizer: ``lr -> optax.GradientTransformation``.
    opt_init: the optimizer's ``init`` (its state does not depend on the lr).
    client_batches: ``(data, key, client, steps) -> (fidx i32[S, B], mask bool[S, B])``.
    batch_at: ``(data, fidx, mask) -> (x, y, mask)``, x decoded to float32.
    local_step: ``(opt, params, opt_state, global_params, batch, aux) -> (loss, params,
      opt_state)``.
    train_one: ``(data, global_params, fidx, mask, steps, aux, lr, num_iters) -> (delta,
      mean loss)``: one client's run, padded steps masked.
  """

  cfg: EngineConfig
  n_max: int
  s_max: int
  num_perms: int
  client_optimizer: Callable[[jax.Array], optax.GradientTransformation]
  opt_init: Callable
  client_batches: Callable
  batch_at: Callable
  local_step: Callable
  train_one: Callable


def make_local_training(
  apply_fn: Callable,
  client_update: ClientUpdate,
  client_optimizer: Callable[[jax.Array], optax.GradientTransformation],
  cfg: EngineConfig,
  n_max: int,
  x_divisor: float = 1.0,
) -> LocalTraining:
  """The per-client pieces for clients of at most ``n_max`` examples (see LocalTraining)."""
  s_max = max_steps(n_max, cfg)
  batch = cfg.batch_size
  loss_fn = cross_entropy_loss(apply_fn)
  if cfg.local_steps is not None:
    # passes over the data needed by the longest-running (smallest) client, capped
    num_perms = int(min(8, max(1, math.ceil(cfg.local_steps * batch / max(1, n_max // 4)))))
  else:
    num_perms = int(cfg.local_epochs)

  def client_batches(data, key, client, steps):
    """Flat example indices i32[S, B] of a client's local batches and their mask bool[S, B]."""
    n = data.counts[client]
    perm = client_permutations(key, n, n_max, num_perms)
    j = jnp.arange(s_max)[:, None]
    b = jnp.arange(batch)[None, :]
    n_safe = jnp.maximum(n, 1)
    if cfg.local_steps is not None:
      pos = j * batch + b
      epoch = (pos // n_safe) % num_perms
      within = pos % n_safe
      mask = (b < n) & (j < steps)
    else:
      steps_per_epoch = jnp.maximum((n + batch - 1) // batch, 1)
      epoch = jnp.minimum(j // steps_per_epoch, num_perms - 1)
      within = (j % steps_per_epoch) * batch + b
      mask = (within < n) & (j < steps)
      within = jnp.minimum(within, n_max - 1)
    return data.offsets[client] + perm[epoch, within], mask

  def batch_at(data, fidx, mask):
    """The (x, y, mask) batch at flat example indices ``fidx`` (x decoded to float32)."""
    return decode_inputs(data.x[fidx], data.table, x_divisor), data.y[fidx], mask

  def local_step(opt, params, opt_state, global_params, batch, aux):
    """One local SGD step on ``batch`` = (x, y, mask): (loss, params, state)."""
    loss, grads = client_update.grad(loss_fn, params, global_params, batch, aux)
    updates, opt_state = opt.update(grads, opt_state, params)
    return loss, optax.apply_updates(params, updates), opt_state

  def train_one(data, global_params, fidx, mb, steps, aux, lr, num_iters):
    opt = client_optimizer(lr)
    opt_state = opt.init(global_params)

    def body(j, carry):
      params, opt_state, loss_sum = carry
      loss, new_params, new_opt_state = local_step(
        opt, params, opt_state, global_params, batch_at(data, fidx[j], mb[j]), aux
      )
      active = j < steps
      keep = lambda new, old: jnp.where(active, new, old)
      params = jax.tree_util.tree_map(keep, new_params, params)
      opt_state = jax.tree_util.tree_map(keep, new_opt_state, opt_state)
      return params, opt_state, loss_sum + jnp.where(active, loss, 0.0)

    params, _, loss_sum = jax.lax.fori_loop(
      0, num_iters, body, (global_params, opt_state, jnp.zeros((), jnp.float32))
    )
    delta = jax.tree_util.tree_map(jnp.subtract, params, global_params)
    return delta, loss_sum / jnp.maximum(steps, 1).astype(jnp.float32)

  return LocalTraining(
    cfg=cfg,
    n_max=n_max,
    s_max=s_max,
    num_perms=num_perms,
    client_optimizer=client_optimizer,
    # the optimizer's state does not depend on the lr (momentum buffers, or nothing)
    opt_init=client_optimizer(1.0).init,
    client_batches=client_batches,
    batch_at=batch_at,
    local_step=local_step,
    train_one=train_one,
  )


def cohort_steps(local: LocalTraining, data, cohort: jax.Array, valid: jax.Array):
  """(cohort i32[M], steps i32[M]): the slots' clients and their local steps (0 if invalid)."""
  cohort = jnp.asarray(cohort, jnp.int32)
  return cohort, jnp.where(valid, steps_per_client(data.counts, local.cfg)[cohort], 0)

"""``lanes``: L lanes, each running its clients one after another (``auto`` for dense
models on CPU).

Clients go longest first to the least loaded lane (LPT), so the only padding is the lanes'
imbalance at the end. One loop of max(lane load) iterations, each a vmapped step of the L
lanes; batches are gathered once per block of ``LANE_BLOCK`` iterations. On several devices
each device runs lanes on its share of the cohort (``shard_map``). One lane is the flat loop
(``auto`` for CNNs on several CPU devices: one client at a time per device).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from fedjax_sel.core.engine.config import CohortResult
from fedjax_sel.core.engine.flat import flat_loop
from fedjax_sel.core.engine.local import LocalTraining, cohort_steps, slot_keys, slot_lrs

# iterations per block of the ``lanes`` loop (each block gathers its batches once)
LANE_BLOCK = 16


def assign_lanes(steps: jax.Array, lanes: int) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Longest-processing-time-first assignment of M clients to ``lanes`` lanes.

  Clients with more steps go first, each to the lane with the least load so far (ties: the
  lowest lane). Returns ``load`` i32[L] (steps per lane), ``lane_client`` i32[L, M + 1]
  (the lane's clients in run order, then M) and ``lane_start`` i32[L, M + 1] (the
  iteration at which each starts). Clients with zero steps are left out. LPT's makespan is
  at most 4/3 of the optimum (Graham 1969) and at most the mean load plus the longest client.
  """
  steps = jnp.asarray(steps, jnp.int32)
  m = steps.shape[0]
  order = jnp.argsort(-steps, stable=True)

  def assign(i, carry):
    load, count, lane_client, lane_start = carry
    c = order[i]
    lane = jnp.argmin(load)
    take = steps[c] > 0
    lane_client = lane_client.at[lane, count[lane]].set(jnp.where(take, c, m))
    lane_start = lane_start.at[lane, count[lane]].set(jnp.where(take, load[lane], 0))
    load = load.at[lane].add(steps[c])
    count = count.at[lane].add(take.astype(jnp.int32))
    return load, count, lane_client, lane_start

  init = (
    jnp.zeros((lanes,), jnp.int32),
    jnp.zeros((lanes,), jnp.int32),
    jnp.full((lanes, m + 1), m, jnp.int32),
    jnp.zeros((lanes, m + 1), jnp.int32),
  )
  load, _, lane_client, lane_start = jax.lax.fori_loop(0, m, assign, init)
  return load, lane_client, lane_start


def lanes_loop(local: LocalTraining, data, global_params, cohort, steps, keys, lr, aux, lanes):
  """The ``lanes`` loop over the m slots given (all of them, or one device's share).

  ``lr``: f32[m]. Returns (deltas [m, ...], loss f32[m], padded lane-steps f32[1]). One
  lane is the flat loop (no vmap: a lane axis of 1 takes XLA:CPU's batched-dot path, and
  a vmapped convolution a grouped one).
  """
  if lanes == 1:
    return flat_loop(local, data, global_params, cohort, steps, keys, lr, aux)
  m = cohort.shape[0]
  fidx, mask = jax.vmap(local.client_batches, in_axes=(None, 0, 0, 0))(data, keys, cohort, steps)
  # spare row m: what a finished lane reads and writes
  fidx = jnp.concatenate([fidx, jnp.zeros_like(fidx[:1])])
  mask = jnp.concatenate([mask, jnp.zeros_like(mask[:1])])
  steps_x = jnp.concatenate([steps, jnp.ones((1,), steps.dtype)])
  aux_x = jax.tree_util.tree_map(lambda a: jnp.concatenate([a, a[:1]]), aux)
  lr_x = jnp.concatenate([lr, jnp.ones((1,), lr.dtype)])
  load, lane_client, lane_start = assign_lanes(steps, lanes)
  lane_end = jnp.where(lane_client < m, lane_start + steps_x[lane_client], jnp.iinfo(jnp.int32).max)
  opt_state0 = local.opt_init(global_params)
  stack = lambda t: jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (lanes,) + a.shape), t)
  out_d = jax.tree_util.tree_map(lambda p: jnp.zeros((m + 1,) + p.shape, p.dtype), global_params)
  out_l = jnp.zeros((m + 1,), jnp.float32)
  num_iters = jnp.max(load)
  block = LANE_BLOCK
  lane_ids = jnp.arange(lanes)[None]

  lane_step = jax.vmap(
    lambda p, s, b, a, r: local.local_step(local.client_optimizer(r), p, s, global_params, b, a)
  )

  def save(out_d, out_l, params, loss_sum, dest):
    """Writes each lane's delta and mean loss into row ``dest`` (m: the spare row)."""
    out_d = jax.tree_util.tree_map(
      lambda o, p, g: o.at[dest].set(p - g[None]), out_d, params, global_params
    )
    out_l = out_l.at[dest].set(loss_sum / steps_x[dest].astype(jnp.float32))
    return out_d, out_l

  def switch(carry, c_i):
    """Lanes whose client changed: save the finished client, start from the global params."""
    params, opt_state, loss_sum, prev_c, out_d, out_l = carry
    new = c_i != prev_c
    out_d, out_l = save(out_d, out_l, params, loss_sum, jnp.where(new, prev_c, m))
    reset = lambda g, p: jnp.where(new.reshape((-1,) + (1,) * (p.ndim - 1)), g[None], p)
    params = jax.tree_util.tree_map(reset, global_params, params)
    opt_state = jax.tree_util.tree_map(reset, opt_state0, opt_state)
    return params, opt_state, jnp.where(new, 0.0, loss_sum), c_i, out_d, out_l

  def run_block(b, carry):
    t = b * block + jnp.arange(block)
    # lane l at iteration t runs its k-th client, k = #clients of the lane ended by t
    k = jax.vmap(lambda e: jnp.searchsorted(e, t, side="right"))(lane_end).T  # [K, L]
    c = lane_client[lane_ids, k]
    j = jnp.where(c < m, t[:, None] - lane_start[lane_ids, k], 0)
    xs = (
      local.batch_at(data, fidx[c, j], mask[c, j]),
      c,
      jax.tree_util.tree_map(lambda a: a[c], aux_x),
      lr_x[c],
    )

    def inner(i, carry):
      batch_i, c_i, aux_i, lr_i = jax.tree_util.tree_map(lambda a: a[i], xs)
      # a lane changes client every ~S / L iterations: skip the save/reset passes over
      # the lanes' params otherwise
      carry = jax.lax.cond(jnp.any(c_i != carry[3]), switch, lambda a, _: a, carry, c_i)
      params, opt_state, loss_sum, prev_c, out_d, out_l = carry
      loss, params, opt_state = lane_step(params, opt_state, batch_i, aux_i, lr_i)
      return params, opt_state, loss_sum + loss, prev_c, out_d, out_l

    return jax.lax.fori_loop(0, jnp.minimum(block, num_iters - b * block), inner, carry)

  init = (stack(global_params), stack(opt_state0), jnp.zeros((lanes,), jnp.float32))
  init += (jnp.full((lanes,), m, jnp.int32), out_d, out_l)
  num_blocks = (num_iters + block - 1) // block
  params, _, loss_sum, prev_c, out_d, out_l = jax.lax.fori_loop(0, num_blocks, run_block, init)
  deltas, loss = save(out_d, out_l, params, loss_sum, prev_c)  # the lanes' last clients
  deltas = jax.tree_util.tree_map(lambda d: d[:m], deltas)
  return deltas, loss[:m], (num_iters * lanes).astype(jnp.float32)[None]


def make_train_lanes(
  local: LocalTraining, num_selected: int, lanes: int, mesh: Mesh | None
) -> Callable[..., CohortResult]:
  """``train_lanes(data, global_params, cohort, valid, key, lr, aux)`` with ``lanes`` lanes
  (per device of ``mesh``, when given)."""
  num_devices = 1 if mesh is None else mesh.devices.size
  m_pad = -(-num_selected // num_devices) * num_devices  # an equal share per device

  def train_lanes(data, global_params, cohort, valid, key, lr, aux) -> CohortResult:
    """``lanes``: L = ``chunk`` lanes, each running its clients one after another.

    Clients are assigned to lanes longest first, each to the least loaded lane (LPT), so
    the loop runs max(lane load) iterations of L client-steps: the padding is the lanes'
    imbalance at the end only, not every chunk's spread of step counts. A lane that starts a
    client resets its params and optimizer state to the global ones; each step writes the
    lane's delta into its client's row (a finished lane writes to a spare row).

    The iterations run in blocks of ``LANE_BLOCK``: each block gathers its batches
    ``[K, L, B, ...]`` once, and the inner loop only slices them. A gather from the full
    training array inside the step loop is split over XLA:CPU's intra-op threads (its cost
    model counts the whole operand), which cost ~10 us per step for a 2 KB batch.

    On several devices the cohort is dealt to them longest first in snake order (equal
    slot counts, near-equal step totals) and each device runs its own lanes loop on its
    share (``shard_map``); batch orders are those of one device, so results are equal.
    """
    cohort, steps = cohort_steps(local, data, cohort, valid)
    keys = slot_keys(key, num_selected)
    lr = slot_lrs(lr, num_selected)
    if mesh is None:
      deltas, loss, padded = lanes_loop(
        local, data, global_params, cohort, steps, keys, lr, aux, lanes
      )
    else:
      pad = m_pad - num_selected
      pad0 = lambda a: jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1))
      ranked = jnp.argsort(-pad0(steps), stable=True).reshape(-1, num_devices)
      snake = jnp.where((jnp.arange(ranked.shape[0]) % 2 == 1)[:, None], ranked[:, ::-1], ranked)
      perm = snake.T.reshape(-1)  # device d's slots: perm[d * m_loc:(d + 1) * m_loc]
      take = lambda a: pad0(a)[perm]
      spec = P("clients")
      per_device = jax.shard_map(
        lambda d, p, c, s, k, r, a: lanes_loop(local, d, p, c, s, k, r, a, lanes),
        mesh=mesh,
        in_specs=(P(), P(), spec, spec, spec, spec, spec),
        out_specs=(spec, spec, spec),
        check_vma=False,
      )
      aux_p = jax.tree_util.tree_map(take, aux)
      out = per_device(data, global_params, take(cohort), take(steps), take(keys), take(lr), aux_p)
      inverse = jnp.argsort(perm)
      deltas, loss = jax.tree_util.tree_map(lambda a: a[inverse][:num_selected], out[:2])
      padded = out[2]
    return CohortResult(
      deltas=deltas,
      loss=jnp.where(valid, loss, 0.0),
      num_steps=steps,
      padded_steps=jnp.sum(padded),
    )

  return train_lanes

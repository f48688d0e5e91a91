"""SCAFFOLD: local SGD corrected by control variates (c - c_i).

Server-side state: the global control variate c and every client's c_i, a pytree of
[N, ...] arrays, i.e. O(N * P) memory. After the round, a participant's control variate is
updated with option II of the paper, c_i+ = c_i - c + (w_t - y_i) / (K * lr), and
c <- c + (1 / N) * sum_{i in S} (c_i+ - c_i). The server model update is the plain average
of the deltas (use it with the ``fedavg`` aggregator).

References: Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated
Learning", ICML 2020, Algorithm 1 (option II). A FedAR (Jiang et al.) baseline.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_sel.client.registry import register
from fedjax_sel.core.types import ClientUpdate


class ScaffoldState(NamedTuple):
  server_c: Any  # pytree like params
  client_c: Any  # pytree of [N, ...]


@register("scaffold")
def make_scaffold() -> ClientUpdate:
  """SCAFFOLD client update (control variates held by the server, O(N * P))."""

  def init(params, num_clients):
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    stacked = jax.tree_util.tree_map(lambda p: jnp.zeros((num_clients, *p.shape), p.dtype), params)
    return ScaffoldState(server_c=zeros, client_c=stacked)

  def prepare(state, cohort):
    # correction c - c_i for every slot, [M, ...]
    return jax.tree_util.tree_map(
      lambda c, ci: c[None] - ci[cohort], state.server_c, state.client_c
    )

  def grad(loss_fn, params, global_params, batch, aux):
    del global_params
    loss, g = jax.value_and_grad(loss_fn)(params, batch)
    return loss, jax.tree_util.tree_map(jnp.add, g, aux)

  def finish(state, cohort, valid, deltas, aux, num_steps, lr):
    num_clients = jax.tree_util.tree_leaves(state.client_c)[0].shape[0]
    scale = jnp.where(valid & (num_steps > 0), 1.0 / (jnp.maximum(num_steps, 1) * lr), 0.0)

    def new_ci(ci_all, corr, delta):
      ci = ci_all[cohort]
      s = scale.reshape((-1,) + (1,) * (delta.ndim - 1))
      # c_i+ = c_i - c + (w - y_i)/(K lr) = -(c - c_i) - delta/(K lr)
      updated = -corr - delta * s
      return jnp.where(s > 0, updated, ci)

    new = jax.tree_util.tree_map(new_ci, state.client_c, aux, deltas)
    diff = jax.tree_util.tree_map(
      lambda n, ci_all: jnp.sum(n - ci_all[cohort], axis=0), new, state.client_c
    )
    target = jnp.where(valid & (num_steps > 0), cohort, num_clients)
    client_c = jax.tree_util.tree_map(
      lambda ci_all, n: ci_all.at[target].set(n, mode="drop"), state.client_c, new
    )
    server_c = jax.tree_util.tree_map(lambda c, d: c + d / num_clients, state.server_c, diff)
    return ScaffoldState(server_c=server_c, client_c=client_c)

  return ClientUpdate(init=init, prepare=prepare, grad=grad, finish=finish)

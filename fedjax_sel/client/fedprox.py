"""FedProx local update: SGD on the loss plus a proximal term (mu / 2) ||w - w_t||^2.

References: Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020,
Eq. (2). FedGS (Wang et al., AAAI 2023) uses mu = 0.01 as a baseline.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_sel.client.registry import register
from fedjax_sel.client.sgd import _keep, _no_aux, _no_state
from fedjax_sel.core.registry import check_range
from fedjax_sel.core.types import ClientUpdate


@register("fedprox")
def make_fedprox(mu: float = 0.01) -> ClientUpdate:
  """Args: mu: the proximal coefficient (>= 0); mu = 0 is plain SGD."""
  check_range("client_update_mu", mu, 0.0)

  def grad(loss_fn, params, global_params, batch, aux):
    del aux

    def prox_loss(p):
      sq = sum(
        jnp.sum(jnp.square(a - b))
        for a, b in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(global_params))
      )
      return loss_fn(p, batch) + 0.5 * mu * sq

    return jax.value_and_grad(prox_loss)(params)

  return ClientUpdate(init=_no_state, prepare=_no_aux, grad=grad, finish=_keep)

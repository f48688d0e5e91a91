"""Plain local SGD: each step follows the gradient of the client's loss.

References: McMahan et al., "Communication-Efficient Learning of Deep Networks from
Decentralized Data" (FedAvg), AISTATS 2017, Algorithm 1 (ClientUpdate).
"""

from __future__ import annotations

import jax

from fedjax_sel.client.registry import register
from fedjax_sel.core.types import ClientUpdate


def _no_state(params, num_clients):
  del params, num_clients
  return ()


def _no_aux(state, cohort):
  del state
  return cohort  # a per-slot placeholder with a leading M axis


def _keep(state, *args, **kwargs):
  del args, kwargs
  return state


@register("sgd")
def make_sgd() -> ClientUpdate:
  """Local SGD on the client's mean cross-entropy."""

  def grad(loss_fn, params, global_params, batch, aux):
    del global_params, aux
    return jax.value_and_grad(loss_fn)(params, batch)

  return ClientUpdate(init=_no_state, prepare=_no_aux, grad=grad, finish=_keep)

"""FedSGD: each selected client takes one step on the gradient of its whole local loss at the
global model; the engine's batches only split that gradient's computation.

References: McMahan et al., "Communication-Efficient Learning of Deep Networks from
Decentralized Data", AISTATS 2017, Sec. 2 (FedSGD: "each client k computes g_k = grad F_k(w_t)
... on its local data"); FedEMD (Table 1) runs it beside FedAvg.

The engine runs ``ceil(n_k / B)`` steps of batch ``B`` for client k (one local epoch). Each
step here returns the gradient **at the global params** of its batch's mean loss, scaled by
(examples in the batch) / n_k, so that plain SGD of lr eta over the epoch moves the params by
exactly ``-eta x sum_j (c_j / n_k) g_j = -eta x grad F_k(w_t)``: one full-batch step, for any
B, with no padding of small clients to the largest one's size (a batch of the largest client
padded every client to it: ~5x the examples of a FedEMD round). The reported loss is scaled
the same way, so the round's mean loss is F_k(w_t). Because the steps must add up, this rule
needs the client optimizer to be linear in the gradient (``client_optimizer="sgd"``, no
momentum, no weight decay) and one local epoch; ``experiment.config.validate_config`` checks
both, and ``experiment.build`` gives it the clients' example counts.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.client.registry import register
from fedjax_sel.client.sgd import _keep
from fedjax_sel.core.types import ClientUpdate


@register("fedsgd")
def make_fedsgd(client_counts: Sequence[int] | None = None) -> ClientUpdate:
  """Args: client_counts: each client's training examples n_k (``experiment.build`` passes
  the dataset's; a rule built without them refuses to ``init``)."""
  counts = None
  if client_counts is not None:
    counts = np.asarray(client_counts)
    if counts.ndim != 1 or counts.size == 0 or not np.issubdtype(counts.dtype, np.integer):
      raise ValueError(
        f"client_counts={client_counts!r}; allowed: a non-empty sequence of integers"
      )
    if np.any(counts < 0):
      raise ValueError(f"client_counts has a negative count {int(counts.min())}; allowed: >= 0")

  def init(params, num_clients):
    del params
    if counts is None:
      raise ValueError(
        "client_update='fedsgd' needs client_counts (each client's training examples); "
        "experiment.build passes the dataset's, or give client_update_hparams.client_counts"
      )
    if counts.size != num_clients:
      raise ValueError(
        f"client_counts has {counts.size} entries for {num_clients} clients; allowed: one "
        "per client"
      )
    return jnp.asarray(counts, jnp.float32)

  def prepare(state, cohort):
    return jnp.take(state, jnp.asarray(cohort, jnp.int32), mode="clip")  # n_k per slot

  def grad(loss_fn, params, global_params, batch, aux):
    del params  # every batch's gradient is taken at the global model
    mask = batch[2]
    n_k = jnp.maximum(aux, 1.0)
    share = jnp.sum(mask.astype(jnp.float32)) / n_k
    steps = jnp.ceil(n_k / mask.shape[0])  # the engine's steps for this client (one epoch)
    loss, g = jax.value_and_grad(loss_fn)(global_params, batch)
    return loss * share * steps, jax.tree_util.tree_map(lambda t: t * share.astype(t.dtype), g)

  return ClientUpdate(init=init, prepare=prepare, grad=grad, finish=_keep)

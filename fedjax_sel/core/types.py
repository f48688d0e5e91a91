"""Types shared by every pluggable part of the simulator.

Shapes use N = number of clients, M = cohort slots (clients selected per round),
C = number of classes, P = number of model parameters.

The four pluggable parts follow the optax ``GradientTransformation`` pattern: a
NamedTuple of pure functions built by ``make(name, **hparams)``. State is an explicit
pytree passed in and returned, never stored on an object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

PRNGKey = jax.Array
Params = Any  # a pytree of arrays
PyTree = Any
Array = jax.Array


class ClientInfo(NamedTuple):
  """Static facts about the clients that every component may use.

  Attributes:
    num_examples: i32[N], training examples held by each client.
    label_counts: i32[N, C], training examples of each class held by each client.
  """

  num_examples: Array
  label_counts: Array

  @property
  def num_clients(self) -> int:
    return int(self.num_examples.shape[0])

  @property
  def num_classes(self) -> int:
    return int(self.label_counts.shape[1])


class Selection(NamedTuple):
  """The cohort chosen for one round.

  Attributes:
    cohort: i32[M], client ids in the M cohort slots (any id in an invalid slot).
    valid: bool[M], whether a slot holds a selected client.
    weights: f32[M], the aggregation weights the method prescribes; zero on invalid
      slots. The FedAvg-style update is ``sum_m weights[m] * delta[m]``.
  """

  cohort: Array
  valid: Array
  weights: Array


class SelectionContext(NamedTuple):
  """What a selection strategy may look at in one round (built inside the jitted round).

  Attributes:
    params: the current global parameters.
    client_losses: ``fn(client_ids: i32[K]) -> f32[K]``, the global model's mean training
      loss on each listed client, computed vmapped on demand (only traced when called).
    update_sketch: f32[N, d], each client's latest local update projected to d dims
      (zeros for clients never seen); maintained when the strategy sets
      ``uses_updates=True``, else a [N, 0] array.
    embeddings: f32[N, E], each client's latest functional embedding (its local model's
      softmax outputs on a shared batch of Gaussian-noise inputs, FedGS Eq. 12),
      maintained when ``uses_updates=True``, else [N, 0].
    seen: bool[N], whether the client has ever returned an update.
    avail_probs: f32[N], the availability model's active probability this round.
    num_examples: i32[N], training examples per client.
    eval_value: ``fn(params) -> f32[]``, accuracy of the given params on the server's
      validation set (the global test set in our experiments); used by the Shapley
      baseline. Only traced when called.
    round: i32[], the round index t.
    client_test_losses: ``fn(client_ids: i32[K]) -> f32[K]``, the global model's mean loss
      on each listed client's whole local test split (the FedGS authors' Power-of-Choice
      asks for the loss on the clients' validation data); None where not provided.
    eval_values: ``fn(stacked_params) -> f32[K]``, ``eval_value`` of each of K models
      stacked on a leading axis, as many at once as the cohort engine trains clients at
      once (vmapped, or one at a time for CNNs on CPU, where vmapping K models' convolutions
      is slower than K evaluations); only traced when called. None where not provided
      (``selection.common.local_model_values`` then vmaps ``eval_value``).
  """

  params: Params
  client_losses: Callable[[Array], Array]
  update_sketch: Array
  embeddings: Array
  seen: Array
  avail_probs: Array
  num_examples: Array
  eval_value: Callable[[Params], Array]
  round: Array
  client_test_losses: Callable[[Array], Array] | None = None
  eval_values: Callable[[Params], Array] | None = None


class AvailabilityModel(NamedTuple):
  """Who can answer the server each round.

  init(key, info) -> state
  probs(state, t) -> f32[N]   active probability of every client at round t
  sample(state, key, t) -> (bool[N], state)
  """

  init: Callable[[PRNGKey, ClientInfo], PyTree]
  probs: Callable[[PyTree, Array], Array]
  sample: Callable[[PyTree, PRNGKey, Array], tuple[Array, PyTree]]


class SelectionStrategy(NamedTuple):
  """Which available clients train this round, and with what aggregation weights.

  init(key, info) -> state
  select(state, key, avail, t, ctx) -> (Selection, state)
  observe(state, selection, deltas, losses, ctx) -> state   (optional, may be None)
      called after local training with the cohort's deltas (pytree of [M, ...]) and
      per-slot train losses f32[M]; for strategies that learn from updates (clustered
      sampling Alg. 2, Shapley).

  ``num_selected`` is M, the number of cohort slots (static). ``uses_updates`` asks the
  round loop to keep ``ctx.update_sketch`` / ``ctx.embeddings`` current.
  ``with_replacement`` says the method may put the same client in two slots.
  ``leaves_slots_empty`` says the method may leave slots invalid while unpicked clients are
  available (TiFL with ``short_tier="tier_only"``: the cohort stays within one tier), so it
  fills between 1 and min(M, available) slots when anybody is available.
  """

  init: Callable[[PRNGKey, ClientInfo], PyTree]
  select: Callable[..., tuple[Selection, PyTree]]
  num_selected: int
  uses_updates: bool = False
  with_replacement: bool = False
  observe: Callable[..., PyTree] | None = None
  leaves_slots_empty: bool = False


class AggregationAux(NamedTuple):
  """Extra per-round facts an aggregator may use (passed as keyword ``aux``).

  Attributes:
    avail_probs: f32[N], this round's active probability of every client.
    num_examples: f32[N], training examples per client.
    finite: bool[M], whether each cohort slot's update is finite (non-finite ones
      must be ignored).
    lr: f32[N], the client lr eta_t of every client this round: the lr its local training
      uses if it is selected (the schedule at the round index, so one value repeated, or
      at the client's own participation count with ``lr_schedule_unit="participation"``).
      A slot's update was trained with ``lr[cohort[m]]``. Memory aggregators store
      G_i = delta_i / eta and step by eta_t * G (FedAR Eq. 4 and 7). None: 1 everywhere
      (the updates taken as they are).
  """

  avail_probs: Array
  num_examples: Array
  finite: Array
  lr: Array | None = None


class Aggregator(NamedTuple):
  """Turns the cohort's local updates into one global update.

  init(params, info) -> state
  apply(state, deltas, selection, avail, t, aux=None) -> (update, state)

  ``deltas`` is a pytree of [M, ...] arrays (local params minus global params);
  ``update`` is a pytree shaped like params, applied by the server optimizer as
  ``params <- params + server_lr * update`` for plain FedAvg.
  """

  init: Callable[[Params, ClientInfo], PyTree]
  apply: Callable[..., tuple[Params, PyTree]]


def empty_aux(num_clients: int, num_selected: int) -> AggregationAux:
  """An AggregationAux with full availability, unit sizes and all-finite updates."""
  return AggregationAux(
    avail_probs=jnp.ones((num_clients,), jnp.float32),
    num_examples=jnp.ones((num_clients,), jnp.float32),
    finite=jnp.ones((num_selected,), bool),
  )


class ClientUpdate(NamedTuple):
  """What one client does with the global params (a local update rule).

  init(params, num_clients) -> state        server-held state of the rule (e.g. SCAFFOLD
                                             control variates), () if none
  prepare(state, cohort) -> aux             per-slot inputs, pytree of [M, ...]
  grad(loss_fn, params, global_params, batch, aux_i) -> (loss, grads)
                                             one local step's loss and gradient
  finish(state, cohort, valid, deltas, aux, num_steps, lr) -> state
                                             server-side bookkeeping after the round
  """

  init: Callable[[Params, int], PyTree]
  prepare: Callable[[PyTree, Array], PyTree]
  grad: Callable[..., tuple[Array, Params]]
  finish: Callable[..., PyTree]

"""TiFL (Chai et al.): tiers of clients and an adaptive, credit-limited choice of one tier.

Restricted to its client selection, as the FedEMD paper implements it (FedEMD Sec. 5.1,
footnote 2: "we do not implement the features related to the communication acceleration in
TiFL"). Each round:

1. Every ``interval`` rounds (t > 0, t mod I = 0) the tier probabilities are recomputed from
   the tiers' accuracies (TiFL's ``ChangeProbs``): the n tiers that still have credits are
   sorted by ascending accuracy and the tier of rank i (0 = least accurate) gets
   ``(n - i) / D`` with ``D = n (n + 1) / 2``; a tier without credits gets 0. So the least
   accurate tier is the most likely. Before the first update every tier has ``1 / T``.
2. One tier is drawn with these probabilities among the tiers that still have credits and
   an available client (TiFL: draw again until the tier has credits), and its credits
   drop by one.
3. M clients are drawn uniformly without replacement among that tier's available clients.
   When the tier has fewer available clients than slots (only under intermittent
   availability, which TiFL does not consider), the other slots are filled uniformly from
   the other available clients.

Aggregation weights are FedAvg's ``n_k / sum n`` (the study's aggregator sets the plain mean
of FedSGD).

Readings (BUILD_NOTES.md, Selection, TiFL):

* What TiFL tiers by (``tier_by``): TiFL profiles each client's response latency and splits
  the sorted latencies into T tiers of equal size. The simulator has no latencies; under
  the FedEMD set-up's homogeneous resources a client's latency grows with its number of
  local steps, i.e. its data size, so ``"size"`` (default) tiers by ``n_i`` (ties by id).
  ``"random"`` is the other reading of "homogeneous": equal latencies, so tiers are equal
  random groups drawn once at ``init``.
* What a tier's accuracy is measured on (``accuracy_from``): TiFL evaluates the global model
  on every tier's clients (``"tiers"``, default); the FedEMD text describes TiFL as
  "evaluating the accuracy of selected participants each round" (``"cohort"``: only the
  tier just drawn is measured, on its M picked clients; a tier never measured counts as the
  least accurate). The selection context offers the global model's mean loss on a client's
  examples (``ctx.client_losses``, on up to ``loss_examples`` of them: TiFL's "random factor
  in local testing"), not its accuracy, so a tier's accuracy is ranked by its negated mean
  loss: the lowest-loss tier ranks as the most accurate.
* When all credits are spent (after T x ``credits`` rounds) the draw falls back to every
  tier with an available client, with the last probabilities (uniform if those are all 0),
  so a run longer than the credits keeps selecting.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_sel.core.registry import check_choice, check_count
from fedjax_sel.core.types import (
  Array,
  ClientInfo,
  PRNGKey,
  Selection,
  SelectionContext,
  SelectionStrategy,
)
from fedjax_sel.selection import common
from fedjax_sel.selection.registry import register

TIER_BY = ("size", "random")
ACCURACY_FROM = ("tiers", "cohort")
# the accuracy of a tier never measured ("cohort" reading): below every measured one
_UNMEASURED = float(jnp.finfo(jnp.float32).min)


class TiFLState(NamedTuple):
  """TiFL server state.

  Attributes:
    tier: i32[N], each client's tier (0 = the fastest: the smallest clients for "size").
    probs: f32[T], the tier probabilities of the last update.
    credits: i32[T], how many more times each tier may be drawn.
    accuracy: f32[T], each tier's latest measured accuracy proxy (negated mean loss).
  """

  tier: Array
  probs: Array
  credits: Array
  accuracy: Array


def tier_assignment(order_key: Array, num_tiers: int) -> Array:
  """i32[N], tier ``floor(rank * T / N)`` of each client, rank = its position in ascending
  ``order_key`` (ties by client id): T tiers of equal size (+-1), tier 0 the lowest keys.

  Args:
    order_key: f32[N] or i32[N], what clients are sorted by (data size, or random numbers).
    num_tiers: T (static).
  """
  n = order_key.shape[0]
  order = jnp.argsort(order_key, stable=True)
  rank = jnp.zeros((n,), jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))
  return (rank * num_tiers // max(n, 1)).astype(jnp.int32)


def tier_probabilities(accuracy: Array, eligible: Array) -> Array:
  """TiFL's ``ChangeProbs``: f32[T], ``(n - i) / D`` for the eligible tier of rank i.

  Args:
    accuracy: f32[T], each tier's accuracy at this update.
    eligible: bool[T], the tiers that may still be drawn (credits left); n = their count.

  Returns:
    f32[T]: eligible tiers sorted by ascending accuracy (ties: lower tier id first) get
    n/D, (n-1)/D, ..., 1/D with D = n (n + 1) / 2 (they sum to 1); the others 0; all 0 when
    none is eligible.

  References:
    Chai et al., "TiFL: A Tier-based Federated Learning System", HPDC 2020, Sec. 4.4
    (adaptive tier selection, ChangeProbs).
  """
  acc = jnp.nan_to_num(jnp.asarray(accuracy, jnp.float32), nan=_UNMEASURED)
  ids = jnp.arange(acc.shape[0])
  below = (acc[None, :] < acc[:, None]) | (
    (acc[None, :] == acc[:, None]) & (ids[None] < ids[:, None])
  )
  rank = jnp.sum(below & eligible[None, :], axis=1).astype(jnp.float32)
  n = jnp.sum(eligible).astype(jnp.float32)
  denom = jnp.maximum(n * (n + 1.0) / 2.0, 1.0)
  return jnp.where(eligible, (n - rank) / denom, 0.0)


def tier_mean(values: Array, tier: Array, mask: Array, num_tiers: int) -> tuple[Array, Array]:
  """(f32[T] mean of ``values`` over each tier's masked clients, bool[T] any masked)."""
  w = mask.astype(jnp.float32)
  total = jax.ops.segment_sum(jnp.where(mask, values, 0.0), tier, num_tiers)
  count = jax.ops.segment_sum(w, tier, num_tiers)
  return total / jnp.maximum(count, 1.0), count > 0


@register("tifl")
def make_tifl(
  num_selected: int,
  num_tiers: int = 5,
  credits: int = 40,
  interval: int = 1,
  tier_by: str = "size",
  accuracy_from: str = "tiers",
) -> SelectionStrategy:
  """TiFL's adaptive tier selection (client selection only).

  Args:
    num_selected: M, the number of cohort slots.
    num_tiers: T, the number of tiers (TiFL's experiments: 5 tiers).
    credits: how many rounds each tier may be drawn (TiFL's ``Credits_t``, the same for every
      tier); default 40 = ceil(R / T) for the FedEMD study's R = 200 rounds and T = 5 (a
      public TiFL implementation gives every tier ceil(R / T) credits).
    interval: I, rounds between probability updates (default 1: the FedEMD text's "each
      round").
    tier_by: ``"size"`` (default, data size as the latency proxy) or ``"random"``.
    accuracy_from: ``"tiers"`` (default, every tier measured at each update) or
      ``"cohort"`` (only the drawn tier, on its picked clients, every round).

  References:
    Chai et al., "TiFL: A Tier-based Federated Learning System", HPDC 2020, Sec. 4
    (tiering, Algorithm 2); Huang et al. (FedEMD), Sec. 2 and 5.1 (TiFL as a baseline).
  """
  num_selected = common.check_num_selected(num_selected)
  num_tiers = check_count("num_tiers", num_tiers)
  credits = check_count("credits", credits)
  interval = check_count("interval", interval)
  check_choice("tier_by", tier_by, TIER_BY)
  check_choice("accuracy_from", accuracy_from, ACCURACY_FROM)

  def init(key: PRNGKey, info: ClientInfo) -> TiFLState:
    n = info.num_examples.shape[0]
    if tier_by == "size":
      order_key = jnp.asarray(info.num_examples, jnp.float32)
    else:
      order_key = jax.random.uniform(key, (n,), jnp.float32)
    return TiFLState(
      tier=tier_assignment(order_key, num_tiers),
      probs=jnp.full((num_tiers,), 1.0 / num_tiers, jnp.float32),
      credits=jnp.full((num_tiers,), credits, jnp.int32),
      accuracy=jnp.full((num_tiers,), _UNMEASURED, jnp.float32),
    )

  def select(
    state: TiFLState, key: PRNGKey, avail: Array, t: Array, ctx: SelectionContext
  ) -> tuple[Selection, TiFLState]:
    n = avail.shape[0]
    k_tier, k_clients, k_fill = jax.random.split(key, 3)
    t = jnp.asarray(t, jnp.int32)
    update = (t > 0) & (t % interval == 0)
    accuracy = state.accuracy
    if accuracy_from == "tiers":

      def measure():
        losses = jnp.asarray(ctx.client_losses(jnp.arange(n, dtype=jnp.int32)), jnp.float32)
        mean, populated = tier_mean(losses, state.tier, jnp.ones((n,), bool), num_tiers)
        acc = jnp.nan_to_num(-mean, nan=_UNMEASURED, neginf=_UNMEASURED)
        return jnp.where(populated, acc, _UNMEASURED)

      accuracy = jax.lax.cond(update, measure, lambda: accuracy)
    probs = jnp.where(update, tier_probabilities(accuracy, state.credits > 0), state.probs)

    # one tier among those with credits and an available client (all tiers with an
    # available client once every credit is spent)
    _, has_avail = tier_mean(avail.astype(jnp.float32), state.tier, avail, num_tiers)
    eligible = has_avail & (state.credits > 0)
    eligible = jnp.where(jnp.any(eligible), eligible, has_avail)
    w = jnp.where(eligible, probs, 0.0)
    w = jnp.where(jnp.sum(w) > 0, w, eligible.astype(jnp.float32))
    chosen, tier_ok = common.categorical_with_replacement(k_tier, w, eligible, 1)
    chosen, tier_ok = chosen[0], tier_ok[0]

    members = avail & (state.tier == chosen) & tier_ok
    cohort, valid = common.uniform_without_replacement(k_clients, members, num_selected)
    # fewer available clients in the tier than slots (only under intermittent availability):
    # the other slots go to other available clients, uniformly
    cohort, valid = common.fill_empty_slots(k_fill, cohort, valid, avail)
    drawn = jax.nn.one_hot(chosen, num_tiers, dtype=jnp.int32) * tier_ok.astype(jnp.int32)
    new_credits = jnp.maximum(state.credits - drawn, 0)
    if accuracy_from == "cohort":
      in_tier = valid & (state.tier[cohort] == chosen)
      losses = jnp.asarray(ctx.client_losses(cohort), jnp.float32)
      loss = jnp.sum(jnp.where(in_tier, losses, 0.0)) / jnp.maximum(jnp.sum(in_tier), 1)
      measured = jnp.any(in_tier) & jnp.isfinite(loss)
      accuracy = jnp.where(measured & (drawn > 0), -loss, accuracy)
    weights = common.fedavg_weights(ctx.num_examples, cohort, valid)
    new_state = TiFLState(tier=state.tier, probs=probs, credits=new_credits, accuracy=accuracy)
    return common.make_selection(cohort, valid, weights), new_state

  return SelectionStrategy(init=init, select=select, num_selected=num_selected)

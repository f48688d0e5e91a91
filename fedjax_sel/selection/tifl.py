"""TiFL (Chai et al.): tiers of clients and an adaptive, credit-limited choice of one tier.

Two rules (``rule``): ``"tiers"`` (default) is TiFL as its paper describes it;
``"accuracy_weighted"`` is what the FedEMD authors' released code runs under the name TiFL.

``rule="tiers"``: restricted to its client selection, as the FedEMD paper implements it
(FedEMD Sec. 5.1, footnote 2: "we do not implement the features related to the
communication acceleration in TiFL"). Each round:

1. Every ``interval`` rounds (t > 0, t mod I = 0) the tier probabilities are recomputed from
   the tiers' accuracies (TiFL's ``ChangeProbs``): the n tiers that still have credits are
   sorted by ascending accuracy and the tier of rank i (0 = least accurate) gets
   ``(n - i) / D`` with ``D = n (n + 1) / 2``; a tier without credits gets 0. So the least
   accurate tier is the most likely. Before the first update every tier has ``1 / T``.
2. One tier is drawn with these probabilities among the tiers that still have credits and
   an available client (TiFL: draw again until the tier has credits), and its credits
   drop by one.
3. M clients are drawn uniformly without replacement among that tier's available clients.
   The tier can hold fewer available clients than slots: under intermittent availability,
   and also with every client available when the tiers are smaller than M (N / T < M).
   ``short_tier`` says what then happens to the other slots: ``"fill"`` (default) draws
   them uniformly from the other available clients, so the cohort has min(M, available)
   clients as every other strategy's; ``"tier_only"`` leaves them empty, the cohort is the
   tier's available clients only. TiFL's Algorithm 2 takes the cohort from the drawn tier
   alone (``"tier_only"``); its experiments never meet a short tier (50 clients in 5 tiers
   of 10, 5 per round), nor does the FedEMD study (the same numbers, always available), so
   the two choices differ only elsewhere (e.g. the atlas's intermittent availability).

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

``rule="accuracy_weighted"``: the FedEMD authors' TiFL, as their released code runs it
(GitHub GillHuang-Xtler/Poison_FL: ``server.py`` ``train_subset_of_clients_tifl`` and
``run_machine_learning``, ``client.py`` ``Client.local_test``,
``federated_learning/worker_selection/random.py`` ``select_round_workers_TiFL`` and
``a_Reservoir``; the same selection functions in GillHuang-Xtler/Maverick_client_selection).
It has no tiers, credits or interval (``num_tiers``, ``credits``, ``interval``, ``tier_by``,
``accuracy_from`` and ``short_tier`` are checked but not used):

* The server keeps one number a_i per client: the accuracy, in percent, on the global test
  set of the model the client last trained locally. Only the clients that trained this
  round are re-measured (``observe``: ``common.local_model_values``, the M local models
  ``params + delta_m`` evaluated on the global test set inside the jitted round, as many at
  once as the cohort engine trains clients); the others keep theirs. Before its first
  training a client has ``0.8 + U[0, 1)`` (the released ``run_machine_learning``; an
  earlier revision had ``U[0, 1)``): below any accuracy a trained classifier reaches, so
  never-tested clients come first (below).
* Each round the cohort is drawn by the Efraimidis-Spirakis reservoir with weight
  ``w_i = -a_i``: client i gets the key ``u_i ** (1 / w_i) = u_i ** (-1 / a_i)``,
  ``u_i ~ U(0, 1)``, and the M largest keys are kept. With ``E_i = -log u_i ~ Exp(1)`` the
  key is ``exp(E_i / a_i)``, so the cohort is the M largest of independent exponentials
  ``E_i / a_i`` of rates ``a_i``: low accuracy, large key. This is not A-Res with positive
  weights: client i is the first pick with probability
  ``sum over subsets S of the others of (-1)^|S| a_i / (a_i + sum_{j in S} a_j)``
  (for two clients ``a_2 / (a_1 + a_2)``; for accuracies 1, 2, 4: 64/105, 30/105,
  11/105). Equivalently (the exponentials are memoryless) the cohort is the M clients left
  after drawing N - M of them one by one with probability proportional to accuracy, so with
  M = N - 1 client i is the one left out with probability ``a_i / sum a``. A client
  measured at 80 % gets a larger key than an untested one (a < 1.8) with probability
  a / (a + 80) < 2.2 %.
* Ties: the released reservoir maps each kept key back to a client by the first client
  with the same weight, so clients of equal accuracy all map to the first of them and the
  cohort repeats a client. Here the cohort is the M largest keys by client (distinct
  clients, as for every strategy without replacement).
* An accuracy of 0 % (the released ``1 / w`` divides by zero) gets the largest key (the
  limit a -> 0+). Only available clients are drawn (the released code has no availability).
* The released TiFL driver averages the cohort's models with equal weights
  (``average_nn_parameters``); the aggregation is the study's, the Selection's weights are
  FedAvg's as for the tiers.

Cost: ``observe`` evaluates M models on the global test set every round, M global
evaluations (FedEMD's cell, cnn_mnist on Fashion-MNIST, 2 loaded CPU cores: 21.1 s for M = 5
against 4.1 s for one evaluation; the whole round 2.3x Random's); the draw itself is a top-k,
as cheap as Random's.
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
  PyTree,
  Selection,
  SelectionContext,
  SelectionStrategy,
)
from fedjax_sel.selection import common
from fedjax_sel.selection.registry import register

RULES = ("tiers", "accuracy_weighted")
SHORT_TIERS = ("fill", "tier_only")
TIER_BY = ("size", "random")
ACCURACY_FROM = ("tiers", "cohort")
# "accuracy_weighted": a client never trained has 0.8 + U[0, 1) percent (the released code)
_UNTESTED_LOW, _UNTESTED_SPAN = 0.8, 1.0
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


class AccuracyWeightedState(NamedTuple):
  """State of TiFL as the FedEMD authors ran it (``rule="accuracy_weighted"``).

  Attributes:
    accuracy: f32[N], each client's a_i: percent accuracy on the global test set of the
      model it last trained locally (``0.8 + U[0, 1)`` before its first training).
  """

  accuracy: Array


def accuracy_weighted_keys(key: PRNGKey, accuracy: Array, mask: Array) -> Array:
  """f32[N], the log of the released reservoir's key ``u_i ** (-1 / a_i)``: ``log(E_i) -
  log(a_i)`` with ``E_i = -log u_i``, ``u_i ~ U(0, 1)``; -inf outside ``mask``.

  The M largest keys are the M largest ``E_i / a_i`` (independent exponentials of rates
  a_i), the cohort of the authors' TiFL. In log space a key never overflows (the released
  ``u ** (-1 / a)`` is ``exp(E / a)``); a_i <= 0 counts as the smallest positive float (the
  largest key, the limit a -> 0+).

  Args:
    key: PRNG key.
    accuracy: f32[N], a_i > 0 (percent).
    mask: bool[N], the clients that may be drawn.

  References:
    Efraimidis & Spirakis, IPL 2006 (the reservoir); the FedEMD authors' released
    ``select_round_workers_TiFL`` (weights ``-a_i``).
  """
  tiny = jnp.finfo(jnp.float32).tiny
  u = jax.random.uniform(key, accuracy.shape, jnp.float32, minval=tiny, maxval=1.0)
  exp1 = -jnp.log(u)  # > 0: u < 1
  acc = jnp.maximum(jnp.nan_to_num(jnp.asarray(accuracy, jnp.float32), nan=0.0), tiny)
  return jnp.where(mask, jnp.log(exp1) - jnp.log(acc), -jnp.inf)


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
  rule: str = "tiers",
  short_tier: str = "fill",
) -> SelectionStrategy:
  """TiFL's client selection: the paper's adaptive tier selection, or the FedEMD authors'.

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
    rule: ``"tiers"`` (default, the TiFL paper's tiers and credits) or
      ``"accuracy_weighted"`` (the FedEMD authors' released code: per-client test accuracy
      of the last local model, the reservoir favouring low accuracy; the tier arguments are
      then unused).
    short_tier: when the drawn tier has fewer available clients than slots, ``"fill"``
      (default: the other slots go uniformly to other available clients) or
      ``"tier_only"`` (TiFL's Algorithm 2: the cohort is the tier's clients only, the other
      slots stay empty).

  References:
    Chai et al., "TiFL: A Tier-based Federated Learning System", HPDC 2020, Sec. 4
    (tiering, Algorithm 2); Huang et al. (FedEMD), Sec. 2 and 5.1 (TiFL as a baseline) and
    its authors' code (GitHub GillHuang-Xtler/Poison_FL, ``select_round_workers_TiFL``).
  """
  num_selected = common.check_num_selected(num_selected)
  num_tiers = check_count("num_tiers", num_tiers)
  credits = check_count("credits", credits)
  interval = check_count("interval", interval)
  check_choice("tier_by", tier_by, TIER_BY)
  check_choice("accuracy_from", accuracy_from, ACCURACY_FROM)
  check_choice("rule", rule, RULES)
  check_choice("short_tier", short_tier, SHORT_TIERS)
  if rule == "accuracy_weighted":
    return _accuracy_weighted(num_selected)
  return _tiers(num_selected, num_tiers, credits, interval, tier_by, accuracy_from, short_tier)


def _accuracy_weighted(num_selected: int) -> SelectionStrategy:
  """TiFL as the FedEMD authors' code runs it (module docstring)."""

  def init(key: PRNGKey, info: ClientInfo) -> AccuracyWeightedState:
    n = info.num_examples.shape[0]
    untested = _UNTESTED_LOW + _UNTESTED_SPAN * jax.random.uniform(key, (n,), jnp.float32)
    return AccuracyWeightedState(accuracy=untested)

  def select(
    state: AccuracyWeightedState, key: PRNGKey, avail: Array, t: Array, ctx: SelectionContext
  ) -> tuple[Selection, AccuracyWeightedState]:
    del t
    keys = accuracy_weighted_keys(key, state.accuracy, avail)
    cohort, valid = common.masked_top_k(keys, avail, num_selected)
    weights = common.fedavg_weights(ctx.num_examples, cohort, valid)
    return common.make_selection(cohort, valid, weights), state

  def observe(
    state: AccuracyWeightedState,
    selection: Selection,
    deltas: PyTree,
    losses: Array,
    ctx: SelectionContext,
  ) -> AccuracyWeightedState:
    del losses
    accuracy = 100.0 * common.local_model_values(ctx, deltas)  # percent, as the authors'
    measured = selection.valid & jnp.isfinite(accuracy)
    n = state.accuracy.shape[0]
    idx = jnp.where(measured, selection.cohort, n)  # unmeasured slots are dropped
    return state._replace(accuracy=state.accuracy.at[idx].set(accuracy, mode="drop"))

  return SelectionStrategy(init=init, select=select, num_selected=num_selected, observe=observe)


def _tiers(
  num_selected: int,
  num_tiers: int,
  credits: int,
  interval: int,
  tier_by: str,
  accuracy_from: str,
  short_tier: str,
) -> SelectionStrategy:
  """TiFL's adaptive tier selection as its paper describes it (module docstring)."""

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
    if short_tier == "fill":
      # fewer available clients in the tier than slots: the other slots go to other
      # available clients, uniformly
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

  return SelectionStrategy(
    init=init,
    select=select,
    num_selected=num_selected,
    leaves_slots_empty=short_tier == "tier_only",
  )

"""Power-of-Choice: the M highest-loss clients of a data-size-weighted candidate set."""

from __future__ import annotations

import jax.numpy as jnp

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


@register("power_of_choice")
def make_power_of_choice(num_selected: int, d: int | None = None) -> SelectionStrategy:
  """Power-of-Choice (pow-d) selection of Cho, Wang & Joshi.

  1. Sample a candidate set of ``min(d, |available|)`` distinct available clients without
     replacement with probability proportional to their data size ``n_i`` (A-Res).
  2. Ask the candidates for the current global model's local loss
     (``ctx.client_losses(candidates)``).
  3. Keep the M candidates with the highest loss.

  Aggregation weights are FedAvg's ``n_k / sum of n over the cohort``.

  Args:
    num_selected: M, the number of cohort slots.
    d: candidate-set size, ``M <= d``; ``None`` (default) means every available client is a
      candidate (``d = N``), the default of FLGo's implementation that the FedGS paper uses
      for its Power-of-Choice baseline. Then selection is deterministic: the top-M losses.

  References:
    Cho, Wang & Joshi, "Client selection in federated learning: convergence analysis and
    power-of-choice selection strategies", 2020, Section 4; FedGS baseline
    "Power-of-Choice".
  """
  num_selected = common.check_num_selected(num_selected)
  if d is not None:
    try:
      ok = not isinstance(d, bool) and int(d) == d
    except (TypeError, ValueError):
      ok = False
    if not ok or d < num_selected:
      raise ValueError(f"d={d!r} must be an integer >= num_selected={num_selected}, or None")
    d = int(d)

  def init(key: PRNGKey, info: ClientInfo) -> common.EmptyState:
    del key, info
    return common.EmptyState()

  def select(
    state: common.EmptyState, key: PRNGKey, avail: Array, t: Array, ctx: SelectionContext
  ) -> tuple[Selection, common.EmptyState]:
    del t
    num_clients = avail.shape[0]
    num_candidates = num_clients if d is None else min(d, num_clients)
    sizes = ctx.num_examples.astype(jnp.float32)
    candidates, cand_valid = common.weighted_sample_without_replacement(
      key, sizes, avail, num_candidates
    )
    losses = jnp.asarray(ctx.client_losses(candidates), jnp.float32)
    top, valid = common.masked_top_k(losses, cand_valid, num_selected)
    cohort = candidates[top]
    weights = common.fedavg_weights(ctx.num_examples, cohort, valid)
    return common.make_selection(cohort, valid, weights), state

  return SelectionStrategy(init=init, select=select, num_selected=num_selected)

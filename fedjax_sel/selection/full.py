"""Full participation: every available client trains (up to the M cohort slots)."""

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


@register("full")
def make_full(num_selected: int) -> SelectionStrategy:
  """All available clients, in increasing id order, in the first cohort slots.

  Set ``num_selected = N`` for true full participation; with ``num_selected < N`` the
  M lowest-id available clients are taken (deterministic). Aggregation weights are FedAvg's
  ``n_k / sum of n over the cohort``.

  Args:
    num_selected: M, the number of cohort slots.

  References:
    McMahan et al. 2017 (FedAvg with full participation); the "Full" baseline of FL-FDMS.
  """
  num_selected = common.check_num_selected(num_selected)

  def init(key: PRNGKey, info: ClientInfo) -> common.EmptyState:
    del key, info
    return common.EmptyState()

  def select(
    state: common.EmptyState, key: PRNGKey, avail: Array, t: Array, ctx: SelectionContext
  ) -> tuple[Selection, common.EmptyState]:
    del key, t
    (cohort,) = jnp.nonzero(avail, size=num_selected, fill_value=0)
    valid = jnp.arange(num_selected) < common.num_valid(avail, num_selected)
    weights = common.fedavg_weights(ctx.num_examples, cohort, valid)
    return common.make_selection(cohort, valid, weights), state

  return SelectionStrategy(init=init, select=select, num_selected=num_selected)

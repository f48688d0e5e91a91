"""UniformSample: M available clients uniformly at random without replacement."""

from __future__ import annotations

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


@register("uniform")
def make_uniform(num_selected: int) -> SelectionStrategy:
  """min(M, |available|) distinct available clients, uniformly without replacement.

  Implemented as i.i.d. uniform scores with unavailable clients masked to -inf, then top-M.
  Aggregation weights are FedAvg's ``n_k / sum of n over the cohort``.

  Args:
    num_selected: M, the number of cohort slots.

  References:
    McMahan et al. 2017 (FedAvg); FedGS (Wang et al. 2023), baseline "UniformSample".
  """
  num_selected = common.check_num_selected(num_selected)

  def init(key: PRNGKey, info: ClientInfo) -> common.EmptyState:
    del key, info
    return common.EmptyState()

  def select(
    state: common.EmptyState, key: PRNGKey, avail: Array, t: Array, ctx: SelectionContext
  ) -> tuple[Selection, common.EmptyState]:
    del t
    cohort, valid = common.uniform_without_replacement(key, avail, num_selected)
    weights = common.fedavg_weights(ctx.num_examples, cohort, valid)
    return common.make_selection(cohort, valid, weights), state

  return SelectionStrategy(init=init, select=select, num_selected=num_selected)

"""MD sampling: M i.i.d. draws proportional to data size, with replacement, weights 1/M."""

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


@register("md")
def make_md(num_selected: int) -> SelectionStrategy:
  """Multinomial-distribution (MD) sampling of Li et al.

  Each of the M slots is an independent draw with ``p_i = n_i / sum_j n_j``; the same client
  may fill several slots (``with_replacement=True``) and every slot has weight ``1/M``, so
  the aggregate is unbiased: ``E[sum_m delta_{l_m} / M] = sum_i p_i delta_i``.

  Availability: draws are restricted to the available clients with the probabilities
  renormalized over them (``p_i = n_i / sum_{j available} n_j``), so the method stays
  unbiased with respect to the available population. All M slots are valid whenever at
  least one client is available.

  Args:
    num_selected: M, the number of cohort slots.

  References:
    Li et al., "Federated optimization in heterogeneous networks" (FedProx) 2020;
    Fraboni et al. 2021, Section 2 (MD sampling); FedGS baseline "MDSample".
  """
  num_selected = common.check_num_selected(num_selected)

  def init(key: PRNGKey, info: ClientInfo) -> common.EmptyState:
    del key, info
    return common.EmptyState()

  def select(
    state: common.EmptyState, key: PRNGKey, avail: Array, t: Array, ctx: SelectionContext
  ) -> tuple[Selection, common.EmptyState]:
    del t
    sizes = ctx.num_examples.astype(jnp.float32)
    cohort, valid = common.categorical_with_replacement(key, sizes, avail, num_selected)
    return common.make_selection(cohort, valid, common.equal_weights(valid)), state

  return SelectionStrategy(
    init=init, select=select, num_selected=num_selected, with_replacement=True
  )

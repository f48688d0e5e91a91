"""Power-of-Choice: the M highest-loss clients of a data-size-weighted candidate set."""

from __future__ import annotations

import jax.numpy as jnp

from fedjax_sel.core.registry import is_integer
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

LOSS_SPLITS = ("train", "local_test")
WEIGHTS = ("fedavg", "equal")


@register("power_of_choice")
def make_power_of_choice(
  num_selected: int,
  d: int | None = None,
  loss_split: str = "train",
  weights: str = "fedavg",
) -> SelectionStrategy:
  """Power-of-Choice (pow-d) selection of Cho, Wang & Joshi.

  1. Sample a candidate set of ``min(d, |available|)`` distinct available clients without
     replacement with probability proportional to their data size ``n_i`` (A-Res).
  2. Ask the candidates for the current global model's local loss
     (``ctx.client_losses(candidates)``, on their training data, as in Cho et al.; or, with
     ``loss_split="local_test"``, ``ctx.client_test_losses`` on their whole local test
     split).
  3. Keep the M candidates with the highest loss.

  Aggregation weights are FedAvg's ``n_k / sum of n over the cohort`` (``weights="fedavg"``)
  or ``1 / |cohort|`` (``weights="equal"``).

  The FedGS paper's baseline (its authors' released code) is ``d=None,
  loss_split="local_test", weights="equal"``: every available client is a candidate, the
  loss is each client's validation loss, and the models are averaged with equal weights
  (the framework's default ``uniform`` aggregation). Our defaults follow Cho et al.

  Args:
    num_selected: M, the number of cohort slots.
    d: candidate-set size, ``M <= d``; ``None`` (default) means every available client is a
      candidate (``d = N``), the default of FLGo's implementation that the FedGS paper uses
      for its Power-of-Choice baseline. Then selection is deterministic: the top-M losses.
    loss_split: "train" (default) or "local_test": which data the candidates' losses are
      computed on.
    weights: "fedavg" (default, data-size weights) or "equal".

  References:
    Cho, Wang & Joshi, "Client selection in federated learning: convergence analysis and
    power-of-choice selection strategies", 2020, Section 4; FedGS baseline
    "Power-of-Choice".
  """
  num_selected = common.check_num_selected(num_selected)
  if d is not None:
    if not is_integer(d) or d < num_selected:
      raise ValueError(f"d={d!r} must be an integer >= num_selected={num_selected}, or None")
    d = int(d)
  if not isinstance(loss_split, str) or loss_split not in LOSS_SPLITS:
    raise ValueError(f"loss_split={loss_split!r}; allowed: {', '.join(LOSS_SPLITS)}")
  if not isinstance(weights, str) or weights not in WEIGHTS:
    raise ValueError(f"weights={weights!r}; allowed: {', '.join(WEIGHTS)}")

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
    if loss_split == "local_test":
      if ctx.client_test_losses is None:
        raise ValueError("loss_split='local_test' needs ctx.client_test_losses (None here)")
      losses = ctx.client_test_losses(candidates)
    else:
      losses = ctx.client_losses(candidates)
    losses = jnp.asarray(losses, jnp.float32)
    top, valid = common.masked_top_k(losses, cand_valid, num_selected)
    cohort = candidates[top]
    if weights == "equal":
      w = common.equal_weights(valid)
    else:
      w = common.fedavg_weights(ctx.num_examples, cohort, valid)
    return common.make_selection(cohort, valid, w), state

  return SelectionStrategy(init=init, select=select, num_selected=num_selected)

"""FedEMD (Huang et al.): EMD-based selection probabilities with a round-decay temperature.

Each client i reports its label counts ``D^i`` once. With ``D_g = sum_i D^i`` (global) and
``D_c^t`` the accumulated distribution of the clients selected before round t (current; Alg. 1:
``D_c^{t+1} = D_c^t + sum_{s in K} D^s``),

  ``Proba^t_i = softmax_i(alpha * emd_g[i] - t * beta * emd_c^t[i])``     (Alg. 1 line 25)

where ``emd_g[i] = Norm(EMD(D_g, D^i))`` and ``emd_c^t[i] = Norm(EMD(D_c^t, D^i))``. The
current-distance coefficient ``t * beta`` grows linearly with the round (the "round decay"
of Appendix A.5): early on, clients far from the global distribution (Mavericks) are
favoured; later, clients far from what has already been trained on are penalized. M
clients are then drawn by weighted random sampling without replacement (A-Res, Alg. 1
lines 9-17) with weights ``Proba^t``, among the available clients (the softmax is taken
over the available clients only). The selection's weights are FedAvg's ``n_k / sum n`` (the
text's size-aware FedAvg, Sec. 3 and 5.1); ``fedavg`` with ``weighting="uniform"`` gives the
plain mean that the authors' code uses instead.

Readings of the machine-converted paper (see BUILD_NOTES.md, selection):

* EMD: Eq. 12 / Eq. 20 call ``sum_c |P_g(y=c) - P_i(y=c)|`` "the EMD of C_k and the global
  distribution" (the weight-divergence bound of Zhao et al. [42]), so the default ground
  metric is ``"l1"`` on normalized label distributions. ``ground_metric="wasserstein"``
  instead uses Eq. 21 with classes as points on a line (1-D W1 = sum_c |CDF difference|).
* Norm (Alg. 1 lines 7/23): ``Norm(emd, D) = emd / (sum_i P^i(y=c1) / N)``, division by
  the mean proportion of a non-Maverick class c1 over clients. The paper picks c1 at random
  among non-Maverick classes; we take deterministically the class held by the most clients
  (ties: lowest id), which cannot be a Maverick class.
* D_c (``current``): the paper calls the D^i "data distributions" but does not say whether
  the sum adds counts or normalized distributions. ``"distribution"`` (default) adds each
  selected client's label distribution once per selection; ``"counts"`` adds its raw label
  counts, so a large Maverick dominates D_c and its current distance stays small (the
  study's first reading; BUILD_NOTES.md, FedEMD, gives the measured difference).
* Round index: the paper's round r (1-based) uses ``Proba^r`` computed with ``(r-1) beta``;
  our rounds are 0-based, so round t uses ``t * beta``, and round 0 is
  ``softmax(alpha * emd_g)`` (the paper only says "initialize Proba^1").
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_sel.core.registry import check_range
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

GROUND_METRICS = ("l1", "wasserstein")
CURRENT_READINGS = ("distribution", "counts")


class FedEMDState(NamedTuple):
  """FedEMD server state.

  Attributes:
    label_counts: f32[N, C], reported label counts ``D^i``.
    emd_global: f32[N], normalized distance of each client to the global distribution.
    normalizer: f32[], ``sum_i P^i(y=c1) / N``.
    current: f32[C], ``D_c``: the label distributions (``current="distribution"``) or label
      counts (``"counts"``) of the clients selected so far, summed once per selection.
  """

  label_counts: Array
  emd_global: Array
  normalizer: Array
  current: Array


def _normalize(counts: Array) -> Array:
  total = jnp.sum(counts, axis=-1, keepdims=True)
  return jnp.where(total > 0, counts / jnp.where(total > 0, total, 1.0), 0.0)


def emd(p: Array, q: Array, ground_metric: str = "l1") -> Array:
  """Earth mover's distance between label distributions over C classes (last axis).

  Args:
    p: f32[..., C] distribution(s) (counts are normalized first).
    q: f32[..., C], broadcastable with ``p``.
    ground_metric: ``"l1"`` gives ``sum_c |p_c - q_c|`` (FedEMD Eq. 12, Zhao et al.);
      ``"wasserstein"`` gives 1-D W1 with ground distance ``|c - c'|`` between classes
      (FedEMD Eq. 21), ``sum_c |F_p(c) - F_q(c)|``.

  Returns:
    f32[...] distances.

  References:
    FedEMD (Huang et al.), Eq. 12 and Eq. 21; Zhao et al. 2018, "Federated learning with
    non-IID data".
  """
  if ground_metric not in GROUND_METRICS:
    raise ValueError(f"ground_metric={ground_metric!r}; allowed: {list(GROUND_METRICS)}")
  diff = _normalize(p) - _normalize(q)
  if ground_metric == "wasserstein":
    diff = jnp.cumsum(diff, axis=-1)
  return jnp.sum(jnp.abs(diff), axis=-1)


def selection_logits(
  emd_global: Array, emd_current: Array, t: Array, alpha: float, beta: float
) -> Array:
  """f32[N], ``alpha * emd_g - t * beta * emd_c`` (FedEMD Alg. 1 line 25), before softmax."""
  return alpha * emd_global - jnp.asarray(t, jnp.float32) * beta * emd_current


def selection_probs(
  state: FedEMDState, avail: Array, t: Array, alpha: float, beta: float, ground_metric: str = "l1"
) -> Array:
  """f32[N], ``Proba^t`` restricted to the available clients (0 elsewhere; 0 if none)."""
  emd_current = emd(state.current[None, :], state.label_counts, ground_metric)
  emd_current = emd_current / state.normalizer
  logits = selection_logits(state.emd_global, emd_current, t, alpha, beta)
  # jax's masked softmax shifts by the largest *available* logit, so it never underflows to
  # all zeros in late rounds (every logit very negative); 0 off the mask, all 0 if none.
  return jax.nn.softmax(logits, where=avail)


@register("fedemd")
def make_fedemd(
  num_selected: int,
  alpha: float = 0.15,
  beta: float = 0.0015,
  ground_metric: str = "l1",
  current: str = "distribution",
) -> SelectionStrategy:
  """FedEMD selection: A-Res sampling with probabilities ``softmax(a emd_g - t b emd_c)``.

  Args:
    num_selected: M, the number of cohort slots.
    alpha: global-distance coefficient (paper: 0.15 for (Fashion-)MNIST, 0.11 for
      CIFAR-10/STL-10).
    beta: current-distance coefficient per round (paper: 0.0015; 0.001 for STL-10).
    ground_metric: ``"l1"`` (default) or ``"wasserstein"``; see ``emd``.
    current: what each selection adds to the current distribution D_c: ``"distribution"``
      (default), the client's normalized label distribution, because only that reading makes
      a Maverick fade in later rounds as the paper reports (with raw counts its own data
      dominates D_c); ``"counts"``, its raw label counts (the study's reading before issue 41).

  References:
    Huang et al., "Is Shapley Value fair? Improving client selection for Mavericks in
    federated learning", Algorithm 1 and Appendix A.10.
  """
  num_selected = common.check_num_selected(num_selected)
  check_range("alpha", alpha, 0.0, None)
  check_range("beta", beta, 0.0, None)
  if ground_metric not in GROUND_METRICS:
    raise ValueError(f"ground_metric={ground_metric!r}; allowed: {list(GROUND_METRICS)}")
  if current not in CURRENT_READINGS:
    raise ValueError(f"current={current!r}; allowed: {list(CURRENT_READINGS)}")

  def init(key: PRNGKey, info: ClientInfo) -> FedEMDState:
    del key
    counts = jnp.asarray(info.label_counts, jnp.float32)
    global_counts = jnp.sum(counts, axis=0)
    holders = jnp.sum(counts > 0, axis=0)
    c1 = jnp.argmax(holders)  # the class held by the most clients: not a Maverick class
    normalizer = jnp.mean(_normalize(counts)[:, c1])
    normalizer = jnp.where(normalizer > 0, normalizer, 1.0)
    emd_global = emd(global_counts[None, :], counts, ground_metric) / normalizer
    return FedEMDState(
      label_counts=counts,
      emd_global=emd_global,
      normalizer=normalizer,
      current=jnp.zeros_like(global_counts),
    )

  def select(
    state: FedEMDState, key: PRNGKey, avail: Array, t: Array, ctx: SelectionContext
  ) -> tuple[Selection, FedEMDState]:
    probs = selection_probs(state, avail, t, alpha, beta, ground_metric)
    cohort, valid = common.weighted_sample_without_replacement(key, probs, avail, num_selected)
    weights = common.fedavg_weights(ctx.num_examples, cohort, valid)
    added = state.label_counts[cohort]
    if current == "distribution":
      added = _normalize(added)
    picked = jnp.where(valid[:, None], added, 0.0)
    state = state._replace(current=state.current + jnp.sum(picked, axis=0))
    return common.make_selection(cohort, valid, weights), state

  return SelectionStrategy(init=init, select=select, num_selected=num_selected)

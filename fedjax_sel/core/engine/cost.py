"""How ``parallelism="auto"`` picks a loop and its width: cost models of the ``chunked``
and ``lanes`` loops, evaluated on a typical cohort of the population's step counts."""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from fedjax_sel.core.engine.config import EngineConfig

# ``chunked`` on accelerators: one loop iteration over a chunk of c clients costs about
# (overhead + c) client-steps, and a wide batch is nearly free there, so the overhead is large
# (unmeasured here: no accelerator was lent; CPUs run ``lanes``).
AUTO_OVERHEAD_LANES_ACCELERATOR = 64.0


def auto_chunk_size(steps: Any, num_selected: int, overhead_lanes: float = 2.0) -> int:
  """The chunk size with the least expected padded cost for a cohort of this population.

  A typical cohort is taken as the ``num_selected`` quantiles of the population's local step
  counts, sorted as the engine sorts them; chunk size c costs
  ``sum over chunks of (the chunk's largest step count) * (overhead_lanes + c)``. Returns
  the c in {1, 2, 4, ..., M} (M included) that minimizes it; equal step counts give M (vmap).
  """
  steps = np.asarray(steps, np.float64)
  steps = steps[steps > 0] if np.any(steps > 0) else np.ones(1)
  q = (np.arange(num_selected) + 0.5) / num_selected
  typical = np.sort(np.quantile(steps, q, method="nearest"))[::-1]
  best, best_cost = num_selected, math.inf
  c = 1
  while True:
    c = min(c, num_selected)
    num_chunks = -(-num_selected // c)
    padded = np.concatenate([typical, np.zeros(num_chunks * c - num_selected)])
    cost = float(np.sum(padded.reshape(num_chunks, c).max(axis=1))) * (overhead_lanes + c)
    if cost < best_cost - 1e-9:
      best, best_cost = c, cost
    if c == num_selected:
      break
    c *= 2
  return int(best)


# ``lanes`` on CPU (benchmarks/step_profile.py, equal sizes, blocked loop): one iteration of
# L lanes costs about (1 + L) client-steps (logreg: 4.4 us + 3.9 us L; MLP 60-200-10: 17 us +
# 17 us L for L <= 2), so the fixed part is about one client-step. Past ~32k floats of lane
# parameters (L x P) a lane-step gets ~40 % dearer (the MLP: 25 us per lane at L = 2, 33-36
# us at L >= 4): the per-step passes over the lanes' params leave the cache and XLA:CPU
# splits them over threads.
LANE_OVERHEAD_CPU = 1.0


LANE_PARAM_BUDGET = 1 << 15


def lane_param_budget(num_devices: int) -> int:
  """Floats of lane parameters per device before lanes get dearer: ``LANE_PARAM_BUDGET``
  per device in use. Measured on the 2-core machine (round_speed, MLP, M = 100): on one
  device 4 lanes ran 1.3-1.4x slower than 2 (106-114 vs 79-88 ms, four runs); on two host
  devices, each with 50 clients, 3-4 lanes per device ran 10-15 % *faster* than 2 (39-46 vs
  45-50 ms, four runs): with every core running a device, the thread split of the wider
  update costs nothing extra."""
  return LANE_PARAM_BUDGET * max(1, int(num_devices))


def lpt_makespan(steps: Any, lanes: int) -> int:
  """Iterations of the ``lanes`` loop: the largest lane load of LPT (as :func:`assign_lanes`)."""
  heap = [(0, lane) for lane in range(max(1, lanes))]  # (load, lane): ties go to the lowest
  for s in np.sort(np.asarray(steps, np.int64))[::-1].tolist():
    load, lane = heapq.heappop(heap)
    heapq.heappush(heap, (load + s, lane))
  return int(max(load for load, _ in heap))


def auto_lane_count(
  steps: Any,
  num_selected: int,
  num_params: int | None = None,
  overhead: float = LANE_OVERHEAD_CPU,
  param_budget: int = LANE_PARAM_BUDGET,
) -> int:
  """The lane count with the least expected cost for a cohort of this population (CPU).

  A typical cohort is the ``num_selected`` quantiles of the population's step counts; L
  lanes cost ``lpt_makespan(cohort, L) * (overhead + L)``; L runs over 1, 2, 3, 4, 6, 8,
  12, ... up to M and to ``param_budget / num_params``.
  """
  steps = np.asarray(steps, np.float64)
  steps = steps[steps > 0] if np.any(steps > 0) else np.ones(1)
  q = (np.arange(num_selected) + 0.5) / num_selected
  typical = np.quantile(steps, q, method="nearest").astype(np.int64)
  max_lanes = num_selected
  if num_params:
    max_lanes = max(1, min(num_selected, param_budget // int(num_params)))
  candidates, p = set(), 1
  while p <= max_lanes:
    candidates.update(c for c in (p, p + p // 2) if c <= max_lanes)
    p *= 2
  candidates.add(max_lanes)
  cost = {lanes: lpt_makespan(typical, lanes) * (overhead + lanes) for lanes in candidates}
  return int(min(sorted(cost), key=lambda lanes: cost[lanes]))


def resolve_kind(cfg: EngineConfig, conv: bool, backend: str, num_devices: int = 1) -> str:
  """Which loop a parallelism mode runs: ``lanes``, ``flat`` (one client at a time) or
  ``chunked`` (chunks of clients vmapped, padded to the chunk's longest; ``vmap`` is one
  chunk). ``auto`` on CPU runs lanes for dense models (measured fastest,
  ``benchmarks/round_speed.py``; on several host devices each runs lanes on its share);
  for CNNs one client at a time: the flat loop on one device, one lane per device (each
  device a flat loop over its share) on several (cnn_mnist, 10 clients, two host devices:
  432-617 ms vs 656-860 ms for the one-device flat loop at batch 4-32, BUILD_NOTES issue
  16). Chunks on accelerators (unmeasured here: wide chunks)."""
  mode = cfg.parallelism
  if mode == "lanes":
    return "lanes"
  if mode == "map":
    return "flat"
  if mode == "auto" and backend == "cpu":
    return "lanes" if (not conv or num_devices > 1) else "flat"
  return "chunked"


def resolve_chunk_size(
  cfg: EngineConfig,
  num_selected: int,
  conv: bool,
  backend: str,
  steps: Any = None,
  num_params: int | None = None,
  num_devices: int = 1,
) -> int:
  """The chunk size (or lane count) a parallelism mode means for this cohort.

  ``auto``: on CPU, dense models run :func:`auto_lane_count` lanes (per device) and
  convolutional ones one client at a time per device (the im2col CNNs: chunks of 4-8
  clients were 1.2-1.4x slower than ``map`` even with equal sizes); on accelerators
  :func:`auto_chunk_size` on the population's step counts ``steps`` (vmap when every
  client runs the same number of steps). Without ``steps``, vmap.
  """
  mode = cfg.parallelism
  if mode == "auto":
    if steps is None:
      return num_selected
    kind = resolve_kind(cfg, conv, backend, num_devices)
    if kind == "flat" or (kind == "lanes" and conv):
      return 1
    if kind == "lanes":  # lanes per device, for its share of the cohort
      share = -(-num_selected // num_devices)
      return auto_lane_count(steps, share, num_params, param_budget=lane_param_budget(num_devices))
    chunk = auto_chunk_size(steps, num_selected, AUTO_OVERHEAD_LANES_ACCELERATOR)
    return max(1, min(chunk, num_selected))
  if mode == "vmap":
    return num_selected
  if mode == "map":
    return 1
  size = cfg.chunk_size or 8
  if mode == "lanes":
    return max(1, min(size, -(-num_selected // num_devices)))
  return max(1, min(size, num_selected))

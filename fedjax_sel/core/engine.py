"""The cohort engine: every selected client's local SGD as one vectorized computation.

Layout: the training examples live on device as one flat array; each round the engine
builds index arrays ``[M, S, B]`` (S = the most local steps any client can run) and each
local step gathers its batch from the flat arrays by index. Clients with different amounts
of data run different numbers of steps: a padded step is masked (``jnp.where`` on params
and optimizer state, so it changes nothing).

Parallelism modes:

* ``lanes`` (``auto`` for dense models on CPU): L lanes, each running its clients one after
  another; clients go longest first to the least loaded lane (LPT), so the only padding is
  the lanes' imbalance at the end. One loop of max(lane load) iterations, each a vmapped
  step of the L lanes; batches are gathered once per block of 16 iterations. On several
  devices each device runs lanes on its share of the cohort (``shard_map``). One lane is
  the flat loop below (``auto`` for CNNs on several CPU devices: one client at a time
  per device).
* ``map``: one client at a time inside jit on one device, no padding (one flat loop over
  every (client, step) pair; ``auto`` for CNNs on one CPU device).
* ``chunked``: the cohort (sorted by step count when bucketing) is cut into chunks of c
  clients; a ``lax.map`` runs the chunks one after another and each vmaps its c clients
  inside a loop whose trip count is the chunk's own largest step count (``auto`` on
  accelerators, where wide batches are nearly free; several devices split each chunk).
* ``vmap``: one chunk of all M clients, padded to the cohort's longest client.

The engine reports the useful-step fraction: real steps / (steps run by the padded loops).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from fedjax_sel.core.registry import check_range
from fedjax_sel.core.types import ClientUpdate
from fedjax_sel.data.federated import check_counts_have_examples

PARALLELISM = ("auto", "vmap", "map", "chunked", "lanes")


class EngineConfig(NamedTuple):
  """Static settings of local training.

  Attributes:
    batch_size: B, examples per local step.
    local_epochs: E, passes over the client's data (used when ``local_steps`` is None).
    local_steps: K, a fixed number of local steps per client (wins over epochs).
    parallelism: one of ``PARALLELISM``.
    chunk_size: clients per chunk for ``chunked``, lanes per device for ``lanes`` (0: 8;
      ``auto`` picks its own).
    sort_by_steps: sort the cohort by step count before chunking (step bucketing).
  """

  batch_size: int = 10
  local_epochs: int = 1
  local_steps: int | None = None
  parallelism: str = "auto"
  chunk_size: int = 0
  sort_by_steps: bool = True


class TrainArrays(NamedTuple):
  """The training data as the compiled round reads it: an argument, never a constant.

  Attributes:
    x: [n_total, ...] all clients' examples, client after client, in their stored dtype
      (float32, or uint8 images decoded to float32 inside the batch gather).
    y: i32[n_total] labels.
    offsets: i32[N] index of each client's first example.
    counts: i32[N] examples of each client.
    table: f32[256] (or f32[65536]) decoding table of unsigned 8/16-bit inputs
      (``table[x]`` is the model's input), or f32[0] when x is used as it is (float data)
      or decoded by ``x.astype(float32) / divisor`` (other integer types).
  """

  x: jax.Array
  y: jax.Array
  offsets: jax.Array
  counts: jax.Array
  table: jax.Array


def decode_table(dtype: Any, divisor: float = 1.0) -> np.ndarray:
  """The f32 table that maps stored unsigned 8/16-bit values to model inputs.

  ``np.arange(2**bits, dtype=float32) / float32(divisor)``: a lookup in it is bitwise the
  host's ``x.astype(float32) / float32(divisor)`` (XLA:CPU's division by a constant is not:
  it multiplies by the reciprocal, off by one ulp on about half of the 256 values). Empty
  (f32[0]) for float data and for other integer types.
  """
  dtype = np.dtype(dtype)
  if dtype.kind == "u" and dtype.itemsize <= 2:
    return np.arange(1 << (8 * dtype.itemsize), dtype=np.float32) / np.float32(divisor)
  return np.zeros((0,), np.float32)


def decode_inputs(x: jax.Array, table: jax.Array, divisor: float = 1.0) -> jax.Array:
  """Model inputs f32 from stored examples (inside jit): float32 data pass unchanged."""
  if table.shape[0]:
    return table[x.astype(jnp.int32)]
  if x.dtype == jnp.float32 and divisor == 1.0:
    return x
  x = x.astype(jnp.float32)
  return x if divisor == 1.0 else x / jnp.float32(divisor)


def train_arrays(x, y, offsets, counts, divisor: float = 1.0, put=None) -> TrainArrays:
  """``TrainArrays`` on device (``put``: a ``jax.device_put``-like placement; default the
  default device). x keeps its dtype; y becomes int32."""
  put = put or jax.device_put
  x = np.asarray(x) if not isinstance(x, jax.Array) else x
  table = decode_table(x.dtype, divisor)
  return TrainArrays(
    x=put(x),
    y=put(jnp.asarray(y, jnp.int32) if isinstance(y, jax.Array) else np.asarray(y, np.int32)),
    offsets=put(np.asarray(offsets, np.int32)),
    counts=put(np.asarray(counts, np.int32)),
    table=put(table),
  )


class CohortResult(NamedTuple):
  """What local training returns for the M cohort slots.

  Attributes:
    deltas: pytree of [M, ...], local params minus global params (zero for invalid slots).
    loss: f32[M], mean training loss over the client's local steps.
    num_steps: i32[M], local steps each slot ran (0 for invalid slots).
    padded_steps: f32[], steps executed including masked padding (per client lane).
  """

  deltas: Any
  loss: jax.Array
  num_steps: jax.Array
  padded_steps: jax.Array


def validate_engine_config(cfg: EngineConfig) -> None:
  check_range("batch_size", cfg.batch_size, 1)
  if cfg.local_steps is not None:
    check_range("local_steps", cfg.local_steps, 1)
  else:
    check_range("local_epochs", cfg.local_epochs, 1)
  if cfg.parallelism not in PARALLELISM:
    raise ValueError(f"parallelism={cfg.parallelism!r}; allowed: {', '.join(PARALLELISM)}")
  check_range("chunk_size", cfg.chunk_size, 0)


def cross_entropy_loss(apply_fn: Callable) -> Callable:
  """loss(params, (x, y, mask)) = masked mean softmax cross-entropy over the batch."""

  def loss_fn(params, batch):
    x, y, mask = batch
    logits = apply_fn(params, x)
    per_example = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    mask = mask.astype(per_example.dtype)
    return jnp.sum(per_example * mask) / jnp.maximum(jnp.sum(mask), 1.0)

  return loss_fn


def steps_per_client(num_examples: jax.Array, cfg: EngineConfig) -> jax.Array:
  """i32[N]: local steps of each client (0 for a client without data)."""
  n = jnp.asarray(num_examples, jnp.int32)
  if cfg.local_steps is not None:
    return jnp.where(n > 0, cfg.local_steps, 0).astype(jnp.int32)
  return (cfg.local_epochs * ((n + cfg.batch_size - 1) // cfg.batch_size)).astype(jnp.int32)


def max_steps(max_examples: int, cfg: EngineConfig) -> int:
  if cfg.local_steps is not None:
    return int(cfg.local_steps)
  return int(cfg.local_epochs * math.ceil(max(max_examples, 1) / cfg.batch_size))


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


def client_permutations(key: jax.Array, n: jax.Array, n_max: int, num_perms: int) -> jax.Array:
  """``num_perms`` random permutations of a client's ``n`` examples, as i32[num_perms, n_max].

  The first ``n`` entries of each row are a permutation of 0..n-1 (the rest are n..n_max-1).
  One single-key sort of packed uint32 words (random high bits, the index in the low
  ``ceil(log2 n_max)`` bits) instead of an argsort of float keys: on CPU the argsort was
  44 % of a logistic-regression round (``benchmarks/step_profile.py``) and this is about
  7x faster. Equal random high bits (rare: 32 - log2(n_max) random bits) keep index order.
  """
  bits = max(1, (max(n_max, 1) - 1).bit_length())
  if bits >= 24:  # too few random bits left in a uint32 word: sort float keys
    u = jax.random.uniform(key, (num_perms, n_max))
    return jnp.argsort(jnp.where(jnp.arange(n_max)[None] < n, u, 2.0), axis=-1).astype(jnp.int32)
  r = jax.random.bits(key, (num_perms, n_max), jnp.uint32) >> bits
  i = jnp.arange(n_max, dtype=jnp.uint32)[None]
  r = jnp.where(i < jnp.asarray(n).astype(jnp.uint32), r, jnp.uint32(0xFFFFFFFF) >> bits)
  packed = jnp.sort((r << bits) | i, axis=-1)
  return (packed & jnp.uint32((1 << bits) - 1)).astype(jnp.int32)


def slot_keys(key: jax.Array, num_slots: int) -> jax.Array:
  """One key per cohort slot (``fold_in(key, slot)``): a slot's batch order depends only on
  the round key and the slot, whichever loop trains it."""
  return jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(num_slots))


# iterations per block of the ``lanes`` loop (each block gathers its batches once)
LANE_BLOCK = 16


def assign_lanes(steps: jax.Array, lanes: int) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Longest-processing-time-first assignment of M clients to ``lanes`` lanes.

  Clients with more steps go first, each to the lane with the least load so far (ties: the
  lowest lane). Returns ``load`` i32[L] (steps per lane), ``lane_client`` i32[L, M + 1]
  (the lane's clients in run order, then M) and ``lane_start`` i32[L, M + 1] (the
  iteration at which each starts). Clients with zero steps are left out. LPT's makespan is
  at most 4/3 of the optimum (Graham 1969) and at most the mean load plus the longest client.
  """
  steps = jnp.asarray(steps, jnp.int32)
  m = steps.shape[0]
  order = jnp.argsort(-steps, stable=True)

  def assign(i, carry):
    load, count, lane_client, lane_start = carry
    c = order[i]
    lane = jnp.argmin(load)
    take = steps[c] > 0
    lane_client = lane_client.at[lane, count[lane]].set(jnp.where(take, c, m))
    lane_start = lane_start.at[lane, count[lane]].set(jnp.where(take, load[lane], 0))
    load = load.at[lane].add(steps[c])
    count = count.at[lane].add(take.astype(jnp.int32))
    return load, count, lane_client, lane_start

  init = (
    jnp.zeros((lanes,), jnp.int32),
    jnp.zeros((lanes,), jnp.int32),
    jnp.full((lanes, m + 1), m, jnp.int32),
    jnp.zeros((lanes, m + 1), jnp.int32),
  )
  load, _, lane_client, lane_start = jax.lax.fori_loop(0, m, assign, init)
  return load, lane_client, lane_start


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


def _check_train_arrays(data: TrainArrays, like: TrainArrays, n_max: int) -> None:
  """``with_data``'s check: the same shapes and dtypes as the data the plan was made for;
  counts are checked against the plan's longest client when they are concrete."""
  for name, a, b in zip(TrainArrays._fields, data, like):
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
      raise ValueError(
        f"training data {name}: {a.dtype}{list(a.shape)}; allowed: {b.dtype}{list(b.shape)} "
        "(the shapes and dtypes the trainer was built for)"
      )
  if not isinstance(data.counts, jax.core.Tracer) and data.counts.size:
    longest = int(np.max(np.asarray(data.counts)))
    if longest > n_max:
      raise ValueError(
        f"training data counts: a client holds {longest} examples; allowed: at most {n_max} "
        "(the longest client the trainer was built for)"
      )


def replicated_put(mesh: Mesh | None) -> Callable:
  """``device_put`` of a whole array onto every device of ``mesh`` (the default device
  when None): how data that every device reads are placed."""
  if mesh is None:
    return jax.device_put
  sharding = NamedSharding(mesh, P())
  if jax.process_count() == 1:
    return lambda a: jax.device_put(a, sharding)

  def put(a):
    # several processes: from the host copy (a process-local jax.Array put straight onto the
    # global mesh gave arrays whose shards orbax could not read, jax 0.10.2)
    if isinstance(a, jax.Array) and a.is_fully_addressable:
      a = np.asarray(a)
    return jax.device_put(a, sharding)

  return put


def _client_mesh():
  devices = jax.devices()
  if len(devices) <= 1:
    return None
  return Mesh(devices, ("clients",))


def _shard_leading(tree, mesh):
  """Constrains arrays to be split over devices along their leading (client) axis."""
  if mesh is None:
    return tree
  n = mesh.devices.size

  def constrain(a):
    if a.ndim == 0 or a.shape[0] % n:
      return a
    spec = P("clients", *([None] * (a.ndim - 1)))
    return jax.lax.with_sharding_constraint(a, NamedSharding(mesh, spec))

  return jax.tree_util.tree_map(constrain, tree)


def make_cohort_trainer(
  apply_fn: Callable,
  client_update: ClientUpdate,
  client_optimizer: Callable[[jax.Array], optax.GradientTransformation],
  train_x: jax.Array,
  train_y: jax.Array,
  offsets: jax.Array,
  counts: jax.Array,
  cfg: EngineConfig,
  num_selected: int,
  conv: bool = False,
  num_params: int | None = None,
  x_divisor: float = 1.0,
  data: TrainArrays | None = None,
) -> Callable[..., CohortResult]:
  """Builds ``train(params, cohort, valid, key, lr, aux) -> CohortResult``.

  Args:
    apply_fn: ``apply(params, x) -> logits``.
    client_update: the local rule (sgd, fedprox, scaffold).
    client_optimizer: ``lr -> optax.GradientTransformation`` (e.g. ``optax.sgd``).
    train_x, train_y: the flat training arrays (on device).
    offsets, counts: i32[N], each client's slice of the flat arrays.
    cfg: EngineConfig.
    num_selected: M, the cohort slots.
    conv: whether the model is convolutional (for the ``auto`` parallelism rule).
    num_params: the model's parameter count (for the ``auto`` rule; None: assume small).
    x_divisor: model inputs are ``x / x_divisor`` in float32 (x may be stored as uint8;
      1.0 for float data).
    data: the ``TrainArrays`` already on device (then train_x ... counts only give shapes
      and sizes); None puts train_x ... counts on device (``train.put``: replicated on
      the client mesh when the loop uses several devices, else the default device).

  Returns:
    A pure, jittable function. ``cohort: i32[M]``, ``valid: bool[M]``, ``lr``: the client
    learning rate, one for the cohort (``f32[]``) or one per slot (``f32[M]``, e.g. a
    per-client schedule), ``aux``: per-slot pytree from ``client_update.prepare``. It reads
    the training data from ``train.data`` (closed over: a constant of whatever program calls
    it);
    ``train.with_data(data, params, cohort, valid, key, lr, aux)`` takes them as an
    argument instead, so a jitted caller compiles once per shape, whatever the values.
    The static plan (longest client, steps, lanes) comes from ``counts``: ``with_data``
    accepts data whose clients hold at most as many examples as the longest one here.
  """
  validate_engine_config(cfg)
  check_range("num_selected", num_selected, 1)
  check_range("x_divisor", x_divisor, 0.0, low_inclusive=False)
  counts_np = np.asarray(counts, np.int64)
  check_counts_have_examples(counts_np, "counts")  # else the gather fails inside JAX
  n_max = int(counts_np.max())
  s_max = max_steps(n_max, cfg)
  batch = cfg.batch_size
  steps_np = np.asarray(steps_per_client(counts_np, cfg))
  mesh = _client_mesh()
  num_devices = 1 if mesh is None else mesh.devices.size
  backend = jax.default_backend()
  kind = resolve_kind(cfg, conv, backend, num_devices)
  chunk = resolve_chunk_size(cfg, num_selected, conv, backend, steps_np, num_params, num_devices)
  if mesh is not None and kind == "chunked" and cfg.parallelism == "auto" and chunk < num_selected:
    # chunks a multiple of the device count, so each chunk is split over every device
    chunk = min(num_selected, -(-chunk // num_devices) * num_devices)
  if kind == "chunked" and chunk == 1:
    kind = "flat"
  uses_mesh = mesh is not None and kind in ("lanes", "chunked")
  # several processes: every array lives on the global mesh (a process's default device is
  # not a device of the others), even when the loop itself runs replicated (``flat``)
  placed_mesh = mesh if (uses_mesh or jax.process_count() > 1) else None
  put = replicated_put(placed_mesh)
  if data is None:
    data = train_arrays(train_x, train_y, offsets, counts_np, x_divisor, put)
  num_chunks = -(-num_selected // chunk)
  m_pad = num_chunks * chunk
  if kind == "lanes" and mesh is not None:
    m_pad = -(-num_selected // num_devices) * num_devices  # an equal share per device
  loss_fn = cross_entropy_loss(apply_fn)
  if cfg.local_steps is not None:
    # passes over the data needed by the longest-running (smallest) client, capped
    num_perms = int(min(8, max(1, math.ceil(cfg.local_steps * batch / max(1, n_max // 4)))))
  else:
    num_perms = int(cfg.local_epochs)

  def client_batches(data, key, client, steps):
    """Flat example indices i32[S, B] of a client's local batches and their mask bool[S, B]."""
    n = data.counts[client]
    perm = client_permutations(key, n, n_max, num_perms)
    j = jnp.arange(s_max)[:, None]
    b = jnp.arange(batch)[None, :]
    n_safe = jnp.maximum(n, 1)
    if cfg.local_steps is not None:
      pos = j * batch + b
      epoch = (pos // n_safe) % num_perms
      within = pos % n_safe
      mask = (b < n) & (j < steps)
    else:
      steps_per_epoch = jnp.maximum((n + batch - 1) // batch, 1)
      epoch = jnp.minimum(j // steps_per_epoch, num_perms - 1)
      within = (j % steps_per_epoch) * batch + b
      mask = (within < n) & (j < steps)
      within = jnp.minimum(within, n_max - 1)
    return data.offsets[client] + perm[epoch, within], mask

  def batch_at(data, fidx, mask):
    """The (x, y, mask) batch at flat example indices ``fidx`` (x decoded to float32)."""
    return decode_inputs(data.x[fidx], data.table, x_divisor), data.y[fidx], mask

  def local_step(opt, params, opt_state, global_params, batch, aux):
    """One local SGD step on ``batch`` = (x, y, mask): (loss, params, state)."""
    loss, grads = client_update.grad(loss_fn, params, global_params, batch, aux)
    updates, opt_state = opt.update(grads, opt_state, params)
    return loss, optax.apply_updates(params, updates), opt_state

  # the optimizer's state does not depend on the lr (momentum buffers, or nothing)
  opt_init = client_optimizer(1.0).init

  def slot_lrs(lr, m):
    """``lr`` (one for the cohort, or one per slot) as f32[m]."""
    return jnp.broadcast_to(jnp.asarray(lr, jnp.float32), (m,))

  def train_one(data, global_params, fidx, mb, steps, aux, lr, num_iters):
    opt = client_optimizer(lr)
    opt_state = opt.init(global_params)

    def body(j, carry):
      params, opt_state, loss_sum = carry
      loss, new_params, new_opt_state = local_step(
        opt, params, opt_state, global_params, batch_at(data, fidx[j], mb[j]), aux
      )
      active = j < steps
      keep = lambda new, old: jnp.where(active, new, old)
      params = jax.tree_util.tree_map(keep, new_params, params)
      opt_state = jax.tree_util.tree_map(keep, new_opt_state, opt_state)
      return params, opt_state, loss_sum + jnp.where(active, loss, 0.0)

    params, _, loss_sum = jax.lax.fori_loop(
      0, num_iters, body, (global_params, opt_state, jnp.zeros((), jnp.float32))
    )
    delta = jax.tree_util.tree_map(jnp.subtract, params, global_params)
    return delta, loss_sum / jnp.maximum(steps, 1).astype(jnp.float32)

  def flat_loop(data, global_params, cohort, steps, keys, lr, aux):
    """One loop over every (client, step) pair of the m slots given (all of them, or one
    device's share), no padding; ``lr``: f32[m]. Returns (deltas [m, ...], loss f32[m],
    steps run f32[1]).

    A loop over clients around a loop over steps (``lax.map`` of single-client chunks)
    runs its ops without XLA:CPU's intra-op thread pool (profiled: a CNN's convolution
    fusion took 109 ms nested vs 63 ms in a flat loop on 2 cores; equal on one core), so
    here client c's steps are iterations ``starts[c] .. ends[c] - 1`` of one flat loop.
    At a client's last step one ``lax.cond`` writes its delta and resets the params and
    optimizer state to the global ones: passes over the parameters on every step (a
    ``where`` reset, a delta write) cost a CNN's memory bandwidth (1.7M parameters at
    batch 4: 1,079 -> 938 ms for 10 MNIST CNN clients, 143 steps).
    """
    m = cohort.shape[0]
    fidx, mask = jax.vmap(client_batches, in_axes=(None, 0, 0, 0))(data, keys, cohort, steps)
    ends = jnp.cumsum(steps)
    starts = ends - steps
    opt_state0 = opt_init(global_params)
    out_d = jax.tree_util.tree_map(lambda p: jnp.zeros((m,) + p.shape, p.dtype), global_params)
    out_l = jnp.zeros((m,), jnp.float32)

    def body(i, carry):
      c = jnp.searchsorted(ends, i, side="right")
      j = i - starts[c]
      params, opt_state, loss_sum, out_d, out_l = carry
      aux_c = jax.tree_util.tree_map(lambda a: a[c], aux)
      loss, params, opt_state = local_step(
        client_optimizer(lr[c]),
        params,
        opt_state,
        global_params,
        batch_at(data, fidx[c, j], mask[c, j]),
        aux_c,
      )

      def finish(carry):
        """Client c's last step: write its delta and mean loss, start from the global
        params for the next client."""
        params, _, loss_sum, out_d, out_l = carry
        out_d = jax.tree_util.tree_map(
          lambda o, p, g: o.at[c].set(p - g), out_d, params, global_params
        )
        out_l = out_l.at[c].set(loss_sum / steps[c].astype(jnp.float32))
        return global_params, opt_state0, jnp.zeros((), jnp.float32), out_d, out_l

      carry = (params, opt_state, loss_sum + loss, out_d, out_l)
      return jax.lax.cond(j == steps[c] - 1, finish, lambda a: a, carry)

    init = (global_params, opt_state0, jnp.zeros((), jnp.float32), out_d, out_l)
    total = ends[-1] if m else jnp.zeros((), jnp.int32)
    _, _, _, deltas, loss = jax.lax.fori_loop(0, total, body, init)
    return deltas, loss, total.astype(jnp.float32)[None]

  def train_flat(data, global_params, cohort, valid, key, lr, aux) -> CohortResult:
    """``map``: one client at a time on one device (:func:`flat_loop`)."""
    cohort = jnp.asarray(cohort, jnp.int32)
    steps = jnp.where(valid, steps_per_client(data.counts, cfg)[cohort], 0)
    keys = slot_keys(key, num_selected)
    lr = slot_lrs(lr, num_selected)
    deltas, loss, padded = flat_loop(data, global_params, cohort, steps, keys, lr, aux)
    return CohortResult(
      deltas=deltas,
      loss=jnp.where(valid, loss, 0.0),
      num_steps=steps,
      padded_steps=jnp.sum(padded),
    )

  def lanes_loop(data, global_params, cohort, steps, keys, lr, aux, lanes):
    """The ``lanes`` loop over the m slots given (all of them, or one device's share).

    ``lr``: f32[m]. Returns (deltas [m, ...], loss f32[m], padded lane-steps f32[1]). One
    lane is the flat loop (no vmap: a lane axis of 1 takes XLA:CPU's batched-dot path, and
    a vmapped convolution a grouped one).
    """
    if lanes == 1:
      return flat_loop(data, global_params, cohort, steps, keys, lr, aux)
    m = cohort.shape[0]
    fidx, mask = jax.vmap(client_batches, in_axes=(None, 0, 0, 0))(data, keys, cohort, steps)
    # spare row m: what a finished lane reads and writes
    fidx = jnp.concatenate([fidx, jnp.zeros_like(fidx[:1])])
    mask = jnp.concatenate([mask, jnp.zeros_like(mask[:1])])
    steps_x = jnp.concatenate([steps, jnp.ones((1,), steps.dtype)])
    aux_x = jax.tree_util.tree_map(lambda a: jnp.concatenate([a, a[:1]]), aux)
    lr_x = jnp.concatenate([lr, jnp.ones((1,), lr.dtype)])
    load, lane_client, lane_start = assign_lanes(steps, lanes)
    lane_end = jnp.where(
      lane_client < m, lane_start + steps_x[lane_client], jnp.iinfo(jnp.int32).max
    )
    opt_state0 = opt_init(global_params)
    stack = lambda t: jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (lanes,) + a.shape), t)
    out_d = jax.tree_util.tree_map(lambda p: jnp.zeros((m + 1,) + p.shape, p.dtype), global_params)
    out_l = jnp.zeros((m + 1,), jnp.float32)
    num_iters = jnp.max(load)
    block = LANE_BLOCK
    lane_ids = jnp.arange(lanes)[None]

    lane_step = jax.vmap(
      lambda p, s, b, a, r: local_step(client_optimizer(r), p, s, global_params, b, a)
    )

    def save(out_d, out_l, params, loss_sum, dest):
      """Writes each lane's delta and mean loss into row ``dest`` (m: the spare row)."""
      out_d = jax.tree_util.tree_map(
        lambda o, p, g: o.at[dest].set(p - g[None]), out_d, params, global_params
      )
      out_l = out_l.at[dest].set(loss_sum / steps_x[dest].astype(jnp.float32))
      return out_d, out_l

    def switch(carry, c_i):
      """Lanes whose client changed: save the finished client, start from the global params."""
      params, opt_state, loss_sum, prev_c, out_d, out_l = carry
      new = c_i != prev_c
      out_d, out_l = save(out_d, out_l, params, loss_sum, jnp.where(new, prev_c, m))
      reset = lambda g, p: jnp.where(new.reshape((-1,) + (1,) * (p.ndim - 1)), g[None], p)
      params = jax.tree_util.tree_map(reset, global_params, params)
      opt_state = jax.tree_util.tree_map(reset, opt_state0, opt_state)
      return params, opt_state, jnp.where(new, 0.0, loss_sum), c_i, out_d, out_l

    def run_block(b, carry):
      t = b * block + jnp.arange(block)
      # lane l at iteration t runs its k-th client, k = #clients of the lane ended by t
      k = jax.vmap(lambda e: jnp.searchsorted(e, t, side="right"))(lane_end).T  # [K, L]
      c = lane_client[lane_ids, k]
      j = jnp.where(c < m, t[:, None] - lane_start[lane_ids, k], 0)
      xs = (
        batch_at(data, fidx[c, j], mask[c, j]),
        c,
        jax.tree_util.tree_map(lambda a: a[c], aux_x),
        lr_x[c],
      )

      def inner(i, carry):
        batch_i, c_i, aux_i, lr_i = jax.tree_util.tree_map(lambda a: a[i], xs)
        # a lane changes client every ~S / L iterations: skip the save/reset passes over
        # the lanes' params otherwise
        carry = jax.lax.cond(jnp.any(c_i != carry[3]), switch, lambda a, _: a, carry, c_i)
        params, opt_state, loss_sum, prev_c, out_d, out_l = carry
        loss, params, opt_state = lane_step(params, opt_state, batch_i, aux_i, lr_i)
        return params, opt_state, loss_sum + loss, prev_c, out_d, out_l

      return jax.lax.fori_loop(0, jnp.minimum(block, num_iters - b * block), inner, carry)

    init = (stack(global_params), stack(opt_state0), jnp.zeros((lanes,), jnp.float32))
    init += (jnp.full((lanes,), m, jnp.int32), out_d, out_l)
    num_blocks = (num_iters + block - 1) // block
    params, _, loss_sum, prev_c, out_d, out_l = jax.lax.fori_loop(0, num_blocks, run_block, init)
    deltas, loss = save(out_d, out_l, params, loss_sum, prev_c)  # the lanes' last clients
    deltas = jax.tree_util.tree_map(lambda d: d[:m], deltas)
    return deltas, loss[:m], (num_iters * lanes).astype(jnp.float32)[None]

  def train_lanes(data, global_params, cohort, valid, key, lr, aux) -> CohortResult:
    """``lanes``: L = ``chunk`` lanes, each running its clients one after another.

    Clients are assigned to lanes longest first, each to the least loaded lane (LPT), so
    the loop runs max(lane load) iterations of L client-steps: the padding is the lanes'
    imbalance at the end only, not every chunk's spread of step counts. A lane that starts a
    client resets its params and optimizer state to the global ones; each step writes the
    lane's delta into its client's row (a finished lane writes to a spare row).

    The iterations run in blocks of ``LANE_BLOCK``: each block gathers its batches
    ``[K, L, B, ...]`` once, and the inner loop only slices them. A gather from the full
    training array inside the step loop is split over XLA:CPU's intra-op threads (its cost
    model counts the whole operand), which cost ~10 us per step for a 2 KB batch.

    On several devices the cohort is dealt to them longest first in snake order (equal
    slot counts, near-equal step totals) and each device runs its own lanes loop on its
    share (``shard_map``); batch orders are those of one device, so results are equal.
    """
    cohort = jnp.asarray(cohort, jnp.int32)
    steps = jnp.where(valid, steps_per_client(data.counts, cfg)[cohort], 0)
    keys = slot_keys(key, num_selected)
    lr = slot_lrs(lr, num_selected)
    if mesh is None:
      deltas, loss, padded = lanes_loop(data, global_params, cohort, steps, keys, lr, aux, chunk)
    else:
      pad = m_pad - num_selected
      pad0 = lambda a: jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1))
      ranked = jnp.argsort(-pad0(steps), stable=True).reshape(-1, num_devices)
      snake = jnp.where((jnp.arange(ranked.shape[0]) % 2 == 1)[:, None], ranked[:, ::-1], ranked)
      perm = snake.T.reshape(-1)  # device d's slots: perm[d * m_loc:(d + 1) * m_loc]
      take = lambda a: pad0(a)[perm]
      spec = P("clients")
      local = jax.shard_map(
        lambda d, p, c, s, k, r, a: lanes_loop(d, p, c, s, k, r, a, chunk),
        mesh=mesh,
        in_specs=(P(), P(), spec, spec, spec, spec, spec),
        out_specs=(spec, spec, spec),
        check_vma=False,
      )
      aux_p = jax.tree_util.tree_map(take, aux)
      out = local(data, global_params, take(cohort), take(steps), take(keys), take(lr), aux_p)
      inverse = jnp.argsort(perm)
      deltas, loss = jax.tree_util.tree_map(lambda a: a[inverse][:num_selected], out[:2])
      padded = out[2]
    return CohortResult(
      deltas=deltas,
      loss=jnp.where(valid, loss, 0.0),
      num_steps=steps,
      padded_steps=jnp.sum(padded),
    )

  def train_chunked(data, global_params, cohort, valid, key, lr, aux) -> CohortResult:
    cohort = jnp.asarray(cohort, jnp.int32)
    steps = jnp.where(valid, steps_per_client(data.counts, cfg)[cohort], 0)
    pad = m_pad - num_selected
    cohort_p = jnp.pad(cohort, (0, pad))
    steps_p = jnp.pad(steps, (0, pad))
    lr_p = jnp.pad(slot_lrs(lr, num_selected), (0, pad), constant_values=1.0)
    aux_p = jax.tree_util.tree_map(lambda a: jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1)), aux)
    slot = jnp.arange(m_pad)
    keys = slot_keys(key, m_pad)
    order = jnp.argsort(-steps_p, stable=True) if (cfg.sort_by_steps and chunk < m_pad) else slot
    shape_chunks = lambda a: a[order].reshape((num_chunks, chunk) + a.shape[1:])
    xs = (
      shape_chunks(cohort_p),
      shape_chunks(steps_p),
      shape_chunks(keys),
      jax.tree_util.tree_map(shape_chunks, aux_p),
      shape_chunks(lr_p),
    )

    def run_chunk(args):
      ids, chunk_steps, chunk_keys, chunk_aux, chunk_lr = args
      flat_idx, mask = jax.vmap(client_batches, in_axes=(None, 0, 0, 0))(
        data, chunk_keys, ids, chunk_steps
      )
      flat_idx, mask, chunk_steps_s, chunk_aux, chunk_lr = _shard_leading(
        (flat_idx, mask, chunk_steps, chunk_aux, chunk_lr), mesh
      )
      num_iters = jnp.max(chunk_steps)
      delta, loss = jax.vmap(train_one, in_axes=(None, None, 0, 0, 0, 0, 0, None))(
        data, global_params, flat_idx, mask, chunk_steps_s, chunk_aux, chunk_lr, num_iters
      )
      return delta, loss, num_iters * chunk

    if num_chunks == 1:
      out = run_chunk(jax.tree_util.tree_map(lambda a: a[0], xs))
      out = jax.tree_util.tree_map(lambda a: a[None], out)
    else:
      out = jax.lax.map(run_chunk, xs)
    delta_c, loss_c, padded = out
    inverse = jnp.argsort(order)
    unchunk = lambda a: a.reshape((m_pad,) + a.shape[2:])[inverse][:num_selected]
    deltas = jax.tree_util.tree_map(unchunk, delta_c)
    loss = unchunk(loss_c)
    deltas = jax.tree_util.tree_map(
      lambda d: jnp.where(valid.reshape((-1,) + (1,) * (d.ndim - 1)), d, 0.0), deltas
    )
    return CohortResult(
      deltas=deltas,
      loss=jnp.where(valid, loss, 0.0),
      num_steps=steps,
      padded_steps=jnp.sum(padded).astype(jnp.float32),
    )

  @jax.jit
  def train_single_with(data, global_params, client_id, key_i, lr, aux_i):
    steps = steps_per_client(data.counts, cfg)[client_id]
    flat_idx, mask = client_batches(data, key_i, client_id, steps)
    return train_one(data, global_params, flat_idx, mask, steps, aux_i, lr, steps)

  def train_single(global_params, client_id, key_i, lr, aux_i):
    return train_single_with(data, global_params, client_id, key_i, lr, aux_i)

  def per_client_loop(global_params, cohort, valid, key, lr, aux) -> CohortResult:
    """The same work as ``train``, one jitted client call after another (a reference)."""
    deltas, losses = [], []
    zeros = jax.tree_util.tree_map(jnp.zeros_like, global_params)
    lr = slot_lrs(lr, num_selected)
    for i in range(num_selected):
      if not bool(valid[i]):
        deltas.append(zeros)
        losses.append(jnp.zeros((), jnp.float32))
        continue
      aux_i = jax.tree_util.tree_map(lambda a, i=i: a[i], aux)
      d, loss = train_single(global_params, cohort[i], jax.random.fold_in(key, i), lr[i], aux_i)
      deltas.append(d)
      losses.append(loss)
    steps = jnp.where(valid, steps_np[np.asarray(cohort)], 0)
    return CohortResult(
      deltas=jax.tree_util.tree_map(lambda *a: jnp.stack(a), *deltas),
      loss=jnp.stack(losses),
      num_steps=steps,
      padded_steps=jnp.sum(steps).astype(jnp.float32),
    )

  if kind == "lanes":
    train_with = train_lanes
  elif kind == "flat":
    # one client at a time: the flat loop (no nested loops, no vmap of a single client,
    # whose batch dimension of 1 takes XLA:CPU's slower batched-dot path; nothing to shard)
    train_with = train_flat
  else:
    train_with = train_chunked

  def with_data(data_arg, global_params, cohort, valid, key, lr, aux) -> CohortResult:
    _check_train_arrays(data_arg, data, n_max)
    return train_with(data_arg, global_params, cohort, valid, key, lr, aux)

  def train(global_params, cohort, valid, key, lr, aux) -> CohortResult:
    return train_with(data, global_params, cohort, valid, key, lr, aux)

  train.__name__ = train_with.__name__  # the loop it runs (train_lanes / train_flat / ...)
  train.with_data = with_data
  train.data = data
  train.x_divisor = x_divisor
  train.uses_mesh = uses_mesh
  train.mesh = placed_mesh
  train.put = put
  train.kind = kind
  train.chunk_size = chunk
  train.max_steps = s_max
  train.steps_per_client = jnp.asarray(steps_np, jnp.int32)
  train.per_client_loop = per_client_loop
  train.train_single = train_single
  # a slot's example order, for inspection: ``client_batches(data, slot_key, client, steps)``
  # gives i32[S, B] flat example indices and bool[S, B] mask; a fixed-steps run's p-th pass
  # over a client's data uses permutation p mod ``num_perms``
  train.client_batches = client_batches
  train.num_perms = num_perms
  return train

"""Contract checks for your own methods: the checks every registered method passes.

  from fedjax_sel import testing
  testing.check_selection_strategy(my_strategy)     # a SelectionStrategy
  testing.check_availability_model(my_model)        # an AvailabilityModel
  testing.check_aggregator(my_aggregator)           # an Aggregator

Each runs a few rounds of a small fake world through one compilation and raises
``AssertionError`` naming the rule that broke (and the round); it returns None when every
rule holds. The rules are what the round loop relies on: jittable and traced once across
rounds, the declared shapes and dtypes, a state whose structure never changes, finite
values, the same numbers for the same key, under ``jax.vmap`` and under
``jax.disable_jit()``, and each part's own invariants (only available clients are
selected; masked slots change nothing). The library's registry-wide tests
(``tests/*/test_*contract.py``) run these on every registered name; docs/extending.md shows
them on new methods.

The fake worlds (``toy_client_info``, ``toy_selection_context``, ``toy_aggregation_round``,
and ``toy_federated_data`` for a whole small run) are public too, for your own tests.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.core.types import (
  AggregationAux,
  Aggregator,
  AvailabilityModel,
  ClientInfo,
  Selection,
  SelectionContext,
  SelectionStrategy,
)

__all__ = [
  "check_aggregator",
  "check_availability_model",
  "check_selection_strategy",
  "toy_aggregation_round",
  "toy_client_info",
  "toy_federated_data",
  "toy_selection_context",
]


def _fail(rule: str, where: str = "") -> None:
  raise AssertionError(f"{rule}{f' ({where})' if where else ''}")


def _require(ok, rule: str, where: str = "") -> None:
  if not bool(ok):
    _fail(rule, where)


def _require_array(x, shape: tuple, dtype, what: str, where: str = "") -> None:
  """``x`` has exactly ``shape`` and ``dtype``; the rule reads e.g. 'probs is f32[6]'."""
  short = {np.dtype(np.int32): "i32", np.dtype(np.bool_): "bool", np.dtype(np.float32): "f32"}
  got = np.dtype(jnp.asarray(x).dtype)
  want = np.dtype(dtype)
  if tuple(np.shape(x)) != tuple(shape) or got != want:
    _fail(f"{what} is {short.get(want, want)}{list(shape)}, got {got}{list(np.shape(x))}", where)


def _same_structure(a, b, rule: str, where: str = "") -> None:
  """Same pytree structure, leaf shapes and dtypes."""
  if jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b):
    _fail(f"{rule}: the pytree structure changed", where)
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    if np.shape(x) != np.shape(y) or jnp.asarray(x).dtype != jnp.asarray(y).dtype:
      _fail(
        f"{rule}: a leaf went from {np.shape(y)} {jnp.asarray(y).dtype} to "
        f"{np.shape(x)} {jnp.asarray(x).dtype}",
        where,
      )


def _all_finite(tree) -> bool:
  return all(
    bool(jnp.all(jnp.isfinite(x)))
    for x in jax.tree_util.tree_leaves(tree)
    if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)
  )


def _trees_equal(a, b) -> bool:
  la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  return len(la) == len(lb) and all(
    np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True) for x, y in zip(la, lb)
  )


def _trees_close(a, b, atol: float, rtol: float = 1e-5) -> bool:
  la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  return len(la) == len(lb) and all(
    np.allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), atol=atol, rtol=rtol)
    for x, y in zip(la, lb)
  )


def _traced_once(fn):
  """jit(fn) that fails with a named rule when it is traced a second time."""
  count = [0]

  def counted(*args):
    count[0] += 1
    if count[0] > 1:
      _fail("traced once: a second trace (shapes, dtypes or Python values depend on the round)")
    return fn(*args)

  return jax.jit(counted)


# --- Selection ---------------------------------------------------------------------------


def toy_federated_data(x, y, clients, num_classes: int):
  """A ``FederatedData`` whose client k trains on ``x[clients[k]], y[clients[k]]``, with no
  local test examples and every example as the global test set: a world small enough to
  work a round out by hand (``experiment.build(config, toy_federated_data(...))``)."""
  from fedjax_sel.data.federated import FederatedData, split_from_indices

  x, y = np.asarray(x), np.asarray(y)
  empty = [np.array([], np.int64)] * len(clients)
  return FederatedData(
    train=split_from_indices(x, y, [np.asarray(c) for c in clients]),
    test=split_from_indices(x, y, empty),
    test_x=x,
    test_y=y,
    num_classes=int(num_classes),
    name="toy",
    extras={},
  )


def toy_client_info(num_clients: int = 12, num_classes: int = 4, seed: int = 0) -> ClientInfo:
  """Clients with 1..40 examples spread unevenly over the classes (each has class 0)."""
  rng = np.random.default_rng(seed)
  counts = rng.integers(0, 10, size=(num_clients, num_classes))
  counts[:, 0] += 1
  return ClientInfo(
    num_examples=jnp.asarray(counts.sum(1), jnp.int32),
    label_counts=jnp.asarray(counts, jnp.int32),
  )


def toy_client_losses(num_clients: int) -> jax.Array:
  """f32[N], distinct losses in a scrambled order: loss[i] = ((7 i) mod N) / N + 0.1."""
  ids = np.arange(num_clients)
  return jnp.asarray(((7 * ids) % num_clients) / num_clients + 0.1, jnp.float32)


def toy_eval_value(params) -> jax.Array:
  """The toy 'validation accuracy' of params {"w": ...}: 1 / (1 + ||w - 1||^2)."""
  return 1.0 / (1.0 + jnp.sum((params["w"] - 1.0) ** 2))


def toy_selection_context(info: ClientInfo, t=0, seed: int = 0) -> SelectionContext:
  """A SelectionContext whose callables are plain functions of fixed arrays.

  params {"w": zeros(3)}; ``toy_client_losses``; update sketches f32[N, 6] and embeddings
  f32[N, 5] drawn with numpy; every client seen; availability probability 0.5;
  ``toy_eval_value``.
  """
  n = int(info.num_examples.shape[0])
  rng = np.random.default_rng(seed)
  sketch = jnp.asarray(rng.normal(size=(n, 6)), jnp.float32)
  logits = rng.normal(size=(n, 5))
  emb = jnp.asarray(np.exp(logits) / np.exp(logits).sum(1, keepdims=True), jnp.float32)
  losses = toy_client_losses(n)
  return SelectionContext(
    params={"w": jnp.zeros((3,), jnp.float32)},
    client_losses=lambda client_ids: losses[client_ids],
    update_sketch=sketch,
    embeddings=emb,
    seen=jnp.ones((n,), bool),
    avail_probs=jnp.full((n,), 0.5, jnp.float32),
    num_examples=info.num_examples,
    eval_value=toy_eval_value,
    round=jnp.asarray(t, jnp.int32),
  )


def toy_deltas(cohort: jax.Array, num_clients: int) -> dict:
  """Per-slot updates pointing client i towards w = 1 with strength (i + 1) / N."""
  strength = (cohort.astype(jnp.float32) + 1.0) / num_clients
  return {"w": strength[:, None] * jnp.ones((1, 3), jnp.float32)}


def availability_patterns(num_clients: int, seed: int = 1) -> list[np.ndarray]:
  """bool[N] per round: half, two clients, nobody, everybody, one client, ~70 %."""
  rng = np.random.default_rng(seed)
  ids = np.arange(num_clients)
  return [
    rng.random(num_clients) < 0.5,
    np.isin(ids, [min(3, num_clients - 1), num_clients - 3]),
    np.zeros(num_clients, bool),
    np.ones(num_clients, bool),
    ids == num_clients // 2,
    rng.random(num_clients) < 0.7,
  ]


def selection_round_fn(strategy: SelectionStrategy, info: ClientInfo):
  """select (then observe, if the strategy has it) as one pure fn(state, key, avail, t)."""
  n = int(info.num_examples.shape[0])

  def fn(state, key, avail, t):
    ctx = toy_selection_context(info, t)
    sel, state = strategy.select(state, key, avail, t, ctx)
    if strategy.observe is not None:
      losses = ctx.client_losses(jnp.clip(sel.cohort, 0, n - 1))
      state = strategy.observe(state, sel, toy_deltas(sel.cohort, n), losses, ctx)
    return sel, state

  return fn


def check_selection(
  strategy: SelectionStrategy,
  sel: Selection,
  avail,
  *,
  normalized_weights: bool = True,
  where: str = "",
) -> None:
  """One round's Selection against the contract (see ``check_selection_strategy``)."""
  m = strategy.num_selected
  n = len(avail)
  cohort, valid, weights = (np.asarray(x) for x in sel)
  _require_array(cohort, (m,), np.int32, "cohort", where)
  _require_array(valid, (m,), np.bool_, "valid", where)
  _require_array(weights, (m,), np.float32, "weights", where)
  _require(
    np.all(np.isfinite(weights)) and np.all(weights >= 0), "weights are finite and >= 0", where
  )
  _require(np.all(weights[~valid] == 0), "invalid slots have weight 0", where)
  picked = cohort[valid]
  _require(np.all((picked >= 0) & (picked < n)), "valid slots hold client ids in [0, N)", where)
  _require(np.all(avail[picked]), "only available clients are selected", where)
  num_avail = int(np.sum(avail))
  if strategy.with_replacement:
    expected = m if num_avail > 0 else 0
    _require(
      valid.sum() == expected,
      f"with replacement, {expected} valid slots when "
      f"{num_avail} clients are available (got {valid.sum()})",
      where,
    )
  else:
    expected = min(m, num_avail)
    if strategy.leaves_slots_empty:
      _require(
        min(1, expected) <= valid.sum() <= expected,
        f"leaves_slots_empty: between {min(1, expected)} and min(M, available) = {expected} "
        f"valid slots (got {valid.sum()})",
        where,
      )
    else:
      _require(
        valid.sum() == expected,
        f"min(M, available) = {expected} valid slots (got {valid.sum()})",
        where,
      )
    _require(
      len(set(picked.tolist())) == len(picked),
      "no client in two slots (with_replacement=False)",
      where,
    )
  if num_avail == 0:
    _require(not valid.any() and not weights.any(), "nobody available: no valid slot", where)
  elif normalized_weights:
    _require(
      abs(float(weights.sum()) - 1.0) <= 1e-5, f"weights sum to 1 (got {weights.sum():.6f})", where
    )


def check_selection_strategy(
  strategy: SelectionStrategy,
  info: ClientInfo | None = None,
  *,
  normalized_weights: bool = True,
) -> None:
  """Raises AssertionError unless ``strategy`` keeps the selection contract.

  Six rounds (half of the clients available, two, none, all, one, ~70 %) through one
  ``jax.jit`` trace; each round's Selection: ``cohort`` i32[M], ``valid`` bool[M],
  ``weights`` f32[M] finite, >= 0, zero on invalid slots and summing to 1 when anybody is
  available (``normalized_weights=False`` drops that last rule); only available clients,
  min(M, available) of them (1 to that many with ``leaves_slots_empty``), none twice (or M
  with replacement); the state keeps its structure and stays finite. Then: the same key
  gives the same Selection, ``jax.vmap`` over keys gives each key's Selection, and
  ``jax.disable_jit()`` gives the jitted one.

  Args:
    strategy: the SelectionStrategy (from ``selection.make`` or your own).
    info: the clients; None uses ``toy_client_info()`` (12 clients, 4 classes).
    normalized_weights: require the weights to sum to 1 (the FedAvg-style update).
  """
  info = toy_client_info() if info is None else info
  n = int(info.num_examples.shape[0])
  fn = selection_round_fn(strategy, info)
  jitted = _traced_once(fn)
  state = strategy.init(jax.random.PRNGKey(0), info)
  state0 = state
  patterns = availability_patterns(n)
  for t, avail in enumerate(patterns):
    where = f"round {t}, {int(avail.sum())} of {n} clients available"
    key = jax.random.fold_in(jax.random.PRNGKey(42), t)
    sel, new_state = jitted(state, key, jnp.asarray(avail), jnp.asarray(t, jnp.int32))
    check_selection(strategy, sel, avail, normalized_weights=normalized_weights, where=where)
    _same_structure(new_state, state, "the state keeps its structure", where)
    _require(_all_finite(new_state), "the state stays finite", where)
    state = new_state
  # Determinism, vmap over keys, and the eager path, from the initial state.
  avail = jnp.asarray(patterns[-1])
  t = jnp.asarray(2, jnp.int32)
  keys = jax.random.split(jax.random.PRNGKey(7), 3)
  batched, _ = jax.jit(jax.vmap(fn, in_axes=(None, 0, None, None)))(state0, keys, avail, t)
  for i in range(keys.shape[0]):
    one, _ = jitted(state0, keys[i], avail, t)
    again, _ = jitted(state0, keys[i], avail, t)
    _require(_trees_equal(one, again), "the same key gives the same Selection")
    row = jax.tree_util.tree_map(lambda x, i=i: x[i], batched)
    _require(_trees_close(one, row, atol=1e-6), "jax.vmap over keys gives each key's Selection")
  with_jit, _ = jitted(state0, keys[0], avail, t)
  with jax.disable_jit():
    eager, _ = fn(state0, keys[0], avail, t)
  _require(_trees_close(with_jit, eager, atol=1e-6), "jax.disable_jit() gives the jitted Selection")


# --- Availability ------------------------------------------------------------------------


def check_availability_model(model: AvailabilityModel, info: ClientInfo | None = None) -> None:
  """Raises AssertionError unless ``model`` keeps the availability contract.

  ``init`` is jittable and deterministic per key; four rounds of ``probs`` and ``sample``
  run through one trace; ``probs`` is f32[N], finite, in [0, 1]; ``sample`` returns bool[N]
  with every client of probability 1 active and every client of probability 0 inactive;
  the state keeps its structure; the same key gives the same numbers, ``jax.disable_jit()``
  too; and ``jax.vmap`` over seeds gives each seed's run.

  Args:
    model: the AvailabilityModel (from ``availability.make`` or your own).
    info: the clients; None uses ``toy_client_info()``.
  """
  info = toy_client_info() if info is None else info
  n = int(info.num_examples.shape[0])
  init_key, round_key = jax.random.split(jax.random.key(7))
  init = jax.jit(model.init)

  def step_fn(state, key, t):
    probs = model.probs(state, t)
    active, new_state = model.sample(state, key, t)
    return probs, active, new_state

  step = _traced_once(step_fn)
  state = init(init_key, info)
  _require(_trees_equal(state, init(init_key, info)), "init is deterministic per key")
  for t in range(4):
    where = f"round {t}"
    k = jax.random.fold_in(round_key, t)
    probs, active, new_state = step(state, k, jnp.int32(t))
    _require_array(probs, (n,), np.float32, "probs", where)
    _require_array(active, (n,), np.bool_, "sample's first output", where)
    _require(
      _all_finite(probs) and jnp.all((probs >= 0.0) & (probs <= 1.0)),
      "probs are finite and in [0, 1]",
      where,
    )
    _same_structure(new_state, state, "the state keeps its structure", where)
    _require(
      jnp.all(jnp.where(probs == 1.0, active, True)), "a client with probability 1 is active", where
    )
    _require(
      jnp.all(jnp.where(probs == 0.0, ~active, True)),
      "a client with probability 0 is inactive",
      where,
    )
    _require(
      _trees_equal((probs, active, new_state), step(state, k, jnp.int32(t))),
      "the same key gives the same round",
      where,
    )
    if t == 1:
      with jax.disable_jit():
        eager_state = model.init(init_key, info)
        probs_eager = model.probs(state, t)
        active_eager, _ = model.sample(state, k, t)
      _same_structure(eager_state, state, "jax.disable_jit(): init gives the same structure")
      _require(
        np.allclose(probs_eager, probs, rtol=1e-6) and np.array_equal(active_eager, active),
        "jax.disable_jit() gives the jitted round",
        where,
      )
    state = new_state

  def init_and_step(seed):
    return model.sample(model.init(seed, info), seed, jnp.int32(2))[0]

  seeds = jax.random.split(jax.random.key(3), 3)
  acts = jax.vmap(init_and_step)(seeds)
  for s in range(3):
    _, single, _ = step(init(seeds[s], info), seeds[s], jnp.int32(2))
    _require(np.array_equal(acts[s], single), "jax.vmap over seeds gives each seed's run")


# --- Aggregation -------------------------------------------------------------------------

_AGG_CLIENTS = 6
_AGG_REAL = 4  # cohort slots holding selected clients, then two empty slots
_AGG_SLOTS = 6
_AGG_SIZES = np.array([3, 1, 4, 1, 5, 9])


def toy_params() -> dict:
  return {"w": jnp.zeros((3, 2), jnp.float32), "b": jnp.zeros((2,), jnp.float32)}


def toy_aggregation_info() -> ClientInfo:
  sizes = jnp.asarray(_AGG_SIZES, jnp.int32)
  return ClientInfo(num_examples=sizes, label_counts=jnp.ones((_AGG_CLIENTS, 2), jnp.int32))


@jax.jit
def toy_aggregation_round(key, t):
  """(deltas, selection, avail, aux) of one round: 6 clients, 6 slots, ~60 % available.

  The first 4 slots hold distinct clients, the available ones first (valid, weights
  proportional to the sizes 3, 1, 4, 1, 5, 9), then unavailable ones (invalid); the last
  two slots are empty (invalid, zero update). ``aux`` carries probabilities 0.6 and the
  sizes; every slot is flagged finite.
  """
  k_avail, k_perm, k_delta = jax.random.split(jax.random.fold_in(key, t), 3)
  avail = jax.random.bernoulli(k_avail, 0.6, (_AGG_CLIENTS,))
  order = jnp.argsort(jnp.where(avail, 0.0, 1.0) + jax.random.uniform(k_perm, (_AGG_CLIENTS,)))
  cohort = jnp.zeros((_AGG_SLOTS,), jnp.int32).at[:_AGG_REAL].set(order[:_AGG_REAL])
  valid = jnp.zeros((_AGG_SLOTS,), bool).at[:_AGG_REAL].set(avail[order[:_AGG_REAL]])
  sizes = jnp.where(valid, jnp.asarray(_AGG_SIZES, jnp.float32)[cohort], 0.0)
  selection = Selection(cohort, valid, (sizes / jnp.maximum(sizes.sum(), 1.0)).astype(jnp.float32))
  aux = AggregationAux(
    avail_probs=jnp.full((_AGG_CLIENTS,), 0.6, jnp.float32),
    num_examples=jnp.asarray(_AGG_SIZES, jnp.float32),
    finite=jnp.ones((_AGG_SLOTS,), bool),
  )
  kw, kb = jax.random.split(k_delta)
  deltas = {
    "w": jax.random.normal(kw, (_AGG_SLOTS, 3, 2), jnp.float32),
    "b": jax.random.normal(kb, (_AGG_SLOTS, 2), jnp.float32),
  }
  deltas = jax.tree_util.tree_map(lambda x: x.at[_AGG_REAL:].set(0.0), deltas)
  return deltas, selection, avail, aux


def with_garbage(deltas, selection, avail, aux, garbage_value, garbage_id, extra_weight):
  """Fills the two empty slots of a ``toy_aggregation_round``: slot 4 invalid, with the id
  ``garbage_id`` (a duplicate or out of range) and weight 0.7; slot 5 valid, its client
  available, but its update flagged non-finite (``aux.finite`` False) with weight
  ``extra_weight``. Both hold ``garbage_value`` in every entry."""
  d = jax.tree_util.tree_map(lambda x: x.at[_AGG_REAL:].set(garbage_value), deltas)
  cohort = selection.cohort.at[_AGG_REAL].set(garbage_id).at[_AGG_REAL + 1].set(jnp.argmax(avail))
  sel = Selection(
    cohort,
    selection.valid.at[_AGG_REAL + 1].set(True),
    selection.weights.at[_AGG_REAL].set(0.7).at[_AGG_REAL + 1].set(extra_weight),
  )
  return d, sel, aux._replace(finite=aux.finite.at[_AGG_REAL + 1].set(False))


def check_aggregator(aggregator: Aggregator, *, rounds: int = 4) -> None:
  """Raises AssertionError unless ``aggregator`` keeps the aggregation contract.

  On ``toy_aggregation_round`` (6 clients, 6 slots, two-level params {"w": [3, 2], "b": [2]}):
  ``rounds`` rounds through one trace, each update shaped like the params and finite (also
  with NaN in the empty slots), the state keeping its structure, the same inputs giving the
  same outputs; garbage (NaN or 1e30, a duplicate or out-of-range id, nonzero weights) in an
  invalid slot and in a valid slot flagged non-finite changes nothing against the same
  round with those slots empty and the FedAvg-style weights rescaled to the same valid
  total; ``jax.vmap`` over independent runs gives each run; ``jax.disable_jit()`` gives the
  jitted round, and ``aux=None`` is a round with full availability, unit sizes and finite
  slots.

  Args:
    aggregator: the Aggregator (from ``aggregation.make`` or your own).
    rounds: how many rounds of the first check (>= 2: odd rounds carry NaN garbage).
  """
  params = toy_params()
  info = toy_aggregation_info()
  apply = _traced_once(aggregator.apply)
  state0 = aggregator.init(params, info)
  state = state0
  key = jax.random.PRNGKey(0)
  for t in range(rounds):
    where = f"round {t}" + (", NaN in the empty slots" if t % 2 else "")
    deltas, selection, avail, aux = toy_aggregation_round(key, t)
    if t % 2:
      deltas, selection, aux = with_garbage(
        deltas, selection, avail, aux, jnp.nan, selection.cohort[0], 0.1
      )
    tt = jnp.asarray(t, jnp.int32)
    update, new_state = apply(state, deltas, selection, avail, tt, aux)
    _same_structure(update, params, "the update is shaped like the params", where)
    _require(_all_finite(update), "the update is finite", where)
    _same_structure(new_state, state, "the state keeps its structure", where)
    _require(
      _trees_equal(apply(state, deltas, selection, avail, tt, aux), (update, new_state)),
      "the same inputs give the same outputs",
      where,
    )
    state = new_state

  # Masked slots change nothing.
  state_ref = state_a = state_b = state0
  extra = 0.25
  for t in range(3):
    where = f"round {t}"
    deltas, selection, avail, aux = toy_aggregation_round(jax.random.PRNGKey(2), t)
    tt = jnp.asarray(t, jnp.int32)
    total = selection.weights.sum()
    ref_sel = selection._replace(
      weights=selection.weights * (total + extra) / jnp.maximum(total, 1e-12)
    )
    update_ref, state_ref = apply(state_ref, deltas, ref_sel, avail, tt, aux)
    inputs = (deltas, selection, avail, aux)
    d_a, sel_a, aux_a = with_garbage(*inputs, jnp.nan, selection.cohort[0], extra)
    update_a, state_a = apply(state_a, d_a, sel_a, avail, tt, aux_a)
    d_b, sel_b, aux_b = with_garbage(*inputs, 1e30, _AGG_CLIENTS + 5, extra)
    update_b, state_b = apply(state_b, d_b, sel_b, avail, tt, aux_b)
    _require(
      _trees_equal((update_a, state_a), (update_b, state_b)),
      "masked slots change nothing: NaN and 1e30 garbage give the same round",
      where,
    )
    _require(
      _trees_close((update_a, state_a), (update_ref, state_ref), atol=1e-6),
      "masked slots change nothing: garbage gives the round with those slots empty",
      where,
    )

  # vmap over independent runs.
  keys = jax.random.split(jax.random.PRNGKey(3), 3)
  t = jnp.asarray(1, jnp.int32)
  batch = [toy_aggregation_round(k, 1) for k in keys]
  stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *batch)
  states = jax.tree_util.tree_map(lambda x: jnp.stack([x] * 3), state0)
  vmapped = jax.jit(jax.vmap(aggregator.apply, in_axes=(0, 0, 0, 0, None, 0)))
  updates, new_states = vmapped(states, stacked[0], stacked[1], stacked[2], t, stacked[3])
  for i, (d, s, a, x) in enumerate(batch):
    one = apply(state0, d, s, a, t, x)
    row = jax.tree_util.tree_map(lambda v, i=i: v[i], (updates, new_states))
    _require(_trees_close(row, one, atol=1e-6), "jax.vmap over runs gives each run's round")

  # The eager path, and aux=None.
  deltas, selection, avail, aux = toy_aggregation_round(jax.random.PRNGKey(4), 0)
  t = jnp.asarray(0, jnp.int32)
  jitted = apply(state0, deltas, selection, avail, t, aux)
  empty = AggregationAux(
    avail_probs=jnp.ones((_AGG_CLIENTS,), jnp.float32),
    num_examples=jnp.ones((_AGG_CLIENTS,), jnp.float32),
    finite=jnp.ones((_AGG_SLOTS,), bool),
  )
  jitted_empty = apply(state0, deltas, selection, avail, t, empty)
  with jax.disable_jit():
    eager = aggregator.apply(state0, deltas, selection, avail, t, aux)
    eager_none = aggregator.apply(state0, deltas, selection, avail, t)
  _require(_trees_close(eager, jitted, atol=1e-6), "jax.disable_jit() gives the jitted round")
  _require(
    _trees_close(eager_none, jitted_empty, atol=1e-6),
    "aux=None is full availability, unit sizes and finite slots",
  )

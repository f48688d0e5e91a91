"""Property-based contracts (hypothesis) of every registered availability model, selection
strategy and aggregator, over random N, M, availability masks (all-unavailable and
single-available rounds included), keys and hyper-parameters.

Each test draws from a few (N, M) shapes and jits once per (component, shape), so the
examples reuse compiled code; tests with random hyper-parameters run eagerly
(``jax.disable_jit``) because each hyper-parameter value is a new closure.
"""

from __future__ import annotations

import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedjax_sel import aggregation, availability, selection, testing
from fedjax_sel.core.types import AggregationAux, ClientInfo, Selection, SelectionContext

BOUNDED = settings(
  max_examples=15,
  deadline=None,
  database=None,
  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
EAGER = settings(BOUNDED, max_examples=8)  # op-by-op examples (random hparams) cost more
SHAPES = [(5, 5), (9, 3)]  # (N, M): a cohort as large as the population, and a small one
NUM_CLASSES = 3
PARAMS = {"w": jnp.zeros((3, 2), jnp.float32), "b": jnp.zeros((2,), jnp.float32)}
REGISTRIES = {"availability": availability, "selection": selection, "aggregation": aggregation}


# ------------------------------------------------------------------ the fake world


def _info(n: int) -> ClientInfo:
  counts = np.random.default_rng(n).integers(0, 6, size=(n, NUM_CLASSES))
  counts[:, 0] += 1
  return ClientInfo(jnp.asarray(counts.sum(1), jnp.int32), jnp.asarray(counts, jnp.int32))


def _ctx(n: int, t) -> SelectionContext:
  rng = np.random.default_rng(100 + n)
  losses = jnp.asarray(rng.uniform(0.1, 2.0, n), jnp.float32)
  emb = rng.random((n, 4))
  return SelectionContext(
    params={"w": jnp.zeros((2,), jnp.float32)},
    client_losses=lambda ids: losses[ids],
    update_sketch=jnp.asarray(rng.normal(size=(n, 6)), jnp.float32),
    embeddings=jnp.asarray(emb / emb.sum(1, keepdims=True), jnp.float32),
    seen=jnp.ones((n,), bool),
    avail_probs=jnp.full((n,), 0.5, jnp.float32),
    num_examples=_info(n).num_examples,
    eval_value=lambda p: 1.0 / (1.0 + jnp.sum((p["w"] - 1.0) ** 2)),
    round=jnp.asarray(t, jnp.int32),
  )


@st.composite
def masks(draw, n: int):
  """bool[N]: nobody, exactly one, everybody, or a random subset available."""
  kind = draw(st.sampled_from(["none", "one", "all", "random"]))
  if kind == "none":
    return np.zeros(n, bool)
  if kind == "all":
    return np.ones(n, bool)
  if kind == "one":
    return np.arange(n) == draw(st.integers(0, n - 1))
  return np.asarray(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)


@st.composite
def worlds(draw, num_rounds: int = 3):
  """(N, M, [avail masks of num_rounds rounds], seed, first round index)."""
  n, m = draw(st.sampled_from(SHAPES))
  rounds = [draw(masks(n)) for _ in range(num_rounds)]
  return n, m, rounds, draw(st.integers(0, 2**31 - 1)), draw(st.integers(0, 500))


def _check_selection(strategy, sel: Selection, avail: np.ndarray, n: int) -> None:
  """The public contract (weights need not sum to 1 here), and every slot's id in [0, N)."""
  testing.check_selection(strategy, sel, avail, normalized_weights=False)
  cohort = np.asarray(sel.cohort)
  assert np.all((cohort >= 0) & (cohort < n)), cohort


# ------------------------------------------------------------------ selection

_SELECTION_CACHE: dict = {}


def _selection_fns(name: str, n: int, m: int):
  """(strategy, jitted init, jitted round) of ``name`` with defaults, cached per shape."""
  key = (name, n, m)
  if key not in _SELECTION_CACHE:
    strategy = selection.make(name, num_selected=m)
    info = _info(n)
    _SELECTION_CACHE[key] = (
      strategy,
      jax.jit(lambda k: strategy.init(k, info)),
      jax.jit(_selection_round(strategy, n)),
    )
  return _SELECTION_CACHE[key]


def _selection_round(strategy, n):
  def one_round(state, key, avail, t):
    ctx = _ctx(n, t)
    sel, state = strategy.select(state, key, avail, t, ctx)
    if strategy.observe is not None:
      deltas = {"w": jnp.ones((strategy.num_selected, 2)) * sel.cohort[:, None] / n}
      state = strategy.observe(state, sel, deltas, ctx.client_losses(sel.cohort), ctx)
    return sel, state

  return one_round


@pytest.mark.parametrize("name", selection.names())
@BOUNDED
@given(world=worlds())
def test_selection_contract_over_random_worlds(name, world):
  n, m, rounds, seed, t0 = world
  strategy, init, one_round = _selection_fns(name, n, m)
  key = jax.random.PRNGKey(seed)
  state = init(key)
  for i, avail in enumerate(rounds):
    args = (jax.random.fold_in(key, i), jnp.asarray(avail), jnp.asarray(t0 + i, jnp.int32))
    sel, new_state = one_round(state, *args)
    _check_selection(strategy, sel, avail, n)
    again, _ = one_round(state, *args)  # a pure function: same inputs, same selection
    for a, b in zip(sel, again):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    state = new_state
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(state) if x.dtype.kind == "f")


# ------------------------------------------------------------------ random hyper-parameters


def _hparam_values(default):
  """Values to try for a hyper-parameter with this default: valid and invalid ones."""
  if isinstance(default, bool):
    return st.booleans()
  if isinstance(default, int):  # small: eager rounds loop over some of these
    return st.integers(-1, 4)
  if isinstance(default, float):
    return st.one_of(
      st.floats(-1.0, 3.0, allow_nan=False),
      st.sampled_from([default, 0.0, 1.0, math.nan, math.inf]),
    )
  if isinstance(default, str):
    return st.sampled_from([default, "no_such_choice"])
  return st.one_of(st.none(), st.integers(-1, 4), st.floats(0.0, 2.0))


@st.composite
def hyper_parameters(draw, part: str):
  """(name, {hparam: value}) for a registered component of ``part``, a random subset of its
  hyper-parameters set to random (valid or invalid) values."""
  registry = REGISTRIES[part]
  name = draw(st.sampled_from(registry.names()))
  sig = inspect.signature(registry.REGISTRY.constructor(name))
  hparams = {}
  for hp, p in sig.parameters.items():
    if hp in ("num_selected", "trace") or p.default is inspect.Parameter.empty:
      continue
    if draw(st.booleans()):
      hparams[hp] = draw(_hparam_values(p.default))
  return name, hparams


def _make(part, name, hparams, **fixed):
  """The component, or None when make rejects the values with a ValueError (and only so)."""
  try:
    return REGISTRIES[part].make(name, **fixed, **hparams)
  except ValueError as e:
    assert str(e), "an empty error message"
    return None


@settings(EAGER)
@given(choice=hyper_parameters("availability"), n=st.sampled_from([5, 9]), seed=st.integers(0, 99))
def test_availability_with_random_hparams_is_valid_or_rejected(choice, n, seed):
  name, hparams = choice
  fixed = {"trace": np.ones((4, n), bool)} if name == "trace" else {}
  model = _make("availability", name, hparams, **fixed)
  if model is None:
    return
  key = jax.random.PRNGKey(seed)
  with jax.disable_jit():
    state = model.init(key, _info(n))
    for t in (0, 7, 30):
      probs = np.asarray(model.probs(state, jnp.asarray(t, jnp.int32)))
      avail, state2 = model.sample(state, jax.random.fold_in(key, t), jnp.asarray(t, jnp.int32))
      again, _ = model.sample(state, jax.random.fold_in(key, t), jnp.asarray(t, jnp.int32))
      assert probs.shape == (n,) and np.all(np.isfinite(probs))
      assert np.all((probs >= 0) & (probs <= 1))
      assert np.asarray(avail).shape == (n,) and np.asarray(avail).dtype == np.bool_
      np.testing.assert_array_equal(np.asarray(avail), np.asarray(again))
      state = state2


@settings(EAGER)
@given(choice=hyper_parameters("selection"), world=worlds(num_rounds=2))
def test_selection_with_random_hparams_is_valid_or_rejected(choice, world):
  name, hparams = choice
  n, m, rounds, seed, t0 = world
  strategy = _make("selection", name, hparams, num_selected=m)
  if strategy is None:
    return
  key = jax.random.PRNGKey(seed)
  one_round = _selection_round(strategy, n)
  with jax.disable_jit():
    state = strategy.init(key, _info(n))
    for i, avail in enumerate(rounds):
      t = jnp.asarray(t0 + i, jnp.int32)
      sel, state = one_round(state, jax.random.fold_in(key, i), jnp.asarray(avail), t)
      _check_selection(strategy, sel, avail, n)


@settings(EAGER)
@given(choice=hyper_parameters("aggregation"), seed=st.integers(0, 2**31 - 1))
def test_aggregation_with_random_hparams_is_valid_or_rejected(choice, seed):
  name, hparams = choice
  agg = _make("aggregation", name, hparams)
  if agg is None:
    return
  n, m = SHAPES[1]
  rng = np.random.default_rng(seed)
  with jax.disable_jit():
    state = agg.init(PARAMS, _info(n))
    for t in range(2):
      deltas, sel, avail, aux = _round_inputs(rng, n, m, rng.random() < 0.2)
      update, state = agg.apply(state, deltas, sel, avail, jnp.asarray(t, jnp.int32), aux=aux)
      assert all(np.all(np.isfinite(np.asarray(u))) for u in jax.tree.leaves(update))


# ------------------------------------------------------------------ aggregation


def _round_inputs(rng, n, m, nobody):
  """Random deltas, a cohort of available clients (invalid slots padded), avail, aux."""
  avail = np.zeros(n, bool) if nobody else rng.random(n) < rng.uniform(0.1, 1.0)
  order = np.concatenate([rng.permutation(np.flatnonzero(avail)), np.flatnonzero(~avail)])
  cohort = order[:m].astype(np.int32)
  valid = avail[cohort]
  finite = valid & (rng.random(m) < 0.8)  # some valid slots' updates were non-finite
  raw = rng.uniform(0.0, 1.0, m) * valid
  weights = raw / max(raw.sum(), 1e-9)
  deltas = {
    "w": jnp.asarray(rng.normal(size=(m, 3, 2)), jnp.float32),
    "b": jnp.asarray(rng.normal(size=(m, 2)), jnp.float32),
  }
  sel = Selection(
    jnp.asarray(cohort),
    jnp.asarray(finite),
    jnp.asarray(np.where(finite, weights, 0.0), jnp.float32),
  )
  aux = AggregationAux(
    avail_probs=jnp.asarray(rng.uniform(0.05, 1.0, n), jnp.float32),
    num_examples=_info(n).num_examples.astype(jnp.float32),
    finite=jnp.asarray(finite),
  )
  return deltas, sel, jnp.asarray(avail), aux


def _masked(deltas, keep, fill):
  """Slots not in ``keep`` hold ``fill``."""
  return jax.tree.map(
    lambda d: jnp.where(keep.reshape((-1,) + (1,) * (d.ndim - 1)), d, fill), deltas
  )


def _garbage(deltas, keep, rng):
  """Slots not in ``keep`` hold NaN, inf or huge values."""
  return _masked(deltas, keep, rng.choice(np.array([np.nan, np.inf, -np.inf, 3e38], np.float32)))


_AGG_CACHE: dict = {}


def _aggregation_fns(name, n):
  if (name, n) not in _AGG_CACHE:
    agg = aggregation.make(name)
    _AGG_CACHE[(name, n)] = (jax.jit(lambda: agg.init(PARAMS, _info(n))), jax.jit(agg.apply))
  return _AGG_CACHE[(name, n)]


@pytest.mark.parametrize("name", aggregation.names())
@BOUNDED
@given(shape=st.sampled_from(SHAPES), seed=st.integers(0, 2**31 - 1))
def test_aggregation_update_is_finite_and_invalid_slots_change_nothing(name, shape, seed):
  n, m = shape
  rng = np.random.default_rng(seed)
  init, apply = _aggregation_fns(name, n)
  clean = dirty = init()
  for t in range(3):
    deltas, sel, avail, aux = _round_inputs(rng, n, m, nobody=rng.random() < 0.25)
    tt = jnp.asarray(t, jnp.int32)
    # Invalid and non-finite slots: zero updates and another client id ...
    zeroed = _masked(deltas, sel.valid, 0.0)
    moved = sel._replace(cohort=jnp.where(sel.valid, sel.cohort, (sel.cohort + 1) % n))
    update_a, clean = apply(clean, zeroed, sel, avail, tt, aux)
    # ... or NaN/inf/huge garbage and the original ids: the same update and state.
    update_b, dirty = apply(dirty, _garbage(deltas, sel.valid, rng), moved, avail, tt, aux)
    for u in jax.tree.leaves(update_a):
      assert np.all(np.isfinite(np.asarray(u)))
    for a, b in zip(jax.tree.leaves((update_a, clean)), jax.tree.leaves((update_b, dirty))):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    if not np.asarray(sel.valid).any() and name == "fedavg":
      for u in jax.tree.leaves(update_a):  # nobody trained: FedAvg leaves the model alone
        np.testing.assert_array_equal(np.asarray(u), 0.0)

"""Small pytrees and selections shared by the aggregation tests."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import testing
from fedjax_sel.core.types import AggregationAux, ClientInfo, Selection


def make_params() -> dict:
  """{"w": zeros(3, 2), "b": zeros(2)}: ``testing.toy_params``, the contract check's."""
  return testing.toy_params()


def make_info(num_examples) -> ClientInfo:
  num_examples = jnp.asarray(num_examples, jnp.int32)
  num_clients = num_examples.shape[0]
  return ClientInfo(num_examples=num_examples, label_counts=jnp.ones((num_clients, 2), jnp.int32))


def random_deltas(key, num_slots: int) -> dict:
  kw, kb = jax.random.split(key)
  return {
    "w": jax.random.normal(kw, (num_slots, 3, 2), jnp.float32),
    "b": jax.random.normal(kb, (num_slots, 2), jnp.float32),
  }


def deltas_from_b(b_rows) -> dict:
  """Deltas whose 'b' leaf holds the given rows and whose 'w' leaf is zero."""
  b = jnp.asarray(b_rows, jnp.float32)
  return {"w": jnp.zeros((b.shape[0], 3, 2), jnp.float32), "b": b}


def selection_of(cohort, valid=None, weights=None) -> Selection:
  cohort = jnp.asarray(cohort, jnp.int32)
  num_slots = cohort.shape[0]
  valid = jnp.ones((num_slots,), bool) if valid is None else jnp.asarray(valid, bool)
  if weights is None:
    weights = jnp.where(valid, 1.0 / jnp.maximum(valid.sum(), 1), 0.0)
  return Selection(cohort=cohort, valid=valid, weights=jnp.asarray(weights, jnp.float32))


def aux_of(
  num_clients, num_slots, probs=None, num_examples=None, finite=None, lr=None
) -> AggregationAux:
  """``lr``: every client's lr this round (a scalar is repeated over the N clients)."""
  probs = jnp.ones((num_clients,)) if probs is None else jnp.asarray(probs)
  sizes = jnp.ones((num_clients,)) if num_examples is None else jnp.asarray(num_examples)
  finite = jnp.ones((num_slots,), bool) if finite is None else jnp.asarray(finite, bool)
  if lr is not None:
    lr = jnp.broadcast_to(jnp.asarray(lr, jnp.float32), (num_clients,))
  return AggregationAux(
    avail_probs=probs.astype(jnp.float32),
    num_examples=sizes.astype(jnp.float32),
    finite=finite,
    lr=lr,
  )


def weighted_mean(deltas: dict, weights) -> dict:
  """Reference sum_m weights[m] * deltas[m] in float64 numpy."""
  w = np.asarray(weights, np.float64)
  return {k: np.tensordot(w, np.asarray(v, np.float64), axes=1) for k, v in deltas.items()}


def assert_tree_close(a, b, atol=1e-6, rtol=1e-6):
  jax.tree_util.tree_map(
    lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=rtol),
    a,
    b,
  )


_AGGREGATORS: dict = {}
_JITTED: dict = {}


def build(name: str, hparams: dict | None = None):
  """One Aggregator per (name, hparams), shared by all tests so compiles are shared too."""
  hparams = hparams or {}
  key = (name, tuple(sorted(hparams.items())))
  if key not in _AGGREGATORS:
    from fedjax_sel import aggregation

    _AGGREGATORS[key] = aggregation.make(name, **hparams)
  return _AGGREGATORS[key]


def jitted_apply(agg):
  """``jit(apply)`` wrapped in ``chex.assert_max_traces(n=1)``, cached per Aggregator.

  Callers must always pass the same shapes and dtypes (N = M = 6 with an explicit aux in
  these tests). Configs of one name share chex's trace footprint (same source), hence the
  autouse ``chex.clear_trace_counter`` fixture in conftest.py.
  """
  import chex

  if id(agg) not in _JITTED:
    _JITTED[id(agg)] = jax.jit(chex.assert_max_traces(agg.apply, n=1))
  return _JITTED[id(agg)]

"""A small fake world for selection tests: client info and a SelectionContext."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel.core.types import ClientInfo, SelectionContext

NUM_CLIENTS = 12
NUM_CLASSES = 4
SKETCH_DIM = 6
EMBED_DIM = 5
PARAM_DIM = 3


def make_info(
  num_clients: int = NUM_CLIENTS, num_classes: int = NUM_CLASSES, seed: int = 0
) -> ClientInfo:
  """Clients with 5..40 examples spread unevenly over the classes."""
  rng = np.random.default_rng(seed)
  counts = rng.integers(0, 10, size=(num_clients, num_classes))
  counts[:, 0] += 1  # every client has at least one example
  return ClientInfo(
    num_examples=jnp.asarray(counts.sum(1), jnp.int32),
    label_counts=jnp.asarray(counts, jnp.int32),
  )


def fixed_losses(num_clients: int = NUM_CLIENTS) -> jax.Array:
  """Distinct per-client losses in a scrambled order: loss[i] = ((7 i) mod N) / N + 0.1."""
  ids = np.arange(num_clients)
  return jnp.asarray(((7 * ids) % num_clients) / num_clients + 0.1, jnp.float32)


def eval_value(params) -> jax.Array:
  """A 'validation accuracy' of params: 1 / (1 + ||w - 1||^2), maximal at w = 1."""
  return 1.0 / (1.0 + jnp.sum((params["w"] - 1.0) ** 2))


def fake_arrays(num_clients: int = NUM_CLIENTS, seed: int = 0):
  """(update_sketch f32[N, d], embeddings f32[N, E]) drawn with numpy (cheap, no tracing)."""
  rng = np.random.default_rng(seed)
  sketch = rng.normal(size=(num_clients, SKETCH_DIM)).astype(np.float32)
  logits = rng.normal(size=(num_clients, EMBED_DIM))
  emb = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
  return jnp.asarray(sketch), jnp.asarray(emb, jnp.float32)


def make_ctx(info: ClientInfo, t=0, seed: int = 0) -> SelectionContext:
  """A SelectionContext whose callables are plain functions of fixed arrays."""
  n = info.num_examples.shape[0]
  sketch, emb = fake_arrays(n, seed)
  losses = fixed_losses(n)
  return SelectionContext(
    params={"w": jnp.zeros((PARAM_DIM,), jnp.float32)},
    client_losses=lambda ids: losses[ids],
    update_sketch=sketch,
    embeddings=emb,
    seen=jnp.ones((n,), bool),
    avail_probs=jnp.full((n,), 0.5, jnp.float32),
    num_examples=info.num_examples,
    eval_value=eval_value,
    round=jnp.asarray(t, jnp.int32),
  )


def fake_deltas(cohort: jax.Array) -> dict:
  """Per-slot updates pointing client i towards w = 1 with strength (i + 1) / N."""
  n = NUM_CLIENTS
  strength = (cohort.astype(jnp.float32) + 1.0) / n
  return {"w": strength[:, None] * jnp.ones((1, PARAM_DIM), jnp.float32)}


@pytest.fixture
def info() -> ClientInfo:
  return make_info()

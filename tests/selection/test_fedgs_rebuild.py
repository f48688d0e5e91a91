"""FedGS's 3DG build schedule at its boundaries: the first round with enough clients seen,
then every ``rebuild_every`` rounds (worked out by hand)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import selection
from fedjax_sel.core.types import ClientInfo, SelectionContext

N, D, ROUNDS = 6, 5, 10


def context(t, features, seen):
  return SelectionContext(
    params=None,
    client_losses=None,
    update_sketch=features,
    embeddings=jnp.zeros((N, 0), jnp.float32),
    seen=seen,
    avail_probs=jnp.ones((N,), jnp.float32),
    num_examples=jnp.arange(1, N + 1, dtype=jnp.int32),
    eval_value=None,
    round=jnp.int32(t),
  )


def build_rounds(rebuild_every):
  """Rounds at which the graph was (re)built: its distances changed (the features are new
  every round, so a rebuild always changes them)."""
  sel = selection.make(
    "fedgs",
    num_selected=2,
    similarity="cosine",
    min_seen_fraction=0.5,
    rebuild_every=rebuild_every,
    num_iters=2,
    num_restarts=1,
  )
  info = ClientInfo(
    num_examples=jnp.arange(1, N + 1, dtype=jnp.int32), label_counts=jnp.ones((N, 2), jnp.int32)
  )
  state = sel.init(jax.random.PRNGKey(0), info)
  select = jax.jit(sel.select)
  built, since = [], []
  avail = jnp.ones((N,), bool)
  for t in range(ROUNDS):
    # round 0: 2 of 6 clients seen (< 0.5), no graph yet; from round 1 on: 4 of 6
    seen = jnp.arange(N) < (2 if t == 0 else 4)
    features = jax.random.normal(jax.random.PRNGKey(100 + t), (N, D))
    before = np.asarray(state.distances)
    _, state = select(state, jax.random.PRNGKey(t), avail, jnp.int32(t), context(t, features, seen))
    if not np.array_equal(before, np.asarray(state.distances)):
      built.append(t)
    since.append(int(state.rounds_since_build))
    assert bool(state.graph_ready) == (t >= 1)
  return built, since


@pytest.mark.parametrize(
  "rebuild_every,want",
  [
    (0, [1]),  # built once, when half the clients have been seen
    (1, list(range(1, ROUNDS))),  # every round
    (3, [1, 4, 7]),  # every 3 rounds after the first build
    (4, [1, 5, 9]),
  ],
)
def test_graph_build_rounds(rebuild_every, want):
  built, _ = build_rounds(rebuild_every)
  assert built == want

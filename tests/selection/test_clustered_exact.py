"""Algorithm 2 on exact updates: sketch_dim >= P keeps the flattened updates themselves."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import aggregation, availability, client, models, selection
from fedjax_sel.core import engine, simulation
from fedjax_sel.core.types import Selection
from fedjax_sel.selection import clustered

EXACT = 2**31 - 1  # any sketch_dim >= the parameter count


def _sim(data, sketch_dim, m=4):
  model = models.make("mlp", data.input_shape, data.num_classes, hidden=(7,))
  cfg = simulation.SimulationConfig(
    client_lr=0.1,
    sketch_dim=sketch_dim,
    engine=engine.EngineConfig(batch_size=10, local_steps=3, parallelism="vmap"),
  )
  return simulation.Simulation(
    data,
    model,
    availability.make("idl"),
    selection.make("clustered_similarity", num_selected=m),
    aggregation.make("fedavg"),
    client.make("sgd"),
    cfg,
  )


def _numpy_flat(tree, m):
  """f64[m, P]: each slot's leaves flattened and concatenated in tree order (numpy)."""
  return np.concatenate(
    [np.asarray(x, np.float64).reshape(m, -1) for x in jax.tree_util.tree_leaves(tree)], axis=1
  )


def _numpy_arccos(g):
  unit = g / np.linalg.norm(g, axis=1, keepdims=True)
  d = np.arccos(np.clip(unit @ unit.T, -1.0, 1.0))
  np.fill_diagonal(d, 0.0)
  return d


def _random_deltas(params, m, seed):
  leaves, treedef = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
  return jax.tree_util.tree_unflatten(
    treedef, [jax.random.normal(k, (m,) + p.shape) for k, p in zip(keys, leaves)]
  )


def test_exact_updates_need_no_projection_matrix(small_synthetic):
  sim = _sim(small_synthetic, EXACT)
  p = sum(x.size for x in jax.tree_util.tree_leaves(sim.init(0).params))
  assert sim.device_data.projection.shape == (0, p)  # the identity marker, not P x P
  assert sim.init(0).update_sketch.shape == (sim.num_clients, p)


def test_exact_distances_equal_numpy_on_the_full_flattened_updates(small_synthetic):
  """The stored rows are the updates; Algorithm 2's arccos, L2 and L1 distances on them equal
  numpy's on the full flattened updates. A 3-dim sketch of the same updates does not."""
  m = 4
  used = Selection(jnp.array([3, 1, 5, 0], jnp.int32), jnp.ones((m,), bool), jnp.ones((m,)))
  sims = {"exact": _sim(small_synthetic, EXACT, m), "sketch": _sim(small_synthetic, 3, m)}
  got = {}
  for name, sim in sims.items():
    state = sim.init(0)
    deltas = _random_deltas(state.params, m, seed=1)
    rows, _, seen = sim._remember(sim.device_data, state, used, deltas)
    np.testing.assert_array_equal(np.flatnonzero(np.asarray(seen)), [0, 1, 3, 5])
    got[name] = np.asarray(rows)[np.asarray(used.cohort)]
  flat = _numpy_flat(deltas, m)
  np.testing.assert_allclose(got["exact"], flat, rtol=1e-6, atol=1e-7)
  want = {
    "arccos": _numpy_arccos(flat),
    "L2": np.linalg.norm(flat[:, None] - flat[None], axis=-1),
    "L1": np.abs(flat[:, None] - flat[None]).sum(-1),
  }
  for measure, w in want.items():
    d = np.asarray(clustered.representative_distances(jnp.asarray(got["exact"]), measure))
    np.testing.assert_allclose(d, w, rtol=1e-4, atol=1e-4)
  sketched = np.asarray(clustered.representative_distances(jnp.asarray(got["sketch"]), "arccos"))
  assert np.max(np.abs(sketched - want["arccos"])) > 0.05


def test_a_round_stores_the_clients_exact_update(small_synthetic):
  """One slot, FedAvg weight 1, server SGD lr 1: the global model moves by the client's
  update, which is what the exact row of that client holds."""
  sim = _sim(small_synthetic, EXACT, m=1)
  state = sim.init(0)
  new, _ = sim.round_step(state)
  moved = jax.tree_util.tree_map(lambda a, b: b[None] - a[None], state.params, new.params)
  want = _numpy_flat(moved, 1)[0]
  picked = np.flatnonzero(np.asarray(new.sampling_counts))
  assert len(picked) == 1
  rows = np.asarray(new.update_sketch)
  np.testing.assert_allclose(rows[picked[0]], want, rtol=1e-4, atol=1e-6)
  assert not np.any(np.delete(rows, picked[0], axis=0))

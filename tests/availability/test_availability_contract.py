"""Registry-wide contract: every availability model passes the same checks."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import availability

NUM_CLIENTS = 6
# Hyper-parameters a name needs to be built at all (everything else uses defaults).
REQUIRED = {"trace": {"trace": np.eye(NUM_CLIENTS, dtype=bool)[:4]}}
# Extra configurations that take a different code path.
VARIANTS = [
  ("bernoulli", {"probs": [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]}),
  ("cluster_dropout", {"mode": "fl_fdms", "num_clusters": 2, "dropout_rate": 0.5}),
]
CASES = [(name, REQUIRED.get(name, {})) for name in availability.names()] + VARIANTS
IDS = [f"{name}-{i}" for i, (name, _) in enumerate(CASES)]


@pytest.mark.parametrize("name,hparams", CASES, ids=IDS)
def test_contract(name, hparams, info6):
  chex.clear_trace_counter()
  model = availability.make(name, **hparams)
  init_key, round_key = jax.random.split(jax.random.key(7))
  init = jax.jit(model.init)

  @jax.jit
  @chex.assert_max_traces(n=1)
  def step(state, key, t):
    probs = model.probs(state, t)
    active, new_state = model.sample(state, key, t)
    return probs, active, new_state

  # init: jittable and deterministic per key.
  state = init(init_key, info6)
  chex.assert_trees_all_equal(state, init(init_key, info6))

  for t in range(4):  # several rounds, one trace
    k = jax.random.fold_in(round_key, t)
    probs, active, new_state = step(state, k, jnp.int32(t))
    # Declared shapes and dtypes; probabilities are finite and in [0, 1].
    chex.assert_shape(probs, (NUM_CLIENTS,))
    chex.assert_type(probs, jnp.float32)
    chex.assert_shape(active, (NUM_CLIENTS,))
    assert active.dtype == jnp.bool_
    chex.assert_tree_all_finite(probs)
    assert bool(jnp.all((probs >= 0.0) & (probs <= 1.0)))
    chex.assert_trees_all_equal_shapes_and_dtypes(new_state, state)
    # probs 1 -> surely active, probs 0 -> surely inactive.
    assert bool(jnp.all(jnp.where(probs == 1.0, active, True)))
    assert bool(jnp.all(jnp.where(probs == 0.0, ~active, True)))
    # Deterministic per key.
    chex.assert_trees_all_equal((probs, active, new_state), step(state, k, jnp.int32(t)))
    if t == 1:  # the debug path gives the same numbers
      with jax.disable_jit():
        eager_state = model.init(init_key, info6)
        chex.assert_trees_all_equal_shapes_and_dtypes(eager_state, state)
        probs_eager = model.probs(state, t)
        active_eager, _ = model.sample(state, k, t)
      np.testing.assert_allclose(probs_eager, probs, rtol=1e-6)
      np.testing.assert_array_equal(active_eager, active)
    state = new_state

  # Vmappable over seeds: row s of the vmapped run equals the run with key s.
  def init_and_step(seed):
    return model.sample(model.init(seed, info6), seed, jnp.int32(2))[0]

  seeds = jax.random.split(jax.random.key(3), 3)
  acts = jax.vmap(init_and_step)(seeds)  # eager vmap: batched primitives are cached
  chex.assert_shape(acts, (3, NUM_CLIENTS))
  for s in range(3):
    _, single_act, _ = step(init(seeds[s], info6), seeds[s], jnp.int32(2))
    np.testing.assert_array_equal(acts[s], single_act)


def test_unknown_name_lists_known_names():
  with pytest.raises(ValueError) as err:
    availability.make("sometimes")
  message = str(err.value)
  assert "'sometimes'" in message
  for name in availability.names():
    assert name in message


def test_every_required_mode_is_registered():
  expected = {
    "idl",
    "mdf",
    "ldf",
    "ymf",
    "yc",
    "ln",
    "sln",
    "always",
    "bernoulli",
    "markov",
    "cluster_dropout",
    "trace",
  }
  assert expected <= set(availability.names())


def test_unknown_hyperparameter_is_rejected():
  with pytest.raises(ValueError, match="beta"):
    availability.make("idl", beta=0.5)

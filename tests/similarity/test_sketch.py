"""Random-projection sketches: N x d memory and the cosine error of a d = 256 sketch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import similarity as sim


def _cos_errors(num_vectors, num_params, dim, seed):
  k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
  x = jax.random.normal(k1, (num_vectors, num_params))
  proj = sim.make_projection(k2, num_params, dim)
  sk = sim.sketch(x, proj)
  assert sk.shape == (num_vectors, dim) and sk.nbytes == num_vectors * dim * 4
  exact = np.asarray(sim.cosine(x, clip=False))
  approx = np.asarray(sim.cosine(sk, clip=False))
  iu = np.triu_indices(num_vectors, 1)
  return (approx - exact)[iu]


def test_sketch_cosine_error_d256_within_bounds():
  """d = 256: RMS cosine error ~ 1/sqrt(d) (variance (1 - c^2)^2 / d, c ~ 0 here), max
  error <= 5 / sqrt(d) (Gaussian tail: P <= 780 * 6e-7 over the 780 pairs)."""
  dim = 256
  err = _cos_errors(40, 2048, dim, seed=0)
  rms = np.sqrt(np.mean(err**2))
  assert 0.8 / np.sqrt(dim) < rms < 1.2 / np.sqrt(dim)
  assert np.max(np.abs(err)) < 5 / np.sqrt(dim)


def test_sketch_cosine_error_within_rigorous_jl_bound():
  """d = 1024, 20 vectors: every cosine within the Dasgupta-Gupta union bound (delta=0.01)."""
  bound = sim.jl_cosine_error_bound(1024, 20, 0.01)
  assert 0.5 < bound < 0.7  # the worst-case guarantee is loose; typical errors are ~0.03
  err = _cos_errors(20, 4096, 1024, seed=1)
  assert np.max(np.abs(err)) < bound
  assert sim.jl_cosine_error_bound(256, 20, 0.01) > 1  # vacuous at d = 256


def test_projection_is_identity_when_dim_covers_params():
  """dim >= P: the exact updates, through an empty f32[0, P] marker (no P x P matrix)."""
  for dim in (5, 8):
    proj = sim.make_projection(jax.random.PRNGKey(0), 5, dim)
    assert proj.shape == (0, 5) and sim.is_exact(proj)
    x = jax.random.normal(jax.random.PRNGKey(1), (3, 5))
    np.testing.assert_array_equal(np.asarray(sim.sketch(x, proj)), np.asarray(x))
  assert not sim.is_exact(sim.make_projection(jax.random.PRNGKey(0), 5, 4))
  assert not sim.is_exact(jnp.zeros((5, 0)))  # the no-sketch projection of other strategies
  with pytest.raises(ValueError, match="exact sketch of 4 parameters with a marker for 5"):
    sim.sketch(jnp.ones((2, 4)), proj)


def test_flatten_stacked_orders_leaves():
  tree = {"a": jnp.arange(6.0).reshape(2, 3), "b": jnp.arange(8.0).reshape(2, 2, 2)}
  flat = np.asarray(sim.flatten_stacked(tree))
  np.testing.assert_array_equal(flat[1], [3, 4, 5, 4, 5, 6, 7])

"""Similarity matrices: hand cases for cosine (Eq. 11), oracle (Appendix C), functional."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import similarity as sim


def test_cosine_clipped_at_zero_hand_case():
  x = jnp.asarray([[1.0, 0.0], [1.0, 1.0], [-1.0, 0.0], [0.0, 0.0]])
  r = 1 / np.sqrt(2)
  expected_raw = np.array([[1, r, -1, 0], [r, 1, -r, 0], [-1, -r, 1, 0], [0, 0, 0, 0]])
  np.testing.assert_allclose(np.asarray(sim.cosine(x, clip=False)), expected_raw, atol=1e-6)
  np.testing.assert_allclose(np.asarray(sim.cosine(x)), np.maximum(expected_raw, 0), atol=1e-6)


def test_cosine_chunked_equals_cosine():
  x = jax.random.normal(jax.random.PRNGKey(0), (37, 9))  # 37 rows: the last block is padded
  np.testing.assert_allclose(
    np.asarray(sim.cosine_chunked(x, 8)), np.asarray(sim.cosine(x)), atol=1e-6
  )
  np.testing.assert_allclose(
    np.asarray(sim.cosine_chunked(x, 8, clip=False)),
    np.asarray(sim.cosine(x, clip=False)),
    atol=1e-6,
  )


def test_label_distribution_hand_case_and_scale_invariance():
  counts = jnp.asarray([[4, 0], [0, 7], [3, 3]])
  # distributions (1,0), (0,1), (.5,.5): cosines 0, 1/sqrt2, 1/sqrt2 -> min-max to 0, 1, 1
  expected = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 1]], np.float32)
  np.testing.assert_allclose(np.asarray(sim.label_distribution(counts)), expected, atol=1e-6)
  raw = np.asarray(sim.label_distribution(counts, normalize=False))
  np.testing.assert_allclose(raw[0, 2], 1 / np.sqrt(2), atol=1e-6)
  np.testing.assert_allclose(np.asarray(sim.label_distribution(counts * 5)), expected, atol=1e-6)


def test_minmax_normalize_off_diagonal():
  v = jnp.asarray([[9.0, 2.0, 4.0], [2.0, 9.0, 6.0], [4.0, 6.0, 9.0]])
  expected = np.array([[1, 0, 0.5], [0, 1, 1], [0.5, 1, 1]])
  np.testing.assert_allclose(np.asarray(sim.minmax_normalize(v)), expected, atol=1e-6)
  np.testing.assert_array_equal(
    np.asarray(sim.minmax_normalize(jnp.full((3, 3), 0.3))), np.ones((3, 3))
  )


def test_model_parameter_similarity_flattens_pytrees():
  key1, key2 = jax.random.split(jax.random.PRNGKey(1))
  w = jax.random.normal(key1, (5, 3, 2))
  b = jax.random.normal(key2, (5, 2))
  flat = jnp.concatenate([w.reshape(5, -1), b], axis=1)
  tree = sim.model_parameter_similarity({"w": w, "b": b})
  # the pytree's leaves are flattened in key order (b, w): cosine is order-invariant
  np.testing.assert_allclose(
    np.asarray(tree), np.asarray(sim.model_parameter_similarity(flat)), atol=1e-6
  )
  raw = np.asarray(sim.model_parameter_similarity(flat, normalize=False))
  off = ~np.eye(5, dtype=bool)
  lo, hi = raw[off].min(), raw[off].max()
  np.testing.assert_allclose(np.asarray(tree)[off], (raw[off] - lo) / (hi - lo), atol=1e-6)


def test_functional_embedding_of_linear_model_and_similarity():
  w = jnp.asarray([[1.0, -2.0, 0.5], [0.0, 1.0, 3.0]])  # [2 inputs, 3 outputs]
  bias = jnp.asarray([0.1, 0.2, -0.3])
  apply_fn = lambda p, x: x @ p["w"] + p["b"]
  noise = sim.noise_inputs(jax.random.PRNGKey(0), 64, (2,), mean=1.0, std=0.5)
  emb = sim.functional_embedding(apply_fn, {"w": w, "b": bias}, noise)
  np.testing.assert_allclose(np.asarray(emb), np.asarray(noise.mean(0) @ w + bias), atol=1e-5)
  probs = sim.functional_embedding(apply_fn, {"w": w, "b": bias}, noise, softmax=True)
  np.testing.assert_allclose(float(probs.sum()), 1.0, atol=1e-5)
  e = jnp.asarray([[1.0, 1.0], [2.0, 2.0], [-1.0, 0.0]])
  np.testing.assert_allclose(np.asarray(sim.functional(e)), np.asarray(sim.cosine(e)), atol=1e-7)
  assert float(sim.functional(e)[0, 2]) == 0.0


def test_noise_inputs_moments():
  x = np.asarray(sim.noise_inputs(jax.random.PRNGKey(3), 20000, (3,), mean=2.0, std=0.5))
  assert x.shape == (20000, 3)
  se = 0.5 / np.sqrt(20000)
  assert np.all(np.abs(x.mean(0) - 2.0) < 4 * se)
  assert np.all(np.abs(x.std(0) - 0.5) < 0.02)

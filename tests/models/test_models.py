"""Models: parameter counts from the papers, output shapes, name validation."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_sel import models


def _count(params):
  return sum(int(x.size) for x in jax.tree_util.tree_leaves(params))


@pytest.mark.parametrize(
  "name,shape,count",
  [
    ("logreg", (60,), 60 * 10 + 10),
    ("mlp", (60,), 60 * 200 + 200 + 200 * 10 + 10),
    ("cnn_mnist", (28, 28, 1), 1_663_370),  # McMahan et al. 2017: "1,663,370 parameters"
  ],
)
def test_parameter_counts(name, shape, count):
  m = models.make(name, shape, 10)
  params = m.init(jax.random.PRNGKey(0))
  assert _count(params) == count
  assert models.num_params(m) == count  # abstractly, without initializing
  assert m.apply(params, jnp.zeros((3, *shape))).shape == (3, 10)


def test_cifar_cnn_runs():
  m = models.make("cnn_cifar", (32, 32, 3), 10)
  params = m.init(jax.random.PRNGKey(0))
  out = m.apply(params, jnp.ones((2, 32, 32, 3)))
  assert out.shape == (2, 10) and bool(jnp.all(jnp.isfinite(out)))
  assert m.conv


def test_bad_model_input():
  with pytest.raises(ValueError, match="unknown model 'resnet'.*logreg"):
    models.make("resnet", (60,), 10)
  with pytest.raises(ValueError, match="needs image inputs"):
    models.make("cnn_mnist", (60,), 10)
  with pytest.raises(ValueError, match="num_classes=1"):
    models.make("logreg", (60,), 1)


@pytest.mark.parametrize(
  "name,shape", [("cnn_mnist", (28, 28, 1)), ("cnn_mnist", (8, 8, 1)), ("cnn_cifar", (32, 32, 3))]
)
def test_im2col_convolutions_equal_lax_conv(name, shape):
  xla = models.make(name, shape, 10, conv_impl="xla")
  im2col = models.make(name, shape, 10, conv_impl="im2col")
  params = xla.init(jax.random.PRNGKey(0))
  # the same parameter tree: im2col only changes how a convolution is computed
  chex.assert_trees_all_equal_shapes(params, im2col.init(jax.random.PRNGKey(0)))
  x = jax.random.normal(jax.random.PRNGKey(1), (4, *shape))
  y = jnp.arange(4) % 10
  np.testing.assert_allclose(im2col.apply(params, x), xla.apply(params, x), rtol=1e-4, atol=1e-4)

  def loss(apply):
    return lambda p: optax.softmax_cross_entropy_with_integer_labels(apply(p, x), y).mean()

  g_xla = jax.grad(loss(xla.apply))(params)
  g_im2col = jax.grad(loss(im2col.apply))(params)
  chex.assert_trees_all_close(g_im2col, g_xla, rtol=1e-4, atol=1e-5)


def test_conv_impl_auto_and_bad_value():
  assert models.models.resolve_conv_impl("auto", "cpu") == "im2col"
  assert models.models.resolve_conv_impl("auto", "gpu") == "xla"
  with pytest.raises(ValueError, match="conv_impl='fft'"):
    models.make("cnn_mnist", (28, 28, 1), 10, conv_impl="fft")

"""Models: parameter counts from the papers, output shapes, name validation."""

import jax
import jax.numpy as jnp
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

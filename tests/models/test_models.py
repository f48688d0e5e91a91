"""Models: parameter counts from the papers, output shapes, name validation."""

import math

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_sel import models
from fedjax_sel.models.conv_ops import canonical_conv, max_pool_2x2


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
  assert models.models.resolve_conv_impl("auto", "cpu") == "canonical"
  assert models.models.resolve_conv_impl("auto", "gpu") == "xla"
  with pytest.raises(ValueError, match="conv_impl='fft'"):
    models.make("cnn_mnist", (28, 28, 1), 10, conv_impl="fft")


_NHWC = ("NHWC", "HWIO", "NHWC")


@pytest.mark.parametrize(
  "x_shape,w_shape,padding",
  [
    ((3, 28, 28, 1), (5, 5, 1, 32), "SAME"),
    ((2, 14, 14, 32), (5, 5, 32, 64), "SAME"),
    ((3, 32, 32, 3), (5, 5, 3, 32), "VALID"),
    ((2, 9, 7, 4), (3, 2, 4, 5), ((1, 2), (0, 3))),
  ],
)
@pytest.mark.parametrize("in_loop", [False, True])
def test_canonical_conv_equals_lax_conv_and_its_gradients(x_shape, w_shape, padding, in_loop):
  kx, kw, kg = jax.random.split(jax.random.PRNGKey(0), 3)
  x = jax.random.normal(kx, x_shape)
  w = jax.random.normal(kw, w_shape)

  def value_and_grads(conv):
    def loss(x, w):
      y = conv(x, w, (1, 1), padding, dimension_numbers=_NHWC)
      return jnp.sum(jnp.sin(y)), y

    f = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)
    if in_loop:  # inside a while loop, where XLA:CPU keeps autodiff's layouts
      g = f
      f = lambda x, w: jax.lax.fori_loop(0, 1, lambda i, c: g(x, w), g(x, w))
    (_, y), (dx, dw) = jax.jit(f)(x, w)
    return y, dx, dw

  got = value_and_grads(canonical_conv)
  want = value_and_grads(jax.lax.conv_general_dilated)
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(jnp.max(jnp.abs(b))))


def test_canonical_conv_falls_back_for_strides():
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 9, 9, 3))
  w = jax.random.normal(jax.random.PRNGKey(1), (3, 3, 3, 4))
  got = canonical_conv(x, w, (2, 2), "SAME", dimension_numbers=_NHWC)
  want = jax.lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=_NHWC)
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", [(2, 8, 6, 3), (1, 5, 7, 2)])
@pytest.mark.parametrize("ties", [False, True])
def test_max_pool_2x2_equals_flax_max_pool_and_its_gradient(shape, ties):
  key = jax.random.PRNGKey(3)
  if ties:  # few distinct values: most windows hold several maxima (as ReLU zeros do)
    x = jax.random.randint(key, shape, 0, 3).astype(jnp.float32)
  else:
    x = jax.random.normal(key, shape)
  g = jax.random.normal(jax.random.PRNGKey(4), (shape[0], shape[1] // 2, shape[2] // 2, shape[3]))
  flax_pool = lambda x: nn.max_pool(x, (2, 2), strides=(2, 2))
  for pool_fn in (jax.jit, lambda f: jax.jit(jax.vmap(f))):
    xs = x if pool_fn is jax.jit else x[None]
    gs = g if pool_fn is jax.jit else g[None]
    got, vjp_got = jax.vjp(pool_fn(max_pool_2x2), xs)
    want, vjp_want = jax.vjp(pool_fn(flax_pool), xs)
    np.testing.assert_array_equal(got, want)
    # the gradient goes to the first maximum of each window, bit for bit
    np.testing.assert_array_equal(vjp_got(gs)[0], vjp_want(gs)[0])


class _FlaxMnistCNN(nn.Module):
  """The MNIST CNN written with flax's own convolution and max pooling (the reference)."""

  @nn.compact
  def __call__(self, x):
    x = nn.max_pool(nn.relu(nn.Conv(32, (5, 5), padding="SAME")(x)), (2, 2), strides=(2, 2))
    x = nn.max_pool(nn.relu(nn.Conv(64, (5, 5), padding="SAME")(x)), (2, 2), strides=(2, 2))
    x = nn.relu(nn.Dense(512)(x.reshape((x.shape[0], -1))))
    return nn.Dense(10)(x)


@pytest.mark.parametrize("conv_impl", ["canonical", "xla"])
def test_cnn_mnist_equals_flax_layers_in_a_training_loop(conv_impl):
  """Three SGD steps in a loop (where the fast paths matter) equal flax's own layers."""
  m = models.make("cnn_mnist", (28, 28, 1), 10, conv_impl=conv_impl)
  params = m.init(jax.random.PRNGKey(0))
  ref = _FlaxMnistCNN()
  x = jax.nn.relu(jax.random.normal(jax.random.PRNGKey(1), (3, 4, 28, 28, 1)))  # zeros: ties
  y = jax.random.randint(jax.random.PRNGKey(2), (3, 4), 0, 10)

  def train(apply):
    def loss(p, xb, yb):
      return optax.softmax_cross_entropy_with_integer_labels(apply(p, xb), yb).mean()

    def step(i, p):
      g = jax.grad(loss)(p, x[i], y[i])
      return jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g)

    return jax.jit(lambda p: jax.lax.fori_loop(0, 3, step, p))(params)

  got = train(m.apply)
  want = train(lambda p, xb: ref.apply({"params": p}, xb))
  chex.assert_trees_all_close(got, want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ initialisation


TORCH_FAN_INS = {  # fan_in of each layer, by hand: in_channels x 5 x 5, or in_features
  "cnn_mnist": {"Conv_0": 25, "Conv_1": 800, "Dense_0": 3136, "Dense_1": 512},
  "cnn_cifar": {"Conv_0": 75, "Conv_1": 800, "Dense_0": 1600, "Dense_1": 384, "Dense_2": 192},
  "mlp": {"Dense_0": 784, "Dense_1": 200},
  "logreg": {"Dense_0": 784},
}


@pytest.mark.parametrize("name", sorted(TORCH_FAN_INS))
def test_torch_init_draws_pytorchs_default_bounds(name):
  """``param_init="torch"``: PyTorch's Conv2d / Linear defaults, kernels kaiming_uniform(a =
  sqrt(5)) and biases both U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the std of a U(-b, b) is
  b / sqrt(3). ``flax`` keeps flax's zero biases."""
  shape = (32, 32, 3) if name == "cnn_cifar" else (28, 28, 1)
  model = models.make(name, shape, 10, param_init="torch")
  params = model.init(jax.random.PRNGKey(1))
  fan_in = TORCH_FAN_INS[name]
  assert set(params) == set(fan_in)
  for layer, n in fan_in.items():
    bound = 1 / math.sqrt(n)
    for part in ("kernel", "bias"):
      v = np.asarray(params[layer][part])
      assert np.abs(v).max() <= bound, (layer, part)
      if v.size >= 500:  # enough draws for the spread: near the bound and a uniform's std
        assert np.abs(v).max() > 0.95 * bound, (layer, part)
        assert v.std() == pytest.approx(bound / math.sqrt(3), rel=0.1), (layer, part)
  flax_params = models.make(name, shape, 10).init(jax.random.PRNGKey(1))
  for layer in fan_in:
    assert not np.any(np.asarray(flax_params[layer]["bias"]))
    assert flax_params[layer]["kernel"].shape == params[layer]["kernel"].shape


def test_param_init_is_checked():
  with pytest.raises(ValueError, match="param_init='pytorch'; allowed: flax, torch"):
    models.make("cnn_mnist", (28, 28, 1), 10, param_init="pytorch")

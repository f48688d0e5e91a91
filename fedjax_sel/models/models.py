"""Logistic regression, MLP and the two CNNs of the papers, as flax modules."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sel.core.registry import Registry, check_range
from fedjax_sel.models.conv_ops import canonical_conv, max_pool_2x2
from fedjax_sel.models.im2col import im2col_conv

CONV_IMPLS = ("auto", "xla", "canonical", "im2col")


def _conv(conv_impl: str) -> Callable[..., nn.Module]:
  """``nn.Conv`` (``xla``), or ``nn.Conv`` with the same params computing the convolution
  with canonical-layout gradients (``canonical``) or as patches @ kernel (``im2col``)."""
  if conv_impl == "im2col":
    return lambda *a, **k: nn.Conv(*a, conv_general_dilated=im2col_conv, **k)
  if conv_impl == "canonical":
    return lambda *a, **k: nn.Conv(*a, conv_general_dilated=canonical_conv, **k)
  return nn.Conv


def resolve_conv_impl(conv_impl: str, backend: str | None = None) -> str:
  """``auto``: ``canonical`` on CPU (autodiff's gradient convolutions run on XLA:CPU's slow
  path inside loops, ``fedjax_sel.models.conv_ops``), else ``xla``."""
  if conv_impl not in CONV_IMPLS:
    raise ValueError(f"conv_impl={conv_impl!r} is not one of {list(CONV_IMPLS)}")
  if conv_impl == "auto":
    return "canonical" if (backend or jax.default_backend()) == "cpu" else "xla"
  return conv_impl


class Model(NamedTuple):
  """A pure model: ``init(key) -> params``, ``apply(params, x) -> logits f32[B, C]``."""

  init: Callable[[jax.Array], dict]
  apply: Callable[[dict, jax.Array], jax.Array]
  name: str
  input_shape: tuple[int, ...]
  num_classes: int
  conv: bool = False
  conv_impl: str | None = None  # the convolutions of a CNN (``CONV_IMPLS``, resolved)


class LogisticRegression(nn.Module):
  """Multinomial logistic regression (the FedProx/FedGS Synthetic model)."""

  num_classes: int

  @nn.compact
  def __call__(self, x):
    x = x.reshape((x.shape[0], -1))
    return nn.Dense(self.num_classes)(x)


class MLP(nn.Module):
  """A ReLU MLP, e.g. 60-200-10 for Synthetic."""

  num_classes: int
  hidden: Sequence[int] = (200,)

  @nn.compact
  def __call__(self, x):
    x = x.reshape((x.shape[0], -1))
    for width in self.hidden:
      x = nn.relu(nn.Dense(width)(x))
    return nn.Dense(self.num_classes)(x)


class MnistCNN(nn.Module):
  """The CNN of McMahan et al. 2017 (FedAvg) for 28x28 images.

  Two 5x5 convolutions (32, 64 channels), each followed by 2x2 max pooling, a
  512-unit ReLU layer and a softmax output (1,663,370 parameters on MNIST).
  """

  num_classes: int
  conv_impl: str = "xla"

  @nn.compact
  def __call__(self, x):
    conv = _conv(self.conv_impl)
    x = nn.relu(conv(32, (5, 5), padding="SAME")(x))
    x = max_pool_2x2(x)
    x = nn.relu(conv(64, (5, 5), padding="SAME")(x))
    x = max_pool_2x2(x)
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(512)(x))
    return nn.Dense(self.num_classes)(x)


class CifarCNN(nn.Module):
  """A small CIFAR-10 CNN (two 5x5 conv + pool layers, 384-192 dense, as in FedGS/FLGo)."""

  num_classes: int
  conv_impl: str = "xla"

  @nn.compact
  def __call__(self, x):
    conv = _conv(self.conv_impl)
    x = nn.relu(conv(32, (5, 5), padding="VALID")(x))
    x = max_pool_2x2(x)
    x = nn.relu(conv(64, (5, 5), padding="VALID")(x))
    x = max_pool_2x2(x)
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(384)(x))
    x = nn.relu(nn.Dense(192)(x))
    return nn.Dense(self.num_classes)(x)


_REGISTRY = Registry("model")


def _wrap(module: nn.Module, name: str, input_shape, num_classes, conv=False) -> Model:
  conv_impl = getattr(module, "conv_impl", None) if conv else None
  dummy = jnp.zeros((1, *input_shape), jnp.float32)

  def init(key):
    return module.init(key, dummy)["params"]

  def apply(params, x):
    return module.apply({"params": params}, x)

  return Model(init, apply, name, tuple(input_shape), num_classes, conv, conv_impl)


def num_params(model: Model) -> int:
  """The number of scalar parameters of ``model`` (abstractly: nothing is initialized)."""
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0))
  return sum(int(math.prod(s.shape)) for s in jax.tree_util.tree_leaves(shapes))


def _check(input_shape, num_classes):
  check_range("num_classes", num_classes, 2)
  if not input_shape or any(int(d) < 1 for d in input_shape):
    raise ValueError(f"input_shape={tuple(input_shape)!r} must be non-empty positive dims")


@_REGISTRY.register("logreg")
def make_logreg(input_shape, num_classes) -> Model:
  _check(input_shape, num_classes)
  return _wrap(LogisticRegression(num_classes), "logreg", input_shape, num_classes)


@_REGISTRY.register("mlp")
def make_mlp(input_shape, num_classes, hidden: Sequence[int] = (200,)) -> Model:
  _check(input_shape, num_classes)
  if any(int(h) < 1 for h in hidden):
    raise ValueError(f"hidden={tuple(hidden)!r}: every width must be >= 1")
  return _wrap(MLP(num_classes, tuple(hidden)), "mlp", input_shape, num_classes)


def _check_image(name, input_shape, min_side):
  if len(input_shape) != 3 or min(input_shape[:2]) < min_side:
    raise ValueError(
      f"model {name!r} needs image inputs (H, W, C) with H, W >= {min_side}; "
      f"got input_shape={tuple(input_shape)}"
    )


@_REGISTRY.register("cnn_mnist")
def make_cnn_mnist(input_shape, num_classes, conv_impl: str = "auto") -> Model:
  """``conv_impl``: one of ``CONV_IMPLS`` (``auto``: ``canonical`` on CPU, else ``xla``)."""
  _check(input_shape, num_classes)
  _check_image("cnn_mnist", input_shape, 4)
  module = MnistCNN(num_classes, resolve_conv_impl(conv_impl))
  return _wrap(module, "cnn_mnist", input_shape, num_classes, conv=True)


@_REGISTRY.register("cnn_cifar")
def make_cnn_cifar(input_shape, num_classes, conv_impl: str = "auto") -> Model:
  """``conv_impl``: one of ``CONV_IMPLS`` (``auto``: ``canonical`` on CPU, else ``xla``)."""
  _check(input_shape, num_classes)
  _check_image("cnn_cifar", input_shape, 13)
  module = CifarCNN(num_classes, resolve_conv_impl(conv_impl))
  return _wrap(module, "cnn_cifar", input_shape, num_classes, conv=True)


MODELS = tuple(_REGISTRY.names())


def make(name: str, input_shape, num_classes: int, **hparams) -> Model:
  """Builds a model by name: one of ``MODELS``."""
  return _REGISTRY.make(name, input_shape=tuple(input_shape), num_classes=num_classes, **hparams)


def names() -> list[str]:
  return _REGISTRY.names()

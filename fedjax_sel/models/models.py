"""Logistic regression, MLP, the papers' CNNs and ResNet-18, as flax modules."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.core.registry import Registry, check_count, check_range, is_integer
from fedjax_sel.models.conv_ops import canonical_conv, max_pool_2x2
from fedjax_sel.models.im2col import im2col_conv
from fedjax_sel.models.precision import FULL, compute_dtype, conv_kwargs, dense_kwargs

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


# How a layer's parameters start: ``flax`` (lecun_normal kernels, zero biases: flax's own
# defaults) or ``torch`` (PyTorch's ``Conv2d`` / ``Linear`` defaults: kernels
# kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)), biases the same U), the
# initialisation of the papers' released PyTorch code.
PARAM_INITS = ("flax", "torch")


def layer_inits(param_init: str, fan_in: int) -> dict:
  """``kernel_init`` / ``bias_init`` keyword arguments of a Dense or Conv layer with
  ``fan_in`` inputs per output (in_features, or in_channels x kernel height x width)."""
  if param_init == "flax":
    return {}
  bound = 1.0 / math.sqrt(fan_in)

  def bias_init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)

  # variance_scaling(1/3, fan_in, uniform): U(-sqrt(3 * (1/3) / fan_in), +...) = U(-bound, bound)
  kernel_init = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
  return {"kernel_init": kernel_init, "bias_init": bias_init}


def _dense(features: int, x, param_init: str, dtype=FULL) -> jax.Array:
  return nn.Dense(features, **layer_inits(param_init, x.shape[-1]), **dense_kwargs(dtype))(x)


def _logits(x) -> jax.Array:
  """The model's output, float32 whatever it computed in (losses and metrics are float32)."""
  return x.astype(FULL)


class Model(NamedTuple):
  """A pure model: ``init(key) -> params``, ``apply(params, x) -> logits f32[B, C]``.

  Parameters are float32 always; ``compute_dtype`` is what ``apply`` computes in
  (``"bfloat16"`` under ``half_precision``, see ``fedjax_sel.models.precision``)."""

  init: Callable[[jax.Array], dict]
  apply: Callable[[dict, jax.Array], jax.Array]
  name: str
  input_shape: tuple[int, ...]
  num_classes: int
  conv: bool = False
  conv_impl: str | None = None  # the convolutions of a CNN (``CONV_IMPLS``, resolved)
  compute_dtype: str = "float32"


class LogisticRegression(nn.Module):
  """Multinomial logistic regression (the FedProx/FedGS Synthetic model)."""

  num_classes: int
  param_init: str = "flax"
  dtype: Any = FULL  # compute dtype; parameters are float32

  @nn.compact
  def __call__(self, x):
    x = x.reshape((x.shape[0], -1)).astype(self.dtype)
    return _logits(_dense(self.num_classes, x, self.param_init, self.dtype))


class MLP(nn.Module):
  """A ReLU MLP, e.g. 60-200-10 for Synthetic."""

  num_classes: int
  hidden: Sequence[int] = (200,)
  param_init: str = "flax"
  dtype: Any = FULL  # compute dtype; parameters are float32

  @nn.compact
  def __call__(self, x):
    x = x.reshape((x.shape[0], -1)).astype(self.dtype)
    for width in self.hidden:
      x = nn.relu(_dense(width, x, self.param_init, self.dtype))
    return _logits(_dense(self.num_classes, x, self.param_init, self.dtype))


def _conv_pool_stack(module, x, widths, kernel: int, padding: str):
  """``conv -> ReLU -> 2x2 max pool`` per width, then flattened: the CNNs' feature stack.

  Called inside a module's compact ``__call__``, so the layers are that module's own
  (``Conv_0``, ``Conv_1``, ... in order); under half precision they compute in
  ``module.dtype``."""
  conv = _conv(module.conv_impl)
  x = x.astype(module.dtype)
  for width in widths:
    kw = {
      **layer_inits(module.param_init, x.shape[-1] * kernel * kernel),
      **conv_kwargs(module.dtype),
    }
    x = nn.relu(conv(width, (kernel, kernel), padding=padding, **kw)(x))
    x = max_pool_2x2(x)
  return x.reshape((x.shape[0], -1))


def _dense_head(module, x, hidden, num_classes: int):
  """ReLU dense layers of the given widths, then the float32 logits."""
  for width in hidden:
    x = nn.relu(_dense(width, x, module.param_init, module.dtype))
  return _logits(_dense(num_classes, x, module.param_init, module.dtype))


class MnistCNN(nn.Module):
  """The CNN of McMahan et al. 2017 (FedAvg) for 28x28 images.

  Two 5x5 convolutions (32, 64 channels), each followed by 2x2 max pooling, a
  512-unit ReLU layer and a softmax output (1,663,370 parameters on MNIST).
  """

  num_classes: int
  conv_impl: str = "xla"
  param_init: str = "flax"
  dtype: Any = FULL  # compute dtype; parameters are float32

  @nn.compact
  def __call__(self, x):
    x = _conv_pool_stack(self, x, (32, 64), kernel=5, padding="SAME")
    return _dense_head(self, x, (512,), self.num_classes)


class CifarCNN(nn.Module):
  """A small CIFAR-10 CNN (two 5x5 conv + pool layers, 384-192 dense, as in FedGS/FLGo)."""

  num_classes: int
  conv_impl: str = "xla"
  param_init: str = "flax"
  dtype: Any = FULL  # compute dtype; parameters are float32

  @nn.compact
  def __call__(self, x):
    x = _conv_pool_stack(self, x, (32, 64), kernel=5, padding="VALID")
    return _dense_head(self, x, (384, 192), self.num_classes)


class Stl10CNN(nn.Module):
  """FedEMD's STL-10 network: "a shallow CNN with 3-convolutional layer followed by 2
  fully-connected layer" (Huang et al., Supplement A.9), for 96x96x3 images.

  A.9 gives neither kernels nor widths; we chose three 3x3 SAME convolutions (32, 64, 128
  channels), each followed by ReLU and 2x2 max pooling (96 -> 48 -> 24 -> 12), then a
  256-unit ReLU layer and the output layer: 4,814,666 parameters at 10 classes.
  """

  num_classes: int
  channels: Sequence[int] = (32, 64, 128)
  hidden: int = 256
  conv_impl: str = "xla"
  param_init: str = "flax"
  dtype: Any = FULL  # compute dtype; parameters are float32

  @nn.compact
  def __call__(self, x):
    x = _conv_pool_stack(self, x, tuple(self.channels), kernel=3, padding="SAME")
    return _dense_head(self, x, (self.hidden,), self.num_classes)


GROUP_NORM_EPS = 1e-5  # PyTorch's nn.GroupNorm / nn.BatchNorm2d default


def _norm(groups: int, dtype) -> nn.Module:
  """GroupNorm (PyTorch's defaults: eps 1e-5, scale 1, bias 0; float32 parameters and
  statistics, output in ``dtype``)."""
  return nn.GroupNorm(num_groups=groups, epsilon=GROUP_NORM_EPS, **conv_kwargs(dtype))


PAD_1 = ((1, 1), (1, 1))  # PyTorch's padding=1


def _bias_free_conv(module, features: int, kernel: int, strides: int, padding, inputs):
  """A ``kernel`` x ``kernel`` convolution without bias, as PyTorch's ResNets, in the calling
  module's compact scope (``module.conv_impl``, ``param_init`` and ``dtype``)."""
  init = layer_inits(module.param_init, inputs.shape[-1] * kernel * kernel)
  init.pop("bias_init", None)
  kw = {**init, **conv_kwargs(module.dtype)}
  conv = _conv(module.conv_impl)
  return conv(
    features, (kernel, kernel), (strides, strides), padding=padding, use_bias=False, **kw
  )(inputs)


class BasicBlock(nn.Module):
  """ResNet's basic block: two 3x3 convolutions with a norm each and an identity shortcut,
  or a 1x1 strided convolution + norm where the shape changes (He et al. 2016, option B)."""

  features: int
  strides: int = 1
  norm_groups: int = 2
  conv_impl: str = "xla"
  param_init: str = "flax"
  dtype: Any = FULL

  @nn.compact
  def __call__(self, x):
    def layer(features, kernel, strides, padding, inputs):
      return _bias_free_conv(self, features, kernel, strides, padding, inputs)

    same = PAD_1  # PyTorch's padding=1 (flax's "SAME" pads (0, 1) at stride 2)
    y = nn.relu(_norm(self.norm_groups, self.dtype)(layer(self.features, 3, self.strides, same, x)))
    y = _norm(self.norm_groups, self.dtype)(layer(self.features, 3, 1, same, y))
    if self.strides != 1 or x.shape[-1] != self.features:
      x = _norm(self.norm_groups, self.dtype)(layer(self.features, 1, self.strides, "VALID", x))
    return nn.relu(y + x)


class ResNet18(nn.Module):
  """The CIFAR-style ResNet-18 (He et al. 2016; the form of FedAR's SVHN model).

  A 3x3 stride-1 stem (no max pool), four stages of two BasicBlocks with ``width`` x (1, 2,
  4, 8) channels (64-128-256-512), the last three starting with stride 2, global average
  pooling and a dense output: 11,173,962 parameters at width 64 and 10 classes. Every
  BatchNorm is a GroupNorm of ``norm_groups`` groups (same parameter count): batch
  statistics are per client and do not average across clients, and a ``Model`` has no
  mutable state for running averages (FedAR's text names ResNet-18 only; no released code
  was found). Convolutions have no bias. Under ``conv_impl="canonical"`` the three stride-2
  3x3 convolutions and the 1x1 shortcuts fall back to ``lax.conv_general_dilated``
  (``canonical_conv`` handles stride 1); ``im2col`` handles every stride.
  """

  num_classes: int
  width: int = 64
  norm_groups: int = 2
  conv_impl: str = "xla"
  param_init: str = "flax"
  dtype: Any = FULL  # compute dtype; parameters are float32

  @nn.compact
  def __call__(self, x):
    x = _bias_free_conv(self, self.width, 3, 1, PAD_1, x.astype(self.dtype))
    x = nn.relu(_norm(self.norm_groups, self.dtype)(x))
    for stage, mult in enumerate((1, 2, 4, 8)):
      for block in range(2):
        strides = 2 if stage > 0 and block == 0 else 1
        x = BasicBlock(
          self.width * mult,
          strides,
          self.norm_groups,
          self.conv_impl,
          self.param_init,
          self.dtype,
        )(x)
    x = jnp.mean(x, axis=(1, 2))
    return _logits(_dense(self.num_classes, x, self.param_init, self.dtype))


_REGISTRY = Registry("model")


def _wrap(module: nn.Module, name: str, input_shape, num_classes, conv=False) -> Model:
  conv_impl = getattr(module, "conv_impl", None) if conv else None
  dtype_name = jnp.dtype(module.dtype).name
  dummy = jnp.zeros((1, *input_shape), jnp.float32)

  def init(key):
    return module.init(key, dummy)["params"]

  def apply(params, x):
    return module.apply({"params": params}, x)

  return Model(init, apply, name, tuple(input_shape), num_classes, conv, conv_impl, dtype_name)


def num_params(model: Model) -> int:
  """The number of scalar parameters of ``model`` (abstractly: nothing is initialized)."""
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0))
  return sum(int(math.prod(s.shape)) for s in jax.tree_util.tree_leaves(shapes))


def _check(input_shape, num_classes, param_init="flax", half_precision=False):
  check_range("num_classes", num_classes, 2)
  if not isinstance(half_precision, (bool, np.bool_)):
    raise ValueError(f"half_precision={half_precision!r}; allowed: True or False")
  if param_init not in PARAM_INITS:
    raise ValueError(f"param_init={param_init!r}; allowed: {', '.join(PARAM_INITS)}")
  if not input_shape or any(int(d) < 1 for d in input_shape):
    raise ValueError(f"input_shape={tuple(input_shape)!r} must be non-empty positive dims")


@_REGISTRY.register("logreg")
def make_logreg(
  input_shape, num_classes, param_init: str = "flax", half_precision: bool = False
) -> Model:
  """``half_precision``: compute in bfloat16 over float32 parameters (``models.precision``)."""
  _check(input_shape, num_classes, param_init, half_precision)
  module = LogisticRegression(num_classes, param_init, compute_dtype(half_precision))
  return _wrap(module, "logreg", input_shape, num_classes)


@_REGISTRY.register("mlp")
def make_mlp(
  input_shape,
  num_classes,
  hidden: Sequence[int] = (200,),
  param_init: str = "flax",
  half_precision: bool = False,
) -> Model:
  """``half_precision``: compute in bfloat16 over float32 parameters (``models.precision``)."""
  _check(input_shape, num_classes, param_init, half_precision)
  if any(int(h) < 1 for h in hidden):
    raise ValueError(f"hidden={tuple(hidden)!r}: every width must be >= 1")
  module = MLP(num_classes, tuple(hidden), param_init, compute_dtype(half_precision))
  return _wrap(module, "mlp", input_shape, num_classes)


def _check_image(name, input_shape, min_side):
  if len(input_shape) != 3 or min(input_shape[:2]) < min_side:
    raise ValueError(
      f"model {name!r} needs image inputs (H, W, C) with H, W >= {min_side}; "
      f"got input_shape={tuple(input_shape)}"
    )


@_REGISTRY.register("cnn_mnist")
def make_cnn_mnist(
  input_shape,
  num_classes,
  conv_impl: str = "auto",
  param_init: str = "flax",
  half_precision: bool = False,
) -> Model:
  """``conv_impl``: one of ``CONV_IMPLS`` (``auto``: ``canonical`` on CPU, else ``xla``);
  ``param_init``: one of ``PARAM_INITS``; ``half_precision``: compute in bfloat16 over
  float32 parameters (``models.precision``)."""
  _check(input_shape, num_classes, param_init, half_precision)
  _check_image("cnn_mnist", input_shape, 4)
  dtype = compute_dtype(half_precision)
  module = MnistCNN(num_classes, resolve_conv_impl(conv_impl), param_init, dtype)
  return _wrap(module, "cnn_mnist", input_shape, num_classes, conv=True)


@_REGISTRY.register("cnn_cifar")
def make_cnn_cifar(
  input_shape,
  num_classes,
  conv_impl: str = "auto",
  param_init: str = "flax",
  half_precision: bool = False,
) -> Model:
  """``conv_impl``: one of ``CONV_IMPLS`` (``auto``: ``canonical`` on CPU, else ``xla``);
  ``param_init``: one of ``PARAM_INITS``; ``half_precision``: compute in bfloat16 over
  float32 parameters (``models.precision``)."""
  _check(input_shape, num_classes, param_init, half_precision)
  _check_image("cnn_cifar", input_shape, 13)
  dtype = compute_dtype(half_precision)
  module = CifarCNN(num_classes, resolve_conv_impl(conv_impl), param_init, dtype)
  return _wrap(module, "cnn_cifar", input_shape, num_classes, conv=True)


@_REGISTRY.register("cnn_stl10")
def make_cnn_stl10(
  input_shape,
  num_classes,
  channels: Sequence[int] = (32, 64, 128),
  hidden: int = 256,
  conv_impl: str = "auto",
  param_init: str = "flax",
  half_precision: bool = False,
) -> Model:
  """FedEMD's STL-10 CNN (``Stl10CNN``; 96x96x3 inputs). ``channels``: the three
  convolutions' widths; ``hidden``: the first dense layer's; ``conv_impl``, ``param_init``,
  ``half_precision`` as ``cnn_cifar``."""
  _check(input_shape, num_classes, param_init, half_precision)
  _check_image("cnn_stl10", input_shape, 8)
  channels = tuple(channels)
  if len(channels) != 3 or any(not is_integer(c, strict=True) or c < 1 for c in channels):
    raise ValueError(f"channels={channels!r}; allowed: three integers >= 1")
  check_count("hidden", hidden, strict=True)
  dtype = compute_dtype(half_precision)
  impl = resolve_conv_impl(conv_impl)
  module = Stl10CNN(num_classes, channels, int(hidden), impl, param_init, dtype)
  return _wrap(module, "cnn_stl10", input_shape, num_classes, conv=True)


@_REGISTRY.register("resnet18")
def make_resnet18(
  input_shape,
  num_classes,
  width: int = 64,
  norm_groups: int = 2,
  conv_impl: str = "auto",
  param_init: str = "flax",
  half_precision: bool = False,
) -> Model:
  """CIFAR-style ResNet-18 with GroupNorm (``ResNet18``; e.g. SVHN's 32x32x3). ``width``:
  the first stage's channels (64); ``norm_groups``: groups of every GroupNorm (must divide
  ``width``); ``conv_impl``, ``param_init``, ``half_precision`` as ``cnn_cifar``."""
  _check(input_shape, num_classes, param_init, half_precision)
  _check_image("resnet18", input_shape, 8)
  check_count("width", width, strict=True)
  check_count("norm_groups", norm_groups, strict=True)
  if width % norm_groups:
    raise ValueError(
      f"norm_groups={norm_groups!r} does not divide width={width!r}; allowed: divisors of width"
    )
  dtype = compute_dtype(half_precision)
  impl = resolve_conv_impl(conv_impl)
  module = ResNet18(num_classes, int(width), int(norm_groups), impl, param_init, dtype)
  return _wrap(module, "resnet18", input_shape, num_classes, conv=True)


MODELS = tuple(_REGISTRY.names())


def make(name: str, input_shape, num_classes: int, **hparams) -> Model:
  """Builds a model by name: one of ``MODELS``."""
  return _REGISTRY.make(name, input_shape=tuple(input_shape), num_classes=num_classes, **hparams)


def names() -> list[str]:
  return _REGISTRY.names()

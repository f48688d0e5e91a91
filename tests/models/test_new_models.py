"""ResNet-18 (FedAR's SVHN model) and FedEMD's STL-10 CNN: parameter counts by hand, logits,
GroupNorm's per-example normalisation, conv paths, half precision, a gradient step, errors.

ResNet-18 (CIFAR-style, bias-free convolutions, every norm a GroupNorm with scale and bias),
first-stage width w, C classes, channels w, 2w, 4w, 8w:
  stem: 3x3x3xw conv + norm                                      = 27w + 2w
  stage 1: 2 blocks x (2 x 3x3xwxw + 2 norms)                      = 36w^2 + 8w
  stage 2: block 1: 3x3xwx2w + 3x3x2wx2w + 1x1xwx2w + 3 norms      = 56w^2 + 12w
           block 2: 2 x 3x3x2wx2w + 2 norms                        = 72w^2 + 8w
  stage 3 (twice the channels of stage 2): 4 x (128w^2) + 2 x 20w   = 512w^2 + 40w
  stage 4: 4 x 512w^2 + 2 x 40w                                    = 2048w^2 + 80w
  dense: 8w x C + C
  total: 2724 w^2 + 177 w + 8wC + C
w = 64, C = 10: 2724 x 4096 + 177 x 64 + 5120 + 10 = 11,157,504 + 11,328 + 5,130
= 11,173,962 (the standard 11.17M; BatchNorm's scale and bias count the same).
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_sel import models
from fedjax_sel.models.im2col import im2col_conv

SVHN, STL = (32, 32, 3), (96, 96, 3)
NHWC = ("NHWC", "HWIO", "NHWC")


def resnet18_count(w: int, c: int) -> int:
  return 2724 * w * w + 177 * w + 8 * w * c + c


def stl10_count(channels, hidden, c, side=96, in_channels=3) -> int:
  """3x3 convs with biases; three 2x2 pools: side / 8 on each side before the dense layers."""
  total, cin = 0, in_channels
  for cout in channels:
    total += 9 * cin * cout + cout
    cin = cout
  flat = (side // 8) ** 2 * cin
  return total + flat * hidden + hidden + hidden * c + c


def _count(params) -> int:
  return sum(int(x.size) for x in jax.tree_util.tree_leaves(params))


@pytest.mark.parametrize(
  "name,shape,hparams,classes,count",
  [
    ("resnet18", SVHN, {}, 10, 11_173_962),
    ("resnet18", SVHN, {"width": 4}, 3, 44_391),  # 2724*16 + 177*4 + 8*4*3 + 3
    ("resnet18", SVHN, {"width": 4, "norm_groups": 4}, 3, 44_391),  # groups add nothing
    ("cnn_stl10", STL, {}, 10, 4_814_666),  # 896 + 18,496 + 73,856 + 4,718,848 + 2,570
    ("cnn_stl10", STL, {"channels": (2, 3, 4), "hidden": 5}, 10, 3_170),  # 56+57+112+2885+60
  ],
)
def test_parameter_counts_by_hand(name, shape, hparams, classes, count):
  model = models.make(name, shape, classes, **hparams)
  assert models.num_params(model) == count  # abstractly, nothing initialized
  w = hparams.get("width")
  if name == "resnet18":
    assert count == resnet18_count(w or 64, classes)
  else:
    assert count == stl10_count(
      hparams.get("channels", (32, 64, 128)), hparams.get("hidden", 256), classes
    )
  assert model.conv and model.conv_impl in ("canonical", "xla")


def test_resnet18_layout_groupnorm_and_stride_two_stages():
  params = jax.eval_shape(models.make("resnet18", SVHN, 10).init, jax.random.PRNGKey(0))
  blocks = sorted(k for k in params if k.startswith("BasicBlock"))
  assert len(blocks) == 8  # 4 stages x 2 blocks
  names = {k for block in params.values() for k in block}
  assert not any("BatchNorm" in k for k in names) and "GroupNorm_0" in names
  # the first block of stages 2-4 has the 1x1 shortcut conv (64->128, 128->256, 256->512)
  shortcuts = [params[b]["Conv_2"]["kernel"].shape for b in blocks if "Conv_2" in params[b]]
  assert shortcuts == [(1, 1, 64, 128), (1, 1, 128, 256), (1, 1, 256, 512)]
  assert params["Dense_0"]["kernel"].shape == (512, 10)
  assert "bias" not in params["Conv_0"]  # bias-free convolutions
  # stages 2-4 start with stride 2: on 32x32 inputs the blocks' outputs are 32, 16, 8, 4 wide
  module, x = models.ResNet18(10, width=4), jnp.zeros((1, *SVHN))

  def intermediates():
    variables = module.init(jax.random.PRNGKey(0), x)
    return module.apply(variables, x, capture_intermediates=True)[1]["intermediates"]

  out = jax.eval_shape(intermediates)
  sides = [out[f"BasicBlock_{i}"]["__call__"][0].shape[1:] for i in range(8)]
  assert sides == [(s, s, 4 * m) for s, m in ((32, 1), (16, 2), (8, 4), (4, 8)) for _ in range(2)]


# Small widths keep the compiles short; each (model, hparams) is built, initialised and
# compiled once for the whole file. The keys are "rbg": XLA:CPU compiles threefry's bit
# generation for ResNet-18's 62 parameter arrays in ~30 s, rbg's in a few.
SMALL = {"resnet18": (SVHN, {"width": 4}), "cnn_stl10": (STL, {"channels": (4, 4, 4), "hidden": 8})}


@functools.cache
def _built(name, **hparams):
  shape, small = SMALL[name]
  model = models.make(name, shape, 10, **{**small, **hparams})
  return model, jax.jit(model.init)(jax.random.key(0, impl="rbg")), jax.jit(model.apply)


def _inputs(name, n=2, seed=1):
  return jax.random.uniform(jax.random.PRNGKey(seed), (n, *SMALL[name][0]))


def test_groupnorm_normalises_each_example_alone():
  """No batch statistics: an example's logits do not depend on the rest of its batch (what
  makes the model averageable across clients)."""
  _, params, apply = _built("resnet18")
  x = _inputs("resnet18", 3)
  a = apply(params, x[:2])
  b = apply(params, jnp.stack([x[0], x[2]]))
  assert a.shape == (2, 10) and a.dtype == jnp.float32
  np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6)
  assert not np.allclose(a[1], b[1])


def test_stride_two_convolutions_equal_lax_conv_as_im2col():
  """ResNet's downsampling: a 3x3 stride-2 conv with PyTorch's padding 1 and a 1x1 stride-2
  shortcut; ``im2col`` computes them as patches @ kernel (``canonical`` passes strided convs
  to lax: tests/models/test_models.py)."""
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 8, 8, 3))
  for kernel, pads in ((3, ((1, 1), (1, 1))), (1, ((0, 0), (0, 0)))):
    w = jax.random.normal(jax.random.PRNGKey(kernel), (kernel, kernel, 3, 5))
    ref = jax.lax.conv_general_dilated(x, w, (2, 2), pads, dimension_numbers=NHWC)
    assert ref.shape == (2, 4, 4, 5)
    out = jax.jit(lambda x, w, p=pads: im2col_conv(x, w, (2, 2), p, dimension_numbers=NHWC))(x, w)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_cnn_stl10_conv_impls_give_the_same_logits():
  _, params, apply = _built("cnn_stl10")
  x = _inputs("cnn_stl10")
  ref = apply(params, x)
  assert ref.shape == (2, 10)
  for impl in ("xla", "im2col"):
    out = jax.jit(_built("cnn_stl10", conv_impl=impl)[0].apply)(params, x)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_half_precision_float32_params_and_logits_within_bfloat16_rounding(name):
  full, params, apply = _built(name)
  half, half_params, half_apply = _built(name, half_precision=True)
  assert half.compute_dtype == "bfloat16" and full.compute_dtype == "float32"
  jax.tree.map(np.testing.assert_array_equal, params, half_params)  # same init, float32
  assert {str(p.dtype) for p in jax.tree.leaves(half_params)} == {"float32"}
  x = _inputs(name)
  a, b = apply(params, x), half_apply(params, x)
  assert b.dtype == jnp.float32
  err, scale = float(jnp.max(jnp.abs(a - b))), float(jnp.max(jnp.abs(a)))
  assert 0 < err <= 5e-2 * scale, (err, scale)  # it computed in bfloat16, to its rounding


def _sgd_steps(model, params, x, y, steps, lr):
  opt = optax.sgd(lr)

  def loss_fn(p):
    return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x), y).mean()

  @jax.jit
  def step(p, s):
    loss, g = jax.value_and_grad(loss_fn)(p)
    updates, s = opt.update(g, s, p)
    return optax.apply_updates(p, updates), s, loss, g

  state, losses, grads = opt.init(params), [], None
  for _ in range(steps):
    params, state, loss, g = step(params, state)
    losses.append(float(loss))
    grads = grads or g
  return losses, grads, params


@pytest.mark.parametrize("name", sorted(SMALL))
def test_gradient_steps_lower_the_loss_and_reach_every_parameter(name):
  model, params, _ = _built(name)
  losses, grads, params = _sgd_steps(model, params, _inputs(name), jnp.array([3, 7]), 3, 0.05)
  assert losses[0] == pytest.approx(math.log(10), abs=1.0)  # near-uniform start
  assert losses[2] < losses[0]
  assert all(bool(jnp.all(jnp.isfinite(p))) for p in jax.tree.leaves(params))
  assert all(float(jnp.max(jnp.abs(g))) > 0 for g in jax.tree.leaves(grads))


def test_torch_init_bounds_by_fan_in():
  """``param_init="torch"``: PyTorch's Conv2d default U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
  the bias-free kernels, GroupNorm's scale 1 and bias 0 (one stride-2 block: its two 3x3
  convolutions and its 1x1 shortcut)."""
  block = models.models.BasicBlock(16, strides=2, norm_groups=2, param_init="torch")
  params = jax.jit(block.init)(jax.random.key(0, impl="rbg"), jnp.zeros((1, 8, 8, 8)))["params"]
  fan_ins = {"Conv_0": 9 * 8, "Conv_1": 9 * 16, "Conv_2": 8}  # kh x kw x in_channels
  assert set(params) == {*fan_ins, "GroupNorm_0", "GroupNorm_1", "GroupNorm_2"}
  for layer, fan_in in fan_ins.items():
    kernel = np.abs(np.asarray(params[layer]["kernel"]))
    assert set(params[layer]) == {"kernel"}
    assert 0.9 / math.sqrt(fan_in) < kernel.max() <= 1 / math.sqrt(fan_in), layer
  for layer in ("GroupNorm_0", "GroupNorm_1", "GroupNorm_2"):
    assert np.all(np.asarray(params[layer]["scale"]) == 1)
    assert not np.any(np.asarray(params[layer]["bias"]))


@pytest.mark.parametrize(
  "name,shape,hparams,match",
  [
    ("resnet18", SVHN, {"width": 6, "norm_groups": 4}, "norm_groups=4 does not divide width=6"),
    ("resnet18", SVHN, {"width": 0}, r"width=0 is out of range; allowed: integers >= 1"),
    (
      "resnet18",
      SVHN,
      {"norm_groups": 2.0},
      r"norm_groups=2.0 is out of range; allowed: integers >= 1",
    ),
    ("resnet18", (60,), {}, "model 'resnet18' needs image inputs"),
    ("cnn_stl10", STL, {"channels": (8, 8)}, r"channels=\(8, 8\); allowed: three integers"),
    ("cnn_stl10", STL, {"hidden": -1}, r"hidden=-1 is out of range; allowed: integers >= 1"),
    ("cnn_stl10", (4, 4, 3), {}, "model 'cnn_stl10' needs image inputs"),
    ("cnn_stl10", STL, {"conv_impl": "cudnn"}, "conv_impl='cudnn'"),
  ],
)
def test_bad_hyperparameters_are_one_clear_error(name, shape, hparams, match):
  with pytest.raises(ValueError, match=match):
    models.make(name, shape, 10, **hparams)


@pytest.mark.slow
def test_resnet18_conv_impls_give_the_same_logits():
  _, params, apply = _built("resnet18")
  x = _inputs("resnet18")
  ref = apply(params, x)
  for impl in ("xla", "im2col"):
    out = jax.jit(_built("resnet18", conv_impl=impl)[0].apply)(params, x)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_names_are_registered():
  assert {"resnet18", "cnn_stl10"} <= set(models.names())


@pytest.mark.slow
def test_full_resnet18_gradient_step_at_batch_two():
  """The real width (11.17M parameters) at SVHN's 32x32x3, batch 2."""
  model = models.make("resnet18", SVHN, 10)
  params = jax.jit(model.init)(jax.random.PRNGKey(0))
  x = jax.random.uniform(jax.random.PRNGKey(2), (2, *SVHN))
  losses, grads, _ = _sgd_steps(model, params, x, jnp.array([1, 4]), steps=2, lr=0.01)
  assert _count(grads) == 11_173_962
  assert losses[1] < losses[0]

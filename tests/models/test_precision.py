"""Half precision (fedjax_sel.models.precision): bfloat16 compute over float32 parameters.

Facts checked: parameters, gradients, optimizer state and aggregation stay float32; every
matmul of a model's forward and backward pass has bfloat16 operands and a float32 result
(the XLA:CPU fast path); the activations are bfloat16 and the logits float32; a bfloat16
model equals its float32 self to bfloat16 rounding; a short run agrees with float32 within
a stated tolerance; the conv paths equal the float32 convolution to bfloat16 rounding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from fedjax_sel import experiment, models
from fedjax_sel.models import precision
from fedjax_sel.models.conv_ops import canonical_conv
from fedjax_sel.models.im2col import im2col_conv

SHAPES = {"logreg": (60,), "mlp": (784,), "cnn_mnist": (28, 28, 1), "cnn_cifar": (32, 32, 3)}
# bfloat16 keeps 8 significant bits: a relative rounding of 2**-8 per operand; a model's
# logits after a few layers stay within a few percent of float32 (measured max: ~1.5e-2)
LOGIT_RTOL = 5e-2


def _dots(jaxpr) -> list:
  """Every dot_general of a jaxpr, inner jaxprs (custom_vjp, pjit) included."""
  out = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      out.append(eqn)
    for v in eqn.params.values():
      for sub in v if isinstance(v, (list, tuple)) else (v,):
        inner = getattr(sub, "jaxpr", sub)
        if hasattr(inner, "eqns"):
          out += _dots(inner)
  return out


def _model(name, half, **hp):
  return models.make(name, SHAPES[name], 10, half_precision=half, **hp)


@pytest.mark.parametrize("name", list(SHAPES))
def test_parameters_are_float32_and_logits_float32_under_half_precision(name):
  m = _model(name, True)
  params = m.init(jax.random.PRNGKey(0))
  assert m.compute_dtype == "bfloat16"
  assert {str(p.dtype) for p in jax.tree.leaves(params)} == {"float32"}
  x = jax.random.normal(jax.random.PRNGKey(1), (4, *SHAPES[name]))
  assert m.apply(params, x).dtype == jnp.float32
  grads = jax.grad(lambda p: m.apply(p, x).sum())(params)
  assert {str(g.dtype) for g in jax.tree.leaves(grads)} == {"float32"}


@pytest.mark.parametrize("name", list(SHAPES))
def test_same_parameters_as_float32_and_logits_equal_to_bfloat16_rounding(name):
  full, half = _model(name, False), _model(name, True)
  p_full, p_half = full.init(jax.random.PRNGKey(0)), half.init(jax.random.PRNGKey(0))
  jax.tree.map(np.testing.assert_array_equal, p_full, p_half)  # same init, same dtype
  x = jax.random.normal(jax.random.PRNGKey(1), (8, *SHAPES[name]))
  a, b = full.apply(p_full, x), half.apply(p_half, x)
  scale = float(jnp.max(jnp.abs(a)))
  err = float(jnp.max(jnp.abs(a - b)))
  assert err <= LOGIT_RTOL * scale, (err, scale)
  assert err > 0  # it did compute in bfloat16: float32 would be exact here


@pytest.mark.parametrize("name", ["mlp", "cnn_mnist"])
def test_every_matmul_has_bfloat16_operands_and_float32_accumulation(name):
  m = _model(name, True)
  params = m.init(jax.random.PRNGKey(0))
  x = jnp.ones((2, *SHAPES[name]))
  grad = jax.make_jaxpr(jax.grad(lambda p: m.apply(p, x).sum()))(params)
  dots = _dots(grad.jaxpr)
  assert len(dots) >= 3 * (2 if name == "mlp" else 2)  # forward + both gradients per layer
  for eqn in dots:
    assert [str(v.aval.dtype) for v in eqn.invars] == ["bfloat16", "bfloat16"], eqn
    assert eqn.params["preferred_element_type"] == jnp.float32, eqn


def test_float32_model_has_no_bfloat16_anywhere():
  m = _model("cnn_mnist", False)
  params = m.init(jax.random.PRNGKey(0))
  text = str(jax.make_jaxpr(jax.grad(lambda p: m.apply(p, jnp.ones((2, 28, 28, 1))).sum()))(params))
  assert "bf16" not in text


def test_activations_are_bfloat16():
  m = models.MLP(10, (16,), dtype=jnp.bfloat16)
  x = jnp.ones((3, 8))
  params = m.init(jax.random.PRNGKey(0), x)
  _, inter = m.apply(params, x, capture_intermediates=True)
  hidden = inter["intermediates"]["Dense_0"]["__call__"][0]
  assert hidden.dtype == jnp.bfloat16
  assert jax.tree.leaves(params)[0].dtype == jnp.float32


def test_mixed_matmul_and_its_gradients_equal_float32_on_bfloat16_values():
  """Inputs that are exact in bfloat16 (small integers): float32 accumulation gives the
  float32 product exactly, forward and both gradients (a bfloat16 result would round)."""
  k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
  a = jax.random.randint(k1, (3, 5, 7), -8, 8).astype(jnp.float32)
  b = jax.random.randint(k2, (7, 4), -8, 8).astype(jnp.float32)
  g = jax.random.randint(k3, (3, 5, 4), -4, 4).astype(jnp.float32)
  out, vjp = jax.vjp(lambda a, b: precision.mixed_matmul(a, b).astype(jnp.float32), a, b)
  np.testing.assert_array_equal(out, a @ b)  # |sums| <= 7 * 64 = 448: exact in bfloat16
  da, db = vjp(g)
  np.testing.assert_array_equal(da, g @ b.T)
  np.testing.assert_array_equal(db, jnp.einsum("ijk,ijl->kl", a, g))
  assert da.dtype == db.dtype == jnp.float32


def test_mixed_dot_general_passes_other_contractions_through():
  a, b = jnp.ones((2, 3, 4)), jnp.ones((2, 4, 5))
  dn = (((2,), (1,)), ((0,), (0,)))  # a batched matmul: not a dense layer's contraction
  out = precision.mixed_dot_general(a, b, dn)
  np.testing.assert_array_equal(out, jax.lax.dot_general(a, b, dn))


@pytest.mark.parametrize("conv", [canonical_conv, im2col_conv], ids=["canonical", "im2col"])
def test_bfloat16_convolution_equals_float32_to_bfloat16_rounding(conv):
  dn = ("NHWC", "HWIO", "NHWC")
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 9, 9, 3))
  w = jax.random.normal(jax.random.PRNGKey(1), (5, 5, 3, 4))
  ref = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn)

  def run(x, w):
    return conv(x, w, (1, 1), "SAME", dimension_numbers=dn).astype(jnp.float32)

  half = run(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16))
  # 75 products of bfloat16-rounded operands: relative error ~ 2**-8 of the terms' scale
  np.testing.assert_allclose(half, ref, atol=0.05 * float(jnp.max(jnp.abs(ref))))
  gx, gw = jax.grad(lambda x, w: (run(x, w) * ref).sum(), argnums=(0, 1))(
    x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
  )
  rx, rw = jax.grad(
    lambda x, w: (
      jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn) * ref
    ).sum(),
    argnums=(0, 1),
  )(x, w)
  for got, want in ((gx, rx), (gw, rw)):
    assert got.dtype == jnp.bfloat16
    err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want)))
    assert err <= 0.05 * float(jnp.max(jnp.abs(want))), err


def _config(half, **kw):
  c = experiment.default_config()
  c.update(
    dict(
      model="mlp",
      mlp_hidden=32,
      num_clients=10,
      clients_per_round=4,
      rounds=20,
      eval_every=10,
      half_precision=half,
    )
  )
  c.update(kw)
  return c


def test_simulation_state_stays_float32_under_half_precision():
  sim, _ = experiment.build(_config(True, aggregator="mifa"))
  state = sim.init()
  state, _ = sim.run_rounds(state, 2)
  for part in (state.params, state.server_opt_state, state.aggregation_state):
    dtypes = {str(x.dtype) for x in jax.tree.leaves(part) if jnp.issubdtype(x.dtype, jnp.floating)}
    assert dtypes <= {"float32"}, dtypes


def test_short_run_agrees_with_float32(tmp_path):
  """20 rounds of an MLP on Synthetic: bfloat16 compute moves the test loss by < 3 % and the
  accuracy by < 2 points (measured: 1.2 % and 0.4 points)."""
  out = {}
  for half in (False, True):
    summary = experiment.run(_config(half, output_dir=str(tmp_path / str(half))), progress=None)
    out[half] = summary
  assert out[True]["half_precision"] and not out[False]["half_precision"]
  assert out[True]["compute_dtype"] == "bfloat16"
  full, half = out[False], out[True]
  assert abs(half["final_test_loss"] - full["final_test_loss"]) < 0.03 * full["final_test_loss"]
  assert abs(half["final_test_accuracy"] - full["final_test_accuracy"]) < 2.0
  assert half["final_test_loss"] != full["final_test_loss"]  # it did compute in bfloat16


def test_bad_half_precision_is_rejected_with_its_name():
  bad = _config(False).to_dict()
  bad["half_precision"] = "yes"  # a config read from JSON or a dict, not type-checked
  with pytest.raises(ValueError, match="half_precision='yes'"):
    experiment.validate_config(ml_collections.ConfigDict(bad))
  with pytest.raises(ValueError, match="half_precision=1"):
    models.make("mlp", (4,), 3, half_precision=1)


def test_study_flag_sets_every_cell_and_a_float32_cell_is_not_reused(tmp_path, monkeypatch):
  from experiments import common

  monkeypatch.setattr(common, "half_precision_flag", lambda: True)
  c = common.seed_config(_config(False, rounds=2, eval_every=1), 3)
  assert c.half_precision is True and c.seed == 3
  folder = tmp_path / "cell" / "seed3"
  folder.mkdir(parents=True)
  finished_float32 = {"complete": True, "rounds": 2, "half_precision": False}
  (folder / "summary.json").write_text(json.dumps(finished_float32))
  (folder / "metrics.jsonl").write_text("")
  out = common.run_cells(
    {"cell": (_config(False, rounds=2, eval_every=1), str(tmp_path / "cell"))}, [3]
  )
  summary, _ = out["cell"][0]
  assert summary["half_precision"] is True and summary["compute_dtype"] == "bfloat16"


STUDIES = ["fedar", "fedemd", "fl_fdms", "clustered_sampling", "fedgs_table2", "atlas"]


@pytest.mark.slow
@pytest.mark.parametrize("study", STUDIES)
def test_every_study_quick_runs_in_half_precision(study, tmp_path):
  env = {**os.environ, "FEDJAX_SEL_TINY": "1", "JAX_PLATFORMS": "cpu"}
  out = tmp_path / study
  args = ["--quick", "--half_precision", f"--output_dir={out}"]
  proc = subprocess.run(
    [sys.executable, "-m", f"experiments.{study}", *args],
    env=env,
    capture_output=True,
    text=True,
    timeout=1800,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  summaries = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs if f == "summary.json"]
  cells = [s for s in summaries if os.path.basename(os.path.dirname(s)).startswith("seed")]
  assert cells
  for path in cells:
    with open(path) as f:
      s = json.load(f)
    assert s["half_precision"] is True and s["compute_dtype"] == "bfloat16", path

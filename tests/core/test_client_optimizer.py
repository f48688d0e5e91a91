"""Client optimizers (momentum as a value, coupled weight decay) and client lr schedules.

Expected values are worked out by hand: the schedules' lr at given rounds, and local SGD
steps written out in numpy (softmax cross-entropy gradient of logistic regression,
PyTorch SGD's update rule), compared with the engine's deltas to 1e-6.
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from fedjax_sel import client, experiment, models
from fedjax_sel.core import engine
from fedjax_sel.core.simulation import (
  SimulationConfig,
  make_client_lr_schedule,
  make_client_optimizer,
)
from fedjax_sel.data.federated import split_from_lists
from fedjax_sel.experiment import config as experiment_config

# ------------------------------------------------------------------------------ schedules


@pytest.mark.parametrize(
  "t,expected",
  [(0, 0.1), (1, 0.05), (2, 0.025), (5, 0.003125)],  # 0.1 * 0.5**t
)
def test_exponential_schedule_by_hand(t, expected):
  lr = make_client_lr_schedule(0.1, "exponential", lr_decay=0.5)
  np.testing.assert_allclose(float(lr(jnp.int32(t))), expected, rtol=1e-6)


def test_exponential_default_is_unchanged():
  # FedGS's 0.1 x 0.998^t: 0.998^100 = exp(100 ln 0.998) = 0.818566...
  lr = make_client_lr_schedule(0.1, lr_decay=0.998)
  np.testing.assert_allclose(float(lr(jnp.int32(100))), 0.0818566, rtol=1e-5)
  np.testing.assert_allclose(float(lr(jnp.int32(0))), 0.1, rtol=1e-7)


@pytest.mark.parametrize(
  "t,expected",
  # FedEMD's Fashion-MNIST setting (App. A.10): lr 0.001, step 10, gamma 0.1
  [(0, 1e-3), (1, 1e-3), (9, 1e-3), (10, 1e-4), (19, 1e-4), (20, 1e-5), (29, 1e-5), (30, 1e-6)],
)
def test_step_schedule_fedemd_by_hand(t, expected):
  lr = make_client_lr_schedule(0.001, "step", step_size=10, step_gamma=0.1)
  np.testing.assert_allclose(float(lr(jnp.int32(t))), expected, rtol=1e-6)


def test_step_schedule_boundaries_by_hand():
  # 0.2 * 0.5 ** floor(t / 3): 0.2 for t = 0..2, 0.1 for 3..5, 0.05 for 6..8, 0.025 at 9
  lr = make_client_lr_schedule(0.2, "step", lr_decay=0.5, step_size=3, step_gamma=0.5)
  got = [float(lr(jnp.int32(t))) for t in range(10)]
  np.testing.assert_allclose(got, [0.2] * 3 + [0.1] * 3 + [0.05] * 3 + [0.025], rtol=1e-6)
  # lr_decay plays no part in the step schedule
  lr1 = make_client_lr_schedule(0.2, "step", lr_decay=1.0, step_size=3, step_gamma=0.5)
  assert [float(lr1(jnp.int32(t))) for t in range(10)] == got


def test_round_loop_uses_the_step_schedule(small_synthetic):
  """Five rounds through experiment.build: the lr each round reports is 0.1 * 0.5^(t // 2)."""
  c = experiment.default_config()
  c.num_clients, c.clients_per_round, c.local_steps = 12, 3, 2
  c.client_lr, c.lr_schedule, c.lr_step_size, c.lr_step_gamma = 0.1, "step", 2, 0.5
  c.client_momentum, c.client_weight_decay = 0.5, 0.001
  sim, _ = experiment.build(c, small_synthetic)
  assert sim.config.lr_schedule == "step" and sim.config.client_momentum == 0.5
  assert sim.config.client_weight_decay == 0.001 and sim.config.lr_step_size == 2
  _, metrics = sim.run_rounds(sim.init(0), 5)
  np.testing.assert_allclose(
    np.asarray(metrics["client_lr"]), [0.1, 0.1, 0.05, 0.05, 0.025], rtol=1e-6
  )


def test_round_loop_steps_each_clients_own_schedule(small_synthetic):
  """``lr_schedule_unit="participation"``: a client's lr is 0.1 * 0.5^(its earlier
  trainings // 2), from the sampling counts before each round, checked round by round."""
  c = experiment.default_config()
  c.num_clients, c.clients_per_round, c.local_steps = 12, 3, 2
  c.client_lr, c.lr_schedule, c.lr_step_size, c.lr_step_gamma = 0.1, "step", 2, 0.5
  c.lr_schedule_unit, c.availability = "participation", "always"
  sim, _ = experiment.build(c, small_synthetic)
  state = sim.init(0)
  reported, expected = [], []
  for _ in range(12):
    before = np.asarray(state.sampling_counts)
    state, m = sim.round_step(state)
    after = np.asarray(state.sampling_counts)
    chosen = np.flatnonzero(after > before)
    assert len(chosen) == 3
    expected.append(np.mean(0.1 * 0.5 ** (before[chosen] // 2)))
    reported.append(float(m["client_lr"]))
  np.testing.assert_allclose(reported, expected, rtol=1e-6)
  assert min(expected) < 0.1 and len(set(np.round(expected, 6))) > 2  # schedules diverged


def test_mlp_hidden_sets_the_width(small_synthetic):
  """``mlp_hidden`` is the MLP's one hidden layer: d x h + h + h x C + C parameters."""
  c = experiment.default_config()
  c.model, c.mlp_hidden, c.num_clients = "mlp", 50, 12
  sim, _ = experiment.build(c, small_synthetic)
  d, k = small_synthetic.input_shape[0], small_synthetic.num_classes
  n = sum(a.size for a in jax.tree_util.tree_leaves(sim.init(0).params))
  assert n == d * 50 + 50 + 50 * k + k


# ------------------------------------------------------------------------------ local steps


def _softmax_ce_grads(w, b, x, y):
  """Gradients of mean softmax cross-entropy of logits x @ w + b (numpy, by hand)."""
  z = x @ w + b
  z = z - z.max(axis=1, keepdims=True)
  p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
  dz = (p - np.eye(w.shape[1])[y]) / len(y)
  return x.T @ dz, dz.sum(axis=0)


def _numpy_sgd(w, b, x, y, lr, mu, wd, steps):
  """PyTorch SGD (dampening 0, not Nesterov) on the full batch: g += wd p; buf = mu buf + g."""
  buf_w, buf_b = np.zeros_like(w), np.zeros_like(b)
  for k in range(steps):
    gw, gb = _softmax_ce_grads(w, b, x, y)
    gw, gb = gw + wd * w, gb + wd * b
    buf_w = gw if k == 0 else mu * buf_w + gw
    buf_b = gb if k == 0 else mu * buf_b + gb
    w, b = w - lr * buf_w, b - lr * buf_b
  return w, b


@pytest.mark.parametrize(
  "name,momentum,weight_decay,mu",
  [
    ("sgd", 0.0, 0.0, 0.0),
    ("sgd", 0.9, 0.0, 0.9),
    ("sgd", 0.0, 0.01, 0.0),
    ("sgd", 0.5, 0.001, 0.5),
    ("momentum", 0.0, 0.0, 0.9),  # backward compatible: "momentum" alone means 0.9
    ("momentum", 0.5, 0.01, 0.5),
  ],
)
@pytest.mark.parametrize("steps", [1, 3])
def test_local_steps_equal_numpy_pytorch_sgd(name, momentum, weight_decay, mu, steps):
  rng = np.random.default_rng(0)
  n, d, c = 8, 5, 3
  xs = [rng.normal(size=(n, d)).astype(np.float32), rng.normal(size=(4, d)).astype(np.float32)]
  ys = [rng.integers(0, c, n), rng.integers(0, c, 4)]
  train = split_from_lists(xs, ys)
  model = models.make("logreg", (d,), c)
  params = model.init(jax.random.PRNGKey(1))
  # non-zero bias so weight decay acts on it as well (PyTorch decays every parameter)
  params = jax.tree_util.tree_map(lambda a: a + 0.3, params)
  dense = params["Dense_0"]
  lr = 0.2
  trainer = engine.make_cohort_trainer(
    model.apply,
    client.make("sgd"),
    make_client_optimizer(name, momentum, weight_decay),
    jnp.asarray(train.x),
    jnp.asarray(train.y),
    train.offsets,
    train.counts,
    engine.EngineConfig(batch_size=n, local_steps=steps),  # full batch: order-free
    1,
  )
  out = jax.jit(trainer)(
    params, jnp.array([0]), jnp.array([True]), jax.random.PRNGKey(2), lr, jnp.array([0])
  )
  w0, b0 = np.asarray(dense["kernel"], np.float64), np.asarray(dense["bias"], np.float64)
  w, b = _numpy_sgd(w0, b0, xs[0].astype(np.float64), ys[0], lr, mu, weight_decay, steps)
  got = out.deltas["Dense_0"]
  np.testing.assert_allclose(np.asarray(got["kernel"][0]), w - w0, atol=1e-6)
  np.testing.assert_allclose(np.asarray(got["bias"][0]), b - b0, atol=1e-6)


def test_momentum_and_weight_decay_change_the_update():
  """Guards the test above against an optimizer that ignores its arguments."""
  rng = np.random.default_rng(0)
  w = rng.normal(size=(4, 3))
  x, y = rng.normal(size=(6, 4)), rng.integers(0, 3, 6)
  plain = _numpy_sgd(w, np.ones(3), x, y, 0.2, 0.0, 0.0, 3)[0]
  assert np.abs(_numpy_sgd(w, np.ones(3), x, y, 0.2, 0.9, 0.0, 3)[0] - plain).max() > 1e-3
  assert np.abs(_numpy_sgd(w, np.ones(3), x, y, 0.2, 0.0, 0.01, 3)[0] - plain).max() > 1e-4


# ------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
  "kwargs,message",
  [
    ({"momentum": 1.0}, "client_momentum=1.0 is out of range; allowed: [0.0, 1.0)"),
    ({"momentum": -0.1}, "client_momentum=-0.1 is out of range"),
    ({"momentum": float("nan")}, "client_momentum=nan is out of range"),
    ({"weight_decay": -1e-3}, "client_weight_decay=-0.001 is out of range"),
    ({"weight_decay": float("inf")}, "client_weight_decay=inf is out of range"),
    ({"weight_decay": "a"}, "client_weight_decay='a' is not a number"),
    ({"name": "adam"}, "client_optimizer='adam'; allowed: sgd, momentum"),
  ],
)
def test_bad_optimizer_values(kwargs, message):
  kwargs = {"name": "sgd", **kwargs}
  with pytest.raises(ValueError) as err:
    make_client_optimizer(**kwargs)
  assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
  "kwargs,message",
  [
    ({"schedule": "cosine"}, "lr_schedule='cosine'; allowed: exponential, step"),
    ({"schedule": "step"}, "lr_step_size=0 is out of range; allowed: integers >= 1"),
    ({"schedule": "step", "step_size": 2.5}, "lr_step_size=2.5 is out of range"),
    ({"schedule": "step", "step_size": True}, "lr_step_size=True is out of range"),
    ({"schedule": "step", "step_size": 5, "step_gamma": 0.0}, "lr_step_gamma=0.0 is out"),
    ({"schedule": "step", "step_size": 5, "step_gamma": 1.5}, "lr_step_gamma=1.5 is out"),
    ({"lr_decay": 0.0}, "lr_decay=0.0 is out of range"),
    ({"client_lr": 0.0}, "client_lr=0.0 is out of range"),
  ],
)
def test_bad_schedule_values(kwargs, message):
  kwargs = {"client_lr": 0.1, **kwargs}
  with pytest.raises(ValueError) as err:
    make_client_lr_schedule(**kwargs)
  assert message in str(err.value)


def test_simulation_config_rejects_bad_values(small_synthetic):
  from fedjax_sel.core.simulation import Simulation

  model = models.make("logreg", small_synthetic.input_shape, small_synthetic.num_classes)
  parts = experiment.make_components(
    ml_collections.ConfigDict(experiment.default_config().to_dict())
  )
  for bad, message in [
    (SimulationConfig(lr_schedule="step"), "lr_step_size=0"),
    (SimulationConfig(client_weight_decay=-1.0), "client_weight_decay=-1.0"),
    (SimulationConfig(client_momentum=2.0), "client_momentum=2.0"),
    (
      SimulationConfig(lr_schedule_unit="epoch"),
      "lr_schedule_unit='epoch'; allowed: round, participation",
    ),
  ]:
    with pytest.raises(ValueError, match=message):
      Simulation(small_synthetic, model, *parts, bad)


def test_resume_of_a_checkpoint_written_before_these_fields():
  """A checkpoint's config without the new fields ran with their defaults: it may resume."""
  now = experiment_config._fingerprint(experiment.default_config())
  new = ("client_momentum", "client_weight_decay", "lr_schedule", "lr_step_size", "lr_step_gamma")
  new += ("lr_schedule_unit",)
  saved = {k: v for k, v in now.items() if k not in new}
  experiment_config._check_same_config(saved, now, "out")  # no error
  c = experiment.default_config()
  c.client_momentum = 0.5
  with pytest.raises(experiment.ConfigError, match=r"client_momentum: None -> 0.5"):
    experiment_config._check_same_config(saved, experiment_config._fingerprint(c), "out")

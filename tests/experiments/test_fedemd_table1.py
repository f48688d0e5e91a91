"""experiments/fedemd.py, Table 1's set-ups: FedSGD against a gradient worked out by hand,
the new methods' cell configs, and the cell names that keep the committed FedAvg cells."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from experiments import fedemd
from experiments.configs import fedemd as fedemd_config
from fedjax_sel import experiment, testing

X = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [-1.0, 0.5], [0.5, -1.0]], np.float32)
Y = np.array([0, 1, 2, 1, 0], np.int32)
CLIENTS = [np.array([0, 1, 2]), np.array([3, 4])]  # 3 and 2 examples: size weights differ


def _tiny_data():
  return testing.toy_federated_data(X, Y, CLIENTS, num_classes=3)


def _config(setup: str):
  config = fedemd_config.get_config()
  config.aggregation_setup = setup
  b = config.base
  b.model, b.num_clients, b.clients_per_round, b.rounds = "logreg", 2, 2, 1
  b.client_lr = 0.5
  return fedemd.prepare_config(config)


def _full_batch_gradient(w, bias, x, y):
  """Softmax regression: d/dW mean CE = x^T (softmax(x W + b) - onehot) / n."""
  logits = x @ w + bias
  p = np.exp(logits - logits.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  err = p - np.eye(3)[y]
  return x.T @ err / len(y), err.mean(0)


def _one_round(cfg, data):
  sim, _ = experiment.build(cfg, data)
  state = sim.init(0)
  before = jax.tree_util.tree_map(np.asarray, state.params)
  state, _ = sim.run_rounds(state, 1)
  return before, jax.tree_util.tree_map(np.asarray, state.params)


def _kernel_bias(params):
  leaves = jax.tree_util.tree_leaves(params)
  (w,) = [a for a in leaves if a.ndim == 2]
  (b,) = [a for a in leaves if a.ndim == 1]
  return w, b


@pytest.mark.parametrize("batch", [0, 1, 2, 500])
def test_fedsgd_gradient_reading_is_minus_lr_times_the_plain_mean_gradient(batch):
  """The gradient reading (McMahan et al.'s FedSGD). Two clients (3 and 2 examples), both
  selected: one full-batch step each, the plain mean,
  server lr 1: W' - W = -0.5 (g_0 + g_1) / 2, not the size-weighted (3 g_0 + 2 g_1) / 5.
  batch 0: one padded batch of the largest client (momentum's first step is the gradient
  itself); 1 and 2: the gradient added up over batches of 1 or 2 (a partial last batch) at
  the global model; 500: one batch larger than every client."""
  data = _tiny_data()
  config = _config("fedsgd")
  config.fedsgd_reading = "gradient"
  config.fedsgd_batch_size = batch
  cfg = fedemd.cell_config(config, "random", fedemd.max_client_examples(data))
  assert (cfg.batch_size, cfg.local_epochs, cfg.local_steps) == (batch or 3, 1, 0)
  assert cfg.client_update == ("fedsgd" if batch else "sgd")
  assert cfg.aggregator_hparams.weighting == "uniform"
  before, after = _one_round(cfg, data)
  w, b = _kernel_bias(before)
  grads = [_full_batch_gradient(w, b, X[idx], Y[idx]) for idx in CLIENTS]
  mean_w = (grads[0][0] + grads[1][0]) / 2
  mean_b = (grads[0][1] + grads[1][1]) / 2
  w1, b1 = _kernel_bias(after)
  np.testing.assert_allclose(w1 - w, -0.5 * mean_w, atol=1e-6)
  np.testing.assert_allclose(b1 - b, -0.5 * mean_b, atol=1e-6)
  weighted = (3 * grads[0][0] + 2 * grads[1][0]) / 5
  assert np.abs(-0.5 * weighted - (w1 - w)).max() > 1e-3  # the test tells the two apart


def test_fedsgd_epoch_reading_is_fedavgs_local_epoch_and_the_plain_mean():
  """The default reading: FedAvg's cell config field for field, but the plain mean; its
  server update is the plain mean of the two clients' one-epoch deltas (client 0's 3
  examples weigh as much as client 1's 2), not their size-weighted mean."""
  data = _tiny_data()
  fedsgd, fedavg = _config("fedsgd"), _config("fedavg")
  assert fedsgd.fedsgd_reading == "epoch"
  for method in ("random", "fedprox", "fedemd"):
    a = fedemd.cell_config(fedsgd, method, 3).to_dict()
    b = fedemd.cell_config(fedavg, method, 3).to_dict()
    assert a.pop("aggregator_hparams") == {"weighting": "uniform"}
    assert b.pop("aggregator_hparams") == {"weighting": "selection"}
    assert a == b
    assert fedemd.cell_name(fedsgd, "1_excl", method) == f"1_excl_{method}_fedsgd"
  # batch 4 holds each client's whole data (3 and 2 examples), so each client's epoch is one
  # step, -lr x its full-batch gradient (momentum's first step is the gradient itself)
  before, after = _one_round(fedemd.cell_config(fedsgd, "random", 3), data)
  w, b = _kernel_bias(before)
  deltas = [-0.5 * _full_batch_gradient(w, b, X[idx], Y[idx])[0] for idx in CLIENTS]
  w1 = _kernel_bias(after)[0] - w
  np.testing.assert_allclose(w1, (deltas[0] + deltas[1]) / 2, atol=1e-6)
  assert np.abs((3 * deltas[0] + 2 * deltas[1]) / 5 - w1).max() > 1e-3


def test_bad_fedsgd_reading_is_one_line():
  config = fedemd_config.get_config()
  config.fedsgd_reading = "step"
  with pytest.raises(ValueError, match=r"^fedsgd_reading='step'; allowed: epoch, gradient$"):
    fedemd.prepare_config(config)


def test_fedavg_setup_keeps_the_committed_cell_config_and_names():
  config = _config("fedavg")
  for method in ("random", "fedemd", "shapley"):
    cfg = fedemd.cell_config(config, method, 6000)
    assert cfg.batch_size == 4 and cfg.client_update == "sgd"  # max_examples unused
    assert fedemd.cell_name(config, "1_excl", method) == f"1_excl_{method}"
  fedsgd = _config("fedsgd")
  assert fedemd.cell_name(fedsgd, "1_excl", "tifl") == "1_excl_tifl_fedsgd"
  fedsgd.fedsgd_reading = "gradient"
  assert fedemd.cell_name(fedsgd, "1_excl", "tifl") == "1_excl_tifl_fedsgd_gradient"


def test_new_methods_cell_configs():
  config = fedemd_config.get_config()
  tifl = fedemd.cell_config(config, "tifl")
  assert tifl.selection == "tifl"
  # credits 0 = ceil(200 rounds / 5 tiers) = 40
  assert tifl.selection_hparams.to_dict() == {
    "num_tiers": 5,
    "credits": 40,
    "interval": 1,
    "tier_by": "size",
    "accuracy_from": "tiers",
  }
  fast = fedemd.cell_config(config, "fedfast")
  assert fast.selection == "fedfast" and fast.selection_hparams.num_clusters == 5
  assert fast.sketch_dim == 64
  prox = fedemd.cell_config(config, "fedprox")
  assert prox.selection == "uniform" and prox.client_update == "fedprox"
  assert prox.client_update_hparams.mu == 0.01


def test_bad_aggregation_setup_is_one_line():
  config = fedemd_config.get_config()
  config.aggregation_setup = "fedsdg"
  with pytest.raises(ValueError, match=r"^aggregation_setup='fedsdg'; allowed: fedavg, fedsgd$"):
    fedemd.prepare_config(config)

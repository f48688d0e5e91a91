"""client update "fedsgd": one full-batch gradient step per client, its gradient added up over
the engine's batches at the global model. Equivalence with the padded single batch (the same
step computed the first way), the reported loss, and the checks of its inputs."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from fedjax_sel import client, experiment, testing

SIZES = (7, 3, 12, 1, 5)  # uneven, one client of one example


def _data():
  rng = np.random.default_rng(3)
  n = sum(SIZES)
  x = rng.normal(size=(n, 6)).astype(np.float32)
  y = rng.integers(0, 4, size=n).astype(np.int32)
  bounds = np.cumsum((0,) + SIZES)
  clients = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
  return testing.toy_federated_data(x, y, clients, num_classes=4)


def _config(**overrides):
  c = experiment.default_config()
  c.dataset, c.model, c.mlp_hidden = "synthetic", "mlp", 8
  c.num_clients, c.clients_per_round, c.rounds = len(SIZES), 3, 3
  c.local_epochs, c.local_steps, c.client_lr = 1, 0, 0.3
  c.aggregator_hparams.weighting = "uniform"
  for k, v in overrides.items():
    c[k] = v
  return c


def _run(cfg, data, rounds=3):
  sim, _ = experiment.build(cfg, data)
  state = sim.init(0)
  state, metrics = sim.run_rounds(state, rounds)
  return jax.tree_util.tree_map(np.asarray, state.params), metrics


@pytest.mark.parametrize("batch", [1, 2, 5, 64])
def test_batches_added_up_equal_one_padded_full_batch_step(batch):
  """Three rounds of an MLP: FedSGD over batches of 1, 2, 5 or 64 == plain SGD with one batch
  of the largest client (12, every client padded to it), to float rounding; the rounds'
  mean train loss too (each client's loss at the global model over all its examples)."""
  data = _data()
  padded, m_padded = _run(_config(batch_size=max(SIZES), client_update="sgd"), data)
  summed, m_summed = _run(_config(batch_size=batch, client_update="fedsgd"), data)
  for a, b in zip(jax.tree_util.tree_leaves(padded), jax.tree_util.tree_leaves(summed)):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(
    np.asarray(m_summed["train_loss"]), np.asarray(m_padded["train_loss"]), rtol=1e-5
  )


def test_gradient_at_the_moving_params_would_differ():
  """The test above can fail: plain local SGD over batches of 2 (each step's gradient at the
  params it has reached, i.e. FedAvg's one epoch) is not the full-batch step."""
  data = _data()
  padded, _ = _run(_config(batch_size=max(SIZES), client_update="sgd"), data)
  epoch, _ = _run(_config(batch_size=2, client_update="sgd"), data)
  diff = max(
    np.abs(a - b).max()
    for a, b in zip(jax.tree_util.tree_leaves(padded), jax.tree_util.tree_leaves(epoch))
  )
  assert diff > 1e-3


@pytest.mark.parametrize(
  "overrides, named",
  [
    ({"client_optimizer": "momentum"}, "client_optimizer='momentum' with momentum 0.9"),
    ({"client_momentum": 0.5}, "client_optimizer='sgd' with momentum 0.5"),
    ({"client_weight_decay": 0.01}, "client_weight_decay=0.01"),
    ({"local_epochs": 2}, "local_epochs=2"),
    ({"local_steps": 5}, "local_steps=5"),
  ],
)
def test_config_that_cannot_add_up_is_one_message(overrides, named):
  cfg = _config(client_update="fedsgd", **overrides)
  with pytest.raises(ValueError, match=r"^client_update='fedsgd' cannot run with ") as e:
    experiment.build(cfg, _data())
  assert named in str(e.value) and "\n" not in str(e.value)


def test_counts_are_checked():
  with pytest.raises(ValueError, match=r"needs client_counts"):
    client.make("fedsgd").init({"w": np.zeros(2)}, 3)
  with pytest.raises(ValueError, match=r"client_counts has 2 entries for 3 clients"):
    client.make("fedsgd", client_counts=[1, 2]).init({"w": np.zeros(2)}, 3)
  with pytest.raises(ValueError, match=r"negative count -1"):
    client.make("fedsgd", client_counts=[1, -1])
  with pytest.raises(ValueError, match=r"client_counts=\[1.5\]"):
    client.make("fedsgd", client_counts=[1.5])
  state = client.make("fedsgd", client_counts=[4, 0, 9]).init({"w": np.zeros(2)}, 3)
  aux = client.make("fedsgd", client_counts=[4, 0, 9]).prepare(state, np.array([2, 0]))
  np.testing.assert_array_equal(np.asarray(aux), [9.0, 4.0])

"""Library-level validation equals command-line validation.

For every value ``fedjax_sel.experiment.validate_config`` (the CLI's check) rejects, the
component that consumes the value rejects it too when built from Python, with one line
naming the value. And a hand-made ``FederatedData`` whose offsets or counts do not cover its
arrays is refused when a ``Simulation`` is built on it (not deep inside JAX).
"""

import math

import numpy as np
import pytest

from fedjax_sel import aggregation, availability, client, data, experiment, models, selection
from fedjax_sel.core import engine, simulation
from fedjax_sel.data import partitions
from fedjax_sel.data.federated import ClientSplit, FederatedData, check_federated_data

INF, NAN = math.inf, math.nan


def one_line_error(fn, *match):
  with pytest.raises(ValueError) as err:
    fn()
  text = str(err.value)
  assert "\n" not in text, text
  for m in match:
    assert m in text, (m, text)
  return text


def cli_rejects(**overrides):
  c = experiment.default_config()
  for k, v in overrides.items():
    c[k] = v
  with pytest.raises(ValueError):
    experiment.validate_config(c)


@pytest.fixture(scope="module")
def tiny():
  d = data.load("synthetic", 6, seed=0)
  return d, models.make("logreg", d.input_shape, d.num_classes)


def make_sim(tiny, m=2, **config):
  d, model = tiny
  return simulation.Simulation(
    d,
    model,
    availability.make("always"),
    selection.make("uniform", num_selected=m),
    aggregation.make("fedavg"),
    client.make("sgd"),
    simulation.SimulationConfig(**config),
  )


# ---------------------------------------------------------------- learning rates and optimizers


@pytest.mark.parametrize("lr", [0.0, -0.5, INF, NAN])
def test_server_lr(lr):
  cli_rejects(server_lr=lr)
  for name in simulation.SERVER_OPTIMIZERS:
    one_line_error(lambda name=name: simulation.make_server_optimizer(name, lr), "server_lr=")


@pytest.mark.parametrize("momentum", [-0.1, 1.0, 1.5, NAN])
def test_server_momentum(momentum):
  one_line_error(
    lambda: simulation.make_server_optimizer("momentum", 0.5, momentum), "server_momentum="
  )


@pytest.mark.parametrize("lr", [0.0, -1.0, INF, NAN])
def test_client_lr(tiny, lr):
  cli_rejects(client_lr=lr)
  one_line_error(lambda: make_sim(tiny, client_lr=lr), "client_lr=")


@pytest.mark.parametrize("decay", [0.0, 1.5, NAN])
def test_lr_decay(tiny, decay):
  cli_rejects(lr_decay=decay)
  one_line_error(lambda: make_sim(tiny, lr_decay=decay), "lr_decay=")


def test_optimizer_names(tiny):
  cli_rejects(server_optimizer="sgdx")
  cli_rejects(client_optimizer="adam")
  one_line_error(lambda: simulation.make_server_optimizer("sgdx", 1.0), "server_optimizer='sgdx'")
  one_line_error(lambda: simulation.make_client_optimizer("adam"), "client_optimizer='adam'")
  one_line_error(lambda: make_sim(tiny, server_optimizer="sgdx"), "sgdx")


# ---------------------------------------------------------------- engine, cohort, seeds


@pytest.mark.parametrize(
  "field,value",
  [
    ("batch_size", 0),
    ("local_steps", -1),
    ("chunk_size", -1),
    ("parallelism", "fast"),
  ],
)
def test_engine_values(tiny, field, value):
  cli_rejects(**{field: value})
  cfg = engine.EngineConfig(**{field: value})
  one_line_error(lambda: make_sim(tiny, engine=cfg), f"{field}=")


def test_engine_lower_bounds(tiny):
  """EngineConfig(local_steps=0) is refused (None means epochs; the CLI's 0 becomes None);
  batch 1, one local step and chunk_size 0 (its default) are allowed."""
  one_line_error(lambda: make_sim(tiny, engine=engine.EngineConfig(local_steps=0)), "local_steps=0")
  for cfg in (
    engine.EngineConfig(batch_size=1, local_steps=1, chunk_size=0),
    engine.EngineConfig(batch_size=1, local_epochs=1),
  ):
    engine.validate_engine_config(cfg)


def test_local_epochs_zero(tiny):
  cli_rejects(local_epochs=0)
  cfg = engine.EngineConfig(local_epochs=0)
  one_line_error(lambda: make_sim(tiny, engine=cfg), "local_epochs=0")


def test_sketch_dim(tiny):
  cli_rejects(sketch_dim=0)
  one_line_error(lambda: make_sim(tiny, sketch_dim=0), "sketch_dim=0")


@pytest.mark.parametrize("m", [0, 7])
def test_clients_per_round(tiny, m):
  cli_rejects(clients_per_round=m, num_clients=6)
  if m == 0:
    one_line_error(lambda: selection.make("uniform", num_selected=0), "num_selected=0")
  else:
    one_line_error(lambda: make_sim(tiny, m=m), "clients_per_round=7")


def test_seeds(tiny):
  cli_rejects(seed=-1)
  cli_rejects(availability_seed=-2)
  sim = make_sim(tiny)
  one_line_error(lambda: sim.init(seed=-1), "seed=-1")
  one_line_error(lambda: sim.init(seed=0, availability_seed=-2), "availability_seed=-2")


# ---------------------------------------------------------------- names and data


def test_component_and_model_names():
  for part, module in experiment.PARTS.items():
    cli_rejects(**{part: "no_such_name"})
    one_line_error(lambda module=module: module.make("no_such_name"), "no_such_name")
  cli_rejects(model="no_such_model")
  one_line_error(lambda: models.make("no_such_model", (3,), 2), "no_such_model")


@pytest.mark.parametrize(
  "field,value,call,match",
  [
    ("dataset", "nope", lambda: data.load("nope", 4), "nope"),
    ("num_clients", 0, lambda: data.load("synthetic", 0), "num_clients=0"),
    ("data_seed", -1, lambda: data.load("synthetic", 4, seed=-1), "seed=-1"),
    (
      "examples_per_client",
      -1,
      lambda: data.load("synthetic", 4, examples_per_client=-1),
      "examples_per_client=-1",
    ),
    ("synthetic_alpha", -1.0, lambda: data.load("synthetic", 4, alpha=-1.0), "alpha=-1.0"),
    ("synthetic_alpha", INF, lambda: data.load("synthetic", 4, alpha=INF), "alpha=inf"),
    ("synthetic_beta", INF, lambda: data.load("synthetic", 4, beta=INF), "beta=inf"),
    ("synthetic_beta", NAN, lambda: data.load("synthetic", 4, beta=NAN), "beta=nan"),
  ],
)
def test_data_values(field, value, call, match):
  cli_rejects(**{field: value})
  one_line_error(call, match)


@pytest.mark.parametrize("alpha", [0.0, -1.0, INF, NAN])
def test_partition_alpha(alpha):
  cli_rejects(partition_alpha=alpha)
  labels = np.repeat(np.arange(4), 10)
  rng = np.random.default_rng(0)
  one_line_error(lambda: partitions.dirichlet(labels, 4, alpha, rng=rng), "alpha=")


def test_partition_counts():
  labels = np.repeat(np.arange(4), 10)
  rng = np.random.default_rng(0)
  cli_rejects(labels_per_client=0)
  one_line_error(
    lambda: partitions.shards(labels, 4, labels_per_client=0, rng=rng), "labels_per_client=0"
  )
  cli_rejects(num_groups=0)
  one_line_error(lambda: partitions.clustered(labels, 4, num_groups=0, rng=rng), "num_groups=0")
  cli_rejects(partition="nope", dataset="digits")
  one_line_error(lambda: partitions.make_partition("nope", labels, 4, rng=rng), "nope")


@pytest.mark.parametrize("fraction", [1.0, -0.1])
def test_test_fraction(fraction):
  cli_rejects(test_fraction=fraction)
  one_line_error(
    lambda: data.load("synthetic", 4, test_fraction=fraction), f"test_fraction={fraction}"
  )


# ---------------------------------------------------------------- hand-made FederatedData


def handmade(train_counts=(3, 2, 4), test_counts=(1, 1, 2), num_classes=3, **change):
  rng = np.random.default_rng(0)

  def split(counts):
    counts = np.asarray(counts, np.int32)
    n = int(counts.sum())
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return ClientSplit(x, rng.integers(0, num_classes, n).astype(np.int32), offsets, counts)

  train, test = split(train_counts), split(test_counts)
  parts = dict(train=train, test=test, test_x=test.x, test_y=test.y, num_classes=num_classes)
  parts.update(change)
  return FederatedData(**parts)


def test_handmade_data_is_checked():
  good = handmade()
  check_federated_data(good)  # consistent: no error
  check_federated_data(handmade(train_counts=(0, 1, 0)))  # one example in all is enough
  bad_counts = good.test._replace(counts=np.array([1, 1, 5], np.int32))  # sum 7, x holds 4
  cases = [
    (handmade(test=bad_counts), "test: counts sum to 7 but x holds 4"),
    (
      handmade(train=good.train._replace(offsets=np.array([0, 3, 4], np.int32))),
      "train.offsets[2]=4; allowed: 5",
    ),
    (handmade(train=good.train._replace(counts=np.array([3, -1, 7], np.int32))), "counts >= 0"),
    (
      handmade(test=good.test._replace(offsets=np.array([0, 1], np.int32))),
      "offsets of shape (2,) and counts of shape (3,)",
    ),
    (handmade(train=good.train._replace(y=good.train.y + 3)), "train.y holds label"),
    (handmade(test_y=good.test_y[:-1]), "test_x/test_y: counts sum to 3 but x holds 4"),
    (handmade(test_counts=(2, 2)), "test split has 2 clients, train 3"),
    (handmade(train_counts=(0, 0, 0)), "all of its 3 clients have 0 training examples"),
  ]
  for bad, match in cases:
    one_line_error(lambda bad=bad: check_federated_data(bad), match)
    model = models.make("logreg", (4,), 3)

    def build(bad=bad, model=model):
      simulation.Simulation(
        bad,
        model,
        availability.make("always"),
        selection.make("uniform", num_selected=2),
        aggregation.make("fedavg"),
        client.make("sgd"),
      )

    one_line_error(build, match)


@pytest.mark.parametrize("field", ["num_noise_inputs", "loss_examples"])
def test_selection_context_sizes(tiny, field):
  one_line_error(lambda: make_sim(tiny, **{field: 0}), f"{field}=0")


@pytest.mark.parametrize("n", [0, -3, 2.0, True])
def test_run_rounds_needs_a_positive_integer(tiny, n):
  sim = make_sim(tiny)
  one_line_error(lambda: sim.run_rounds(sim.init(0), n), f"num_rounds={n!r}")


@pytest.mark.parametrize(
  "value, loose, strict",
  [
    (3, True, True),
    (np.int64(3), True, True),
    (-2, True, True),
    (3.0, True, False),
    (np.float32(3.0), True, False),
    (2.5, False, False),
    (True, False, False),
    (np.True_, False, False),
    (INF, False, False),
    (NAN, False, False),
    ("3", False, False),
    ("x", False, False),
    (None, False, False),
  ],
)
def test_is_integer(value, loose, strict):
  # The one integer check every component uses (core.registry.is_integer).
  from fedjax_sel.core.registry import is_integer

  assert is_integer(value) is loose
  assert is_integer(value, strict=True) is strict


@pytest.mark.parametrize("bad", ["abc", INF, 2.5, True])
def test_integer_hparams_of_availability_give_the_message(bad):
  one_line_error(lambda: availability.make("cluster_dropout", num_clusters=bad), "num_clusters=")
  one_line_error(lambda: availability.make("yc", beta=0.5, period=bad), "period=")

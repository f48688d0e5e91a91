"""Registry-wide contract: every availability model passes the same checks."""

import numpy as np
import pytest

from fedjax_sel import availability, testing

NUM_CLIENTS = 6
# Hyper-parameters a name needs to be built at all (everything else uses defaults).
REQUIRED = {"trace": {"trace": np.eye(NUM_CLIENTS, dtype=bool)[:4]}}
# Extra configurations that take a different code path.
VARIANTS = [
  ("bernoulli", {"probs": [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]}),
  ("cluster_dropout", {"mode": "fl_fdms", "num_clusters": 2, "dropout_rate": 0.5}),
]
CASES = [(name, REQUIRED.get(name, {})) for name in availability.names()] + VARIANTS
IDS = [f"{name}-{i}" for i, (name, _) in enumerate(CASES)]


@pytest.mark.parametrize("name,hparams", CASES, ids=IDS)
def test_contract(name, hparams, info6):
  """``testing.check_availability_model``: init deterministic per key, four rounds through
  one trace, probs f32[N] in [0, 1], sample bool[N] consistent with probs 0 and 1, a stable
  state, determinism, the eager path and vmap over seeds."""
  testing.check_availability_model(availability.make(name, **hparams), info6)


def test_unknown_name_lists_known_names():
  with pytest.raises(ValueError) as err:
    availability.make("sometimes")
  message = str(err.value)
  assert "'sometimes'" in message
  for name in availability.names():
    assert name in message


def test_every_required_mode_is_registered():
  expected = {
    "idl",
    "mdf",
    "ldf",
    "ymf",
    "yc",
    "ln",
    "sln",
    "always",
    "bernoulli",
    "markov",
    "cluster_dropout",
    "trace",
  }
  assert expected <= set(availability.names())


def test_unknown_hyperparameter_is_rejected():
  with pytest.raises(ValueError, match="beta"):
    availability.make("idl", beta=0.5)

"""End to end: every aggregator under every availability mode, and 1000 rounds of LN(0.9).

Issue 5, acceptance 5. The runs go through ``experiment.run`` (what ``experiments/run.py``
calls after parsing its flags) on Synthetic(0.5, 0.5). The availability matrix is slow
(7 minutes on 2 cores): run it with ``-m slow``.
"""

import math

import numpy as np
import pytest

from fedjax_sel import aggregation, availability, experiment
from fedjax_sel.metrics import results

AGGREGATORS = aggregation.names()
MODES = availability.names()
NUM_CLIENTS = 20


def _config(aggregator, mode, rounds, eval_every, trace_path=None):
  c = experiment.default_config()
  c.num_clients = NUM_CLIENTS
  c.clients_per_round = 4
  c.local_steps = 5
  c.rounds = rounds
  c.eval_every = eval_every
  c.aggregator = aggregator
  c.availability = mode
  if mode == "trace":
    c.availability_hparams.trace = trace_path
  if mode == "ln":
    c.availability_hparams.beta = 0.9
  return c


def _finite_metrics(out):
  rows = results.read_jsonl(str(out / "metrics.jsonl"))
  assert rows, "no evaluations written"
  for row in rows:
    for key in ("test_loss", "test_accuracy", "train_loss"):
      assert math.isfinite(row[key]), (key, row)
  return rows


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("trace") / "trace.npy"
  rng = np.random.default_rng(0)
  np.save(path, rng.random((7, NUM_CLIENTS)) < 0.4)
  return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("aggregator", AGGREGATORS)
def test_every_aggregator_runs_under_every_availability_mode(aggregator, trace_file, tmp_path):
  for mode in MODES:
    out = tmp_path / mode
    summary = experiment.run(
      _config(aggregator, mode, 6, 3, trace_file), str(out), write_plots=False
    )
    assert summary["complete"] and summary["rounds"] == 6, (mode, summary)
    _finite_metrics(out)


@pytest.mark.parametrize(
  "aggregator,client_update", [(a, "sgd") for a in AGGREGATORS] + [("fedavg", "scaffold")]
)
def test_no_nan_in_1000_rounds_of_ln_0_9(aggregator, client_update, tmp_path):
  # about 4 s each on 2 CPU cores: in the default suite
  c = _config(aggregator, "ln", 1000, 100)
  c.client_update = client_update
  summary = experiment.run(c, str(tmp_path), write_plots=False)
  assert summary["complete"] and summary["rounds"] == 1000
  rows = _finite_metrics(tmp_path)
  assert len(rows) == 10
  assert summary.get("skipped_updates", 0) == 0, summary
  assert summary.get("nonfinite_updates", 0) == 0, summary

"""``client_accuracy``: the evaluation skips the clients' local test splits when off, and
every other number a run writes stays bit for bit the same (the FedGS study's default)."""

import ml_collections
import numpy as np
import pytest

from experiments.configs import fedgs_table2 as fedgs_config
from fedjax_sel import experiment
from fedjax_sel.metrics import results

CLIENT_FIELDS = {"client_acc_mean", "client_acc_var", "client_acc_worst10", "client_acc_best10"}


def _config(selection, hparams, client_accuracy):
  c = experiment.default_config()
  c.num_clients, c.clients_per_round = 10, 3
  c.local_steps, c.rounds, c.eval_every = 2, 4, 1
  c.availability, c.availability_hparams = "ln", ml_collections.ConfigDict({"beta": 0.5})
  c.selection = selection
  c.selection_hparams = ml_collections.ConfigDict(hparams)
  c.client_accuracy = client_accuracy
  return c


@pytest.mark.parametrize(
  "selection,hparams",
  [
    ("uniform", {}),
    # reads the clients' local test splits itself (ctx.client_test_losses), every round
    ("power_of_choice", {"loss_split": "local_test", "weights": "equal"}),
  ],
)
def test_same_metrics_without_client_accuracy(tmp_path, selection, hparams):
  runs = {}
  for on in (True, False):
    out = tmp_path / f"{selection}_{on}"
    summary = experiment.run(_config(selection, hparams, on), str(out), write_plots=False)
    runs[on] = (summary, results.read_jsonl(str(out / "metrics.jsonl")))
  (s_on, h_on), (s_off, h_off) = runs[True], runs[False]
  assert [r["round"] for r in h_off] == [1, 2, 3, 4]
  for a, b in zip(h_on, h_off):
    # the four per-client statistics are the only fields that disappear
    assert set(a) - set(b) == CLIENT_FIELDS and set(b) <= set(a)
    for k in set(b) - {"seconds"}:
      assert a[k] == b[k], k  # bit for bit
    assert 0.0 <= a["client_acc_worst10"] <= a["client_acc_mean"] <= a["client_acc_best10"]
  for k in set(s_on) - {"seconds", "seconds_per_round", "compile_seconds"}:
    assert s_on[k] == s_off[k], k
  with pytest.raises(ValueError, match=r"written only by runs with client_accuracy=True"):
    results.compare([str(tmp_path / f"{selection}_False")], "client_acc_worst10")
  assert results.compare([str(tmp_path / f"{selection}_True")], "client_acc_worst10")


def test_batched_program_same_metrics(tmp_path):
  """The study path (``run_batch``: two seeds as one program) gives the same numbers with
  and without the per-client pass."""
  hist = {}
  for on in (True, False):
    configs, dirs = [], []
    for seed in (0, 1):
      c = _config("md", {}, on)
      c.seed = seed
      configs.append(c)
      dirs.append(str(tmp_path / f"{on}" / f"seed{seed}"))
    experiment.run_batch(configs, dirs, write_plots=False)
    hist[on] = [results.read_jsonl(f"{d}/metrics.jsonl") for d in dirs]
  for h_on, h_off in zip(hist[True], hist[False]):
    for a, b in zip(h_on, h_off):
      assert set(a) - set(b) == CLIENT_FIELDS
      np.testing.assert_equal(
        {k: b[k] for k in b if k != "seconds"}, {k: a[k] for k in b if k != "seconds"}
      )


def test_fedgs_study_skips_client_accuracy_only():
  """The FedGS Table 2 columns evaluate what Table 2 reads: the global test set."""
  for base in (
    fedgs_config.synthetic_base(),
    fedgs_config.fashion_mnist_base(),
    fedgs_config.cifar10_base(),
  ):
    assert base.client_accuracy is False
    assert base.global_train_loss is False
  assert experiment.default_config().client_accuracy is True  # elsewhere: as before


def test_client_accuracy_must_be_bool():
  c = ml_collections.ConfigDict(
    {**_config("uniform", {}, True).to_dict(), "client_accuracy": "yes"}
  )
  with pytest.raises(ValueError, match=r"client_accuracy='yes'; allowed: True or False"):
    experiment.validate_config(c)

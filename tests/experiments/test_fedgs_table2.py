"""experiments/fedgs_table2.py: the --quick path, the TFDS column on mock data, the config."""

import csv
import json
import math
import os

import numpy as np
import pytest

from experiments import common, fedgs_table2, grid
from experiments.configs import fedgs_table2 as config_lib
from fedjax_sel import experiment


def _read_csv(path):
  with open(path) as f:
    return list(csv.reader(f))


def _mean_std(text):
  mean, std = (float(x) for x in text.split(" ± "))
  return mean, std


def test_config_holds_the_papers_settings():
  cfg = config_lib.get_config()
  syn = cfg.datasets.synthetic.base
  assert (syn.num_clients, syn.clients_per_round) == (30, 6)
  assert (syn.local_steps, syn.batch_size) == (10, 10)
  assert (syn.client_lr, syn.lr_decay, syn.rounds) == (0.1, 0.998, 1000)
  assert (syn.synthetic_alpha, syn.synthetic_beta) == (0.5, 0.5)
  order = cfg.method_order.split(",")
  extra = cfg.extra_methods.split(",")
  assert len(order) == 9 and set(order) | set(extra) == set(cfg.methods.keys())
  assert [cfg.methods[k].selection_hparams.alpha for k in order[4:]] == [0.0, 0.5, 1.0, 2.0, 5.0]
  # The paper's instance, evaluated every round (the authors' framework's eval interval).
  assert (syn.synthetic_recipe, syn.eval_every) == ("fedgs", 1)
  assert cfg.datasets.synthetic.availability_seed_per_seed
  # The authors' released protocol (issue 14): PoC on validation losses, equal weights;
  # FedGS with the code's scale and kernel; SLN with the code's schedule and redraws.
  poc = dict(cfg.methods.power_of_choice.selection_hparams)
  assert poc == {"loss_split": "local_test", "weights": "equal"}
  for k in order[4:]:
    hp = cfg.methods[k].selection_hparams
    assert (hp.scale, hp.kernel, hp.sigma2, hp.epsilon) == (
      "reference_code",
      "reference_code",
      0.1,
      0.01,
    )
  assert all("scale" not in cfg.methods[k].selection_hparams for k in extra)
  sln = cfg.modes.sln.availability_hparams
  assert (sln.schedule, sln.redraw_empty) == ("reference_code", True)
  # "FedProx/MDSample ... w/wo proximal term": MD sampling + the proximal local update.
  assert cfg.methods.fedprox.selection == cfg.methods.md.selection == "md"
  assert cfg.methods.fedprox.client_update == "fedprox"
  assert cfg.methods.fedprox.client_update_hparams.mu == 0.01
  betas = {k: dict(cfg.modes[k].availability_hparams).get("beta") for k in cfg.modes.keys()}
  assert betas == {
    "idl": None,
    "ln": 0.5,
    "sln": 0.5,
    "ldf": 0.7,
    "mdf": 0.7,
    "ymf": 0.9,
    "yc": 0.9,
  }
  # One base availability seed for every method (Appendix C); on Synthetic seed s draws
  # from base + s, as in the authors' code; the other columns share the base seed.
  assert len({cfg.datasets[d].base.availability_seed for d in cfg.datasets.keys()}) == 1
  base = cfg.datasets.synthetic.base
  assert common.seed_config(base, 2, True).availability_seed == base.availability_seed + 2
  assert common.seed_config(base, 2, False).availability_seed == base.availability_seed
  assert common.seed_config(base, 2, True).seed == 2
  neg = common.seed_config(base, 0)
  neg.availability_seed = -1
  with pytest.raises(ValueError, match="availability_seed=-1"):
    common.seed_config(neg, 1, True)
  assert fedgs_table2.PAPER_TABLE2["synthetic"]["mdf"]["uniform"] == 0.362


def test_synthetic_fedgs_cell_uses_true_local_models_as_oracle():
  cfg = config_lib.get_config()
  col = fedgs_table2.Column("synthetic", cfg.datasets.synthetic, quick=True, data_dir="", rounds=0)
  c = fedgs_table2.cell_config(col, cfg.methods.fedgs_a1, cfg.modes.ln)
  np.testing.assert_allclose(
    np.asarray(c.selection_hparams.oracle_features), col.data.extras["true_params"], rtol=0
  )
  assert (c.availability, c.availability_hparams.beta) == ("ln", 0.5)
  u = fedgs_table2.cell_config(col, cfg.methods.uniform, cfg.modes.idl)
  assert "oracle_features" not in u.selection_hparams


def test_quick_writes_paper_shaped_tables(tmp_path):
  cfg = config_lib.get_config()
  out = str(tmp_path)
  # --quick: 2 methods x the first 2 modes; Table 4 on the first mode with alpha = 1.
  fedgs_table2.run_all(cfg, out, [0], quick=True, parts=("table2", "fig4", "table4"))
  rows = _read_csv(os.path.join(out, "table2.csv"))
  assert rows[0] == ["Method", "Synthetic(0.5, 0.5) IDL", "Synthetic(0.5, 0.5) LN0.5"]
  assert [r[0] for r in rows[1:]] == ["UniformSample", "FedGS α=1.0"]
  for r in rows[1:]:
    for cell in r[1:]:
      mean, std = _mean_std(cell)
      assert 0.0 < mean < 5.0 and std == 0.0  # one seed
  assert "| Method |" in open(os.path.join(out, "table2.md")).read()
  cmp = _read_csv(os.path.join(out, "table2_vs_paper.csv"))
  assert len(cmp) == 1 + 4
  assert {float(r[5]) for r in cmp[1:] if r[2] == "UniformSample"} == {0.302, 0.320}
  # Fig. 4: counts of 10 rounds x 6 slots; FedGS balances them at least as well as uniform.
  assert os.path.getsize(os.path.join(out, "fig4_synthetic_ln.png")) > 5000
  t4 = _read_csv(os.path.join(out, "table4.csv"))
  assert t4[0][:3] == ["Dataset", "Mode", "FedGS (oracle 3DG)"] and len(t4) == 2
  assert all(0.0 < _mean_std(x)[0] < 5.0 for x in t4[1][2:4])
  # Every cell/seed ran under cells/<cell>/seed<k>/ and finished 10 rounds of 6 slots.
  import json

  summary = json.load(
    open(os.path.join(out, "cells", "synthetic-ln-fedgs_a1", "seed0", "summary.json"))
  )
  assert summary["rounds"] == 10 and sum(summary["sampling_counts"]) <= 60
  assert np.var(summary["sampling_counts"]) <= np.var(
    json.load(open(os.path.join(out, "cells", "synthetic-ln-uniform", "seed0", "summary.json")))[
      "sampling_counts"
    ]
  )


def test_table3_oracle_recovers_itself_and_scores_are_fractions(tmp_path):
  cfg = config_lib.get_config()
  col = fedgs_table2.Column("synthetic", cfg.datasets.synthetic, quick=True, data_dir="", rounds=0)
  t3 = cfg.table3
  t3.warmup_rounds = 1
  rows = fedgs_table2.table3_rows(col.base, col.data, t3, seed=0)
  for name in ("functional", "cosine"):
    p, r, f, eps = rows[name]
    assert 0.0 <= p <= 1.0 and 0.0 <= r <= 1.0 and 0.0 <= f <= 1.0
    assert eps in t3.epsilons
    if p + r > 0:
      assert math.isclose(f, 2 * p * r / (p + r), rel_tol=1e-5)


def test_tfds_column_runs_on_mock_data(tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  cfg = config_lib.get_config()
  out = str(tmp_path / "out")
  with tfds.testing.mock_data(num_examples=60):
    fedgs_table2.run_all(
      cfg,
      out,
      [0],
      quick=True,
      data_dir=str(tmp_path),
      datasets=["fashion_mnist"],
      methods=["uniform"],
      modes=["ymf"],
      parts=("table2",),
    )
  rows = _read_csv(os.path.join(out, "table2.csv"))
  assert rows[0] == ["Method", "FashionMNIST YMF0.9"]
  mean, _ = _mean_std(rows[1][1])
  assert math.isfinite(mean) and mean > 0.0
  import json

  conf = json.load(
    open(os.path.join(out, "cells", "fashion_mnist-ymf-uniform", "seed0", "config.json"))
  )
  c = conf["config"]
  assert c["model"] == "cnn_mnist" and c["partition"] == "easyfl_quantity"
  assert (c["input_normalization"], c["input_mean"], c["input_std"]) == (
    "standardize",
    0.1307,
    0.3081,
  )


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ABLATION_CELLS = os.path.join(REPO, "results", "fedgs_fmnist", "cells")
# fields a cell's config.json holds that depend on the seed, the machine or the staging
# fields that differ between runs of the same cell (client_accuracy: what an evaluation
# writes besides the global test set; the rounds are the same, tests/core/test_client_accuracy)
PER_RUN = {
  "seed",
  "availability_seed",
  "output_dir",
  "data_dir",
  "rounds",
  "checkpoint_every",
  "client_accuracy",
}


def test_fashion_mnist_column_defaults_to_the_released_protocol():
  """Issue 37: the authors' task (utils/fashion.yml: fashion_classification_cnum100_dist1_
  skew0.79_seed0), their Normalize((0.1307,), (0.3081,)), their simulator's YC, and an
  evaluation every round (eval_interval 1)."""
  cfg = config_lib.get_config()
  assert cfg.fmnist_protocol == "reference_code"
  base = cfg.datasets.fashion_mnist.base
  assert (base.partition, base.label_rule, base.labels_per_client) == (
    "easyfl_quantity",
    "least_used",
    2,
  )
  assert (base.data_seed, base.test_fraction, base.num_clients) == (0, 0.2, 100)
  assert (base.input_normalization, base.input_mean, base.input_std) == (
    "standardize",
    0.1307,
    0.3081,
  )
  assert base.eval_every == 1
  assert base.param_init == "torch"  # PyTorch's Conv2d / Linear defaults, as the authors' code
  assert base.client_accuracy is False  # Table 2 reads the global test set only
  assert dict(cfg.modes.yc.availability_hparams) == {"beta": 0.9, "schedule": "reference_code"}
  assert fedgs_table2.apply_fmnist_protocol(cfg) is cfg
  with pytest.raises(ValueError, match="fmnist_protocol='paper'; allowed: reference_code, ours"):
    cfg.fmnist_protocol = "paper"
    fedgs_table2.apply_fmnist_protocol(cfg)


def test_ours_protocol_is_the_committed_ablation():
  """--config.fmnist_protocol=ours rebuilds, field for field, the configs of the committed
  results/fedgs_fmnist/cells/ (seed 0, 500 rounds): --resume reads them back."""
  cells = sorted(os.listdir(ABLATION_CELLS))
  assert len(cells) == 12
  cfg = config_lib.get_config()
  cfg.fmnist_protocol = "ours"
  ours = fedgs_table2.apply_fmnist_protocol(cfg)
  assert config_lib.get_config().datasets.fashion_mnist.base.partition == "easyfl_quantity"
  col = fedgs_table2.Column("fashion_mnist", ours.datasets.fashion_mnist, False, "", 0)
  defaults = config_lib.default_config().to_dict()
  for name in cells:
    _, mode, method = name.split("-")
    with open(os.path.join(ABLATION_CELLS, name, "seed0", "config.json")) as f:
      saved = json.load(f)["config"]
    cell = fedgs_table2.cell_config(col, ours.methods[method], ours.modes[mode])
    now = cell.to_dict()
    for key in (set(saved) | set(now)) - PER_RUN:
      assert saved.get(key, defaults.get(key)) == now.get(key), (name, key)
    mine = common.seed_config(cell, 0).to_dict()
    folder = os.path.join(ABLATION_CELLS, name, "seed0")
    assert grid.read_finished(folder, saved["rounds"], config=mine) is not None
  # the released protocol refuses those runs instead of reading them back
  ref = fedgs_table2.Column(
    "fashion_mnist", config_lib.get_config().datasets.fashion_mnist, False, "", 0
  )
  released = fedgs_table2.cell_config(ref, cfg.methods.uniform, config_lib.get_config().modes.yc)
  folder = os.path.join(ABLATION_CELLS, "fashion_mnist-yc-uniform", "seed0")
  with pytest.raises(experiment.ConfigError, match="partition: 'shards' there, 'easyfl_quantity'"):
    grid.read_finished(folder, 500, config=common.seed_config(released, 0).to_dict())


def test_bad_names_are_one_clear_error():
  with pytest.raises(ValueError, match="unknown methods \\['fedgss'\\]"):
    fedgs_table2.split_names("uniform,fedgss", ["uniform", "md"], "methods")


def test_a_fresh_machine_trains_only_the_runs_results_lack(tmp_path, monkeypatch):
  """--seed_from: the committed finished runs are copied in and read back, never trained
  again; the command goes on at the first run the committed folder lacks (here MDSample, and
  UniformSample's seed 1, whose committed run did not finish)."""
  kw = dict(quick=True, datasets=["synthetic"], modes=["idl"], parts=("table2",))
  committed = str(tmp_path / "results")
  fedgs_table2.run_all(config_lib.get_config(), committed, [0, 1], methods=["uniform"], **kw)
  cell = os.path.join(committed, "cells", "synthetic-idl-uniform")
  for seed in ("seed0", "seed1"):
    assert sorted(os.listdir(os.path.join(cell, seed))) == sorted(
      [*common.RESULT_FILES, "checkpoints"]
    )
  with open(os.path.join(cell, "seed1", "summary.json")) as f:
    unfinished = dict(json.load(f), complete=False)
  with open(os.path.join(cell, "seed1", "summary.json"), "w") as f:
    json.dump(unfinished, f)
  trained = []
  run_batch = common.experiment.run_batch

  def spy(configs, dirs, **kwargs):
    trained.extend(os.path.relpath(d, out) for d in dirs)
    return run_batch(configs, dirs, **kwargs)

  monkeypatch.setattr(common.experiment, "run_batch", spy)
  out = str(tmp_path / "fresh")
  tables = fedgs_table2.run_all(
    config_lib.get_config(), out, [0, 1], methods=["uniform", "md"], seed_from=committed, **kw
  )
  assert sorted(trained) == [
    os.path.join("cells", "synthetic-idl-md", "seed0"),
    os.path.join("cells", "synthetic-idl-md", "seed1"),
    os.path.join("cells", "synthetic-idl-uniform", "seed1"),
  ]
  copied = os.path.join(out, "cells", "synthetic-idl-uniform", "seed0")
  assert sorted(os.listdir(copied)) == sorted(common.RESULT_FILES)  # never checkpoints
  for name in common.RESULT_FILES:
    with open(os.path.join(copied, name)) as a, open(os.path.join(cell, "seed0", name)) as b:
      assert a.read() == b.read()
  assert "UniformSample" in tables["table2"] and "MDSample" in tables["table2"]
  # the same command again: everything is read back
  trained.clear()
  again = fedgs_table2.run_all(
    config_lib.get_config(), out, [0, 1], methods=["uniform", "md"], seed_from=committed, **kw
  )
  assert trained == [] and again["table2"] == tables["table2"]

"""experiments/fl_fdms.py, the general non-iid setting (``--config.setting=general``)."""

import numpy as np
import pytest

from experiments import fl_fdms
from experiments.configs import fl_fdms as fl_fdms_config
from fedjax_sel import experiment
from fedjax_sel.data import partitions


def general_config(**fields):
  config = fl_fdms_config.get_config()
  config.setting = "general"
  for name, value in fields.items():
    config[name] = value
  return config


def test_clustered_stays_the_default():
  config = fl_fdms.prepare_config(fl_fdms_config.get_config())
  assert config.setting == "clustered" and config.base.partition == "clustered"
  assert "fdms_oracle" in config.methods
  assert fl_fdms.setting_text(config) == "20 clients in 5 clusters"


def test_general_setting_cells_use_shards_and_leave_the_oracle_out():
  config = fl_fdms.prepare_config(general_config())
  # the oracle friend needs true clusters: left out, the other methods kept
  assert config.methods == ("full", "dropout", "stale", "fdms", "fdms_cr", "fdms_cr_half")
  c = fl_fdms.cell_config(config, "fdms", 0.5)
  assert (c.partition, c.labels_per_client) == ("shards", 2)
  # the same dropout process as the clustered setting
  assert (c.availability, c.availability_hparams.mode) == ("cluster_dropout", "fl_fdms")
  assert "general non-iid setting (2 classes per client)" in fl_fdms.setting_text(config)
  d = fl_fdms.prepare_config(general_config(general_partition="dirichlet"))
  assert fl_fdms.cell_config(d, "stale", 0.3).partition == "dirichlet"
  assert "Dir(0.5)" in fl_fdms.setting_text(d)


def test_shards_by_hand():
  # 4 clients x 2 labels = 8 slots over 4 classes: every class held by exactly 2 clients,
  # each taking one of its 2 examples, so every client gets 2 examples of 2 distinct classes.
  labels = np.array([0, 0, 1, 1, 2, 2, 3, 3], np.int32)
  parts = partitions.shards(labels, 4, 2, np.random.default_rng(0))
  assert sorted(np.concatenate(parts).tolist()) == list(range(8))  # every example, once
  for p in parts:
    assert len(p) == 2 and len(set(labels[p].tolist())) == 2


def test_general_setting_builds_the_shards_partition():
  # the offline data (scikit-learn digits): 20 clients x 2 labels = 40 slots over 10 classes
  config = fl_fdms.prepare_config(general_config())
  data = experiment.load_data(fl_fdms.cell_config(config, "dropout", 0.5))
  counts = np.asarray(data.client_info().label_counts)
  assert counts.shape == (20, 10)
  assert ((counts > 0).sum(axis=1) == 2).all()  # 2 classes per client
  assert ((counts > 0).sum(axis=0) == 4).all()  # each class held by 4 clients


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("setting", "mixed", r"setting='mixed' is not allowed; allowed: \['clustered', 'general'\]"),
    ("general_partition", "iid", r"general_partition='iid' is not allowed; allowed: \['shards'"),
  ],
)
def test_bad_values_fail_in_one_line(field, value, match):
  with pytest.raises(ValueError, match=match) as e:
    fl_fdms.prepare_config(general_config(**{field: value}))
  assert "\n" not in str(e.value)


def test_quick_general_run(tmp_path):
  config = fl_fdms.prepare_config(general_config(), quick=True, rounds=2)
  config.methods = ("stale", "fdms")
  config.base.eval_every = 1
  out = fl_fdms.run_study(config, str(tmp_path), [0])
  header, rows = out["accuracy"]
  assert [r[0] for r in rows] == ["Stale", "FL-FDMS"]
  assert "general non-iid setting (2 classes per client)" in out["markdown"]
  assert [len(h) for _, h in out["runs"]["alpha0.5_fdms"]] == [2]

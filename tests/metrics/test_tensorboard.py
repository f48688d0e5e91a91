"""TensorBoard event files (issue 40): TensorBoard's own reader sees metrics.jsonl, each round
once after a kill and a resume; other processes write nothing; a clear error without the
extra; the main command never imports the writer."""

import json
import os
import subprocess
import sys

import ml_collections
import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from fedjax_sel import data, experiment
from fedjax_sel.core import checkpoint
from fedjax_sel.metrics import results
from fedjax_sel.metrics import tensorboard as tb

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_back(logdir: str) -> dict[str, list[tuple[int, float]]]:
  """Every scalar TensorBoard reads from ``logdir``: tag -> [(step, value)] in file order."""
  acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0})
  acc.Reload()
  return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def assert_same_as_metrics(logdir: str, records: list[dict]) -> None:
  """Each numeric field of each record is a scalar at its round, once, equal in float32
  (TensorBoard keeps scalars as float32)."""
  got = read_back(logdir)
  want_tags = {k for r in records for k, v in r.items() if k != "round"}
  assert set(got) == want_tags
  for tag, events in got.items():
    want = [(r["round"], r[tag]) for r in records if tag in r]
    assert [s for s, _ in events] == [s for s, _ in want], tag
    np.testing.assert_array_equal(
      np.float32([v for _, v in events]), np.float32([v for _, v in want]), err_msg=tag
    )


def run_python(*args: str) -> None:
  """``python *args`` from the repository root on the CPU; fails the test on a non-zero exit."""
  p = subprocess.run(
    [sys.executable, *args],
    cwd=ROOT,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert p.returncode == 0, p.stderr[-2000:]


@pytest.fixture(scope="module")
def dataset():
  return data.load("synthetic", 10, seed=0, alpha=0.5, beta=0.5)


def config():
  c = experiment.default_config()
  c.num_clients, c.clients_per_round = 10, 3
  c.local_steps, c.rounds, c.eval_every = 2, 8, 2
  c.availability, c.availability_hparams.beta = "ln", 0.5
  return c


class Killed(Exception):
  pass


def test_short_run_event_files_equal_metrics_and_resume_keeps_each_round_once(tmp_path, dataset):
  """``tensorboard=True``: the run writes its events itself; killed after round 6 (checkpoint
  at 4) and resumed, TensorBoard reads rounds 2, 4, 6, 8 once each, equal to metrics.jsonl."""
  out = str(tmp_path / "run")
  c = config()
  c.tensorboard = True

  def kill_at_round_6(t, total, record):
    # flushed at each evaluation: a reader sees this round now, while the run goes on
    assert read_back(out)["test_loss"][-1][0] == t
    if t == 6:  # after round 6's metrics line and events, before its checkpoint
      raise Killed

  with pytest.raises(Killed):
    experiment.run(c, out, dataset=dataset, progress=kill_at_round_6, write_plots=False)
  # the killed run's files: rounds 2..6 in metrics.jsonl and in the events, checkpoint at 4
  before = results.read_jsonl(os.path.join(out, "metrics.jsonl"))
  assert [r["round"] for r in before] == [2, 4, 6]
  assert_same_as_metrics(out, before)
  assert checkpoint.latest_round(out) == 4
  experiment.run(c, out, dataset=dataset, resume=True, write_plots=False)
  after = results.read_jsonl(os.path.join(out, "metrics.jsonl"))
  assert [r["round"] for r in after] == [2, 4, 6, 8]
  assert_same_as_metrics(out, after)
  assert len(tb.event_files(out)) == 1
  for tag in ("test_loss", "test_accuracy", "train_loss", "client_acc_mean", "seconds"):
    assert [s for s, _ in read_back(out)[tag]] == [2, 4, 6, 8]
  # round 6 ran twice (killed before its checkpoint): the events hold the second run's value
  assert read_back(out)["seconds"][2][1] == pytest.approx(after[2]["seconds"], rel=1e-6)


def test_without_the_flag_a_run_writes_no_events(tmp_path, dataset):
  out = str(tmp_path / "run")
  experiment.run(config(), out, dataset=dataset, write_plots=False)
  assert tb.event_files(out) == []


def test_seeds_batch_writes_one_event_run_per_seed(tmp_path, dataset):
  """``--seeds``: each seed<k>/ is a TensorBoard run of its own, equal to its metrics.jsonl."""
  c = config()
  c.tensorboard = True
  out = str(tmp_path / "seeds")
  experiment.run_seeds(c, [0, 3], out, dataset=dataset, write_plots=False)
  for s in (0, 3):
    folder = experiment.seed_dir(out, s)
    records = results.read_jsonl(os.path.join(folder, "metrics.jsonl"))
    assert [r["round"] for r in records] == [2, 4, 6, 8]
    assert len(tb.event_files(folder)) == 1
    assert_same_as_metrics(folder, records)
  assert tb.event_files(out) == []  # the batch folder itself is not a run
  seed0 = read_back(experiment.seed_dir(out, 0))["test_loss"]
  seed3 = read_back(experiment.seed_dir(out, 3))["test_loss"]
  assert seed0 != seed3


def test_tensorboard_without_the_writer_is_a_config_error(tmp_path, dataset, monkeypatch):
  for name in [m for m in sys.modules if m.startswith("tensorboardX")] + ["tensorboardX"]:
    monkeypatch.setitem(sys.modules, name, None)
  c = config()
  c.tensorboard = True
  with pytest.raises(experiment.ConfigError, match=r'pip install -e "\.\[tensorboard\]"'):
    experiment.run(c, str(tmp_path / "run"), dataset=dataset, write_plots=False)
  c = ml_collections.ConfigDict(c.to_dict(), type_safe=False)  # e.g. a config file's dict
  c.tensorboard = "yes"
  with pytest.raises(ValueError, match="tensorboard='yes'; allowed: True or False"):
    experiment.validate_config(c)


def test_run_binary_flag_writes_events(tmp_path):
  """``python -m experiments.run --tensorboard``: event files beside metrics.jsonl."""
  out = tmp_path / "run"
  run_python(
    "-m",
    "experiments.run",
    "--rounds=4",
    "--eval_every=2",
    "--num_clients=6",
    "--clients_per_round=2",
    "--local_steps=1",
    "--progress=false",
    "--tensorboard",
    f"--output_dir={out}",
  )
  assert_same_as_metrics(str(out), results.read_jsonl(str(out / "metrics.jsonl")))


def test_fresh_start_replaces_old_event_files(tmp_path):
  out = str(tmp_path)
  with tb.open_writer(out) as w:
    for t in (1, 2, 3):
      w.write({"round": t, "test_loss": float(t)})
  with tb.open_writer(out) as w:  # a new run in the same folder: no history
    w.write({"round": 1, "test_loss": 0.5})
  assert read_back(out) == {"test_loss": [(1, 0.5)]}
  assert len(tb.event_files(out)) == 1


def test_scalars_rule():
  record = {
    "round": 5,
    "test_loss": 0.25,
    "count": 3,
    "flag": True,
    "diverged": float("nan"),
    "np": np.float32(1.5),
    "per_client": [0.1, 0.2],
    "name": "fedgs",
    "missing": None,
    "selection": {"unique": 7, "ids": [1, 2]},
  }
  got = tb.scalars(record)
  assert set(got) == {"test_loss", "count", "flag", "diverged", "np", "selection/unique"}
  assert got["flag"] == 1.0 and got["count"] == 3.0 and got["selection/unique"] == 7.0
  assert np.isnan(got["diverged"]) and got["np"] == 1.5


def test_nan_and_nested_written_and_read_back(tmp_path):
  records = [
    {"round": 1, "test_loss": 2.0, "x": {"y": 0.5}},
    {"round": 2, "test_loss": float("nan"), "x": {"y": 0.25}},
  ]
  with tb.open_writer(str(tmp_path)) as w:
    for r in records:
      w.write(r)
  got = read_back(str(tmp_path))
  assert got["x/y"] == [(1, 0.5), (2, 0.25)]
  assert got["test_loss"][0] == (1, 2.0) and np.isnan(got["test_loss"][1][1])


def test_other_processes_write_nothing(tmp_path, monkeypatch):
  monkeypatch.setattr(results, "writes_here", lambda: False)
  out = tmp_path / "run"
  with tb.open_writer(str(out), [{"round": 1, "test_loss": 1.0}]) as w:
    w.write({"round": 2, "test_loss": 0.5})
  assert isinstance(w, tb.NullWriter)
  assert not out.exists()


def test_missing_writer_names_the_extra(tmp_path, monkeypatch):
  for name in [m for m in sys.modules if m.startswith("tensorboardX")] + ["tensorboardX"]:
    monkeypatch.setitem(sys.modules, name, None)
  with pytest.raises(tb.TensorBoardUnavailable) as e:
    tb.open_writer(str(tmp_path))
  assert 'pip install -e ".[tensorboard]"' in str(e.value)
  assert "\n" not in str(e.value)
  with pytest.raises(ImportError):  # an ImportError, for callers that catch that
    tb.check_available()
  assert not os.listdir(tmp_path)


def test_main_command_runs_without_the_writer(tmp_path):
  """The README's first command (shortened) with tensorboardX and tensorboard unimportable."""
  code = (
    "import sys, runpy\n"
    "for m in ('tensorboardX', 'tensorboard'): sys.modules[m] = None\n"
    f"sys.argv = ['run', '--rounds=2', '--eval_every=1', '--num_clients=6', "
    f"'--clients_per_round=2', '--local_steps=1', '--progress=false', "
    f"'--output_dir={tmp_path}']\n"
    "runpy.run_module('experiments.run', run_name='__main__')\n"
  )
  run_python("-c", code)
  assert json.loads((tmp_path / "summary.json").read_text())["rounds"] == 2
  assert tb.event_files(str(tmp_path)) == []

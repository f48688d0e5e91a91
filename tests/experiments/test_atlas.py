"""experiments/atlas.py: every registered name in a --quick atlas (a strategy registered by a
test included), one cell equal to the same config run alone, resume, bad values, ranks."""

import csv
import json
import os
import subprocess
import sys

import ml_collections
import numpy as np
import pytest

from experiments import atlas
from experiments.configs import atlas as atlas_config
from fedjax_sel import aggregation, availability, experiment, selection
from fedjax_sel.metrics import results

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOY = "toy_atlas_uniform"  # uniform sampling under another name, registered by the test
BROKEN = "toy_atlas_broken"  # a strategy whose init raises: its cells must read "failed"


def read_csv(path):
  with open(path) as f:
    return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def quick_atlas(tmp_path_factory):
  """A --quick atlas run with two strategies registered by the test (removed afterwards)."""

  @selection.register(TOY)
  def make_toy(num_selected: int):
    return selection.make_uniform(num_selected)

  @selection.register(BROKEN)
  def make_broken(num_selected: int):
    strategy = selection.make_uniform(num_selected)

    def init(key, info):
      raise RuntimeError("this toy strategy is broken on purpose")

    return strategy._replace(init=init)

  try:
    out = str(tmp_path_factory.mktemp("atlas"))
    config = atlas.prepare_config(atlas_config.get_config(), quick=True)
    study = atlas.run_study(config, out, [0])
    yield config, out, study, selection.names()
  finally:
    for name in (TOY, BROKEN):
      selection.REGISTRY._constructors.pop(name, None)


def test_a_registered_strategy_appears_without_touching_the_atlas(quick_atlas):
  config, out, _, _ = quick_atlas
  rows = read_csv(os.path.join(out, "atlas.csv"))
  toy = [r for r in rows if r["selection"] == TOY]
  assert [(r["availability"], r["status"]) for r in toy] == [(config.quick_availability, "ok")]
  # the toy is uniform sampling: its cell is the uniform cell's run, to the last digit
  (uniform,) = [
    r
    for r in rows
    if r["panel"] == "selection"
    and r["selection"] == "uniform"
    and r["availability"] == config.quick_availability
  ]
  for key in ("optimal_test_loss", "final_test_accuracy", "client_accuracy_std"):
    assert toy[0][key] == uniform[key] != ""
  (broken,) = [r for r in rows if r["selection"] == BROKEN]
  assert broken["status"] == "failed"
  assert "RuntimeError" in broken["reason"] and "broken on purpose" in broken["reason"]
  assert broken["final_test_accuracy"] == ""


def test_every_registered_name_and_availability_model_is_in_the_csv(quick_atlas):
  _, out, _, registered = quick_atlas
  rows = read_csv(os.path.join(out, "atlas.csv"))
  assert TOY in registered
  sel_rows = [r for r in rows if r["panel"] == "selection"]
  agg_rows = [r for r in rows if r["panel"] == "aggregation"]
  assert {r["selection"] for r in sel_rows} == set(registered)
  assert {r["aggregator"] for r in agg_rows} == set(aggregation.names())
  for panel_rows in (sel_rows, agg_rows):
    assert {r["availability"] for r in panel_rows} == set(availability.names())
  # a cell that cannot run is in the csv with its reason: trace without a recorded trace
  trace = [r for r in rows if r["availability"] == "trace"]
  assert trace and all(r["status"] == "cannot run" for r in trace)
  assert all("trace" in r["reason"] and r["final_test_accuracy"] == "" for r in trace)
  ok = [r for r in rows if r["status"] == "ok"]
  assert all(0.0 <= float(r["final_test_accuracy"]) <= 1.0 for r in ok)
  assert all(float(r["client_accuracy_std"]) >= 0.0 for r in ok)
  md = open(os.path.join(out, "atlas.md")).read()
  assert "n/a (cannot run)" in md and f"{TOY}" in md
  for panel in ("selection", "aggregation"):
    assert os.path.getsize(os.path.join(out, f"heatmap_synthetic_{panel}.png")) > 10_000


def test_a_cell_equals_the_same_config_run_alone(quick_atlas, tmp_path):
  config, out, _, _ = quick_atlas
  # ln shares its program with idl, ldf and mdf (batched): run alone it must give the same
  folder = os.path.join(out, "cells", "synthetic", "uniform+fedavg+ln", "seed0")
  with open(os.path.join(folder, "config.json")) as f:
    saved = json.load(f)["config"]
  alone = ml_collections.ConfigDict(saved)
  alone.output_dir = str(tmp_path / "alone")
  alone.resume = False
  # the atlas's config is the dataset's base with the cell's names and seed 0's availability
  expected = atlas.cell_config(
    config, atlas.Cell("synthetic", "selection", "uniform", "fedavg", "ln")
  )
  assert alone.availability_seed == expected.availability_seed + 0
  assert (alone.selection, alone.aggregator, alone.availability) == ("uniform", "fedavg", "ln")
  experiment.run(alone)
  batched = results.read_jsonl(os.path.join(folder, "metrics.jsonl"))
  single = results.read_jsonl(os.path.join(alone.output_dir, "metrics.jsonl"))
  assert [r["round"] for r in batched] == [r["round"] for r in single] == [2, 4]
  for key in ("test_loss", "test_accuracy", "train_loss", "client_acc_var", "client_acc_mean"):
    np.testing.assert_allclose(
      [r[key] for r in batched], [r[key] for r in single], rtol=1e-6, err_msg=key
    )


def test_resume_reads_finished_cells_back(quick_atlas, monkeypatch):
  config, out, _, _ = quick_atlas

  def no_training(*args, **kwargs):
    raise AssertionError("a finished cell was trained again")

  monkeypatch.setattr(experiment, "run_batch", no_training)
  before = read_csv(os.path.join(out, "atlas.csv"))
  mtime = os.path.getmtime(
    os.path.join(out, "cells", "synthetic", "uniform+fedavg+always", "seed0", "metrics.jsonl")
  )
  again = atlas.run_study(config, out, [0], resume=True)
  after = read_csv(os.path.join(out, "atlas.csv"))
  assert after == before and len(again["rows"]) == len(before)
  assert mtime == os.path.getmtime(
    os.path.join(out, "cells", "synthetic", "uniform+fedavg+always", "seed0", "metrics.jsonl")
  )


def test_bad_config_value_ends_in_one_line(tmp_path):
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.atlas",
      "--config.selections=uniform,no_such_strategy",
      f"--output_dir={tmp_path}",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  lines = [line for line in proc.stderr.splitlines() if line.strip()]
  assert proc.returncode == 2 and len(lines) == 1, proc.stderr
  assert lines[0].startswith("error: selections: unknown selection 'no_such_strategy'")
  assert "uniform" in lines[0] and "fedgs" in lines[0]  # what is allowed
  assert not os.path.exists(tmp_path / "atlas.csv")


@pytest.mark.parametrize(
  "field, value, message",
  [
    ("panels", "selection,sampling", "panels='selection,sampling': unknown 'sampling'"),
    ("datasets", "cifar", "datasets='cifar': unknown 'cifar'"),
    ("aggregators", "fedavg,fedavg", "aggregators='fedavg,fedavg': a name repeats"),
    ("workers", 0, "workers=0 is out of range; allowed: integers >= 1"),
  ],
)
def test_bad_values_are_named_with_what_is_allowed(field, value, message):
  c = atlas_config.get_config()
  c[field] = value
  with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
    atlas.prepare_config(c)


def test_bad_target_and_override_name_are_refused():
  c = atlas_config.get_config()
  c.data.synthetic.target_accuracy = 1.5
  with pytest.raises(ValueError, match=r"data.synthetic.target_accuracy=1.5 .* \(0, 1\]"):
    atlas.prepare_config(c)
  c = atlas_config.get_config()
  c.selection_hparams = ml_collections.ConfigDict({"fedgss": {"alpha": 1.0}})
  with pytest.raises(ValueError, match="selection_hparams.fedgss: unknown selection 'fedgss'"):
    atlas.prepare_config(c)


def test_full_grid_has_every_combination_once_per_panel():
  c = atlas.prepare_config(atlas_config.get_config())
  cells = atlas.cells(c, "synthetic")
  sel = [x for x in cells if x.panel == "selection"]
  agg = [x for x in cells if x.panel == "aggregation"]
  n_av = len(availability.names())
  assert len(sel) == len(selection.names()) * n_av
  assert len(agg) == len(aggregation.names()) * n_av
  assert {x.aggregator for x in sel} == {"fedavg"} and {x.selection for x in agg} == {"uniform"}
  # the reference cell (uniform + fedavg) is one folder shared by both panels
  assert len({x.name for x in cells}) == len(cells) - n_av
  # each method runs with its constructor's defaults: the cell config sets no hyper-parameter
  fedgs = atlas.cell_config(c, atlas.Cell("synthetic", "selection", "fedgs", "fedavg", "ln"))
  assert dict(fedgs.selection_hparams) == {} and dict(fedgs.availability_hparams) == {}
  assert fedgs.client_lr == c.data.synthetic.base.client_lr == 0.1


def test_rank_row_ranks_marks_ties_within_one_std():
  # accuracies (higher is better): a wins; b is 0.02 below with std 0.03 -> a tie; c is not
  stats = {"a": (0.90, 0.01, 0), "b": (0.88, 0.03, 0), "c": (0.80, 0.01, 0), "d": None}
  assert atlas.rank_row(stats, higher=True) == {"a": (1, True), "b": (2, True), "c": (3, False)}
  # losses (lower is better), equal means share a rank
  stats = {"a": (0.5, 0.0, 0), "b": (0.5, 0.0, 0), "c": (0.7, 0.1, 0)}
  assert atlas.rank_row(stats, higher=False) == {"a": (1, True), "b": (1, True), "c": (3, False)}


def test_rounds_to_target_and_never_reached():
  history = [{"round": 5, "test_accuracy": 0.5}, {"round": 10, "test_accuracy": 0.81}]
  assert atlas.rounds_to_target(history, 0.8) == 10
  assert atlas.rounds_to_target(history, 0.5) == 5
  assert atlas.rounds_to_target(history, 0.9) is None
  rows = [
    {"status": "ok", "rounds_to_target": 10},
    {"status": "ok", "rounds_to_target": None},
    {"status": "failed", "rounds_to_target": None},
  ]
  # a seed that never reaches it counts as rounds + 1 = 21; the failed seed is left out
  assert atlas._stats(rows, "rounds_to_target", 20) == (15.5, 5.5, 1)
  summary = {"best_test_loss": 0.4, "final_test_accuracy": 0.8, "rounds": 10}
  m = atlas.seed_metrics(
    summary, [{"round": 10, "test_accuracy": 0.8, "client_acc_var": 0.04}], 0.7
  )
  assert m["client_accuracy_std"] == pytest.approx(0.2) and m["rounds_to_target"] == 10


def test_train_false_reads_back_and_trains_nothing(quick_atlas, tmp_path, monkeypatch):
  config, out, _, _ = quick_atlas

  def no_training(*args, **kwargs):
    raise AssertionError("train=False trained a cell")

  monkeypatch.setattr(experiment, "run_batch", no_training)
  report = ml_collections.ConfigDict(config.to_dict())
  report.train = False
  # on the finished folder: the same rows as the run that trained them
  before = read_csv(os.path.join(out, "atlas.csv"))
  atlas.run_study(report, out, [0])
  assert read_csv(os.path.join(out, "atlas.csv")) == before
  # on an empty folder: every runnable cell is written as not finished, none is left out
  rows = atlas.run_study(report, str(tmp_path), [0])["rows"]
  assert len(rows) == len(before)
  # (idl's reference cells are always's, named, with no numbers while always's are missing)
  assert {r["status"] for r in rows} == {"not finished", "cannot run", "failed", "same as always"}
  assert all(r["final_test_accuracy"] is None for r in rows)


# ------------------------------------------------- same experiment, reuse, paired effects


def test_an_availability_model_drawing_what_another_draws_is_named_not_run(quick_atlas):
  """IDL ("ideal": every client always available, FedGS's Table 1) is always-available:
  the atlas names it instead of spending runs on it."""
  config, out, study, _ = quick_atlas
  rows = read_csv(os.path.join(out, "atlas.csv"))
  key = ("selection", "aggregator", "panel")
  # --quick's cross: every method runs under idl, the references also under always; the
  # references' idl cells are always's cells (not run, their numbers), the others run
  ref_idl = [
    r
    for r in rows
    if r["availability"] == "idl" and r["selection"] == "uniform" and r["aggregator"] == "fedavg"
  ]
  assert ref_idl and {r["status"] for r in ref_idl} == {"same as always"}
  always = {tuple(r[k] for k in key): r for r in rows if r["availability"] == "always"}
  for r in ref_idl:
    twin = always[tuple(r[k] for k in key)]
    assert r["final_test_accuracy"] == twin["final_test_accuracy"] != ""
  assert not os.path.exists(os.path.join(out, "cells", "synthetic", "uniform+fedavg+idl"))
  assert {r["status"] for r in rows if r["availability"] == "idl" and r["selection"] == TOY} == {
    "ok"
  }
  # a model whose rates follow data size differs from always on Synthetic (sizes differ)
  assert {r["status"] for r in rows if r["availability"] == "ldf"} == {"ok"}
  with open(os.path.join(out, "atlas.md")) as f:
    md = f.read()
  assert "(= always)" in md
  assert "- idl: same as always (every round of every seed)" in md


def test_with_equal_client_sizes_ldf_and_mdf_are_always_available():
  """LDF / MDF make a client's rate follow its data size; with every client holding the
  same number of examples every rate is the same: the same draws as always-available."""
  from fedjax_sel.core.types import ClientInfo

  class Equal:
    def client_info(self):
      n = 30
      return ClientInfo(np.full(n, 120, np.int32), np.full((n, 10), 12, np.int32))

  config = atlas.prepare_config(atlas_config.get_config(), quick=False, rounds=20)
  config.data.synthetic.availabilities = "always,ldf,mdf,ln"
  same = atlas.same_availability(config, "synthetic", Equal(), [0, 1])
  assert same == {"ldf": "always", "mdf": "always"}


def _row(method, av, seed, acc):
  return {
    "dataset": "d",
    "panel": "selection",
    "selection": method,
    "aggregator": "fedavg",
    "availability": av,
    "seed": seed,
    "status": "ok",
    "final_test_accuracy": acc,
  }


def test_paired_effects_against_the_reference_and_the_best_by_hand():
  """Differences 2, 3, 1 points over three seeds: mean 2, sd 1, t = 2 / (1 / sqrt 3) =
  3.464 with 2 degrees of freedom, two-sided p = 0.0742; the 95 % interval is 2 ± t_.975,2
  (4.303) / sqrt 3 = 2 ± 2.484."""
  ref, mine = [0.50, 0.60, 0.70], [0.52, 0.63, 0.71]
  rows = [_row("uniform", "ln", s, a) for s, a in enumerate(ref)]
  rows += [_row("mine", "ln", s, a) for s, a in enumerate(mine)]
  rows += [_row("worse", "ln", s, a - 0.10) for s, a in enumerate(ref)]  # 10 points below
  header, table = atlas.effect_table(rows, "d", "selection", "reference", "uniform")
  assert header == ["availability", "uniform", "mine", "worse"]
  assert table[0][:3] == ["ln", "—", "+2.00 [-0.48, +4.48] p=0.074"]
  assert table[0][3] == "-10.00 [-10.00, -10.00] p=0.000 *"  # no spread: scipy's limit
  header, table = atlas.effect_table(rows, "d", "selection", "best", "uniform")
  assert table[0][0] == "ln (best: mine)"
  assert table[0][1] == "-2.00 [-4.48, +0.48] p=0.074"
  assert table[0][2] == "—"


def test_reuse_takes_every_matching_run_and_refuses_other_settings(quick_atlas, tmp_path):
  config, out, _, _ = quick_atlas
  trained = []
  run_batch = atlas.common.experiment.run_batch

  def spy(configs, dirs, **kwargs):
    trained.extend(dirs)
    return run_batch(configs, dirs, **kwargs)

  again = str(tmp_path / "again")
  try:
    atlas.common.experiment.run_batch = spy
    atlas.run_study(config, again, [0], reuse=(out,))
  finally:
    atlas.common.experiment.run_batch = run_batch
  assert trained == []  # every runnable cell was taken from the first atlas
  assert read_csv(os.path.join(again, "atlas.csv")) == read_csv(os.path.join(out, "atlas.csv"))
  other = atlas.prepare_config(atlas_config.get_config(), quick=True, rounds=6)
  with pytest.raises(experiment.ConfigError, match=r"rounds: 4 there, 6 here"):
    atlas.run_study(other, str(tmp_path / "other"), [0], reuse=(out,))


@pytest.mark.parametrize(
  "sizes, same",
  [
    ("lognormal", {"idl": "always"}),  # the config's grid: LDF and MDF are their own rows
    ("", {"idl": "always", "ldf": "always", "mdf": "always"}),  # equal sizes: 600 each
  ],
)
def test_fashion_mnist_grid_ldf_and_mdf_follow_the_clients_sizes(tmp_path, sizes, same):
  """The atlas's own Fashion-MNIST config, on a stand-in with Fashion-MNIST's 60,000 balanced
  training labels (6x6 random images written as IDX files): with lognormal client sizes only
  IDL draws what always-available draws over seeds 0-2 (LDF and MDF follow the sizes); with
  600 images per client LDF and MDF are always-available too."""
  from tests.data.test_idx import write_dataset

  write_dataset(tmp_path, n_train=60_000, n_test=100)
  config = atlas.prepare_config(atlas_config.get_config(), data_dir=str(tmp_path))
  config.data.fashion_mnist.base.partition_sizes = sizes
  dataset = experiment.load_data(config.data.fashion_mnist.base)
  num_examples = np.asarray(dataset.client_info().num_examples)
  assert (num_examples.min() == num_examples.max()) == (sizes == "")
  assert atlas.same_availability(config, "fashion_mnist", dataset, [0, 1, 2]) == same


def test_committed_fashion_mnist_sizes_grid_has_ldf_and_mdf_as_their_own_rows():
  """results/atlas/fashion_mnist_sizes/atlas.csv, as committed: in every row of both panels
  LDF's and MDF's per-seed numbers differ from always-available's, IDL is named "same as
  always" (not run), and no other two columns of a method hold the same numbers."""
  rows = read_csv(os.path.join(ROOT, "results", "atlas", "fashion_mnist_sizes", "atlas.csv"))
  runs = {}
  for r in rows:
    method = (r["panel"], r["selection"], r["aggregator"])
    if r["availability"] == "idl":
      assert r["status"] == "same as always", r
      continue
    assert r["status"] == "ok", r
    key = (r["final_test_accuracy"], r["optimal_test_loss"])
    runs.setdefault(method, {}).setdefault(r["availability"], []).append((r["seed"], key))
  assert len(runs) == 21  # 12 selection strategies + 9 aggregators
  for method, by_model in runs.items():
    assert len(by_model) == 8, method  # nine models, IDL named
    numbers = {av: tuple(sorted(v)) for av, v in by_model.items()}
    assert all(len(v) == 3 for v in numbers.values()), method
    for av in ("ldf", "mdf"):
      assert numbers[av] != numbers["always"], (method, av)
    assert len(set(numbers.values())) == len(numbers), method

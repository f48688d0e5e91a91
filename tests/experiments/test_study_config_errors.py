"""Every study binary ends a bad flag or config value as ``experiments.run`` does (issue 42).

Exit code 2 and one line ``error: <the bad value and what is allowed>`` on stderr, no
traceback, and nothing trained: the checks (``experiments.common``: ``parse_flags``,
``define_config_file``, ``checked``, ``validate_cells``) run before any data or program.
One subprocess per case; each ends in about a second.
"""

import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Binaries tested elsewhere: run (tests/experiments/test_run.py) and the multi-process
# launcher (tests/experiments/test_multiprocess.py).
ELSEWHERE = {"run", "launch_local"}

# (binary, arguments, what the error line must name); "{tmp}" is a fresh folder.
CASES = [
  # the example: the study's own check (prepare_config)
  ("fedemd", ["--config.methods=('fedemd',)"], "methods must include 'random'"),
  ("fedemd", ["--config.scenarios=('3_both',)"], "scenario '3_both'"),
  # a method named twice: its two cells would share one folder
  (
    "fedemd",
    ["--config.methods=('random','random')"],
    "names random more than once; allowed: each method once",
  ),
  # the base config's checks (experiment.validate_config), made for every cell up front
  ("fedemd", ["--config.base.client_lr=-1"], "client_lr=-1.0 is out of range"),
  # an override naming no field (raised while ml_collections defines --config)
  ("fedemd", ["--config.base.no_such_field=1"], "--config.base.no_such_field: no such field"),
  # a config field given twice: a tuple's values would be joined, not replaced
  (
    "fedemd",
    ["--config.scenarios=('1_excl',)", "--config.scenarios=('2_excl',)"],
    "--config.scenarios is given 2 times; allowed: once",
  ),
  # a value of the wrong type (raised while absl parses the flags)
  ("fedemd", ["--config.base.rounds=many"], "--config.base.rounds=many"),
  ("fl_fdms", ["--config.process=poisson"], "process='poisson' is not allowed"),
  # a component's constructor (experiment.make_components)
  ("fl_fdms", ["--config.weighting=by_size"], "weighting='by_size' is not allowed"),
  ("fl_fdms", ["--seeds=0,x"], "--seeds='0,x' must be comma-separated integers"),
  ("fedar", ["--config.p_mins=(0.5, 2.0)"], "p_min=2.0 is out of range"),
  ("fedar", ["--seeds=-1"], "seed=-1 is out of range"),
  ("fedar", ["--config.base.selection=best"], "unknown selection 'best'"),
  ("fedar", ["surplus"], "unexpected arguments ['surplus']"),
  (
    "clustered_sampling",
    ["--output_dir={tmp}", "--config.methods.md.updates=dense"],
    "methods.md.updates='dense'; allowed: sketch, exact",
  ),
  ("clustered_sampling", ["--output_dir={tmp}", "--alphas=0.1,low"], "--alphas='0.1,low'"),
  ("clustered_sampling", ["--output_dir={tmp}", "--parts=all"], "unknown parts ['all']"),
  ("clustered_sampling", [], "--output_dir is required"),
  (
    "fedgs_table2",
    ["--output_dir={tmp}", "--config.fmnist_protocol=theirs"],
    "fmnist_protocol='theirs'; allowed: reference_code, ours",
  ),
  ("fedgs_table2", ["--output_dir={tmp}", "--methods=fedgs_a9"], "unknown methods ['fedgs_a9']"),
  (
    "fedgs_table2",
    ["--output_dir={tmp}", "--config.datasets.synthetic.base.batch_size=0"],
    "batch_size=0 is out of range",
  ),
  ("availability_plot", ["--output_dir={tmp}", "--dataset=imagenet"], "--dataset='imagenet'"),
  ("availability_plot", ["--output_dir={tmp}", "--num_clients=0"], "--num_clients=0"),
  ("fedgs_init_check", ["--init=xavier"], "invalid choice: 'xavier'"),
  ("fedgs_init_check", ["--data_dir={tmp}/none"], "data_dir='{tmp}/none' is not a folder"),
  ("fedgs_init_check", ["--rounds=7"], "--rounds=7; allowed: multiples of 5"),
  ("atlas", ["--output_dir={tmp}", "--config.datasets=imagenet"], "unknown 'imagenet'"),
  ("atlas", ["--output_dir={tmp}", "--seeds=0,x"], "--seeds='0,x' must be comma-separated"),
  ("claims", ["--paper=fedxx"], "--paper='fedxx'; allowed: clustered_sampling, fedar, fedemd"),
  ("claims", ["--paper=fedgs", "--write"], "--write and --check read every claim"),
  ("claims", ["surplus"], "unexpected arguments ['surplus']"),
  ("compare", ["{tmp}", "--format=html"], "--format='html'; allowed: md, csv"),
  ("compare", ["{tmp}", "--no_such_flag"], "Unknown command line flag 'no_such_flag'"),
]


def run(name, args, tmp):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.run(
    [sys.executable, "-m", f"experiments.{name}", *[a.format(tmp=tmp) for a in args]],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=120,
  )


@pytest.mark.parametrize("name, args, names", CASES)
def test_bad_value_ends_in_one_error_line(tmp_path, name, args, names):
  p = run(name, args, str(tmp_path))
  lines = [line for line in p.stderr.splitlines() if line.strip()]
  assert p.returncode == 2, p.stderr[-3000:]
  assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr[-3000:]
  assert names.format(tmp=str(tmp_path)) in lines[0]
  assert "Traceback" not in p.stderr and p.stdout == ""
  assert os.listdir(tmp_path) == []  # nothing written: the checks come before the run


def test_every_study_binary_has_a_case():
  binaries = {
    os.path.basename(path)[:-3]
    for path in glob.glob(os.path.join(ROOT, "experiments", "*.py"))
    if 'if __name__ == "__main__":' in open(path).read()
  }
  assert binaries - ELSEWHERE == {name for name, _, _ in CASES}

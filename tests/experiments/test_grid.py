"""The grid runner (``experiments/grid.py``) and one writer per run folder
(``fedjax_sel/experiment/ownership.py``).

Facts checked: a second process into a folder another live process writes is refused with
that process named, before it writes anything; a folder left by a killed process is taken
over (the kernel drops its lock) and ``--resume`` finishes it with the metrics of an
uninterrupted run; ``--plan`` lists exactly the runs that are neither finished nor committed,
in the study's order, and trains nothing; ``--lanes=2`` runs each run in exactly one lane;
``--collect`` keeps a run's three files (never checkpoints) and the tables, ``--commit``
commits each with a message naming it; a lane killed with ``kill -9`` is reported in one
line and the rerun finishes its run with the numbers of an uninterrupted run.
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from experiments import grid
from fedjax_sel.experiment import ownership

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = dict(os.environ, JAX_PLATFORMS="cpu")
ENV.pop(grid.LANE_ENV, None)

HOLD = """
import sys, time
from fedjax_sel.experiment import ownership
ownership.acquire(sys.argv[1])
print("held", flush=True)
time.sleep(600)
"""


def _hold(folder):
  """A process that owns ``folder`` until killed."""
  p = subprocess.Popen(
    [sys.executable, "-c", HOLD, str(folder)],
    cwd=ROOT,
    env=ENV,
    stdout=subprocess.PIPE,
    text=True,
  )
  assert p.stdout.readline().strip() == "held"
  return p


def test_a_second_owner_is_refused_naming_the_first_and_a_dead_ones_folder_is_taken_over(
  tmp_path, caplog
):
  folder = tmp_path / "run"
  p = _hold(folder)
  try:
    with pytest.raises(ownership.FolderBusyError, match=rf"process {p.pid} on host "):
      ownership.acquire(str(folder))
    assert ownership.owner_of(str(folder))["pid"] == p.pid
  finally:
    p.send_signal(signal.SIGKILL)
    p.wait()
  assert ownership.owner_of(str(folder)) is None  # the kernel dropped the lock with it
  caplog.set_level("WARNING")
  ownership.acquire(str(folder))
  try:
    assert f"process {p.pid}" in caplog.text and "which is gone" in caplog.text
    record = json.loads((folder / ownership.LOCK_FILE).read_text())
    assert record["pid"] == os.getpid()
  finally:
    ownership.release(str(folder))
  assert not (folder / ownership.LOCK_FILE).exists()  # a clean end leaves no lock file


def test_ownership_is_reentrant_within_a_process_and_all_or_none(tmp_path):
  a, b = str(tmp_path / "a"), str(tmp_path / "b")
  ownership.acquire(a)
  ownership.acquire(a)
  ownership.release(a)
  assert ownership.owns(a)
  ownership.release(a)
  assert not ownership.owns(a)
  p = _hold(b)
  try:
    with pytest.raises(ownership.FolderBusyError):
      with ownership.owned([a, b]):
        pass
    assert not ownership.owns(a)  # released when b was refused
  finally:
    p.kill()
    p.wait()


def _run(*args, timeout=600):
  return subprocess.run(
    [sys.executable, "-m", "experiments.run", "--progress=false", *args],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


def _rounds(folder):
  with open(os.path.join(folder, "metrics.jsonl")) as f:
    return [json.loads(line)["round"] for line in f]


def _numbers(folder):
  """Every evaluated number but the wall times."""
  with open(os.path.join(folder, "metrics.jsonl")) as f:
    return [
      {k: v for k, v in json.loads(line).items() if "second" not in k and k != "eta"} for line in f
    ]


def test_a_second_run_command_into_one_folder_ends_in_one_line_naming_the_first(tmp_path):
  out = str(tmp_path / "run")
  args = ["--rounds=300", "--eval_every=5", f"--output_dir={out}"]
  first = subprocess.Popen(
    [sys.executable, "-m", "experiments.run", "--progress=false", *args],
    cwd=ROOT,
    env=ENV,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )
  try:
    deadline = time.time() + 120
    while ownership.owner_of(out) is None and time.time() < deadline:
      time.sleep(0.2)
    second = _run(*args)
  finally:
    first.communicate(timeout=600)
  assert second.returncode == 2
  errors = [ln for ln in second.stderr.splitlines() if ln.startswith("error:")]
  assert len(errors) == 1 and f"process {first.pid} on host" in errors[0]
  assert "Traceback" not in second.stderr
  assert first.returncode == 0
  rounds = _rounds(out)
  assert rounds == sorted(set(rounds)) and rounds[-1] == 300  # each round once


def test_kill9_then_resume_takes_the_folder_over_and_ends_as_an_uninterrupted_run(tmp_path):
  out, ref = str(tmp_path / "killed"), str(tmp_path / "whole")
  args = ["--rounds=400", "--eval_every=5"]
  p = subprocess.Popen(
    [sys.executable, "-m", "experiments.run", "--progress=false", *args, f"--output_dir={out}"],
    cwd=ROOT,
    env=ENV,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )
  ckpt = os.path.join(out, "checkpoints")
  deadline = time.time() + 300
  while time.time() < deadline and not (os.path.isdir(ckpt) and os.listdir(ckpt)):
    time.sleep(0.1)
  p.send_signal(signal.SIGKILL)
  p.wait()
  assert not os.path.exists(os.path.join(out, "summary.json"))
  again = _run(*args, f"--output_dir={out}", "--resume")
  assert again.returncode == 0, again.stderr[-2000:]
  assert f"taking over {out} from process {p.pid}" in again.stderr
  assert _run(*args, f"--output_dir={ref}").returncode == 0
  assert _numbers(out) == _numbers(ref)


# ---------------------------------------------------------------------- study binaries

QUICK = ["--quick", "--parts=table2", "--datasets=synthetic"]


def _study(*args, timeout=900, env=None):
  return subprocess.run(
    [sys.executable, "-m", "experiments.fedgs_table2", *QUICK, *args],
    cwd=ROOT,
    env=env or ENV,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


def _commit_cell(collect, cell, seed, rounds=10, spr=0.5):
  """A committed finished run (its three files) of ``rounds`` rounds."""
  folder = collect / "cells" / cell / f"seed{seed}"
  folder.mkdir(parents=True)
  (folder / "config.json").write_text("{}\n")
  (folder / "metrics.jsonl").write_text(json.dumps({"round": rounds, "test_loss": 1.0}) + "\n")
  summary = {"complete": True, "rounds": rounds, "seconds_per_round": spr, "best_test_loss": 1}
  (folder / "summary.json").write_text(json.dumps(summary))


def _plan_rows(stdout):
  return [
    tuple(c.strip() for c in ln.strip("|").split("|")[:3])
    for ln in stdout.splitlines()
    if ln.startswith("| synthetic-")
  ]


def test_plan_lists_exactly_the_runs_neither_finished_nor_committed_and_trains_nothing(tmp_path):
  collect, out = tmp_path / "results", tmp_path / "runs"
  _commit_cell(collect, "synthetic-idl-uniform", 0, spr=0.25)
  _commit_cell(collect, "synthetic-idl-fedgs_a1", 0, spr=0.75)
  _commit_cell(collect, "synthetic-ln-uniform", 1)
  got = _study(
    "--seeds=0,1",
    f"--output_dir={out}",
    f"--collect={collect}",
    "--plan",
    "--config.datasets.synthetic.run_order=seed",
  )
  assert got.returncode == 0, got.stderr[-2000:]
  rows = _plan_rows(got.stdout)
  # the study's order with run_order=seed: every cell's seed 0, then seed 1
  assert [(c, s) for c, s, _ in rows] == [
    ("synthetic-ln-uniform", "0"),
    ("synthetic-ln-fedgs_a1", "0"),
    ("synthetic-idl-uniform", "1"),
    ("synthetic-idl-fedgs_a1", "1"),
    ("synthetic-ln-fedgs_a1", "1"),
  ]
  assert all(state == "to run" for _, _, state in rows)
  assert "| synthetic-idl-uniform | 1 | to run | 0.25 (the cell's finished seeds) |" in got.stdout
  assert "8 runs: 3 finished (3 of them committed in" in got.stdout
  # nothing trained: no checkpoint, no run folder but the three committed runs copied in
  assert not list(out.rglob("checkpoints"))
  assert sorted(str(p.parent.relative_to(out)) for p in out.rglob("summary.json")) == [
    "cells/synthetic-idl-fedgs_a1/seed0",
    "cells/synthetic-idl-uniform/seed0",
    "cells/synthetic-ln-uniform/seed1",
  ]


@pytest.mark.parametrize(
  "args,expected",
  [
    (["--commit"], "--commit without --collect"),
    (["--seed_from=/no/such/folder"], "--seed_from='/no/such/folder' is not a folder"),
    (["--lanes=0"], "lanes"),
    (["--config.datasets.synthetic.seeds_of=uniform"], "seeds_of entry 'uniform'"),
    (["--config.datasets.synthetic.run_order=random"], "run_order='random'; allowed: cell, seed"),
  ],
)
def test_bad_grid_input_ends_in_one_line(tmp_path, args, expected):
  got = _study(f"--output_dir={tmp_path}", *args)
  assert got.returncode != 0
  assert expected in got.stderr and "Traceback" not in got.stderr


def _git(repo, *args):
  return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)


def test_two_lanes_run_each_run_once_and_collect_and_commit_it(tmp_path):
  repo = tmp_path / "repo"
  repo.mkdir()
  _git(repo, "init", "-q")
  _git(repo, "config", "user.email", "t@example.com")
  _git(repo, "config", "user.name", "t")
  collect, out = repo / "results", tmp_path / "runs"
  got = _study(
    "--modes=idl",
    "--methods=uniform",
    "--seeds=0,1",
    f"--output_dir={out}",
    f"--collect={collect}",
    "--commit",
    "--lanes=2",
  )
  assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
  assert "lane 0: process" in got.stdout and "lane 1: process" in got.stdout
  started = []
  for i in (0, 1):
    log = (out / "lanes" / f"lane{i}.log").read_text()
    started += re.findall(r"lane run: (\S+ seed \d)", log)
  assert sorted(started) == ["synthetic-idl-uniform seed 0", "synthetic-idl-uniform seed 1"]
  for s in (0, 1):
    kept = collect / "cells" / "synthetic-idl-uniform" / f"seed{s}"
    assert sorted(os.listdir(kept)) == ["config.json", "metrics.jsonl", "summary.json"]
    assert (kept / "metrics.jsonl").read_bytes() == (
      out / "cells" / "synthetic-idl-uniform" / f"seed{s}" / "metrics.jsonl"
    ).read_bytes()
  assert (collect / "table2.md").read_bytes() == (out / "table2.md").read_bytes()
  log = _git(repo, "log", "--format=%s").stdout
  assert "experiments.fedgs_table2: synthetic-idl-uniform seed 0, 10 rounds" in log
  assert "experiments.fedgs_table2: synthetic-idl-uniform seed 1, 10 rounds" in log
  assert "experiments.fedgs_table2: tables and figures" in log
  assert _git(repo, "status", "--porcelain").stdout == ""


@pytest.mark.slow
def test_a_lane_killed_with_kill9_is_reported_and_the_rerun_finishes_its_run(tmp_path):
  out, ref = tmp_path / "runs", tmp_path / "ref"
  args = ["--modes=idl", "--methods=uniform", "--seeds=0,1", "--rounds=600"]
  parent = subprocess.Popen(
    [
      sys.executable,
      "-m",
      "experiments.fedgs_table2",
      *QUICK,
      *args,
      f"--output_dir={out}",
      "--lanes=2",
    ],
    cwd=ROOT,
    env=ENV,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )
  pids = [int(parent.stdout.readline().split()[3].rstrip(",")) for _ in range(2)]
  victim = out / "cells" / "synthetic-idl-uniform" / "seed0"
  deadline = time.time() + 600
  while time.time() < deadline:
    owner = ownership.owner_of(str(victim)) if victim.is_dir() else None
    ckpt = victim / "checkpoints"
    if owner and ckpt.is_dir() and os.listdir(ckpt):
      break
    time.sleep(0.1)
  assert owner["pid"] in pids
  os.kill(owner["pid"], signal.SIGKILL)
  rest, _ = parent.communicate(timeout=900)
  assert parent.returncode == 1
  lines = [ln for ln in rest.splitlines() if "stopped with exit code" in ln]
  assert len(lines) == 1
  assert (
    f"(process {owner['pid']}) stopped with exit code -9 at synthetic-idl-uniform seed 0"
    in (lines[0])
  )
  again = _study(*args, f"--output_dir={out}", "--lanes=2")
  assert again.returncode == 0, again.stderr[-3000:]
  alone = _study(
    "--modes=idl", "--methods=uniform", "--seeds=0", "--rounds=600", f"--output_dir={ref}"
  )
  assert alone.returncode == 0
  assert _numbers(victim) == _numbers(ref / "cells" / "synthetic-idl-uniform" / "seed0")


def test_collect_keeps_a_run_that_finished_before_the_command(tmp_path):
  """A run finished by an earlier command without --collect is kept by the next command
  with --collect, read back, not trained again."""
  out, collect = tmp_path / "runs", tmp_path / "results"
  args = ["--modes=idl", "--methods=uniform", "--seeds=0", f"--output_dir={out}"]
  assert _study(*args).returncode == 0
  metrics = out / "cells" / "synthetic-idl-uniform" / "seed0" / "metrics.jsonl"
  before = metrics.stat().st_mtime_ns
  got = _study(*args, f"--collect={collect}")
  assert got.returncode == 0, got.stderr[-2000:]
  assert metrics.stat().st_mtime_ns == before  # read back, not trained
  kept = collect / "cells" / "synthetic-idl-uniform" / "seed0"
  assert sorted(os.listdir(kept)) == ["config.json", "metrics.jsonl", "summary.json"]
  assert (kept / "metrics.jsonl").read_bytes() == metrics.read_bytes()
  assert (collect / "table2.md").exists()


def test_a_lanes_command_is_the_command_without_lanes_and_plan_with_its_device_share():
  argv = ["--quick", "--lanes", "2", "--cpu_devices=4", "--seeds=0,1", "--noplan", "--x=1"]
  assert grid._lane_argv(argv, 0, 2) == ["--quick", "--seeds=0,1", "--x=1", "--cpu_devices=2"]
  assert grid._lane_argv(["--lanes=3", "--cpu_devices", "2"], 2, 3) == ["--cpu_devices=1"]
  assert grid._lane_argv(["--plan"], 0, 2) == ["--cpu_devices=1"]  # one device each at least
  env = grid._lane_env(1, 2)
  assert env[grid.LANE_ENV] == "1/2"


def test_a_second_signal_during_a_study_ends_in_one_line_with_130(capsys):
  """The escape hatch (a second SIGINT/SIGTERM raises KeyboardInterrupt at once, e.g. while
  a study's threads finish their chunks) ends a study binary in one line, not a traceback."""
  from experiments import common

  with pytest.raises(SystemExit) as e, common.user_errors():
    raise KeyboardInterrupt
  assert e.value.code == 130
  err = capsys.readouterr().err
  assert err.splitlines() == [
    "stopped at once by a second signal; the newest checkpoints are kept (the same command "
    "continues from them)"
  ]


def test_ctrl_c_in_a_study_ends_in_one_line_and_keeps_the_checkpoint(tmp_path):
  out = tmp_path / "runs"
  args = [*QUICK, "--modes=idl", "--methods=uniform", "--seeds=0", "--rounds=100000"]
  p = subprocess.Popen(
    [sys.executable, "-m", "experiments.fedgs_table2", *args, f"--output_dir={out}"],
    cwd=ROOT,
    env=ENV,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )
  ckpt = out / "cells" / "synthetic-idl-uniform" / "seed0" / "checkpoints"
  deadline = time.time() + 300
  while time.time() < deadline and not (ckpt.is_dir() and os.listdir(ckpt)):
    time.sleep(0.1)
  p.send_signal(signal.SIGINT)
  _, err = p.communicate(timeout=300)
  assert p.returncode == 130
  assert "Traceback" not in err
  assert err.strip().splitlines()[-1].startswith("interrupted by signal 2 after round ")
  assert os.listdir(ckpt)

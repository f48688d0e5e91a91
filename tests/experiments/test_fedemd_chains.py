"""FedEMD's long chains (``results/fedemd_fmnist/scripts/run_table1.sh`` and ``run_fig4.sh``)
run two commands side by side (``LANES=2``). Two commands running at once must never train
the same cell: a command trains its method's cell and, where it is not committed, Random's
cell of its (scenario, seed), which it writes into the same folder.

Each script runs here in a copy of the repository's layout with ``PYTHON`` a stand-in that
records when each command starts and ends (and sleeps 0.1-2.5 s, a time fixed per command,
so that the lanes overlap and finish out of step); the committed cells come from the real
``results/``, which the scripts copy into ``runs/`` first, as on a fresh machine. Nothing trains.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "results" / "fedemd_fmnist" / "scripts"
DEFAULT = "results/fedemd_fmnist/text_reading_lr_per_round_default"
# where each run folder's Random cells are committed (the SVB folder's are Table 1's copies)
RANDOM_OF = {
  "runs/fedemd_fmnist_text_round_lr": f"{DEFAULT}/table1",
  "runs/fedemd_fmnist_text_round_lr_svb": f"{DEFAULT}/table1",
  "runs/fedemd_fmnist_text_round_lr_fedsgd": f"{DEFAULT}/table1_fedsgd",
  "runs/fedemd_fmnist_text_fig4": f"{DEFAULT}/fig4",
}

FAKE_PYTHON = """#!/bin/bash
echo "start $(date +%s.%N) $*" >> "$CHAIN_LOG"
# commands take different times (0.1-0.7 s, fixed per command), as cells do; Random's cell of
# seed 1 alone takes longest, so a lane that goes on without waiting for it shows
case "$*" in
  *"methods=('random',) --seeds=1"*) sleep 2.5 ;;
  *) sleep 0.$(( $(echo "$*" | cksum | cut -d' ' -f1) % 7 + 1 )) ;;
esac
echo "end $(date +%s.%N) $*" >> "$CHAIN_LOG"
"""


def copy_layout(tmp_path) -> pathlib.Path:
  """A copy of the scripts and of the committed cells they seed runs/ from (no checkpoints
  are committed), under ``tmp_path / "repo"``."""
  tree = tmp_path / "repo"
  shutil.copytree(SCRIPTS, tree / "results" / "fedemd_fmnist" / "scripts")
  shutil.copytree(ROOT / DEFAULT, tree / DEFAULT)
  return tree


def run_chain(tmp_path, script: str, **env) -> list[dict]:
  """Runs ``script`` in a copy of the layout; its commands as dicts, in start order."""
  tree = copy_layout(tmp_path)
  fake = tmp_path / "python"
  fake.write_text(FAKE_PYTHON)
  fake.chmod(0o755)
  log = tmp_path / "chain.log"
  result = subprocess.run(
    ["bash", str(tree / "results" / "fedemd_fmnist" / "scripts" / script)],
    env={**os.environ, "PYTHON": str(fake), "CHAIN_LOG": str(log), **env},
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-2000:]
  commands = {}
  for line in log.read_text().splitlines():
    kind, when, args = line.split(" ", 2)
    commands.setdefault(args, {})[kind] = float(when)
  out = []
  for args, times in commands.items():
    scenario = re.search(r"--config.scenarios=\('(\w+)',\)", args).group(1)
    methods = re.findall(r"'(\w+)'", re.search(r"--config.methods=(\S+)", args).group(1))
    seeds = [int(s) for s in re.search(r"--seeds=(\S+)", args).group(1).split(",")]
    output_dir = re.search(r"--output_dir=(\S+)", args).group(1)
    devices = int(re.search(r"--cpu_devices=(\d)", args).group(1))
    out.append(
      dict(
        times,
        scenario=scenario,
        methods=methods,
        seeds=seeds,
        out=output_dir,
        devices=devices,
        tree=tree,
        args=args,
      )
    )
  return sorted(out, key=lambda c: c["start"])


def trains(command, commands, at: float) -> set[tuple]:
  """The cells ``command`` may train when it runs at time ``at``: its methods' cells, and
  Random's of its seed unless committed or trained by an earlier command that ended by then."""
  suffix = "_fedsgd" if "aggregation_setup=fedsgd" in command["args"] else ""
  cells = set()
  for seed in command["seeds"]:
    for m in command["methods"]:
      committed = command["tree"] / RANDOM_OF[command["out"]] / "cells"
      name = f"{command['scenario']}_{m}{suffix}"
      if m == "random" and command["methods"] != ["random"]:
        if (committed / name / f"seed{seed}" / "summary.json").exists() or any(
          c["methods"] == ["random"]
          and c["out"] == command["out"]
          and c["seeds"] == [seed]
          and c["scenario"] == command["scenario"]
          and c["end"] <= at
          for c in commands
        ):
          continue
      cells.add((command["out"], name, seed))
  return cells


def assert_no_cell_trained_twice_at_once(commands):
  overlapping = 0
  for i, a in enumerate(commands):
    for b in commands[i + 1 :]:
      if b["start"] < a["end"] and a["start"] < b["end"]:
        overlapping += 1
        at = min(a["start"], b["start"])
        shared = trains(a, commands, at) & trains(b, commands, at)
        assert not shared, f"two commands at once train {shared}:\n{a['args']}\n{b['args']}"
  return overlapping


@pytest.mark.parametrize("script", ["run_table1.sh", "run_fig4.sh"])
def test_two_lanes_never_train_one_cell_at_once(tmp_path, script):
  commands = run_chain(tmp_path, script)
  training = [c for c in commands if len(c["seeds"]) == 1]  # the table commands train nothing
  assert assert_no_cell_trained_twice_at_once(training) >= len(training) // 3  # lanes overlap
  assert {c["devices"] for c in commands} == {1}
  # every cell of the grid is asked for once
  asked = [
    (c["out"], c["scenario"], m, c["seeds"][0])
    for c in training
    for m in c["methods"]
    if m != "random"
  ]
  assert len(asked) == len(set(asked))
  if script == "run_fig4.sh":
    # 12 baseline cells on seed 0, 8 FedEMD cells of seeds 1, 2, TiFL's 4 exclusive ones
    assert len(training) == 24
  else:
    # 3 x 3 FedAvg baselines, 4 x 3 FedSGD methods beside Random, FedSGD Random of seeds 1, 2
    # (seed 0 committed), SVB on 3 seeds
    assert len(training) == 9 + 12 + 2 + 3


def test_a_phase_waits_for_the_random_cells_it_needs(tmp_path):
  """FedSGD's Random cells of seeds 1, 2 end before any other FedSGD command of those seeds
  starts (that command would train Random's cell again beside it)."""
  commands = run_chain(tmp_path, "run_table1.sh")
  sgd = [c for c in commands if "aggregation_setup=fedsgd" in c["args"] and len(c["seeds"]) == 1]
  for seed in (1, 2):
    alone = [c for c in sgd if c["methods"] == ["random"] and c["seeds"] == [seed]]
    others = [c for c in sgd if c["methods"] != ["random"] and c["seeds"] == [seed]]
    assert len(alone) == 1 and len(others) == 4
    assert all(c["start"] >= alone[0]["end"] for c in others)


def test_one_lane_runs_one_two_device_command_at_a_time(tmp_path):
  commands = run_chain(tmp_path, "run_fig4.sh", LANES="1", STEPS="1")
  assert len(commands) == 6 and {c["devices"] for c in commands} == {2}
  assert all(b["start"] >= a["end"] for a, b in zip(commands, commands[1:]))


def refused(tmp_path, script: str, **env) -> subprocess.CompletedProcess:
  """Runs ``script`` with ``env`` and a ``PYTHON`` that fails: a bad value must stop it first."""
  return subprocess.run(
    ["bash", str(SCRIPTS / script)],
    env={**os.environ, "PYTHON": "false", **env},
    capture_output=True,
    text=True,
    timeout=60,
    cwd=tmp_path,
  )


@pytest.mark.parametrize("script", ["run_table1.sh", "run_fig4.sh"])
def test_a_bad_lanes_value_is_refused(tmp_path, script):
  result = refused(tmp_path, script, LANES="3")
  assert result.returncode == 2 and "LANES=3: allowed: 1 or 2" in result.stderr


def test_tifls_seeds_wait_for_the_random_cells_of_step_4(tmp_path):
  """Step 5 (TiFL, seeds 1, 2, exclusive) starts once every step-4 command of its scenario and
  seed has ended: that command trains Random's cell step 5 reads."""
  commands = run_chain(tmp_path, "run_fig4.sh", STEPS="4 5")
  tifl = [c for c in commands if "tifl" in c["methods"]]
  fedemd = [c for c in commands if "fedemd" in c["methods"]]
  assert len(tifl) == 4 and len(fedemd) == 4
  for c in tifl:
    (same,) = [f for f in fedemd if (f["scenario"], f["seeds"]) == (c["scenario"], c["seeds"])]
    assert c["start"] >= same["end"]


def test_seeds_picks_the_seeds_of_steps_2_4_and_5(tmp_path):
  commands = run_chain(tmp_path, "run_fig4.sh", STEPS="2 4 5", SEEDS="1")
  asked = sorted((c["scenario"], c["methods"][1], c["seeds"][0]) for c in commands)
  expected = [(sc, "fedemd", 1) for sc in ("2_shared", "3_shared", "2_excl", "3_excl")]
  expected += [(sc, "tifl", 1) for sc in ("2_excl", "3_excl")]
  assert asked == sorted(expected)


def test_a_bad_seeds_value_is_refused(tmp_path):
  result = refused(tmp_path, "run_fig4.sh", SEEDS="1 0")
  assert result.returncode == 2 and "SEEDS=1 0: unknown seed 0; allowed: 1 2" in result.stderr


def tables(tmp_path, drop: str | None = None) -> tuple[subprocess.CompletedProcess, list[str]]:
  """Runs ``run_fig4.sh tables`` in a copy of the layout (``drop``: a committed cell removed
  first); its result and the commands the stand-in python ran, less the completeness checks."""
  tree = copy_layout(tmp_path)
  if drop:
    shutil.rmtree(tree / DEFAULT / "fig4" / "cells" / drop)
  log = tmp_path / "chain.log"
  fake = tmp_path / "python"
  # the completeness check (-c) runs the real python; the binary's command is recorded and
  # writes a table where the binary would
  fake.write_text(
    f'#!/bin/bash\nif [ "$1" = -c ]; then exec {sys.executable} "$@"; fi\n'
    f'echo "$*" >> "{log}"\necho table > runs/fedemd_fmnist_text_fig4/r99.md\n'
  )
  fake.chmod(0o755)
  result = subprocess.run(
    ["bash", str(tree / "results" / "fedemd_fmnist" / "scripts" / "run_fig4.sh"), "tables"],
    env={**os.environ, "PYTHON": str(fake)},
    capture_output=True,
    text=True,
    timeout=120,
  )
  return result, (log.read_text().splitlines() if log.exists() else [])


def test_tables_reads_the_24_cells_of_random_and_fedemd_and_copies_the_tables(tmp_path):
  result, commands = tables(tmp_path)
  assert result.returncode == 0, result.stderr[-2000:]
  (command,) = commands
  assert "--config.scenarios=('2_excl','3_excl','2_shared','3_shared')" in command
  assert "--config.methods=('random','fedemd')" in command and "--seeds=0,1,2" in command
  assert (tmp_path / "repo" / DEFAULT / "fig4" / "r99.md").read_text() == "table\n"


def test_tables_refuses_while_a_cell_is_missing(tmp_path):
  result, commands = tables(tmp_path, drop="3_excl_fedemd/seed2")
  assert result.returncode == 2 and not commands
  assert "cell 3_excl_fedemd/seed2 has not finished; run the steps first" in result.stderr

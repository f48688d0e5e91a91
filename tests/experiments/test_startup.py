"""What every binary does first (``experiments/startup.py``): ``--import`` and the persistent
compilation cache (``fedjax_sel/experiment/cache.py``).

Facts checked: a run with a cold cache, the same run with the cache warm, and one with the
cache off give the same numbers in every evaluated record; the warm run finds the compiled
programs on disk; an unwritable cache folder warns once and the run goes on uncached; a
strategy registered in a file given to ``--import`` is a ``--selection`` name with its
hyper-parameter flags, and a missing file or a module that fails to import ends in one
``error:`` line naming it.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STRATEGY = '''
import fedjax_sel as fs
from fedjax_sel.selection import common


@fs.selection.register("toy_lowest_ids")
def make(num_selected: int, offset: int = 0):
  """The M available clients of lowest id (offset: a hyper-parameter that does nothing)."""
  num_selected = common.check_num_selected(num_selected)
  return fs.selection.make_full(num_selected)
'''


def _run(*args, env=None):
  env = dict(os.environ, JAX_PLATFORMS="cpu", **(env or {}))
  return subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.run",
      "--progress=false",
      "--rounds=20",
      "--eval_every=5",
      *args,
    ],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )


def _numbers(folder):
  with open(os.path.join(folder, "metrics.jsonl")) as f:
    return [{k: v for k, v in json.loads(line).items() if "second" not in k} for line in f]


def test_the_cache_changes_no_number_and_is_read_back(tmp_path):
  cache = tmp_path / "cache"
  cold = _run(f"--output_dir={tmp_path / 'cold'}", f"--compilation_cache={cache}")
  assert cold.returncode == 0, cold.stderr[-2000:]
  entries = set(os.listdir(cache))
  assert entries  # the programs were written
  warm = _run(f"--output_dir={tmp_path / 'warm'}", f"--compilation_cache={cache}")
  off = _run(f"--output_dir={tmp_path / 'off'}", "--compilation_cache=none")
  assert warm.returncode == 0 and off.returncode == 0
  assert set(os.listdir(cache)) == entries  # the warm run compiled nothing new
  assert _numbers(tmp_path / "cold") == _numbers(tmp_path / "warm") == _numbers(tmp_path / "off")


def test_an_unwritable_cache_folder_warns_once_and_runs_uncached(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("not a folder")
  got = _run(f"--output_dir={tmp_path / 'out'}", f"--compilation_cache={blocker}/cache")
  assert got.returncode == 0, got.stderr[-2000:]
  assert got.stderr.count("cannot be written") == 1 and "running uncached" in got.stderr


def test_import_registers_a_strategy_before_the_flags_are_made(tmp_path):
  module = tmp_path / "toy_strategy.py"
  module.write_text(STRATEGY)
  out = tmp_path / "out"
  got = _run(
    f"--import={module}",
    "--selection=toy_lowest_ids",
    "--selection_offset=3",
    f"--output_dir={out}",
  )
  assert got.returncode == 0, got.stderr[-2000:]
  with open(out / "config.json") as f:
    config = json.load(f)["config"]
  assert config["selection"] == "toy_lowest_ids"
  assert config["selection_hparams"] == {"offset": 3}


def test_a_bad_import_ends_in_one_line_naming_it(tmp_path):
  missing = _run(f"--import={tmp_path / 'nope.py'}")
  assert missing.returncode == 2
  assert [ln for ln in missing.stderr.splitlines() if ln.startswith("error:")] == [
    f"error: --import={tmp_path / 'nope.py'}: ImportError: no such file "
    f"{tmp_path / 'nope.py'}; allowed: an importable module name or the path of a .py file"
  ]
  broken = tmp_path / "broken.py"
  broken.write_text("raise RuntimeError('boom')\n")
  got = _run(f"--import={broken}")
  assert got.returncode == 2 and "RuntimeError: boom" in got.stderr
  assert "Traceback" not in got.stderr
  study = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.fedgs_table2",
      "--quick",
      "--import=no_such_module_x",
      f"--output_dir={tmp_path / 's'}",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert study.returncode == 2
  assert "error: --import=no_such_module_x: ModuleNotFoundError" in study.stderr

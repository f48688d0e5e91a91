"""A run whose disk fills up ends cleanly: one ``error:`` line naming the file and what could
not be written, exit code 1, no traceback, nothing half-written; a checkpoint that cannot be
written is a warning while an older one is kept, and stops the run when none is."""

import errno
import logging
import os
import subprocess
import sys

import pytest

from fedjax_sel import experiment
from fedjax_sel.core import checkpoint
from fedjax_sel.metrics import results

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DISK_FULL_RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_disk_full_run.py")
ARGS = ["--rounds=6", "--eval_every=2", "--num_clients=8", "--clients_per_round=3"]
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _config():
  c = experiment.default_config()
  c.num_clients, c.clients_per_round, c.local_steps = 8, 3, 2
  c.rounds, c.eval_every = 6, 2
  return c


def _leftovers(folder):
  """Temporary files anywhere under ``folder`` (a write that was not finished)."""
  return [f for _, _, files in os.walk(folder) for f in files if f.startswith(".tmp-")]


def _full_from_round(monkeypatch, first_full):
  """Checkpoints of rounds >= ``first_full`` cannot be written (a full disk)."""
  write = checkpoint.atomic_write_bytes

  def atomic_write_bytes(path, data, what=None):
    if int(os.path.basename(path)[5:13]) >= first_full:
      raise results.WriteError(path, what, ENOSPC)
    return write(path, data, what)

  monkeypatch.setattr(checkpoint, "atomic_write_bytes", atomic_write_bytes)


def test_a_checkpoint_that_cannot_be_written_is_a_warning_while_one_is_kept(
  tmp_path, monkeypatch, caplog
):
  out = str(tmp_path / "run")
  _full_from_round(monkeypatch, 4)
  with caplog.at_level(logging.WARNING):
    summary = experiment.run(_config(), out, write_plots=False)
  assert summary["complete"] and summary["rounds"] == 6
  assert checkpoint.all_rounds(out) == [2]  # the run's results are all there, its resume point 2
  assert [r["round"] for r in results.read_jsonl(f"{out}/metrics.jsonl")] == [2, 4, 6]
  warned = [r.getMessage() for r in caplog.records if "could not write" in r.getMessage()]
  assert len(warned) == 2, warned
  assert warned[0] == (
    f"could not write {out}/checkpoints/ckpt_00000004.npz (checkpoint of round 4): No space "
    "left on device; the run goes on, and --resume would continue from round 2"
  )
  assert not _leftovers(out)


def test_no_checkpoint_kept_stops_the_run(tmp_path, monkeypatch):
  out = str(tmp_path / "run")
  _full_from_round(monkeypatch, 0)
  with pytest.raises(results.WriteError) as err:
    experiment.run(_config(), out, write_plots=False)
  assert str(err.value) == (
    f"could not write {out}/checkpoints/ckpt_00000002.npz (checkpoint of round 2): No space "
    f"left on device; no checkpoint in {out}: free space and run again"
  )
  assert checkpoint.all_rounds(out) == [] and not _leftovers(out)
  assert not os.path.exists(f"{out}/summary.json")


def test_a_full_disk_makes_room_from_older_checkpoints(tmp_path, monkeypatch):
  """The first write of a checkpoint fails; the older ones but the newest are removed and
  the write is tried once more."""
  out = str(tmp_path / "run")
  for r in (1, 2):
    checkpoint.save(out, {"x": [r]}, r)
  write, calls = checkpoint.atomic_write_bytes, []

  def first_fails(path, data, what=None):
    calls.append(path)
    if len(calls) == 1:
      raise results.WriteError(path, what, ENOSPC)
    return write(path, data, what)

  monkeypatch.setattr(checkpoint, "atomic_write_bytes", first_fails)
  checkpoint.save(out, {"x": [3]}, 3)
  assert len(calls) == 2 and checkpoint.all_rounds(out) == [2, 3]


def _cli(out, full_after, timeout=300):
  env = dict(
    os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT, FEDJAX_SEL_FULL_AFTER=str(full_after)
  )
  cmd = [sys.executable, DISK_FULL_RUN, "--progress=false", *ARGS, f"--output_dir={out}"]
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_command_line_ends_with_one_error_line(tmp_path):
  """``experiments.run``: the disk is full after config.json and metrics.jsonl were made (two
  fsyncs): the first evaluation's metrics line cannot be written."""
  out = str(tmp_path / "run")
  done = _cli(out, 2)
  assert done.returncode == 1, done.stderr[-3000:]
  assert "Traceback" not in done.stderr
  lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
  assert lines == [
    f"error: could not write {out}/metrics.jsonl (metrics): No space left on device; no "
    f"checkpoint in {out}: free space and run again"
  ], done.stderr[-3000:]
  assert os.path.getsize(f"{out}/metrics.jsonl") == 0  # the line's bytes are taken back
  assert not _leftovers(out) and checkpoint.all_rounds(out) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root only)")
def test_a_60_kb_tmpfs_as_output_dir(tmp_path):
  """The user's case: a 60 KB tmpfs as --output_dir (an MLP's checkpoints do not fit)."""
  mount = tmp_path / "tiny"
  mount.mkdir()
  made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=60k", "tmpfs", str(mount)])
  if made.returncode != 0:
    pytest.skip("tmpfs cannot be mounted here")
  try:
    out = str(mount / "run")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "experiments.run", "--progress=false", *ARGS, "--model=mlp",
           f"--output_dir={out}"]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: could not write {out}/"), lines
    assert "No space left on device" in lines[0] and "Traceback" not in done.stderr
    assert not _leftovers(out)
  finally:
    subprocess.run(["umount", str(mount)])


def test_study_binaries_end_a_write_error_in_one_line(capsys):
  """The study binaries' runs sit in ``common.user_errors``: a full disk there (a table, a
  run of ``run_batch``) is one ``error:`` line and exit code 1, as in ``experiments.run``."""
  from experiments import common

  with pytest.raises(SystemExit) as stop:
    with common.user_errors():
      raise results.WriteError("/x/table2.md", "table", ENOSPC)
  assert stop.value.code == 1
  assert capsys.readouterr().err == (
    "error: could not write /x/table2.md (table): No space left on device\n"
  )

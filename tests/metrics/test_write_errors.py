"""A write that fails (a full disk: ENOSPC) raises ``results.WriteError`` naming the file, what
it is and the reason, and leaves no half-written file: an atomic write keeps the old file, an
append cuts the file back to its length before."""

import errno
import os

import pytest

from fedjax_sel.metrics import results

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _no_temp_files(folder):
  return [f for f in os.listdir(folder) if f.startswith(".tmp-")] == []


def test_atomic_write_keeps_the_old_file(tmp_path, monkeypatch):
  path = str(tmp_path / "summary.json")
  results.write_json(path, {"rounds": 5})
  monkeypatch.setattr(results.os, "fsync", lambda fd: (_ for _ in ()).throw(ENOSPC))
  with pytest.raises(results.WriteError) as err:
    results.write_json(path, {"rounds": 6})
  assert str(err.value) == f"could not write {path} (run summary): No space left on device"
  assert err.value.errno == errno.ENOSPC and err.value.path == path
  monkeypatch.undo()
  with open(path) as f:
    assert f.read() == '{\n  "rounds": 5\n}\n'
  assert _no_temp_files(tmp_path)


def test_figure_and_table_name_what_they_are(tmp_path, monkeypatch):
  monkeypatch.setattr(results.os, "fsync", lambda fd: (_ for _ in ()).throw(ENOSPC))
  with pytest.raises(results.WriteError, match=r"curves\.png \(figure\): No space left"):
    results.atomic_write_bytes(str(tmp_path / "curves.png"), b"png")
  with pytest.raises(results.WriteError, match=r"table2\.csv \(table\): No space left"):
    results.write_table(str(tmp_path / "table2"), ["a"], [[1]])
  assert os.listdir(tmp_path) == []


def test_failed_append_cuts_the_file_back(tmp_path, monkeypatch):
  """Half of the new lines reach the file, then the disk is full: the file is cut back to
  its two complete lines, and the next append (space freed) continues it."""
  path = str(tmp_path / "metrics.jsonl")
  results.append_lines(path, [{"round": 1}, {"round": 2}])
  before = os.path.getsize(path)
  write = os.write

  def half_then_full(fd, data):
    if len(data) > 1:
      return write(fd, bytes(data[: len(data) // 2]))
    raise ENOSPC

  monkeypatch.setattr(results.os, "write", half_then_full)
  with pytest.raises(results.WriteError, match=r"metrics\.jsonl \(metrics\): No space left"):
    results.append_lines(path, [{"round": 3, "test_loss": 0.5}, {"round": 4}])
  monkeypatch.undo()
  assert os.path.getsize(path) == before
  results.append_jsonl(path, {"round": 3})
  assert [r["round"] for r in results.read_jsonl(path)] == [1, 2, 3]


def test_note_keeps_the_reason():
  e = results.WriteError("/x/ckpt.npz", "checkpoint of round 5", ENOSPC)
  noted = e.with_note("checkpoint of round 4 kept")
  assert str(noted) == (
    "could not write /x/ckpt.npz (checkpoint of round 5): No space left on device; "
    "checkpoint of round 4 kept"
  )
  assert noted.errno == errno.ENOSPC and isinstance(noted, OSError)

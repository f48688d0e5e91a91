"""tools/mutation.py --shards: one file's pending mutants dealt to several sessions and merged
back (on cosmic-ray's sqlite schema, written here; cosmic-ray itself is not needed)."""

import importlib.util
import os
import sqlite3

import pytest

_spec = importlib.util.spec_from_file_location(
  "mutation_tool", os.path.join(os.path.dirname(__file__), "..", "..", "tools", "mutation.py")
)
mutation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutation)

SCHEMA = """
CREATE TABLE work_items (job_id VARCHAR NOT NULL, PRIMARY KEY (job_id));
CREATE TABLE mutation_specs (module_path VARCHAR, operator_name VARCHAR, operator_args JSON,
  occurrence INTEGER, start_pos_row INTEGER, start_pos_col INTEGER, end_pos_row INTEGER,
  end_pos_col INTEGER, definition_name VARCHAR, job_id VARCHAR NOT NULL, PRIMARY KEY (job_id));
CREATE TABLE work_results (worker_outcome VARCHAR(9), output TEXT, test_outcome VARCHAR(11),
  diff TEXT, job_id VARCHAR NOT NULL, PRIMARY KEY (job_id));
"""


def _session(path, rows, done):
  """A session of mutants on ``rows`` (job ids j0, j1, ...); ``done`` maps job -> outcome."""
  with sqlite3.connect(path) as db:
    db.executescript(SCHEMA)
    for i, row in enumerate(rows):
      db.execute("INSERT INTO work_items VALUES (?)", (f"j{i}",))
      db.execute(
        "INSERT INTO mutation_specs (module_path, start_pos_row, start_pos_col, job_id) "
        "VALUES ('m.py', ?, 0, ?)",
        (row, f"j{i}"),
      )
    for job, outcome in done.items():
      db.execute("INSERT INTO work_results VALUES ('NORMAL', 'out', ?, NULL, ?)", (outcome, job))


def _results(path):
  with sqlite3.connect(path) as db:
    return dict(db.execute("SELECT job_id, output FROM work_results"))


def _run_pending(path, outcome):
  """What ``cosmic-ray exec`` does: a result for every job without one."""
  with sqlite3.connect(path) as db:
    pending = db.execute(
      "SELECT job_id FROM work_items WHERE job_id NOT IN (SELECT job_id FROM work_results)"
    ).fetchall()
    db.executemany(
      "INSERT INTO work_results VALUES ('NORMAL', ?, 'KILLED', NULL, ?)",
      [(f"{outcome}:{job}", job) for (job,) in pending],
    )


@pytest.mark.parametrize("k", [2, 3])
def test_each_pending_mutant_runs_in_exactly_one_shard(tmp_path, k):
  main = str(tmp_path / "engine.sqlite")
  rows = [5, 1, 9, 3, 7, 2, 8]  # j1 (row 1) comes first in line order
  _session(main, rows, {"j3": "SURVIVED"})
  copies = [str(tmp_path / f"engine.shard{j}.sqlite") for j in range(1, k)]
  mutation.split_pending(main, copies)
  assert mutation.shard_sessions(main) == copies
  runs = {}
  for j, path in enumerate([main, *copies]):
    before = _results(path)
    assert before["j3"] == "out"  # a finished result is kept in every copy
    _run_pending(path, f"shard{j}")
    runs[j] = {job for job, out in _results(path).items() if out == f"shard{j}:{job}"}
  pending = ["j1", "j5", "j0", "j4", "j6", "j2"]  # rows 1, 2, 5, 7, 8, 9 (j3 is done)
  for j in range(k):
    assert runs[j] == set(pending[j::k])  # round-robin in line order, disjoint, complete
  assert mutation.merge_shards(main, copies) == len(pending) - len(runs[0])
  merged = _results(main)
  assert set(merged) == {f"j{i}" for i in range(len(rows))}
  assert merged["j3"] == "out"
  for j in range(k):
    for job in runs[j]:
      assert merged[job] == f"shard{j}:{job}"
  assert not any(os.path.exists(c) for c in copies)  # merged copies are removed


def test_interrupted_shard_keeps_what_it_finished(tmp_path):
  main = str(tmp_path / "engine.sqlite")
  _session(main, [1, 2, 3, 4], {})
  copy = str(tmp_path / "engine.shard1.sqlite")
  mutation.split_pending(main, [copy])  # main runs j0, j2; the shard j1, j3
  with sqlite3.connect(copy) as db:  # the shard finished j1 only, then was killed
    db.execute("INSERT INTO work_results VALUES ('NORMAL', 'done', 'KILLED', NULL, 'j1')")
  assert mutation.merge_shards(main, mutation.shard_sessions(main)) == 1
  merged = _results(main)
  assert merged == {"j1": "done"}  # j0, j2 (main never ran) and j3 are pending again
  assert mutation.SHARD_PLACEHOLDER not in merged.values()


def test_empty_leftover_copy_holds_no_result(tmp_path):
  """An empty leftover copy (sqlite3 creates one when a deleted copy is opened) is removed
  with the placeholders, not an error: its mutants are pending again."""
  main = str(tmp_path / "engine.sqlite")
  _session(main, [1, 2, 3], {"j0": "KILLED"})
  copy = str(tmp_path / "engine.shard1.sqlite")
  mutation.split_pending(main, [copy])  # main runs j1; the shard j2
  os.remove(copy)
  sqlite3.connect(copy).close()  # an empty file in its place
  assert mutation.merge_shards(main, mutation.shard_sessions(main)) == 0
  assert _results(main) == {"j0": "out"}
  assert not os.path.exists(copy)

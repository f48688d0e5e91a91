"""Logs a person reads (issue 42): the libraries' INFO chatter is off unless --verbosity is
given; this package's own INFO lines and every library's warnings stay."""

import logging
import os
import re
import subprocess
import sys

import pytest

from fedjax_sel.core import logs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _record(name, level, path):
  return logging.LogRecord(name, level, path, 1, "message", None, None)


@pytest.fixture
def restored():
  saved = {n: logging.getLogger(n).level for n in ("jax", "jaxlib")}
  filters = {n: list(logging.getLogger(n).filters) for n in ("absl", "")}
  yield
  for n, level in saved.items():
    logging.getLogger(n).setLevel(level)
  for n, f in filters.items():
    logging.getLogger(n).filters[:] = f


def test_the_filter_drops_library_info_and_keeps_warnings_and_our_own(restored):
  orbax = os.path.join("site-packages", "orbax", "checkpoint", "checkpoint_manager.py")
  ours = os.path.join("fedjax_sel", "experiment", "loop.py")
  f = logs._DropLibraryInfo()
  assert not f.filter(_record("absl", logging.INFO, orbax))
  assert not f.filter(_record("absl", logging.DEBUG, orbax))
  assert f.filter(_record("absl", logging.WARNING, orbax))
  assert f.filter(_record("absl", logging.INFO, ours))
  logging.getLogger("jax").setLevel(logging.NOTSET)
  logs.quiet_libraries(explicit_verbosity=True)
  assert logging.getLogger("jax").level == logging.NOTSET  # --verbosity given: untouched
  logs.quiet_libraries()
  assert logging.getLogger("jax").level == logging.WARNING
  assert not logging.getLogger("jax._src.xla_bridge").isEnabledFor(logging.INFO)
  assert logging.getLogger("jax._src.xla_bridge").isEnabledFor(logging.WARNING)
  logs.quiet_libraries()  # idempotent: one filter
  assert sum(isinstance(x, logs._DropLibraryInfo) for x in logging.getLogger("absl").filters) == 1


def _first_command_stderr(tmp_path, *extra):
  env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
  done = subprocess.run(
    [sys.executable, "-m", "experiments.run", "--rounds=100", "--eval_every=10",
     f"--output_dir={tmp_path}", "--noprogress", *extra],
    cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
  )  # fmt: skip
  assert done.returncode == 0, done.stderr[-3000:]
  return done.stderr


def test_the_readme_first_command_logs_only_its_own_lines(tmp_path):
  """The README's first command (its flags, without the progress bar): no 'tpu' line on a
  machine without TPUs, no library INFO line; the one INFO line left is run.py's 'done'."""
  err = _first_command_stderr(tmp_path)
  assert "tpu" not in err.lower(), err
  lines = [ln for ln in err.splitlines() if ln.strip()]
  sources = [m.group(1) for ln in lines if (m := re.match(r"^[IWEF]\d{4} [\d:.]+ +\d+ (\S+):", ln))]
  assert sources == ["run.py"], lines


def test_a_logged_peer_failure_goes_to_the_process_log_not_the_terminal(monkeypatch, tmp_path):
  """orbax's checkpoint thread logs a lost peer's failed collective with its traceback
  (``logging.exception``); in a multi-process run that record goes to process_<i>.log, and
  every other error record still reaches the terminal."""
  from fedjax_sel.core import peer_failure

  monkeypatch.setattr(peer_failure, "_multiprocess", lambda: True)
  monkeypatch.setattr(peer_failure, "_ids", lambda: (1, 2))
  monkeypatch.setitem(peer_failure._context, "output_dir", str(tmp_path))
  orbax = os.path.join("site-packages", "orbax", "checkpoint", "_src", "futures", "future.py")
  try:
    raise ValueError("UNKNOWN: Gloo AllGather failed: Connection reset by peer")
  except ValueError:
    lost = logging.LogRecord("absl", logging.ERROR, orbax, 378, "run() raised: %s", ("x",),
                             sys.exc_info())  # fmt: skip
  other = logging.LogRecord("absl", logging.ERROR, orbax, 9, "disk full", None, None)
  warning = logging.LogRecord("absl", logging.WARNING, orbax, 9, "gloo is slow", None, None)
  f = peer_failure._RECORDS
  assert not f.filter(lost)
  assert f.filter(other) and f.filter(warning)
  text = (tmp_path / "process_1.log").read_text()
  assert "future.py:378 run() raised: x" in text and "Connection reset by peer" in text
  assert "Traceback (most recent call last)" in text
  monkeypatch.setattr(peer_failure, "_multiprocess", lambda: False)  # one process: printed
  assert f.filter(lost)

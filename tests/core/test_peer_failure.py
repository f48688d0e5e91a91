"""The error line of a lost peer (``peer_failure``), in process: the cause as a short phrase,
the last checkpoint and a resume command, under 200 characters for a run in ``runs/x``; the
full message (gloo's) and the command in the process's log. The end-to-end cases (a process
killed with SIGKILL, one failing by itself) are in tests/experiments/test_multiprocess.py."""

import os
import shlex
import sys

import numpy as np
import pytest

from fedjax_sel.core import checkpoint, peer_failure

# what gloo says through JAX when the other process is gone (shortened paths, real shape)
GLOO = (
  "JaxRuntimeError: INTERNAL: Gloo allreduce failed: [/root/.cache/bazel/_bazel_root/"
  "1b7fba7b3f8a5e3b/external/gloo/gloo/transport/tcp/pair.cc:534] Read error "
  "[127.0.0.1]:40521: Connection reset by peer; while running replica 0 and partition 0 of a "
  "replicated computation (original message: Connection closed by peer [127.0.0.1]:40521 "
  "after 120.5 s in collective op all-reduce.7 of module jit__run_rounds_with with 2 "
  "participants)"
)
COMMAND = "python -m experiments.run --config=c.py --output_dir=runs/x --process_id=0 --resume"


@pytest.fixture
def ended(monkeypatch, tmp_path):
  """peer_failure as in process 0 of 2 whose run is runs/x (round 300 checkpointed); its end
  (the line on stderr) is returned instead of ending the process."""
  monkeypatch.chdir(tmp_path)
  checkpoint.save("runs/x", {"w": np.zeros(2)}, 300)
  monkeypatch.setattr(peer_failure, "_multiprocess", lambda: True)
  monkeypatch.setattr(peer_failure, "_ids", lambda: (0, 2))
  monkeypatch.setattr(peer_failure, "_announced", lambda: {})
  monkeypatch.setattr(peer_failure, "resume_command", lambda argv=None: COMMAND)

  def end(text, code):
    raise SystemExit((code, text))

  monkeypatch.setattr(peer_failure, "_end", end)
  monkeypatch.setitem(peer_failure._context, "output_dir", "runs/x")
  return tmp_path


def test_a_lost_peer_is_one_short_line(ended):
  with pytest.raises(SystemExit) as stop:
    peer_failure.report_lost(GLOO[:300], "Traceback (most recent call last): ...")
  code, text = stop.value.code
  line = text.strip()
  assert code == 2 and "\n" not in line
  assert line == (
    "error: process 1 of 2 was lost (connection reset by peer); the last checkpoint is round "
    "300 in runs/x; resume: sh runs/x/resume_process_0.sh (details: runs/x/process_0.log)"
  )
  assert len(line) < 200
  with open("runs/x/resume_process_0.sh") as f:
    script = f.read().splitlines()
  assert script[-1] == (
    f"cd {shlex.quote(str(ended))} && exec {shlex.quote(sys.executable)}" + COMMAND[len("python") :]
  )
  assert os.access("runs/x/resume_process_0.sh", os.X_OK)
  with open("runs/x/process_0.log") as f:
    log = f.read()
  assert GLOO[:300] in log and COMMAND in log and "Traceback" in log


def test_own_failure_is_one_short_line(ended):
  error = RuntimeError("out of memory while allocating 17179869184 bytes " + "x" * 300)
  with pytest.raises(SystemExit) as stop:
    peer_failure.report(error)
  line = stop.value.code[1].strip()
  assert line.startswith(
    "error: process 0 of 2 failed (RuntimeError: out of memory while allocating...); "
    "the last checkpoint is round 300 in runs/x; resume: sh runs/x/resume_process_0.sh"
  ), line
  assert len(line) < 200


@pytest.mark.parametrize(
  "reason,phrase",
  [
    (GLOO, "connection closed by peer"),
    ("UNAVAILABLE: failed to connect to all addresses; last error: ...", "unreachable"),
    ("no sign of life for 15 s", "no sign of life for 15 s"),
    ("it failed with ValueError: " + "v" * 80, "it failed with ValueError:..."),
  ],
)
def test_short_cause(reason, phrase):
  assert peer_failure.short_cause(reason) == phrase
  assert len(peer_failure.short_cause(reason)) <= peer_failure.CAUSE_CHARS


def test_the_command_stays_in_the_line_when_no_script_can_be_written(ended, monkeypatch):
  monkeypatch.setitem(peer_failure._context, "output_dir", "runs/missing")
  with pytest.raises(SystemExit) as stop:
    peer_failure.report_lost("no sign of life for 15 s", lost=1)
  line = stop.value.code[1].strip()
  assert line.endswith(f"this one with: {COMMAND} (details: {peer_failure._log_path(0)})"), line

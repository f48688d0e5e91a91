"""The coordination service's child process (``core/coordinator.py``): how long it outlives
the process that started it.

Orphaned, it serves on for ``linger_s`` seconds (so that the surviving processes notice the
loss themselves and end with one line), and no longer (it holds the port the relaunch
needs); released (``ServiceProcess.release``: process 0 ends after a failure), it ends right
after its parent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from fedjax_sel.core import distributed

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# the parent: starts the service, prints the child's pid, maybe releases it, then ends
# without shutting it down (as a killed or failed process 0 would)
_PARENT = """
import os, sys
from fedjax_sel.core import coordinator
service = coordinator.start(sys.argv[1], 1, 10, 10, linger_s=float(sys.argv[2]))
if sys.argv[3] == "release":
  service.release()
os.write(1, f"{service.proc.pid}\\n".encode())
os._exit(0)
"""


def _alive(pid: int) -> bool:
  """Whether ``pid`` runs (a zombie waiting for its reaper counts as ended)."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except FileNotFoundError:
    return False


def _lifetime_after_parent(linger_s: float, mode: str) -> float:
  """Seconds the service's child lives on after its parent ended."""
  address = f"127.0.0.1:{distributed.free_port()}"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  cmd = [sys.executable, "-c", _PARENT, address, str(linger_s), mode]
  parent = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
  ended = time.monotonic()
  assert parent.returncode == 0, parent.stderr[-3000:]
  pid = int(parent.stdout.split()[-1])
  try:
    while _alive(pid) and time.monotonic() - ended < linger_s + 30:
      time.sleep(0.02)
    return time.monotonic() - ended
  finally:
    if _alive(pid):
      os.kill(pid, 9)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_an_orphaned_service_lingers_for_its_time_then_ends():
  lived = _lifetime_after_parent(4.0, "keep")
  # noticed within one 0.2 s poll of the parent's end; 3 s of slack for a loaded machine
  assert 4.0 - 0.25 <= lived <= 4.0 + 3.0, lived


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_a_released_service_ends_right_after_its_parent():
  lived = _lifetime_after_parent(30.0, "release")
  assert lived < 3.0, lived  # not the 30 s linger

"""JAX's coordination service in a process of its own, so that it outlives process 0.

``jax.distributed.initialize`` starts the coordination service (the key-value store, the
barriers, the heartbeats) inside process 0. When process 0 dies, every other process's
coordination client sees the service's socket close and aborts at once (a C++ check failure:
``Terminating process because the JAX distributed service detected fatal errors``), before
its Python code can end it cleanly; jaxlib offers no Python callback in place of that abort
(``missed_heartbeat_callback`` cannot receive the status: ``std::bad_cast``). Process 0
therefore starts the service as a child process (:func:`start`), in a session of its own so
that the terminal's Ctrl-C reaches only the workers. The child

- serves until process 0 shuts it down (JAX's ``shutdown``: SIGTERM, then the service's
  own shutdown), or
- when process 0 is gone, serves on for a little longer than ``peer_failure.stale_after``
  (17.5 s by default), so that the other processes notice the loss themselves (a stale
  beat, a failed collective) and end with one ``error:`` line, then exits; or
- ends right after process 0 when process 0 ends after a failure
  (:meth:`ServiceProcess.release`).

Run as ``python -m fedjax_sel.core.coordinator ADDRESS N HEARTBEAT SHUTDOWN PARENT LINGER``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


class ServiceProcess:
  """The handle JAX keeps as its ``service``: ``shutdown()`` stops the child."""

  def __init__(self, proc: subprocess.Popen):
    self.proc = proc

  def release(self) -> None:
    """Tells the child to end as soon as this process is gone (process 0 ends after a
    failure: nobody will shut the service down, and it would hold the port the relaunch
    needs). Not at once: this process's own coordination client would see the service go
    and abort before this process ends."""
    if self.proc.poll() is None:
      self.proc.send_signal(signal.SIGUSR1)

  def shutdown(self) -> None:
    if self.proc.poll() is None:
      self.proc.send_signal(signal.SIGTERM)
      try:
        self.proc.wait(timeout=30)
      except subprocess.TimeoutExpired:  # pragma: no cover
        self.proc.kill()
        self.proc.wait()


def start(
  address: str, num_processes: int, heartbeat_timeout: int, shutdown_timeout: int, linger_s: float
):
  """Starts the service on ``address`` (host:port to bind) in a child process; returns its
  handle once it listens (or raises RuntimeError with the child's last words). Orphaned,
  the child serves on for ``linger_s`` seconds."""
  cmd = [
    sys.executable, "-m", __name__, address, str(num_processes), str(heartbeat_timeout),
    str(shutdown_timeout), str(os.getpid()), str(linger_s),
  ]  # fmt: skip
  proc = subprocess.Popen(
    cmd,
    stdin=subprocess.DEVNULL,
    stdout=subprocess.PIPE,
    stderr=subprocess.DEVNULL,
    start_new_session=True,
    env=dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3"),
  )
  line = proc.stdout.readline().decode(errors="replace").strip()
  if line != "serving":
    rest = proc.stdout.read().decode(errors="replace").strip().splitlines()
    proc.wait()
    raise RuntimeError(
      f"the coordination service on {address} did not start: {(rest or [line])[-1]}"
    )
  proc.stdout.close()
  global current
  current = ServiceProcess(proc)
  return current


current: ServiceProcess | None = None  # the service this process started, if any


def _serve(address, num_processes: int, heartbeat: int, shutdown: int, parent: int, linger):
  from jax._src.lib import _jax

  stop = []
  signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  released = []
  signal.signal(signal.SIGUSR1, lambda *_: released.append(True))
  try:
    service = _jax.get_distributed_runtime_service(
      address, num_processes, heartbeat_timeout=heartbeat, shutdown_timeout=shutdown
    )
  except Exception as e:
    print(f"{type(e).__name__}: {e}".replace("\n", " "), flush=True)
    sys.exit(1)
  print("serving", flush=True)
  null = os.open(os.devnull, os.O_WRONLY)  # the parent stops reading
  os.dup2(null, 1)
  orphaned_at = None
  while not stop:
    time.sleep(0.2)
    if orphaned_at is None and os.getppid() != parent:
      orphaned_at = time.monotonic()
    if orphaned_at is not None and (released or time.monotonic() - orphaned_at > linger):
      os._exit(0)  # the others had time to notice and end
  service.shutdown()


if __name__ == "__main__":
  a = sys.argv[1:]
  _serve(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]), float(a[5]))

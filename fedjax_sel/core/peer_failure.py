"""A multi-process run that loses a process ends cleanly in every survivor.

When a process of a ``jax.distributed`` run dies (a host lost, SIGKILL, out of memory) or
fails with an error, every other process ends with exit code 2 and one line on stderr, of
about 150 characters plus the run folder's path three times::

  error: process 1 of 2 was lost (connection closed by peer); the last checkpoint is round
  300 in runs/x; resume: sh runs/x/resume_process_0.sh (details: runs/x/process_0.log)

The cause is a short phrase (:func:`short_cause`: gloo's or gRPC's message of several
hundred characters becomes "connection closed by peer"); the script holds this process's
command with ``--resume`` (:func:`resume_command`), which the log repeats with the full
reason and traceback. No Python traceback, no C++ abort, no thread dump. A survivor learns
of the loss in one of three ways, whichever comes first:

- its next collective fails (gloo reports the closed connection at once: ``ValueError`` /
  ``JaxRuntimeError`` from a round or from ``distributed.any_process``, which every
  evaluation block runs), caught around the run (``experiment.run``) and by
  ``sys.excepthook``: :func:`report`;
- the watcher thread (:class:`_Watcher`): every process writes a beat into JAX's
  coordination service every ``BEAT_S`` seconds; a process whose beat stands still for
  :func:`stale_after` seconds (15 s with the default ``--distributed_timeout``) is lost;
- a process that fails by itself writes its reason into the service before it exits
  (:func:`announce`); the watchers read it within ``BEAT_S`` seconds and name it.

So the bound is ``stale_after(heartbeat_timeout)`` seconds plus one beat (15.5 s by
default), set by ``--distributed_timeout`` through ``distributed.heartbeat_timeout``; it
stays below JAX's own heartbeat timeout, whose end would abort the survivors. The service
itself runs in a child process of process 0 (``coordinator``), so it outlives process 0.
"""

from __future__ import annotations

import atexit
import logging
import os
import shlex
import sys
import tempfile
import threading
import time
import traceback
from typing import NoReturn

# the run being executed (set by the experiment loop): named in the error line
_context: dict = {"output_dir": None}
_lock = threading.Lock()
_KEY = "fedjax_sel/failed/"

# what JAX/gloo/gRPC say when a peer is gone (the text of the exception)
_PEER_SIGNS = (
  "gloo",
  "connection closed by peer",
  "connection reset by peer",
  "socket closed",
  "broken pipe",
  "unavailable:",
  "heartbeat",
  "coordination service",
  "barrier failed",
  "task is set to error",
)


def set_run(output_dir: str | None) -> None:
  """Names the run's folder, whose newest checkpoint the error line names (the experiment
  loop calls this)."""
  _context["output_dir"] = output_dir


def is_peer_failure(exc: BaseException) -> bool:
  """Whether ``exc`` is a collective or coordination failure (a lost peer), judged by its
  text: JAX raises ``ValueError`` / ``XlaRuntimeError`` with gloo's or gRPC's message."""
  return _multiprocess() and _names_lost_peer(f"{type(exc).__name__}: {exc}")


def _names_lost_peer(text: str) -> bool:
  text = text.lower()
  return any(s in text for s in _PEER_SIGNS)


def resume_command(argv: list[str] | None = None) -> str:
  """The command line that continues this process's run: its own, with ``--resume``."""
  argv = list(sys.argv if argv is None else argv)
  main = sys.modules.get("__main__")
  module = getattr(getattr(main, "__spec__", None), "name", None)
  program = ["python", "-m", module] if module else ["python", argv[0]]
  args = [a for a in argv[1:] if a not in ("--noresume", "--resume=false", "--resume=False")]
  if not any(a == "--resume" or a.startswith("--resume=") for a in args):
    args.append("--resume")
  return shlex.join(program + args)


# what a lost peer's message says, as a short phrase (first match; the full text is logged)
_CAUSES = (
  ("connection closed by peer", "connection closed by peer"),
  ("connection reset by peer", "connection reset by peer"),
  ("socket closed", "connection closed by peer"),
  ("broken pipe", "connection closed by peer"),
  ("heartbeat", "missed heartbeats"),
  ("barrier failed", "a barrier failed"),
  ("task is set to error", "the coordination service marked it failed"),
  ("coordination service", "the coordination service is unreachable"),
  ("unavailable:", "unreachable"),
  ("gloo", "a collective failed"),
)
CAUSE_CHARS = 50  # the most characters of a cause in the error line


def short_cause(reason: str) -> str:
  """``reason`` as the error line names it: a short phrase for the known messages of a lost
  peer (gloo, gRPC, the coordination service), else its first line, at most ``CAUSE_CHARS``
  characters (the full text goes to the process's log)."""
  text = " ".join(reason.split())
  own = text.startswith(("it failed with", "it ended", "no sign of life"))
  if not own:
    low = text.lower()
    for sign, phrase in _CAUSES:
      if sign in low:
        return phrase
  if len(text) <= CAUSE_CHARS:
    return text
  cut = text[: CAUSE_CHARS - 3]
  space = cut.rfind(" ")
  return (cut[:space] if space > CAUSE_CHARS // 2 else cut).rstrip() + "..."


def _resume_hint(me: int) -> str:
  """``resume: sh <folder>/resume_process_<me>.sh``: a script holding this process's command
  with ``--resume`` (:func:`resume_command`) in the run's folder; the command itself where
  the script cannot be written."""
  command = resume_command()
  folder = _context["output_dir"]
  if folder and os.path.isdir(folder):
    path = os.path.join(folder, f"resume_process_{me}.sh")
    program = shlex.quote(sys.executable) + command[len("python") :]  # this interpreter
    script = f"#!/bin/sh\ncd {shlex.quote(os.getcwd())} && exec {program}\n"
    try:
      with open(path, "w") as f:
        f.write(script)
      os.chmod(path, 0o755)
      return f"resume: sh {shlex.quote(path)}"
    except OSError:
      pass
  return f"resume every process with --resume, this one with: {command}"


def _multiprocess() -> bool:
  try:
    import jax

    return jax.distributed.is_initialized() and jax.process_count() > 1
  except Exception:  # pragma: no cover (JAX's runtime already torn down)
    return False


def _ids() -> tuple[int, int]:
  import jax

  return jax.process_index(), jax.process_count()


def _client():
  try:
    from jax._src import distributed as jax_distributed

    return jax_distributed.global_state.client
  except Exception:  # pragma: no cover
    return None


def _read_keys(client, prefix: str) -> dict[int, str]:
  """The values the processes wrote under ``prefix<process>`` (``{process: value}``)."""
  out = {}
  for key, value in client.key_value_dir_get(prefix):
    tail = str(key).rsplit("/", 1)[-1]
    if tail.isdigit():
      out[int(tail)] = str(value)
  return out


def _announced() -> dict[int, str]:
  """The reasons other processes wrote before they ended (``{process: line}``)."""
  client = _client()
  if client is None:
    return {}
  try:
    return _read_keys(client, _KEY)
  except Exception:  # the service is gone with process 0
    return {}


def _log_path(me: int) -> str:
  folder = _context["output_dir"]
  if folder and os.path.isdir(folder):
    return os.path.join(folder, f"process_{me}.log")
  return os.path.join(tempfile.gettempdir(), f"fedjax_sel_process_{me}_{os.getpid()}.log")


def _append_to_log(details: str) -> str | None:
  """Appends ``details`` to this process's log file; its path, or None if it cannot."""
  path = _log_path(_ids()[0])
  try:
    with open(path, "a") as f:
      f.write(details.rstrip() + "\n")
  except OSError:
    return None
  return path


def _exit(line: str, details: str) -> NoReturn:
  """Writes ``details`` to the log, prints ``line`` and ends this process at once (no
  atexit: JAX's shutdown barrier would wait for the lost peer and then abort)."""
  path = _append_to_log(details)
  if path is not None:
    line = f"{line} (details: {path})"
  _end(f"\nerror: {line}\n", 2)


def _end(text: str, code: int) -> NoReturn:
  """Prints ``text`` on stderr and ends this process now (no atexit: JAX's shutdown barrier
  would wait for the lost peer, then abort); process 0 first tells the coordination service
  it hosts to end after it, once the others had a few beats to read why it ends."""
  try:
    sys.stdout.flush()
  except Exception:  # pragma: no cover
    pass
  os.write(2, text.encode())
  from fedjax_sel.core import coordinator

  if coordinator.current is not None:
    if _watcher is not None and _watcher.n > 2:
      time.sleep(3 * BEAT_S)
    coordinator.current.release()
  os._exit(code)


def _where() -> str:
  folder = _context["output_dir"]
  if folder is None:
    return "no checkpoint yet"
  try:  # what --resume will read: the finished checkpoints on disk
    from fedjax_sel.core import checkpoint

    last = checkpoint.latest_round(folder)
  except OSError:
    last = None
  if last is None:
    return f"no checkpoint yet in {folder}"
  return f"the last checkpoint is round {last} in {folder}"


def report_lost(reason: str, details: str = "", lost: int | None = None) -> NoReturn:
  """Ends this process: another process was lost (``lost``, when known)."""
  with _lock:  # the main thread and the watcher thread may both get here
    me, n = _ids()
    announced = {k: v for k, v in _announced().items() if k != me}
    if lost is None and announced:
      lost = min(announced)
    if lost is None and n == 2:
      lost = 1 - me
    who = f"process {lost} of {n}" if lost is not None else f"a peer process (of {n})"
    why = announced.get(lost, reason) if lost is not None else reason
    line = f"{who} was lost ({short_cause(why)}); {_where()}; {_resume_hint(me)}"
    _exit(line, _log_text(me, f"{who} was lost: {why}", details))


def report(exc: BaseException) -> NoReturn:
  """Ends this process after its own error ``exc``: tells the others through the
  coordination service, then one ``error:`` line (a lost peer reads as :func:`report_lost`)."""
  details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
  first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
  reason = f"{type(exc).__name__}: {first}"[:300]
  if is_peer_failure(exc):
    report_lost(reason, details)
  with _lock:
    me, n = _ids()
    announce(f"it failed with {reason}")
    line = f"process {me} of {n} failed ({short_cause(reason)}); {_where()}; {_resume_hint(me)}"
    _exit(line, _log_text(me, f"process {me} of {n} failed: {reason}", details))


def _log_text(me: int, what: str, details: str) -> str:
  """What the process's log gets: the full reason, the command that resumes this process
  (every process is relaunched with --resume) and the details (a traceback)."""
  return (
    f"process {me}: {what}\nrelaunch every process with --resume; this one: "
    f"{resume_command()}\n{details}"
  )


def announce(reason: str) -> None:
  """Writes this process's reason for ending into the coordination service's key-value
  store, where the others read it when they notice the loss (best effort)."""
  client = _client()
  if client is None or not _multiprocess():
    return
  try:
    client.key_value_set(f"{_KEY}{_ids()[0]}", reason[:300], True)
  except Exception:  # the service is gone (process 0 lost) or refuses: nothing to tell
    pass


def _excepthook(exc_type, exc, tb) -> None:
  if _multiprocess() and not issubclass(exc_type, (KeyboardInterrupt, SystemExit)):
    report(exc.with_traceback(tb) if exc is not None else exc_type())
  _previous_hook(exc_type, exc, tb)


_previous_hook = sys.excepthook


def exit_with(message: str, code: int) -> NoReturn:
  """Prints ``error: message`` and ends this process at once (a multi-process run's own,
  expected error: a bad config, an interrupt), telling the others why."""
  with _lock:  # not interleaved with a lost-peer report of the watcher
    announce(f"it ended: {message}")
    _end(f"error: {message}\n", code)


BEAT_S = 0.5  # seconds between two beats of a process
_BEAT, _DONE = "fedjax_sel/beat/", "fedjax_sel/done/"


def stale_after(heartbeat_timeout: float) -> float:
  """Seconds without a beat after which a process counts as lost: well inside JAX's own
  heartbeat timeout, whose end would abort the survivors."""
  return max(3.0, min(15.0, heartbeat_timeout / 2))


class _Watcher(threading.Thread):
  """Every ``BEAT_S`` seconds: writes this process's beat into the coordination service's
  key-value store and reads the others'; a process whose beat stands still for ``stale_s``
  seconds (killed, frozen, its host gone) or that announced its failure ends this one
  (:func:`report_lost`). A process that ends normally says so first (no false alarm)."""

  def __init__(self, client, me: int, n: int, stale_s: float):
    super().__init__(name="fedjax_sel-peer-watch", daemon=True)
    self.client, self.me, self.n, self.stale_s = client, me, n, stale_s
    self.stopped = threading.Event()

  def run(self) -> None:
    now = time.monotonic()
    seen = {k: (None, now) for k in range(self.n) if k != self.me}
    unreachable_since = None
    beat = 0
    while not self.stopped.wait(BEAT_S):
      beat += 1
      now = time.monotonic()
      try:
        self.client.key_value_set(f"{_BEAT}{self.me}", str(beat), True)
        beats, done, failed = (_read_keys(self.client, p) for p in (_BEAT, _DONE, _KEY))
      except Exception as e:  # the coordination service is unreachable
        unreachable_since = unreachable_since or now
        if now - unreachable_since > self.stale_s and not self.stopped.is_set():
          report_lost(f"JAX's coordination service is unreachable: {e}"[:300], str(e))
        continue
      unreachable_since = None
      if self.stopped.is_set():
        return
      for k, (value, since) in seen.items():
        if k in done:
          continue
        if k in failed:
          report_lost(failed[k], lost=k)
        if beats.get(k) != value:
          seen[k] = (beats.get(k), now)
        elif now - since > self.stale_s:
          report_lost(f"no sign of life for {self.stale_s:.0f} s", lost=k)

  def stop(self) -> None:
    self.stopped.set()
    try:
      self.client.key_value_set(f"{_DONE}{self.me}", "done", True)
    except Exception:
      pass


_watcher: _Watcher | None = None


class _PeerFailureRecords(logging.Filter):
  """Keeps a library's logged peer failure off the terminal: orbax's checkpoint threads log
  the failed collective of a lost peer (``logging.exception``, with its traceback) before
  this process ends with its one line; the record goes to the process's log file instead."""

  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno < logging.ERROR:
      return True
    exc = record.exc_info[1] if record.exc_info else None
    text = f"{record.getMessage()} {type(exc).__name__ if exc else ''}: {exc or ''}"
    if not _multiprocess() or not _names_lost_peer(text):
      return True
    _append_to_log(_RECORD_FORMAT.format(record))  # the line that follows names the log
    return False


_RECORD_FORMAT = logging.Formatter("%(levelname)s %(pathname)s:%(lineno)d %(message)s")


_RECORDS = _PeerFailureRecords()


def _stop_watching() -> None:
  if _watcher is not None:
    _watcher.stop()


def install(heartbeat_timeout: float) -> None:
  """For a multi-process run: an uncaught exception ends as :func:`report` does, and a
  watcher thread notices lost processes (:class:`_Watcher`)."""
  global _previous_hook, _watcher
  if sys.excepthook is not _excepthook:
    _previous_hook = sys.excepthook
    sys.excepthook = _excepthook
  client = _client()
  if _multiprocess():
    from fedjax_sel.core import logs

    logs.add_filter(_RECORDS)
  if _watcher is None and client is not None and _multiprocess():
    me, n = _ids()
    _watcher = _Watcher(client, me, n, stale_after(heartbeat_timeout))
    _watcher.start()
    # atexit runs last-in first-out: this runs before JAX's shutdown (registered at import)
    atexit.register(_stop_watching)

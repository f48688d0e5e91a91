"""One writer per run folder: a lock naming the process and host that writes it.

A run folder (``experiment.run``'s ``output_dir``, each ``run_batch`` experiment's folder, a
study cell's ``seed<k>/``) is owned by one process while it runs. The owner holds an
exclusive ``flock`` on ``<folder>/.owner`` and writes into it who it is (process id, host,
start time, command). A second process that asks for the folder gets ``FolderBusyError``
naming the owner, before it writes anything; two commands started a second apart into one
``--output_dir`` can no longer interleave their ``metrics.jsonl`` records.

The kernel drops a ``flock`` when its process dies (``kill -9`` included), so a lock left
by a killed process is recognised without guessing from process ids: the next process
gets the lock, finds the dead owner's record in the file, logs a warning naming it and
takes the folder over (with ``--resume`` the run continues from its newest checkpoint).
An owner that ends normally removes the file (while it holds the lock; a process that
opened the old file checks, once it has the lock, that it is still the folder's), so a
finished run folder holds no lock file and only a dead owner leaves a record.

Within one process the lock is re-entrant (a study that owns a cell's folder and then runs
it through ``run_batch``), counted per folder. In a multi-process run (``jax.distributed``)
only process 0 writes the files, so only process 0 takes the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterable, Iterator

from absl import logging

from fedjax_sel.experiment.config import ConfigError

LOCK_FILE = ".owner"

_GUARD = threading.Lock()
_HELD: dict[str, list] = {}  # absolute folder -> [file descriptor, count]


class FolderBusyError(ConfigError):
  """The folder is being written by another live process (named in the message)."""

  def __init__(self, folder: str, owner: dict):
    self.folder = folder
    self.owner = owner
    super().__init__(
      f"{folder} is being written by {describe(owner)}; allowed: wait for it to end, stop "
      "it, or give another output folder"
    )


def describe(owner: dict) -> str:
  """``process 123 on host h (since 15:40:02: python -m experiments.run ...)``."""
  if not owner:
    return "another process (no record)"
  since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.get("started", 0)))
  command = owner.get("command", "")
  return (
    f"process {owner.get('pid', '?')} on host {owner.get('host', '?')} (since {since}"
    + (f": {command}" if command else "")
    + ")"
  )


def _me() -> dict:
  return {
    "pid": os.getpid(),
    "host": socket.gethostname(),
    "started": time.time(),
    "command": " ".join(sys.argv)[:300],
  }


def _read(fd: int) -> dict:
  os.lseek(fd, 0, os.SEEK_SET)
  text = os.read(fd, 65536).decode("utf-8", "replace").strip()
  if not text:
    return {}
  try:
    return json.loads(text)
  except json.JSONDecodeError:
    return {"pid": "?", "host": "?", "command": text[:100]}


def acquire(folder: str) -> None:
  """Makes this process the owner of ``folder`` (created if missing).

  Raises:
    FolderBusyError: another live process owns it (the message names it).
  """
  path = os.path.abspath(folder)
  with _GUARD:
    if path in _HELD:
      _HELD[path][1] += 1
      return
    os.makedirs(path, exist_ok=True)
    lock_path = os.path.join(path, LOCK_FILE)
    while True:
      fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except OSError:
        owner = _read(fd)
        os.close(fd)
        raise FolderBusyError(folder, owner) from None
      try:  # the file an owner removed as it ended is not the lock any more: open the new one
        if os.stat(lock_path).st_ino == os.fstat(fd).st_ino:
          break
      except FileNotFoundError:
        pass
      os.close(fd)
    previous = _read(fd)
    if previous:
      logging.warning(
        "taking over %s from %s, which is gone (its lock ended with its process)",
        folder,
        describe(previous),
      )
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, (json.dumps(_me()) + "\n").encode())
    _HELD[path] = [fd, 1]


def release(folder: str) -> None:
  """Ends this process's ownership of ``folder`` (the last of its re-entrant holds)."""
  path = os.path.abspath(folder)
  with _GUARD:
    held = _HELD.get(path)
    if held is None:
      return
    held[1] -= 1
    if held[1] > 0:
      return
    del _HELD[path]
    fd = held[0]
    try:  # a clean end leaves no file (only a dead owner leaves its record)
      os.unlink(os.path.join(path, LOCK_FILE))
    except OSError:
      pass
    finally:
      fcntl.flock(fd, fcntl.LOCK_UN)
      os.close(fd)


def owns(folder: str) -> bool:
  """Whether this process holds ``folder``."""
  with _GUARD:
    return os.path.abspath(folder) in _HELD


def owner_of(folder: str) -> dict | None:
  """The live owner's record of ``folder``, or None when no process holds it."""
  path = os.path.join(os.path.abspath(folder), LOCK_FILE)
  if owns(folder):
    return _me()
  try:
    fd = os.open(path, os.O_RDWR)
  except FileNotFoundError:
    return None
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      return _read(fd) or {}
    fcntl.flock(fd, fcntl.LOCK_UN)
    return None
  finally:
    os.close(fd)


@contextlib.contextmanager
def owned(folders: str | Iterable[str], primary: bool = True) -> Iterator[None]:
  """Owns every folder for the block (all or none: on a busy one, the ones taken so far are
  released before ``FolderBusyError`` propagates). ``primary=False`` (a multi-process run's
  other processes, which write nothing) takes no lock."""
  folders = [folders] if isinstance(folders, str) else list(folders)
  taken = []
  try:
    if primary:
      for f in folders:
        acquire(f)
        taken.append(f)
    yield
  finally:
    for f in reversed(taken):
      release(f)

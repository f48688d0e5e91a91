"""TensorBoard event files of a run: every evaluated metric of ``metrics.jsonl``, per round.

The event files of a run mirror its ``metrics.jsonl``: one scalar per numeric field of each
record, under the field's own name, at ``step = record["round"]``. They live in the run's
own folder (``<output_dir>/events.out.tfevents.*``), so ``tensorboard --logdir runs/`` shows
every run under its folder's name, and each seed of a ``--seeds`` batch
(``runs/x/seed<k>/``) as a run of its own.

Usage (the run loop; primary process only, the others get a writer that writes nothing)::

  writer = tensorboard.open_writer(output_dir, history)  # history: records kept so far
  ...
  writer.write(record)  # after each evaluation: written and flushed to disk
  ...
  writer.close()

``open_writer`` always starts the run's event files afresh from ``history`` (the records of
``metrics.jsonl`` that the run keeps: none for a new run; those up to the checkpoint's round
for a resumed one): it writes them to a new event file and then removes the run's older
event files, so a run killed and resumed shows each round once.

The writer is tensorboardX, an optional extra (``pip install -e ".[tensorboard]"``); nothing
here is imported by a run without ``--tensorboard``. Events are written synchronously (no
background queue), so a flushed round is on disk when ``write`` returns and a running
``tensorboard`` shows it at its next reload.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from fedjax_sel.metrics import results

EXTRA = 'pip install -e ".[tensorboard]"'
# TensorBoard reads every file of a folder whose name contains this.
EVENT_FILE_MARK = "tfevents"
# Fields of a metrics record that are not metrics.
SKIPPED_FIELDS = ("round",)


class TensorBoardUnavailable(ImportError):
  """The optional writer library (tensorboardX) is not installed."""


def _tensorboardx():
  """The tensorboardX modules this file uses; TensorBoardUnavailable when it is missing."""
  try:
    from tensorboardX.event_file_writer import EventsWriter
    from tensorboardX.proto import event_pb2, summary_pb2
  except ImportError as e:
    raise TensorBoardUnavailable(
      f"--tensorboard needs tensorboardX, which is not installed ({e}); install the extra: {EXTRA}"
    ) from None
  return EventsWriter, event_pb2, summary_pb2


def check_available() -> None:
  """Raises TensorBoardUnavailable (one line naming the extra) when the writer is missing.

  Call it where flags are validated, so that ``--tensorboard`` fails before a run starts.
  """
  _tensorboardx()


def event_dir(output_dir: str) -> str:
  """Where a run's event files go: its own folder (its name is the run's in TensorBoard)."""
  return output_dir


def event_files(logdir: str) -> list[str]:
  """The event files directly in ``logdir`` (sorted by name: oldest first)."""
  if not os.path.isdir(logdir):
    return []
  return sorted(
    os.path.join(logdir, f)
    for f in os.listdir(logdir)
    if EVENT_FILE_MARK in f and os.path.isfile(os.path.join(logdir, f))
  )


def scalars(record: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
  """The scalars of one metrics record, by tag.

  Rule: every int, float and bool field becomes a scalar under its own name (bools as 0/1;
  NaN and infinities are written as they are, TensorBoard shows them as such); a nested
  dict's numeric fields become ``parent/child`` (TensorBoard groups tags by the part before
  the slash); lists, strings and None are not scalars and are skipped; ``round`` is the step,
  not a scalar.
  """
  out: dict[str, float] = {}
  for key, value in record.items():
    if not prefix and key in SKIPPED_FIELDS:
      continue
    tag = f"{prefix}{key}"
    if isinstance(value, Mapping):
      out.update(scalars(value, prefix=f"{tag}/"))
    elif isinstance(value, (bool, int, float)) or _is_numpy_scalar(value):
      out[tag] = float(value)
  return out


def _is_numpy_scalar(value) -> bool:
  import numpy as np

  return isinstance(value, np.generic) and np.issubdtype(value.dtype, np.number)


class EventWriter:
  """Writes metrics records as TensorBoard scalars into one new event file in ``logdir``.

  Build it with :func:`open_writer` (which also replays the run's history and hands other
  processes a writer that writes nothing).
  """

  def __init__(self, logdir: str):
    events_writer, self._event_pb2, self._summary_pb2 = _tensorboardx()
    os.makedirs(logdir, exist_ok=True)
    self.logdir = logdir
    # tensorboardX names the file events.out.tfevents.<seconds>.<host><suffix>; the suffix
    # keeps two writers opened in the same second (a quick resume) from sharing one file
    suffix = f".{os.getpid()}.{uuid.uuid4().hex[:8]}"
    self._writer = events_writer(os.path.join(logdir, "events"), suffix)
    self.path = getattr(self._writer, "_file_name", None)  # for messages only
    # A session start at step 0: a TensorBoard that read this run's older files before a
    # resume drops their steps ("purge orphaned data") and keeps this file's.
    start = self._event_pb2.SessionLog(status=self._event_pb2.SessionLog.START)
    self._writer.write_event(
      self._event_pb2.Event(wall_time=time.time(), step=0, session_log=start)
    )
    self._writer.flush()
    self._closed = False

  def write(self, record: Mapping[str, Any], flush: bool = True) -> None:
    """Writes every scalar of ``record`` (see :func:`scalars`) at step ``record["round"]``.

    Args:
      record: one line of metrics.jsonl (``round`` and the evaluated metrics).
      flush: write the file to disk now (the default: a live TensorBoard sees the round).
    """
    if self._closed:
      raise ValueError(f"the event writer of {self.logdir} is closed")
    values = [
      self._summary_pb2.Summary.Value(tag=tag, simple_value=value)
      for tag, value in scalars(record).items()
    ]
    event = self._event_pb2.Event(
      wall_time=time.time(),
      step=int(record["round"]),
      summary=self._summary_pb2.Summary(value=values),
    )
    self._writer.write_event(event)
    if flush:
      self._writer.flush()

  def flush(self) -> None:
    if not self._closed:
      self._writer.flush()

  def close(self) -> None:
    if not self._closed:
      self._writer.flush()
      self._writer.close()
      self._closed = True

  def __enter__(self) -> EventWriter:
    return self

  def __exit__(self, *exc) -> bool:
    self.close()
    return False


class NullWriter:
  """What a process that does not write results gets: the same methods, no files."""

  logdir = None
  path = None

  def write(self, record: Mapping[str, Any], flush: bool = True) -> None:
    del record, flush

  def flush(self) -> None:
    pass

  def close(self) -> None:
    pass

  def __enter__(self) -> NullWriter:
    return self

  def __exit__(self, *exc) -> bool:
    return False


def open_writer(
  output_dir: str, history: Iterable[Mapping[str, Any]] = ()
) -> EventWriter | NullWriter:
  """Opens the run's event files afresh: a new file holding ``history``, older files removed.

  Args:
    output_dir: the run's folder (the event files go to :func:`event_dir` of it).
    history: the metrics records the run keeps, oldest first: none for a new run; for a
      resumed one, those of metrics.jsonl up to the checkpoint's round. Each is written
      again, so that after a crash and a resume every round appears once.

  Returns:
    An :class:`EventWriter`; a :class:`NullWriter` in processes other than the primary one
    of a multi-process run (``results.writes_here``).

  Raises:
    TensorBoardUnavailable: tensorboardX is missing (raised in every process alike).
  """
  _tensorboardx()
  if not results.writes_here():
    return NullWriter()
  logdir = event_dir(output_dir)
  older = event_files(logdir)
  writer = EventWriter(logdir)
  for record in history:
    writer.write(record, flush=False)
  writer.flush()
  # only now: a crash before this line leaves the older files, and the next resume replaces
  # them all again
  for path in older:  # the new file is not among them: its name is new (see EventWriter)
    if os.path.exists(path):
      os.remove(path)
  return writer

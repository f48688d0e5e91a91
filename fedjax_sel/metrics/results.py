"""Results files that survive crashes: atomic JSON, complete JSONL lines, plots.

Every file is written to a temporary name in the same folder and renamed into place, so
a reader (or a crash) never sees a half-written file. In a run of several processes
(``jax.distributed``) only process 0 writes: the others' writes are skipped
(:func:`writes_here`), so every results file, table and plot is written once.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from typing import Any

import numpy as np


def _default(o):
  if isinstance(o, (np.integer,)):
    return int(o)
  if isinstance(o, (np.floating,)):
    return float(o)
  if isinstance(o, np.ndarray):
    return o.tolist()
  return str(o)


def writes_here() -> bool:
  """Whether this process writes results files: yes, except in processes 1, 2, ... of a
  multi-process run (``jax.distributed``), whose results process 0 writes."""
  import jax

  return not jax.distributed.is_initialized() or jax.process_index() == 0


def atomic_write_text(path: str, text: str) -> None:
  """Writes ``text`` to ``path`` via a temp file + fsync + rename (process 0 only)."""
  if not writes_here():
    return
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
  try:
    with os.fdopen(fd, "w") as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def atomic_write_bytes(path: str, data: bytes) -> None:
  if not writes_here():
    return
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_json(path: str, obj: Any) -> None:
  atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_default) + "\n")


def dumps_line(obj: Any) -> str:
  return json.dumps(obj, sort_keys=True, default=_default)


def write_jsonl(path: str, records: Iterable[dict]) -> None:
  """Rewrites a whole JSONL file atomically (one complete JSON object per line)."""
  atomic_write_text(path, "".join(dumps_line(r) + "\n" for r in records))


def append_jsonl(path: str, record: dict) -> None:
  """Appends one complete line. A crash mid-append can only leave a torn last line,
  which ``read_jsonl`` drops; ``write_jsonl`` rewrites the file clean on resume."""
  if not writes_here():
    return
  with open(path, "a") as f:
    f.write(dumps_line(record) + "\n")
    f.flush()
    os.fsync(f.fileno())


def read_jsonl(path: str) -> list[dict]:
  """Reads complete lines; a torn (unterminated or unparsable) last line is ignored."""
  if not os.path.exists(path):
    return []
  out = []
  with open(path) as f:
    for line in f:
      if not line.endswith("\n"):
        break
      try:
        out.append(json.loads(line))
      except json.JSONDecodeError:
        break
  return out


def write_table(path_stem: str, header: list[str], rows: list[list[Any]], title: str = "") -> str:
  """Writes ``<stem>.csv`` and ``<stem>.md`` atomically; returns the Markdown text."""
  import csv
  import io

  buf = io.StringIO()
  writer = csv.writer(buf)
  writer.writerow(header)
  writer.writerows(rows)
  atomic_write_text(path_stem + ".csv", buf.getvalue())
  md = markdown_table(header, rows, title)
  atomic_write_text(path_stem + ".md", md)
  return md


def markdown_table(header: list[str], rows: list[list[Any]], title: str = "") -> str:
  def fmt(v):
    if isinstance(v, float):
      return f"{v:.4f}"
    return str(v)

  lines = [f"### {title}", ""] if title else []
  lines.append("| " + " | ".join(header) + " |")
  lines.append("|" + "|".join("---" for _ in header) + "|")
  for r in rows:
    lines.append("| " + " | ".join(fmt(v) for v in r) + " |")
  return "\n".join(lines) + "\n"


def save_figure(fig, path: str) -> None:
  """Saves a matplotlib figure atomically as PNG."""
  import io

  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
  atomic_write_bytes(path, buf.getvalue())


def plot_curves(
  curves: dict[str, tuple[list[float], list[float]]],
  path: str,
  title: str,
  ylabel: str,
  xlabel: str = "communication round",
  logy: bool = False,
) -> None:
  """One line per method: ``curves[name] = (rounds, values)``."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6.4, 4.2))
  for name, (x, y) in curves.items():
    ax.plot(x, y, label=name)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  if logy:
    ax.set_yscale("log")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  save_figure(fig, path)
  plt.close(fig)

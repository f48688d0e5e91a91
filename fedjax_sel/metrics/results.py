"""Results files that survive crashes: atomic JSON, complete JSONL lines, plots.

Every file is written to a temporary name in the same folder and renamed into place, so
a reader (or a crash) never sees a half-written file. In a run of several processes
(``jax.distributed``) only process 0 writes: the others' writes are skipped
(:func:`writes_here`), so every results file, table and plot is written once.

:func:`compare` reads run folders (and ``--seeds`` folders) back and puts them side by side:
the rows of ``python -m experiments.compare``, its table (:func:`compare_table`) and its plot
(:func:`plot_compare`).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

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


class WriteError(OSError):
  """A results file, figure or checkpoint could not be written (a full disk, a read-only
  folder, a quota): one line naming the path, what it is and the system's reason. The
  writers below raise it after removing what they had written of the file, so no
  half-written file is left under a results name.

  Attributes:
    path: the file that could not be written.
    what: what it is ("run summary", "figure", "checkpoint of round 25", ...).
    errno: the system's error number (``errno.ENOSPC`` for a full disk).
  """

  def __init__(self, path: str, what: str, cause: BaseException | str, note: str = ""):
    if isinstance(cause, WriteError):
      reason = cause.reason
    else:
      reason = getattr(cause, "strerror", None) or str(cause)
    text = f"could not write {path} ({what}): {reason}"
    super().__init__(f"{text}; {note}" if note else text)
    self.path, self.what, self.note = path, what, note
    self.errno = getattr(cause, "errno", None)
    self.reason = reason

  def with_note(self, note: str) -> WriteError:
    """The same error with ``note`` (what it means for the run) after its message."""
    return WriteError(self.path, self.what, self, note)


_WHAT = {
  "summary.json": "run summary",
  "config.json": "run config",
  "metrics.jsonl": "metrics",
  ".npz": "checkpoint",
  ".png": "figure",
  ".csv": "table",
  ".md": "table",
  ".jsonl": "records",
  ".json": "JSON file",
}


def describe(path: str) -> str:
  """What a results file is, from its name (``WriteError``'s ``what``)."""
  name = os.path.basename(path)
  for end, what in _WHAT.items():
    if name == end or (end.startswith(".") and name.endswith(end)):
      return what
  return "results file"


def _atomic_write(path: str, data: bytes, what: str | None) -> None:
  if not writes_here():
    return
  what = what or describe(path)
  folder = os.path.dirname(os.path.abspath(path))
  tmp = None
  try:
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException as e:
    if tmp is not None and os.path.exists(tmp):
      os.remove(tmp)
    if isinstance(e, OSError) and not isinstance(e, WriteError):
      raise WriteError(path, what, e) from e
    raise


def atomic_write_text(path: str, text: str, what: str | None = None) -> None:
  """Writes ``text`` to ``path`` via a temp file + fsync + rename (process 0 only).

  Raises:
    WriteError: the file could not be written (``what``: what it is; default from its
      name); the temp file is removed and an older ``path`` is left as it was.
  """
  _atomic_write(path, text.encode(), what)


def atomic_write_bytes(path: str, data: bytes, what: str | None = None) -> None:
  """``atomic_write_text`` for bytes."""
  _atomic_write(path, data, what)


def write_json(path: str, obj: Any) -> None:
  atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_default) + "\n")


def dumps_line(obj: Any) -> str:
  return json.dumps(obj, sort_keys=True, default=_default)


def write_jsonl(path: str, records: Iterable[dict]) -> None:
  """Rewrites a whole JSONL file atomically (one complete JSON object per line)."""
  atomic_write_text(path, "".join(dumps_line(r) + "\n" for r in records))


def append_lines(path: str, records: Sequence[dict]) -> None:
  """Appends one complete line per record with one fsync (process 0 only). A crash
  mid-append can only leave a torn last line, which ``read_jsonl`` drops; a failed write
  (a full disk) cuts the file back to its length before and raises ``WriteError``."""
  if not writes_here() or not records:
    return
  data = "".join(dumps_line(r) + "\n" for r in records).encode()
  try:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
  except OSError as e:
    raise WriteError(path, describe(path), e) from e
  start = os.fstat(fd).st_size
  try:
    view = memoryview(data)
    while view:
      view = view[os.write(fd, view) :]
    os.fsync(fd)
  except OSError as e:
    try:
      os.ftruncate(fd, start)
    except OSError:  # pragma: no cover (the torn line is dropped by read_jsonl)
      pass
    raise WriteError(path, describe(path), e) from e
  finally:
    os.close(fd)


def append_jsonl(path: str, record: dict) -> None:
  """Appends one complete line (``append_lines``); ``write_jsonl`` rewrites the file clean
  on resume."""
  append_lines(path, [record])


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
  atomic_write_bytes(path, buf.getvalue(), "figure")


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


# ------------------------------------------------------------------ runs side by side

# Summary numbers compared across runs (mean and std over the seeds of a folder).
COMPARED = ("final_test_loss", "best_test_loss", "final_test_accuracy", "best_test_accuracy")
# Config fields that are bookkeeping, not experiment settings: never a difference.
NOT_SETTINGS = ("output_dir", "resume", "data_dir", "checkpoint_every", "tensorboard")
_SEED_FOLDER = re.compile(r"^seed(\d+)$")
_EXPECTED = (
  "expected a run folder (config.json and metrics.jsonl, from experiments.run) or a --seeds "
  "folder (seed<k>/ run folders)"
)


class RunFolder(NamedTuple):
  """What ``compare`` reads from one folder: one run, or the seeds of a ``--seeds`` batch."""

  name: str
  seeds: list[int]
  configs: list[dict]  # each seed's config.json "config"
  summaries: list[dict]  # each seed's summary.json (derived from metrics.jsonl when absent)
  histories: list[list[dict]]  # each seed's metrics.jsonl
  batch_summary: dict | None  # the combined summary.json of a --seeds folder


def _read_json(path: str, folder: str) -> dict:
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"{folder}: cannot read {os.path.basename(path)} ({e}); {_EXPECTED}") from None


def _summary_from_history(history: list[dict], config: dict) -> dict:
  """The summary numbers of a run that wrote no summary.json yet (running or killed)."""
  last = history[-1]
  rounds = int(last["round"])
  return {
    "final_test_loss": last.get("test_loss"),
    "final_test_accuracy": last.get("test_accuracy"),
    "best_test_loss": min(r["test_loss"] for r in history),
    "best_test_accuracy": max(r["test_accuracy"] for r in history),
    "rounds": rounds,
    "rounds_planned": config.get("rounds"),
    "complete": False,
    "seconds_per_round": last.get("seconds", 0.0) / max(rounds, 1),
  }


def _read_single(folder: str) -> tuple[dict, dict, list[dict]]:
  missing = [f for f in ("config.json", "metrics.jsonl") if not os.path.isfile(f"{folder}/{f}")]
  if missing:
    raise ValueError(f"{folder}: no {' or '.join(missing)}; {_EXPECTED}")
  config = _read_json(os.path.join(folder, "config.json"), folder).get("config")
  if not isinstance(config, dict):
    raise ValueError(f"{folder}: config.json has no 'config' object; {_EXPECTED}")
  history = read_jsonl(os.path.join(folder, "metrics.jsonl"))
  if not history:
    raise ValueError(f"{folder}: metrics.jsonl holds no evaluation yet; nothing to compare")
  summary_path = os.path.join(folder, "summary.json")
  if os.path.isfile(summary_path):
    summary = _read_json(summary_path, folder)
    for key in COMPARED:  # a summary of an older version may lack best_test_accuracy
      if summary.get(key) is None:
        summary[key] = _summary_from_history(history, config)[key]
  else:
    summary = _summary_from_history(history, config)
  return config, summary, history


def read_run_folder(folder: str) -> RunFolder:
  """Reads a run folder or a ``--seeds`` folder (``seed<k>/`` run folders + summary.json).

  Raises:
    ValueError: one line naming the folder and what was expected, when it is neither.
  """
  name = os.path.normpath(folder)
  if not os.path.isdir(folder):
    raise ValueError(
      f"{folder}: {'not a folder' if os.path.exists(folder) else 'no such folder'}; {_EXPECTED}"
    )
  if any(os.path.exists(os.path.join(folder, f)) for f in ("config.json", "metrics.jsonl")):
    config, summary, history = _read_single(folder)
    return RunFolder(name, [int(config.get("seed", 0))], [config], [summary], [history], None)
  found = {
    int(m.group(1)): os.path.join(folder, f)
    for f in os.listdir(folder)
    if (m := _SEED_FOLDER.match(f)) and os.path.isdir(os.path.join(folder, f))
  }
  if not found:
    raise ValueError(f"{folder}: no config.json, metrics.jsonl or seed<k>/ folders; {_EXPECTED}")
  batch_path = os.path.join(folder, "summary.json")
  batch = _read_json(batch_path, folder) if os.path.isfile(batch_path) else None
  seeds = sorted(found)
  if batch and isinstance(batch.get("seeds"), list):
    absent = [s for s in batch["seeds"] if s not in found]
    if absent:
      raise ValueError(f"{folder}: summary.json names seeds {absent} with no seed<k>/ folder")
    seeds = [int(s) for s in batch["seeds"]]
  parts = [_read_single(found[s]) for s in seeds]
  return RunFolder(
    name, seeds, [p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts], batch
  )


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  out = {}
  for key, value in config.items():
    if isinstance(value, Mapping):
      out.update(_flatten(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def _settings(run: RunFolder) -> dict[str, Any]:
  """The folder's config as dotted keys, without bookkeeping; a --seeds folder's ``seed`` is
  its list of seeds, and a field its seeds disagree on is the list of their values."""
  flat = [_flatten(c) for c in run.configs]
  out = {}
  for key in sorted(set().union(*flat)):
    if key in NOT_SETTINGS:
      continue
    values = [f.get(key) for f in flat]
    out[key] = values[0] if all(v == values[0] for v in values) else values
  if len(run.seeds) > 1 or run.batch_summary is not None:
    out["seed"] = list(run.seeds)
  return out


def _stat(values: list) -> dict[str, Any]:
  """Mean and std (population, ddof 0, as ``combine_summaries``) of the seeds' values."""
  if not values or any(v is None for v in values):
    return {"mean": None, "std": None, "values": list(values)}
  a = np.asarray(values, np.float64)
  return {"mean": float(a.mean()), "std": float(a.std()), "values": list(values)}


def _curve(histories: list[list[dict]], metric: str) -> dict[str, list[float]]:
  """Each evaluated round and the mean and std over the seeds that evaluated it."""
  by_round: dict[int, list[float]] = {}
  for h in histories:
    for r in h:
      by_round.setdefault(int(r["round"]), []).append(float(r[metric]))
  rounds = sorted(by_round)
  return {
    "round": rounds,
    "mean": [float(np.mean(by_round[t])) for t in rounds],
    "std": [float(np.std(by_round[t])) for t in rounds],
  }


def _check_metric(run: RunFolder, metric: str) -> None:
  for seed, h in zip(run.seeds, run.histories):
    if any(metric not in r for r in h):
      available = sorted(
        k for k, v in h[-1].items() if k != "round" and isinstance(v, (int, float))
      )
      where = (
        run.name
        if len(run.seeds) == 1 and run.batch_summary is None
        else (f"{run.name} (seed {seed})")
      )
      hint = (
        " (written only by runs with client_accuracy=True)"
        if metric.startswith("client_acc_")
        else ""
      )
      raise ValueError(
        f"metric {metric!r} is not in every record of {where}'s metrics.jsonl; available: "
        f"{', '.join(available)}{hint}"
      )


def compare(folders: Sequence[str], metric: str = "test_loss") -> list[dict]:
  """Runs side by side: one row per folder (a run folder or a ``--seeds`` folder).

  Args:
    folders: run folders of ``experiments.run`` (or of the study binaries) and ``--seeds``
      folders, in the order of the rows.
    metric: a field of metrics.jsonl whose curve each row carries (``curve``), e.g.
      ``test_loss``, ``test_accuracy``, ``train_loss``, ``client_acc_worst10``.

  Returns:
    One dict per folder: ``name`` (the folder), ``seeds`` (a run's own seed, or the seeds of
    a --seeds folder), ``final_test_loss``, ``best_test_loss``, ``final_test_accuracy``,
    ``best_test_accuracy`` and ``rounds``, each ``{"mean", "std", "values"}`` over the seeds
    (std with ddof 0, as the combined summary.json), ``complete`` (every seed ran all its
    rounds), ``rounds_planned``, ``seconds_per_round`` (wall time per round of the folder: a
    --seeds folder's seeds ran together, so the batch's), ``metric``, ``final_metric``
    (``{"mean", "std", "values"}`` of ``metric`` at each seed's last evaluation), ``curve``
    (``{"round", "mean", "std"}`` of ``metric`` over the seeds) and ``differs`` (dotted
    config keys -> this folder's values, for every key whose value is not the same in all
    folders; bookkeeping such as ``output_dir`` is left out, see ``NOT_SETTINGS``).

  Raises:
    ValueError: one line naming a folder that is not a run, or a metric it lacks.
  """
  if not folders:
    raise ValueError("no folders to compare; give one or more run folders")
  runs = [read_run_folder(f) for f in folders]
  for run in runs:
    _check_metric(run, metric)
  settings = [_settings(r) for r in runs]
  keys = sorted(set().union(*settings))
  differ = [k for k in keys if any(s.get(k) != settings[0].get(k) for s in settings)]
  rows = []
  for run, setting in zip(runs, settings):
    row: dict[str, Any] = {"name": run.name, "seeds": list(run.seeds)}
    for key in COMPARED:
      row[key] = _stat([s.get(key) for s in run.summaries])
    row["rounds"] = _stat([int(s["rounds"]) for s in run.summaries])
    row["rounds_planned"] = max(
      int(s.get("rounds_planned") or c.get("rounds") or 0)
      for s, c in zip(run.summaries, run.configs)
    )
    row["complete"] = all(bool(s.get("complete")) for s in run.summaries)
    if run.batch_summary is not None and run.batch_summary.get("seconds_per_round") is not None:
      row["seconds_per_round"] = float(run.batch_summary["seconds_per_round"])
    else:
      row["seconds_per_round"] = float(np.mean([s["seconds_per_round"] for s in run.summaries]))
    row["metric"] = metric
    row["final_metric"] = _stat([h[-1][metric] for h in run.histories])
    row["curve"] = _curve(run.histories, metric)
    row["differs"] = {k: setting.get(k) for k in differ}
    rows.append(row)
  return rows


def _cell(stat: dict, scale: float = 1.0, digits: int = 4) -> str:
  if stat["mean"] is None:
    return "-"
  if len(stat["values"]) == 1:
    return f"{scale * stat['mean']:.{digits}f}"
  return f"{scale * stat['mean']:.{digits}f} ± {scale * stat['std']:.{digits}f}"


def _rounds_cell(row: dict) -> str:
  values = row["rounds"]["values"]
  text = str(values[0]) if len(set(values)) == 1 else _cell(row["rounds"], digits=1)
  if not row["complete"]:
    text += f" of {row['rounds_planned']}"
  return text


def _value_text(value: Any) -> str:
  if value is None:
    return "(unset)"
  if isinstance(value, list):
    return "[" + ",".join(_value_text(v) for v in value) + "]"
  return json.dumps(value) if isinstance(value, str) and not value else str(value)


def differs_text(row: dict, sep: str = ", ") -> str:
  """``key=value`` for each config key in which the folders differ ("-" when none)."""
  return sep.join(f"{k}={_value_text(v)}" for k, v in row["differs"].items()) or "-"


def compare_table(rows: list[dict], fmt: str = "md") -> str:
  """The rows of ``compare`` as a Markdown table (``md``: mean ± std, accuracy in %) or CSV
  (``csv``: one column per mean and per std, accuracy as a fraction, as in the JSON files)."""
  import csv
  import io

  metric = rows[0]["metric"] if rows else "test_loss"
  extra = metric not in ("test_loss", "test_accuracy")
  if fmt == "md":
    header = ["run", "seeds", "final test loss", "best test loss", "final test acc (%)"]
    header += ["best test acc (%)"] + ([f"final {metric}"] if extra else [])
    header += ["rounds", "s/round", "differs in"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
      cells = [r["name"], ",".join(str(s) for s in r["seeds"])]
      cells += [_cell(r["final_test_loss"]), _cell(r["best_test_loss"])]
      cells += [_cell(r["final_test_accuracy"], 100, 2), _cell(r["best_test_accuracy"], 100, 2)]
      cells += [_cell(r["final_metric"])] if extra else []
      cells += [_rounds_cell(r), f"{r['seconds_per_round']:.4g}", differs_text(r)]
      lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
  if fmt == "csv":
    stats = list(COMPARED) + ([f"final_{metric}"] if extra else []) + ["rounds"]
    header = ["name", "seeds"] + [f"{k}_{m}" for k in stats for m in ("mean", "std")]
    header += ["complete", "seconds_per_round", "differs"]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for r in rows:
      values = [r["name"], " ".join(str(s) for s in r["seeds"])]
      for k in stats:
        stat = r["final_metric"] if k == f"final_{metric}" and extra else r[k]
        values += [stat["mean"], stat["std"]]
      values += [r["complete"], r["seconds_per_round"], differs_text(r, "; ")]
      writer.writerow(["" if v is None else v for v in values])
    return buf.getvalue()
  raise ValueError(f"format={fmt!r}; allowed: md, csv")


def plot_compare(rows: list[dict], path: str, title: str = "") -> None:
  """One PNG: each row's ``curve`` (the mean over its seeds, a band of ± one std where it
  has several seeds) against rounds."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  metric = rows[0]["metric"] if rows else ""
  fig, ax = plt.subplots(figsize=(7.0, 4.4))
  for i, r in enumerate(rows):
    x = np.asarray(r["curve"]["round"])
    mean, std = np.asarray(r["curve"]["mean"]), np.asarray(r["curve"]["std"])
    label = r["name"] + (f" ({len(r['seeds'])} seeds)" if len(r["seeds"]) > 1 else "")
    ax.plot(x, mean, color=f"C{i % 10}", label=label, lw=1.5)
    if len(r["seeds"]) > 1:
      ax.fill_between(x, mean - std, mean + std, color=f"C{i % 10}", alpha=0.2, lw=0)
  ax.set_xlabel("communication round")
  ax.set_ylabel(metric)
  ax.set_title(title or f"{metric}: mean over seeds ± one std")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  save_figure(fig, path)
  plt.close(fig)

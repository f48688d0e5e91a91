"""The grid runner of every study binary and the atlas: plan, lanes, collect and commit.

A study is a grid of runs (cell x seed), each in ``<output_dir>/cells/<cell>/seed<k>/``,
run by ``common.run_cells`` in the study's order (its config's order: the one that settles
its claims soonest). This module adds, to every binary, what the long grids need:

* ``--plan``: lists the runs of the command (finished in ``--output_dir``, committed in the
  ``--collect`` folder, checkpointed at round r, or not started), the seconds per round
  measured by finished runs (the same cell's other seeds first) and the hours left on this
  machine; it trains nothing. A study whose later parts read the first part's runs lists
  the first part with unfinished runs (the rest follow once it has run).
* ``--lanes=N``: N processes of the same command side by side, each with its share of the
  devices. Each takes the next unfinished run in the study's order that no other process
  owns (``fedjax_sel.experiment.ownership``: a run folder has one writer), so lanes never
  share a run; a lane with nothing left to take waits for the runs the others hold (a
  study's later parts read them). A lane that dies is reported in one line; its run resumes
  from its checkpoint when the command is run again. When every lane has ended well the
  command reads the runs back and writes the study's tables in this process.
* ``--collect=<results folder>``: the committed runs there are copied into ``--output_dir``
  first (read back, never trained again: a fresh clone goes on at the first run that folder
  lacks), each run's ``config.json``, ``metrics.jsonl`` and ``summary.json`` (never
  checkpoints) are copied there as it finishes, and the study's tables and figures once the
  command ends; ``--commit`` also commits each, with a message naming it.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

from absl import flags, logging

from fedjax_sel import experiment
from fedjax_sel.experiment import ownership
from fedjax_sel.metrics import results

LANE_ENV = "FEDJAX_SEL_LANE"  # "i/N" in the processes --lanes starts
RESULT_FILES = ("config.json", "metrics.jsonl", "summary.json")  # a run as results/ keeps it
TABLE_PATTERNS = ("*.md", "*.csv", "*.png")  # a study's tables and figures, top level
POLL_SECONDS = 5.0


def define_flags() -> None:
  """--plan, --lanes, --collect, --commit (every study binary and the atlas)."""
  flags.DEFINE_bool(
    "plan",
    False,
    "list the runs of this command (finished, committed in --collect, checkpointed, to run), "
    "their measured seconds per round and the hours left; trains nothing",
  )
  flags.DEFINE_integer(
    "lanes",
    1,
    "processes side by side, each with its share of the devices, each taking the next "
    "unfinished run (1 = this process alone)",
    lower_bound=1,
  )
  flags.DEFINE_string(
    "collect",
    "",
    "a results folder: its committed runs are read back (never trained again), and each "
    "finished run's config.json, metrics.jsonl and summary.json (never checkpoints) and the "
    "tables are copied there",
  )
  flags.DEFINE_bool("commit", False, "with --collect: git-commit each collected run and the tables")
  flags.DEFINE_bool(
    "collect_tables",
    True,
    "with --collect: also copy the study's tables and figures there once it ends (off for a "
    "study whose runs share a results folder with another study's tables)",
  )
  flags.DEFINE_string(
    "seed_from",
    "",
    "comma-separated folders of committed results (cells/**/seed<k>/ with config.json, "
    "metrics.jsonl, summary.json): their finished runs are copied into --output_dir first "
    "(never over a run there) and read back instead of trained",
  )


def _flag(name: str, default):
  f = flags.FLAGS
  try:
    return f[name].value if name in f else default
  except flags.UnparsedFlagAccessError:
    return default


def planning() -> bool:
  return bool(_flag("plan", False))


def lane() -> tuple[int, int] | None:
  """``(i, N)`` in a process started by ``--lanes=N``; None elsewhere."""
  text = os.environ.get(LANE_ENV, "")
  m = re.fullmatch(r"(\d+)/(\d+)", text)
  return (int(m.group(1)), int(m.group(2))) if m else None


def seed_folders() -> list[str]:
  """The ``--seed_from`` folders."""
  return [p.strip() for p in str(_flag("seed_from", "") or "").split(",") if p.strip()]


def check_flags() -> None:
  """The grid flags, checked with the binary's own.

  Raises:
    ValueError: a bad combination, named with what is allowed.
  """
  collect = _flag("collect", "")
  for folder in seed_folders():
    if not os.path.isdir(folder):
      raise ValueError(
        f"--seed_from={folder!r} is not a folder; allowed: folders of committed results "
        "(cells/<cell>/seed<k>/)"
      )
  if _flag("commit", False) and not collect:
    raise ValueError("--commit without --collect; allowed: --collect=<results folder> --commit")
  if collect and os.path.exists(collect) and not os.path.isdir(collect):
    raise ValueError(f"--collect={collect!r} is a file; allowed: a results folder")


# ------------------------------------------------------------------------------- runs


@dataclasses.dataclass
class Run:
  """One run of a grid: cell ``name``, ``seed``, its folder and how far it is."""

  name: str
  seed: int
  folder: str
  rounds: int
  summary: dict | None = None  # finished: its summary.json

  @property
  def finished(self) -> bool:
    return self.summary is not None


# fields a finished run may differ in from the config that reads it back (paths, resuming and
# reporting switches: experiment.RESUMABLE_CHANGES, and the data folder)
READ_BACK_FREE = (*experiment.RESUMABLE_CHANGES, "data_dir")


def read_finished(
  folder: str, rounds: int, half_precision: bool = False, config: dict | None = None
) -> dict | None:
  """The run's summary if it finished ``rounds`` rounds at this precision, else None.

  Raises:
    experiment.ConfigError: with ``config``, a finished run whose config.json differs from
      it (never read back as this config's run, never trained over): one line naming the
      folder and the fields.
  """
  path = os.path.join(folder, "summary.json")
  try:
    with open(path) as f:
      summary = json.load(f)
  except (OSError, json.JSONDecodeError):
    return None
  same_precision = summary.get("half_precision", False) == bool(half_precision)
  if not (summary.get("complete") and summary.get("rounds") == rounds and same_precision):
    return None
  if config is not None:
    diff = saved_differences(folder, config, READ_BACK_FREE)
    if diff:
      raise experiment.ConfigError(
        f"{folder} finished under another config ({'; '.join(diff[:6])}"
        f"{'; ...' if len(diff) > 6 else ''}); allowed: another --output_dir (and --collect "
        "folder) for this config, or the config it ran with"
      )
  return summary


def saved_differences(folder: str, config: dict, free: tuple[str, ...]) -> list[str]:
  """The fields (``experiment.config_differences``) in which the run in ``folder`` ran under
  another config than ``config``, ``free`` left out; [] when it saved no config."""
  try:
    with open(os.path.join(folder, "config.json")) as f:
      saved = json.load(f).get("config")
  except (OSError, json.JSONDecodeError):
    saved = None
  return experiment.config_differences(saved, config, free) if saved else []


def root_of(folder: str) -> str:
  """The study's output folder of a run folder ``<root>/cells/.../seed<k>``."""
  parts = os.path.normpath(folder).split(os.sep)
  if "cells" not in parts:
    return os.path.dirname(os.path.normpath(folder))
  i = len(parts) - 1 - parts[::-1].index("cells")
  return os.sep.join(parts[:i]) or "."


# ------------------------------------------------------------------------------ collect

_SEEDED: set[str] = set()
_ROOTS: list[str] = []
_GIT = threading.Lock()
_SEEDING = threading.Lock()


def seed_from(committed: str, output_dir: str) -> list[str]:
  """Copies the finished runs of ``committed`` (``cells/**/seed<k>/`` whose summary.json
  says ``complete``: their three files) into ``output_dir`` wherever it has no such seed
  folder yet, so that the study reads them back instead of training them. Nothing in
  ``output_dir`` is overwritten; a seed folder appears with its three files or not at all.

  Returns:
    The seed folders made in ``output_dir``.
  """
  root = os.path.join(committed, "cells")
  made = []
  for summary in sorted(
    glob.glob(os.path.join(root, "**", "seed*", "summary.json"), recursive=True)
  ):
    source = os.path.dirname(summary)
    if not re.fullmatch(r"seed\d+", os.path.basename(source)):
      continue
    target = os.path.join(output_dir, os.path.relpath(source, committed))
    if os.path.exists(target) or not _complete(summary):
      continue
    copy_run(source, target)
    made.append(target)
  if made:
    logging.info("%d finished run(s) copied from %s into %s", len(made), committed, output_dir)
  return made


def _complete(summary_path: str) -> bool:
  try:
    with open(summary_path) as f:
      return bool(json.load(f).get("complete"))
  except (OSError, json.JSONDecodeError):
    return False


def copy_run(source: str, target: str) -> None:
  """The run's three files into ``target``, which appears whole or not at all."""
  part = f"{target}.part"
  shutil.rmtree(part, ignore_errors=True)
  for name in RESULT_FILES:
    with open(os.path.join(source, name), "rb") as f:
      results.atomic_write_bytes(os.path.join(part, name), f.read())
  if os.path.isdir(target):
    for name in RESULT_FILES:
      os.replace(os.path.join(part, name), os.path.join(target, name))
    os.rmdir(part)
  else:
    os.replace(part, target)


def start(folder: str) -> None:
  """Before a study's runs are looked at: with ``--collect``, its committed runs are copied
  into the study's output folder (once per folder)."""
  root = root_of(folder)
  with _SEEDING:  # the atlas's programs start in threads: none reads before the copy ends
    if root not in _ROOTS:
      _ROOTS.append(root)
    if root not in _SEEDED:
      collect = _flag("collect", "")
      for source in ([collect] if collect else []) + seed_folders():
        if os.path.abspath(source) != os.path.abspath(root):
          seed_from(source, root)
      _SEEDED.add(root)


def collect_run(folder: str, label: str) -> None:
  """A finished run's three files into the ``--collect`` folder (and a commit with
  ``--commit``); nothing without ``--collect`` or when the folder already holds it."""
  collect = _flag("collect", "")
  if not collect:
    return
  target = os.path.join(collect, os.path.relpath(folder, root_of(folder)))
  if os.path.abspath(target) == os.path.abspath(folder):
    return
  try:
    with open(os.path.join(folder, "summary.json"), "rb") as f:
      raw = f.read()
    summary = json.loads(raw)
  except (OSError, json.JSONDecodeError):
    return
  if not summary.get("complete") or _holds(os.path.join(target, "summary.json"), raw):
    return
  copy_run(folder, target)
  logging.info("collected %s into %s", label, target)
  if _flag("commit", False):
    _commit([target], f"{_study()}: {label}, {summary.get('rounds')} rounds ({collect})")


def _holds(path: str, data: bytes) -> bool:
  """Whether the file at ``path`` exists and holds exactly ``data``."""
  try:
    with open(path, "rb") as f:
      return f.read() == data
  except OSError:
    return False


def collect_tables() -> list[str]:
  """The study's tables and figures (``*.md``, ``*.csv``, ``*.png`` at the top of its output
  folder) into the ``--collect`` folder, once the command has ended well."""
  collect = _flag("collect", "") if _flag("collect_tables", True) else ""
  copied = []
  for root in _ROOTS if collect else []:
    if os.path.abspath(root) == os.path.abspath(collect):
      continue
    for pattern in TABLE_PATTERNS:
      for path in sorted(glob.glob(os.path.join(root, pattern))):
        target = os.path.join(collect, os.path.basename(path))
        with open(path, "rb") as f:
          data = f.read()
        if _holds(target, data):
          continue
        results.atomic_write_bytes(target, data)
        copied.append(target)
  if copied and _flag("commit", False):
    _commit(copied, f"{_study()}: tables and figures ({collect})")
  return copied


def _study() -> str:
  main = sys.modules.get("__main__")
  spec = getattr(main, "__spec__", None)
  return spec.name if spec is not None else os.path.basename(sys.argv[0])


def _commit(paths: list[str], message: str) -> None:
  """``git add`` and ``git commit`` of ``paths`` only; retried while another git command
  holds the index. A failure is a warning: the files are collected either way."""
  cwd = os.path.dirname(os.path.abspath(paths[0]))  # the repository that holds them
  paths = [os.path.abspath(p) for p in paths]
  with _GIT:
    for attempt in range(30):
      add = subprocess.run(["git", "add", "--", *paths], capture_output=True, text=True, cwd=cwd)
      commit = ["git", "commit", "-q", "-m", message, "--", *paths]
      done = (
        add.returncode == 0
        and subprocess.run(commit, capture_output=True, text=True, cwd=cwd).returncode == 0
      )
      if done:
        logging.info("committed: %s", message)
        return
      if "index.lock" not in (add.stderr or "") and attempt >= 2:
        break
      time.sleep(2.0)
    logging.warning("could not commit %s (the files are collected; commit them by hand)", paths)


# --------------------------------------------------------------------------------- plan


class PlanReady(BaseException):  # noqa: N818 (a stop, not an error: through `except Exception`)
  """Raised by ``common.run_cells`` under ``--plan`` once the first part with unfinished
  runs has been listed; the binary prints the plan and ends."""


_PLAN: list[Run] = []


def note(runs: list[Run]) -> None:
  """Under ``--plan``: the runs of one ``run_cells`` call; stops the study at the first call
  with an unfinished run (a later part may read its runs)."""
  _PLAN.extend(runs)
  if any(not r.finished for r in runs):
    raise PlanReady()


def _own_seconds(finished: list[Run]) -> dict[int, float]:
  """Each finished run's seconds per round on its own: runs that ran as one program share
  its wall time (the same ``seconds`` in their summaries), so it is divided among them."""
  shared: dict = {}
  for r in finished:
    shared.setdefault(r.summary.get("seconds"), []).append(r)
  out = {}
  for seconds, group in shared.items():
    for r in group:
      spr = r.summary.get("seconds_per_round")
      if spr:
        out[id(r)] = float(spr) / (len(group) if seconds else 1)
  return out


def seconds_per_round(run: Run, finished: list[Run]) -> tuple[float | None, str]:
  """The measured seconds per round for ``run``: its own records (a checkpointed run),
  else the same cell's finished seeds, else the median of every finished run (a program's
  wall time divided among the runs it held, ``_own_seconds``)."""
  try:
    own = results.read_jsonl(os.path.join(run.folder, "metrics.jsonl"))
  except (OSError, ValueError):
    own = []
  own = [r for r in own if r.get("seconds") and r.get("round")]
  if own:
    return float(own[-1]["seconds"]) / float(own[-1]["round"]), "its own rounds"
  own = _own_seconds(finished)
  same = [own[id(r)] for r in finished if r.name == run.name and id(r) in own]
  if same:
    return sum(same) / len(same), "the cell's finished seeds"
  every = sorted(own.values())
  if every:
    return every[len(every) // 2], "median of the finished runs"
  return None, "unknown: no finished run to measure from"


def plan_text(runs: list[Run], lanes: int = 1, collect: str = "") -> str:
  """The plan as Markdown: a row per run left to do (in the order they run), then the
  totals (the finished runs are counted, not listed)."""
  from fedjax_sel.core import checkpoint

  finished = [r for r in runs if r.finished]
  rows = []
  seconds_left = 0.0
  unknown = 0
  committed_runs = 0
  for r in runs:
    committed = bool(collect) and _complete(
      os.path.join(collect, os.path.relpath(r.folder, root_of(r.folder)), "summary.json")
    )
    if r.finished:
      committed_runs += committed
      continue
    try:
      done = (checkpoint.latest_round(r.folder) or 0) if os.path.isdir(r.folder) else 0
    except OSError:
      done = 0
    label = os.path.relpath(os.path.dirname(r.folder), os.path.join(root_of(r.folder), "cells"))
    state = f"checkpoint at round {done} of {r.rounds}" if done else "to run"
    owner = ownership.owner_of(r.folder) if os.path.isdir(r.folder) else None
    if owner is not None:
      state += f" (running: {ownership.describe(owner)})"
    spr, source = seconds_per_round(r, finished)
    if spr is None:
      unknown += 1
      rows.append([label, str(r.seed), state, source, "?"])
      continue
    left = (r.rounds - done) * spr
    seconds_left += left
    rows.append([label, str(r.seed), state, f"{spr:.2f} ({source})", f"{left / 3600:.2f}"])
  header = ["cell", "seed", "state", "s/round", "hours left"]
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(row) + " |" for row in rows]
  if not rows:
    lines = []
  todo = len(runs) - len(finished)
  where = f" ({committed_runs} of them committed in {collect})" if collect else ""
  total = (
    f"{len(runs)} runs: {len(finished)} finished{where} and not listed, {todo} to run: "
    f"{seconds_left / 3600:.2f} run-hours"
  )
  if todo:
    total += f", about {seconds_left / 3600 / max(1, min(lanes, todo)):.2f} h on this machine "
    total += f"with --lanes={lanes}" if lanes > 1 else "in one process (--lanes=2 to halve it)"
  if unknown:
    total += f" (+ {unknown} run(s) of unknown cost)"
  return "\n".join(lines + ["", total])


def print_plan() -> None:
  print(plan_text(_PLAN, int(_flag("lanes", 1)), _flag("collect", "")))
  if any(not r.finished for r in _PLAN):
    print(
      "trains nothing; the same command without --plan runs them (--lanes=2 two at a time, "
      "--collect=<results folder> keeps each as it finishes)"
    )


# --------------------------------------------------------------------------------- lanes


def claim(folder: str) -> bool:
  """In a lane: whether this process now owns the run folder (False: another lane has it)."""
  try:
    ownership.acquire(folder)
  except ownership.FolderBusyError:
    return False
  return True


def wait_for(run: Run, half_precision: bool = False) -> dict | None:
  """In a lane: waits for a run another process holds; its summary once it has finished,
  or None when its owner ended without finishing it (a lane that died: take it over)."""
  while True:
    summary = read_finished(run.folder, run.rounds, half_precision)
    if summary is not None:
      return summary
    if ownership.owner_of(run.folder) is None:
      return read_finished(run.folder, run.rounds, half_precision)
    time.sleep(POLL_SECONDS)


def _lane_argv(argv: list[str], i: int, n: int) -> list[str]:
  """The command of lane ``i``: the same flags without --lanes/--plan, and its share of the
  CPU devices (``--cpu_devices``: the command's count split over the lanes, at least 1).
  ``--flag=value`` and ``--flag value`` are both understood."""
  out, cpu, skip = [], None, False
  for j, a in enumerate(argv):
    if skip:
      skip = False
      continue
    m = re.fullmatch(r"--(lanes|cpu_devices)(?:=(\S*))?|--(?:no)?plan", a)
    if not m:
      out.append(a)
      continue
    value = m.group(2)
    if m.group(1) and value is None and j + 1 < len(argv):  # --flag value
      value, skip = argv[j + 1], True
    if m.group(1) == "cpu_devices" and value and value.isdigit():
      cpu = int(value)
  share = max(1, (cpu or n) // n)
  return out + [f"--cpu_devices={share}"]


def _lane_env(i: int, n: int) -> dict:
  env = dict(os.environ)
  env[LANE_ENV] = f"{i}/{n}"
  visible = env.get("CUDA_VISIBLE_DEVICES", "")
  gpus = [g for g in visible.split(",") if g.strip()]
  if len(gpus) >= n:  # each lane its share of the listed GPUs
    env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[i::n])
  return env


def _last_run(log_path: str) -> str:
  try:
    with open(log_path, errors="replace") as f:
      lines = [ln for ln in f if "lane run:" in ln]
  except OSError:
    return "?"
  return lines[-1].split("lane run:", 1)[1].strip() if lines else "none started"


def run_lanes(output_dir: str) -> None:
  """``--lanes=N`` (N > 1) in the command's own process: starts the N lanes, waits for them,
  reports a lane that died in one line each. Returns when every lane ended well (the caller
  then reads the runs back and writes the tables); exits with 1 otherwise."""
  n = int(_flag("lanes", 1))
  module = _study()
  logs = os.path.join(output_dir, "lanes")
  os.makedirs(logs, exist_ok=True)
  procs = []
  for i in range(n):
    argv = _lane_argv(sys.argv[1:], i, n)
    log_path = os.path.join(logs, f"lane{i}.log")
    log = open(log_path, "a")  # noqa: SIM115 (open for the child's lifetime)
    log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} lane {i} of {n}\n")
    log.flush()
    p = subprocess.Popen(
      [sys.executable, "-m", module, *argv],
      stdout=log,
      stderr=subprocess.STDOUT,
      env=_lane_env(i, n),
    )
    procs.append((i, p, log, log_path))
    print(f"lane {i}: process {p.pid}, log {log_path}", flush=True)
  failed = 0
  try:
    for i, p, log, log_path in procs:
      rc = p.wait()
      log.close()
      if rc != 0:
        failed += 1
        print(
          f"lane {i} (process {p.pid}) stopped with exit code {rc} at {_last_run(log_path)}; "
          f"its run resumes from its checkpoint when this command is run again (log {log_path})",
          flush=True,
        )
  except KeyboardInterrupt:
    for _, p, _, _ in procs:
      if p.poll() is None:
        p.send_signal(signal.SIGINT)  # each lane checkpoints and stops
    for _, p, _, _ in procs:
      p.wait()
    raise
  if failed:
    sys.exit(1)

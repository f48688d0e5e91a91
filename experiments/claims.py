r"""Every claim's verdict, computed from the committed runs by one written rule.

  python -m experiments.claims                 # every claim: verdict, effect, interval, p, seeds
  python -m experiments.claims --paper=fedgs   # one paper
  python -m experiments.claims --write         # also rewrite the generated blocks of the docs
  python -m experiments.claims --check         # exit 1 when a generated block is out of date

The claims are data: ``docs/reproductions/claims/<paper>.yaml``, one entry per claim (id,
the claim in one sentence, the paper's numbers, and per set-up the comparison that decides
it). This module reads only those files and committed files under ``results/``; it never
trains. The rule, the same for every paper, its words and its statistics live in
``fedjax_sel.metrics.verdicts`` (``RULE`` is restated by a generated block at the top of
docs/reproductions/README.md).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
import os
import pathlib
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import yaml
from absl import app, flags

from experiments.markdown_tables import markdown_rows
from fedjax_sel.metrics.verdicts import (  # noqa: F401 (the words and verdicts, used here)
  INCONCLUSIVE,
  NOT_MEASURABLE,
  NOT_REPRODUCED,
  PARTLY,
  REPRODUCED,
  RULE,
  RULE_PARTS,
  WORDS,
  ClaimsError,
  Effect,
  Sample,
  Verdict,
  _num,
  bound_verdict,
  combine,
  difference,
  direction_verdict,
  equivalence_verdict,
  relative,
  seeds_text,
  spread_verdict,
  value_verdict,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLAIMS_DIR = "docs/reproductions/claims"

# ---------------------------------------------------------------------------------------
# Reading committed values


class NotCommittedError(ClaimsError):
  """A results file or run a claim reads is not committed (a set-up with ``pending`` runs is
  then not measurable; for any other it is an error in the claims file)."""


def _results_path(root: pathlib.Path, rel: str, where: str) -> pathlib.Path:
  path = root / rel
  if not path.exists():
    raise NotCommittedError(f"{where}: {rel} is not committed")
  return path


@functools.cache
def _read_json(path: str) -> dict:
  with open(path) as f:
    return json.load(f)


@functools.cache
def _read_jsonl(path: str) -> tuple[dict, ...]:
  with open(path) as f:
    return tuple(json.loads(line) for line in f if line.strip())


@functools.cache
def _read_csv(path: str) -> tuple[dict, ...]:
  """The rows of a committed CSV, or of every Markdown table in a committed .md file (each
  row keyed by its own table's header)."""
  with open(path, newline="") as f:
    return tuple(csv.DictReader(f) if not path.endswith(".md") else markdown_rows(f))


def _evaluated(history: Sequence[dict]) -> list[dict]:
  return [r for r in history if "test_accuracy" in r and r.get("test_accuracy") is not None]


def _window(history: list[dict], rounds: Sequence[int] | None) -> list[dict]:
  if not rounds:
    return history
  lo, hi = rounds
  return [r for r in history if lo <= r["round"] <= hi]


def _metric_final_accuracy(summary, history, spec):
  return 100 * summary["final_test_accuracy"]


def _metric_best_accuracy(summary, history, spec):
  return 100 * max(r["test_accuracy"] for r in _window(_evaluated(history), spec.get("rounds")))


def _metric_final_loss(summary, history, spec):
  return summary["final_test_loss"]


def _metric_best_loss(summary, history, spec):
  return min(r["test_loss"] for r in _window(_evaluated(history), spec.get("rounds")))


def _metric_mean_accuracy(summary, history, spec):
  h = _window(_evaluated(history), spec.get("rounds"))
  return 100 * float(np.mean([r["test_accuracy"] for r in h]))


def _metric_fluctuation(summary, history, spec):
  """Mean |difference| of ``of`` (test_loss, or test_accuracy in points) between consecutive
  evaluations, over ``rounds`` if given."""
  key = spec.get("of", "test_loss")
  h = _window(_evaluated(history), spec.get("rounds"))
  v = np.asarray([r[key] for r in h], np.float64) * (100 if key == "test_accuracy" else 1)
  return float(np.mean(np.abs(np.diff(v))))


def _metric_sampling_count_std(summary, history, spec):
  return float(np.std(np.asarray(summary["sampling_counts"], np.float64)))


def _metric_last(summary, history, spec):
  """A metrics.jsonl field (``key``) at the last record that holds it (e.g. the per-client
  accuracy statistics, logged at the final evaluation)."""
  key = spec.get("key")
  values = [r[key] for r in history if r.get(key) is not None]
  if not values:
    raise ClaimsError(f"metrics.jsonl has no {key!r}")
  return float(values[-1]) * float(spec.get("scale", 1))


def _metric_summary(summary, history, spec):
  key = spec.get("key")
  if key not in summary:
    raise ClaimsError(f"summary.json has no {key!r}")
  return float(summary[key])


METRICS: dict[str, Callable] = {
  "final_accuracy": _metric_final_accuracy,
  "best_accuracy": _metric_best_accuracy,
  "final_loss": _metric_final_loss,
  "best_loss": _metric_best_loss,
  "mean_accuracy": _metric_mean_accuracy,
  "fluctuation": _metric_fluctuation,
  "sampling_count_std": _metric_sampling_count_std,
  "summary": _metric_summary,
  "last": _metric_last,
  "rounds_to": None,  # needs the reference run: read in _cell_values
}


def _run_files(root: pathlib.Path, folder: str, seed: int) -> tuple[dict, tuple[dict, ...]]:
  base = root / folder / f"seed{seed}"
  return _read_json(str(base / "summary.json")), _read_jsonl(str(base / "metrics.jsonl"))


def _cell_values(root: pathlib.Path, spec: dict, seeds: Sequence[int], where: str) -> Sample:
  """A cell's metric per seed: ``{cells: <folder of cells>, cell: <name>, metric: <name>}``
  (+ the metric's arguments). ``rounds_to`` reads ``target`` (an accuracy in %) or
  ``fraction`` of ``reference``'s (a cell of the same folder, same seed) best accuracy."""
  metric = spec.get("metric")
  if metric not in METRICS:
    raise ClaimsError(f"{where}: metric {metric!r}; allowed: {', '.join(sorted(METRICS))}")
  folder = f"{spec['cells']}/{spec['cell']}"
  _results_path(root, folder, where)
  values, censored = {}, 0
  for seed in seeds:
    if not (root / folder / f"seed{seed}" / "summary.json").exists():
      continue
    summary, history = _run_files(root, folder, seed)
    if metric == "rounds_to":
      h = _evaluated(history)
      if "target" in spec:
        target = float(spec["target"]) / 100
      else:
        ref = f"{spec['cells']}/{spec['reference']}"
        _, ref_history = _run_files(root, ref, seed)
        target = float(spec.get("fraction", 0.99)) * max(
          r["test_accuracy"] for r in _evaluated(ref_history)
        )
      reached = next((r["round"] for r in h if r["test_accuracy"] >= target), None)
      if reached is None:
        reached = int(summary.get("rounds", h[-1]["round"])) + 1
        censored += 1
      values[seed] = float(reached)
    else:
      values[seed] = float(METRICS[metric](summary, history, spec))
  if not values:
    raise NotCommittedError(f"{where}: {folder} holds none of seeds {list(seeds)}")
  return Sample.of(values, censored)


_MEAN_STD = re.compile(r"^\s*([+-−]?[\d.]+(?:e[+-]?\d+)?)\s*(?:±\s*([\d.]+(?:e[+-]?\d+)?))?")


def parse_mean_std(text: str) -> tuple[float, float | None]:
  """``"81.26 ± 0.17"`` -> (81.26, 0.17); ``"+2.01"`` -> (2.01, None)."""
  m = _MEAN_STD.match(text.replace("−", "-"))
  if not m:
    raise ClaimsError(f"{text!r} is not a number or 'mean ± std'")
  return float(m.group(1)), (float(m.group(2)) if m.group(2) else None)


def _table_values(root: pathlib.Path, spec: dict, seeds: Sequence[int], where: str) -> Sample:
  """A committed CSV's value: ``{table: <csv>, row: {column: value}, column: <name>}``.
  With ``seed_column``, one row per seed (per-seed values); else the row's "mean ± std"
  over the claim's seeds (``n`` overrides their number)."""
  path = _results_path(root, spec["table"], where)
  rows = _read_csv(str(path))
  want = {str(k): str(v) for k, v in (spec.get("row") or {}).items()}
  match = [r for r in rows if all(r.get(k) == v for k, v in want.items())]
  column = spec["column"]
  if match and column not in match[0]:
    raise ClaimsError(f"{where}: {spec['table']} has no column {column!r}")
  if "seed_column" in spec:
    values = {
      int(r[spec["seed_column"]]): parse_mean_std(r[column])[0]
      for r in match
      if int(r[spec["seed_column"]]) in seeds
    }
    if not values:
      raise ClaimsError(f"{where}: no row of {spec['table']} matches {want} for {list(seeds)}")
    return Sample.of(values)
  if len(match) != 1:
    raise ClaimsError(f"{where}: {len(match)} rows of {spec['table']} match {want}; need one")
  mean, std = parse_mean_std(match[0][column])
  n = int(spec.get("n", len(seeds)))
  if std is None or n == 1:
    return Sample(mean, math.nan, 0.0, 1)  # one number, no spread committed
  return Sample.from_stats(mean, std, n)


def read_value(root: pathlib.Path, spec: Any, seeds: Sequence[int], where: str) -> Sample:
  """One value spec: a cell's metric, a table's value, or ``difference`` / ``relative`` of
  two specs."""
  if not isinstance(spec, dict):
    raise ClaimsError(f"{where}: a value is a mapping, got {spec!r}")
  seeds = spec.get("seeds", seeds)
  if "difference" in spec or "relative" in spec:
    op = "difference" if "difference" in spec else "relative"
    pair = spec[op]
    if not (isinstance(pair, list) and len(pair) == 2):
      raise ClaimsError(f"{where}: {op} takes two values, got {pair!r}")
    a, b = (read_value(root, x, seeds, where) for x in pair)
    return difference(a, b) if op == "difference" else relative(a, b)
  if "cells" in spec:
    return _cell_values(root, spec, seeds, where)
  if "table" in spec:
    return _table_values(root, spec, seeds, where)
  if "json" in spec:
    return _json_value(root, spec, where)
  raise ClaimsError(f"{where}: a value needs 'cells', 'table', 'json', 'difference' or 'relative'")


def _json_value(root: pathlib.Path, spec: dict, where: str) -> Sample:
  """One number of a committed JSON file: ``{json: <path>, key: "a.b.c"}`` (dotted keys;
  list items by index). It is one measurement (no seeds)."""
  data: Any = _read_json(str(_results_path(root, spec["json"], where)))
  for part in str(spec.get("key", "")).split("."):
    try:
      data = data[int(part)] if isinstance(data, list) else data[part]
    except (KeyError, IndexError, ValueError, TypeError):
      raise ClaimsError(f"{where}: {spec['json']} has no {spec.get('key')!r}") from None
  return Sample(float(data), math.nan, 0.0, 1)


# ---------------------------------------------------------------------------------------
# Checks


def evaluate(root: pathlib.Path, check: dict, seeds: Sequence[int], where: str) -> Verdict:
  """The verdict of one check (``kind``: direction, value, bound, spread, equivalence,
  not_worse, all, trend, not_measurable)."""
  kind = check.get("kind")
  unit = check.get("unit", "")
  digits = int(check.get("digits", 3))
  seeds = check.get("seeds", seeds)
  if kind == "not_measurable":
    reason = check.get("reason")
    if not reason:
      raise ClaimsError(f"{where}: not_measurable needs a 'reason'")
    return Verdict(NOT_MEASURABLE, reason)
  if kind == "direction":
    d = difference(
      read_value(root, check["a"], seeds, where), read_value(root, check["b"], seeds, where)
    )
    return direction_verdict(
      Effect(d), bool(check.get("higher", True)), check.get("size"), unit, digits
    )
  if kind == "value":
    s = read_value(root, check["of"], seeds, where)
    return value_verdict(s, float(check["paper"]), float(check["tolerance"]), unit, digits)
  if kind == "bound":
    if ("at_most" in check) == ("at_least" in check):
      raise ClaimsError(f"{where}: a bound needs one of 'at_most', 'at_least'")
    s = read_value(root, check["of"], seeds, where)
    at_most = "at_most" in check
    return bound_verdict(
      s, float(check["at_most" if at_most else "at_least"]), at_most, unit, digits
    )
  if kind == "spread":
    a = read_value(root, check["a"], seeds, where)
    b = read_value(root, check["b"], seeds, where)
    return spread_verdict(a, b, bool(check.get("higher", True)), unit, digits)
  if kind in ("equivalence", "not_worse"):
    d = difference(
      read_value(root, check["a"], seeds, where), read_value(root, check["b"], seeds, where)
    )
    worse = 0 if kind == "equivalence" else (1 if check.get("higher", True) else -1)
    return equivalence_verdict(Effect(d), float(check["margin"]), unit, digits, worse)
  if kind == "all":
    parts = []
    for i, part in enumerate(check.get("parts") or []):
      label = part.get("label", str(i + 1))
      parts.append((label, evaluate(root, part, seeds, f"{where}, part {label!r}")))
    if not parts:
      raise ClaimsError(f"{where}: 'all' needs parts")
    return combine(parts)
  if kind == "trend":
    points = check.get("points") or []
    if len(points) < 2:
      raise ClaimsError(f"{where}: a trend needs at least two points")
    higher = bool(check.get("increasing", True))
    parts = []
    samples = [
      (p.get("label", str(i)), read_value(root, p, seeds, where)) for i, p in enumerate(points)
    ]
    for (la, a), (lb, b) in zip(samples[1:], samples[:-1]):
      v = direction_verdict(Effect(difference(a, b)), higher, None, unit, digits)
      parts.append((f"{lb} → {la}", v))
    return combine(parts)
  raise ClaimsError(
    f"{where}: kind {kind!r}; allowed: direction, value, bound, spread, equivalence, "
    "not_worse, all, trend, not_measurable"
  )


# ---------------------------------------------------------------------------------------
# Claims files


@dataclasses.dataclass
class Claim:
  id: int
  paper: str
  page: str
  claim: str
  paper_says: str
  setups: list[tuple[str, Verdict]]
  note: str = ""
  pending: list[str] = dataclasses.field(default_factory=list)  # per set-up: runs to commit
  paths: set[str] = dataclasses.field(default_factory=set)  # results/ paths its checks read

  @property
  def main(self) -> Verdict:
    return self.setups[0][1]


CLAIM_KEYS = {"id", "claim", "paper_says", "setups", "note"}
SETUP_KEYS = {"setup", "seeds", "check", "note", "pending"}


def load(root: pathlib.Path = ROOT, papers: Sequence[str] = ()) -> list[Claim]:
  """Every claim of ``docs/reproductions/claims/*.yaml`` (or of ``papers``), evaluated."""
  folder = root / CLAIMS_DIR
  files = sorted(folder.glob("*.yaml"))
  if not files:
    raise ClaimsError(f"no claims files in {folder}")
  names = [f.stem for f in files]
  for p in papers:
    if p not in names:
      raise ClaimsError(f"--paper={p!r}; allowed: {', '.join(names)}")
  out = []
  for f in files:
    if papers and f.stem not in papers:
      continue
    out.extend(load_file(root, f))
  return sorted(out, key=lambda c: c.id)


def load_file(root: pathlib.Path, path: pathlib.Path) -> list[Claim]:
  with open(path) as f:
    data = yaml.safe_load(f)
  rel = path.relative_to(root) if path.is_relative_to(root) else path
  if not isinstance(data, dict) or {"paper", "page", "claims"} - set(data):
    raise ClaimsError(f"{rel}: needs 'paper', 'page' and 'claims'")
  out = []
  for entry in data["claims"]:
    where = f"{rel}: claim {entry.get('id', '?')}"
    extra = set(entry) - CLAIM_KEYS
    if extra or {"id", "claim", "setups"} - set(entry):
      raise ClaimsError(f"{where}: keys {sorted(entry)}; allowed {sorted(CLAIM_KEYS)}")
    setups = []
    for s in entry["setups"]:
      extra = set(s) - SETUP_KEYS
      if extra or "check" not in s:
        raise ClaimsError(f"{where}: set-up keys {sorted(s)}; allowed {sorted(SETUP_KEYS)}")
      label = s.get("setup", "")
      try:
        v = evaluate(root / "results", s["check"], s.get("seeds", [0, 1, 2]), f"{where} {label}")
      except NotCommittedError:
        # a set-up whose runs are listed as pending (the command and cost) is not measurable
        # until they are committed; any other missing file is an error in the claims file
        if not s.get("pending"):
          raise
        v = Verdict(NOT_MEASURABLE, f"runs not committed: {s['pending']}")
      setups.append((label, v))
    out.append(
      Claim(
        int(entry["id"]),
        data["paper"],
        data["page"],
        entry["claim"],
        entry.get("paper_says", ""),
        setups,
        entry.get("note", ""),
        [s.get("pending", "") for s in entry["setups"]],
        _paths_in(entry["setups"]),
      )
    )
  return out


# ---------------------------------------------------------------------------------------
# Output


def verdict_text(c: Claim) -> str:
  if len(c.setups) == 1 and not c.setups[0][0]:
    return c.main.label()
  return "; ".join(f"{label}: {v.label()}" for label, v in c.setups)


def _leaves(v: Verdict) -> list[Verdict]:
  return [x for _, p in v.parts for x in _leaves(p)] if v.parts else [v]


def evidence_text(v: Verdict, sep: str = "; ") -> str:
  """A verdict's evidence: a part per label (its word and effect), the seeds said once when
  every part shares them."""
  if not v.parts:
    return v.evidence
  leaves = [x for x in _leaves(v) if x.word != NOT_MEASURABLE]
  shared = {(x.seeds, x.n) for x in leaves}
  if len(shared) == 1 and all(x.detail for x in leaves):
    ((seeds, n),) = shared

    def part(label: str, p: Verdict) -> str:
      if p.parts:
        return f"{label}: {p.word} ({', '.join(part(lb, q) for lb, q in p.parts)})"
      return f"{label}: {p.word}, {p.detail or p.evidence}"

    return sep.join(part(lb, p) for lb, p in v.parts) + f" ({seeds_text(seeds, n)})"
  return sep.join(f"{label}: {p.word}, {evidence_text(p)}" for label, p in v.parts)


def short_evidence(v: Verdict) -> str:
  """The claims table's cell: a leaf's evidence, or a composite's count of parts by word."""
  return v.evidence if not v.parts else v.evidence + f" ({seeds_text(v.seeds, v.n)})"


def tally(claims: Sequence[Claim]) -> dict[str, int]:
  """Claims per word of their main set-up (the first), in WORDS order."""
  words = [c.main.word for c in claims]
  return {w: words.count(w) for w in WORDS}


def tally_text(claims: Sequence[Claim]) -> str:
  t = tally(claims)
  one = sum(c.main.one_seed for c in claims)
  text = ", ".join(f"{n} {w}" for w, n in t.items() if n)
  return f"{len(claims)} claims: {text}" + (f" ({one} on one seed)" if one else "")


def claims_table(claims: Sequence[Claim], link: bool = True) -> str:
  lines = [
    f"**All five papers** (each claim's first set-up): {tally_text(claims)}.",
    "",
    "| # | claim | paper | verdict | evidence: effect [95 % interval], p (seeds) "
    "| paper's numbers |",
    "|---|---|---|---|---|---|",
  ]
  for c in claims:
    ev = " · ".join((f"{label}: " if label else "") + short_evidence(v) for label, v in c.setups)
    claim = f"[{c.claim}]({c.page}#claim-{c.id})" if link else c.claim
    lines.append(
      f"| {c.id} | {claim} | {c.paper} | {verdict_text(c)} | {_cell(ev)} | {_cell(c.paper_says)} |"
    )
  return "\n".join(lines)


def _cell(text: str) -> str:
  return text.replace("|", "\\|").replace("\n", " ")


def page_summary(claims: Sequence[Claim]) -> str:
  """The block under a page's "In one minute": the tally and the claims per word."""
  lines = [f"**Verdicts** (`python -m experiments.claims`): {tally_text(claims)}."]
  for w in WORDS:
    ids = [c for c in claims if c.main.word == w]
    if ids:
      items = ", ".join(
        f"[{c.id}](#claim-{c.id})" + (" (one seed)" if c.main.one_seed else "") for c in ids
      )
      lines.append(f"- {w.capitalize()}: {items}")
  return "\n".join(lines)


def page_table(claims: Sequence[Claim]) -> str:
  """A page's verdict table: one row per claim and set-up, with its anchor."""
  lines = [
    "| # | claim | set-up | verdict | evidence: effect [95 % interval], p (seeds) | paper |",
    "|---|---|---|---|---|---|",
  ]
  for c in claims:
    for i, (label, v) in enumerate(c.setups):
      anchor = f'<a id="claim-{c.id}"></a>{c.id}' if i == 0 else ""
      claim = c.claim if i == 0 else ""
      paper = c.paper_says if i == 0 else ""
      lines.append(
        f"| {anchor} | {_cell(claim)} | {label or '-'} | {v.label()} | "
        f"{_cell(evidence_text(v, sep='<br>'))} | {_cell(paper)} |"
      )
  return "\n".join(lines)


def readme_table(claims: Sequence[Claim]) -> str:
  """The README's five rows: each paper's tally and its claims by word, linked."""
  by_paper: dict[str, list[Claim]] = {}
  for c in claims:
    by_paper.setdefault(c.paper, []).append(c)
  lines = [
    "| paper | tally | reproduced | partly | not reproduced | inconclusive | not measurable |",
    "|---|---|---|---|---|---|---|",
  ]
  for paper, cs in by_paper.items():
    page = f"docs/reproductions/{cs[0].page}"
    cols = []
    for w in WORDS:
      ids = [c for c in cs if c.main.word == w]
      cols.append(", ".join(f"[{c.id}]({page}#claim-{c.id})" for c in ids) or "-")
    reproduced, not_reproduced, partly, inconclusive, not_measurable = cols
    lines.append(
      f"| [{paper}]({page}#in-one-minute) | {tally_text(cs)} | {reproduced} | {partly} | "
      f"{not_reproduced} | {inconclusive} | {not_measurable} |"
    )
  counts = tally(claims)
  cells = " | ".join(
    str(counts[w]) for w in (REPRODUCED, PARTLY, NOT_REPRODUCED, INCONCLUSIVE, NOT_MEASURABLE)
  )
  lines.append(f"| all five | {tally_text(claims)} | {cells} |")
  return "\n".join(lines)


def open_work(claims: Sequence[Claim]) -> str:
  """The main verdicts resting on one seed and the set-ups whose runs are not committed,
  claims sharing the same runs on one line."""
  groups: dict[tuple[str, str], list[str]] = {}
  for c in claims:
    for i, (label, v) in enumerate(c.setups):
      where = f"{c.id}" + (f" ({label})" if label else "")
      if v.evidence.startswith("runs not committed: "):
        key = ("not measurable until its runs are committed", v.evidence.split(": ", 1)[1])
      elif i == 0 and v.one_seed:
        more = c.pending[i] or "the cost of more seeds is not stated"
        key = (f"rests on one seed ({seeds_text(v.seeds, v.n)})", more)
      else:
        continue
      groups.setdefault(key, []).append(where)
  lines = []
  for (state, runs), ids in groups.items():
    noun = "claim" if len(ids) == 1 else "claims"
    lines.append(f"- {noun} {', '.join(ids)}: {state}; {runs}")
  return "\n".join(lines) or "- none"


def _study_folder(path: str) -> str:
  """The study folder a claim's path is in: the part before ``/cells``, or a table's folder."""
  if "/cells" in f"/{path}":
    return path.split("/cells")[0] if not path.startswith("cells") else "."
  return path if not re.search(r"\.(csv|md|json|jsonl)$", path) else os.path.dirname(path)


def committed_seeds(folder: pathlib.Path) -> list[int]:
  """The seeds of every ``seed<k>/summary.json`` under ``folder``."""
  return sorted({int(p.parent.name[4:]) for p in folder.rglob("seed*/summary.json")})


def results_index(root: pathlib.Path, claims: Sequence[Claim]) -> str:
  """results/README.md's index: each folder a verdict reads, its committed per-seed runs
  and the claims that read it."""
  reads: dict[str, set[int]] = {}
  for c in claims:
    for path in c.paths:
      reads.setdefault(_study_folder(path), set()).add(c.id)
  lines = ["| folder | per-seed runs committed | claims whose verdict reads it |", "|---|---|---|"]
  for folder in sorted(reads):
    seeds = committed_seeds(root / "results" / folder)
    runs = len(list((root / "results" / folder).rglob("seed*/summary.json")))
    held = f"{runs} runs, {seeds_text(seeds, 0)}" if seeds else "tables only"
    ids = ", ".join(str(i) for i in sorted(reads[folder]))
    lines.append(f"| `{folder}/` | {held} | {ids} |")
  return "\n".join(lines)


def _paths_in(data: Any) -> set[str]:
  """The results/ paths (``cells``, ``table``, ``json``) a claims entry reads."""
  if isinstance(data, dict):
    return set().union(
      *(
        {v} if k in ("cells", "table", "json") and isinstance(v, str) else _paths_in(v)
        for k, v in data.items()
      )
    )
  if isinstance(data, list):
    return set().union(*(_paths_in(v) for v in data))
  return set()


def report(claims: Sequence[Claim]) -> str:
  """The binary's printout: every claim, its verdict per set-up with evidence."""
  lines = [f"The rule: {RULE}", ""]
  paper = None
  for c in claims:
    if c.paper != paper:
      paper = c.paper
      these = [x for x in claims if x.paper == paper]
      lines += ["", f"== {paper}: {tally_text(these)}"]
    lines.append(f"{c.id:>3}. {c.claim}")
    for label, v in c.setups:
      lines.append(f"     {label + ': ' if label else ''}{v.label()}: {evidence_text(v)}")
  return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Generated blocks in the docs


def begin(name: str) -> str:
  return f"<!-- generated by python -m experiments.claims --write: {name} -->"


def end(name: str) -> str:
  return f"<!-- end of generated block: {name} -->"


def blocks(root: pathlib.Path, claims: Sequence[Claim]) -> dict[str, dict[str, str]]:
  """{file (relative to root): {block name: text}} of every generated block."""
  out: dict[str, dict[str, str]] = {
    "docs/reproductions/README.md": {
      "rule": "\n".join(f"- {part}" for part in RULE_PARTS),
      "claims": claims_table(claims),
      "open": open_work(claims),
    },
    "README.md": {"verdicts": readme_table(claims)},
    "results/README.md": {"index": results_index(root, claims)},
  }
  pages: dict[str, list[Claim]] = {}
  for c in claims:
    pages.setdefault(c.page, []).append(c)
  for page, cs in pages.items():
    out[f"docs/reproductions/{page}"] = {"summary": page_summary(cs), "verdicts": page_table(cs)}
  return out


def replace_block(text: str, name: str, body: str, path: str) -> str:
  b, e = begin(name), end(name)
  if b not in text or e not in text:
    raise ClaimsError(f"{path} has no generated block {name!r} (add the lines {b!r} and {e!r})")
  head, rest = text.split(b, 1)
  _, tail = rest.split(e, 1)
  return f"{head}{b}\n{body}\n{e}{tail}"


def stale_blocks(root: pathlib.Path, claims: Sequence[Claim]) -> list[str]:
  """The generated blocks whose text in the docs differs from what the engine writes."""
  stale = []
  for rel, named in blocks(root, claims).items():
    text = (root / rel).read_text()
    for name, body in named.items():
      if replace_block(text, name, body, rel) != text:
        stale.append(f"{rel}: block {name!r}")
  return stale


def write_blocks(root: pathlib.Path, claims: Sequence[Claim]) -> list[str]:
  written = []
  for rel, named in blocks(root, claims).items():
    path = root / rel
    text = original = path.read_text()
    for name, body in named.items():
      text = replace_block(text, name, body, rel)
    if text != original:
      tmp = path.with_suffix(path.suffix + ".tmp")
      tmp.write_text(text)
      os.replace(tmp, path)
      written.append(rel)
  return written


# ---------------------------------------------------------------------------------------
# The binary

flags.DEFINE_list(
  "paper",
  [],
  "the claims files to read (stems of docs/reproductions/claims/*.yaml); all by default",
)
flags.DEFINE_bool("write", False, "rewrite the generated blocks of the docs")
flags.DEFINE_bool("check", False, "exit 1 when a generated block in the docs is out of date")
FLAGS = flags.FLAGS


def main(argv: list[str]) -> int:
  try:
    if len(argv) > 1:
      raise ClaimsError(f"unexpected arguments {argv[1:]}")
    if (FLAGS.write or FLAGS.check) and FLAGS.paper:
      raise ClaimsError("--write and --check read every claim: leave out --paper")
    claims = load(ROOT, FLAGS.paper)
    print(report(claims))
    if FLAGS.write or FLAGS.check:
      if FLAGS.write:
        for rel in write_blocks(ROOT, claims):
          print(f"wrote {rel}")
      stale = stale_blocks(ROOT, claims)
      if stale:
        print("out of date (python -m experiments.claims --write):\n  " + "\n  ".join(stale))
        return 1
  except ClaimsError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  app.run(main)

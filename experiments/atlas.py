r"""The atlas: which selection strategy and which aggregator win under which availability.

  python -m experiments.atlas --output_dir=runs/atlas
  python -m experiments.atlas --quick --output_dir=/tmp/atlas
  python -m experiments.atlas --config.datasets=fashion_mnist --output_dir=runs/atlas_fmnist

Two panels per dataset, on the same data with the same budget (``experiments/configs/atlas.py``):

* **selection**: every registered selection strategy x every availability model, FedAvg
  aggregation;
* **aggregation**: every aggregator x every availability model, uniform selection among the
  available clients.

The names come from the registries when the atlas runs: a strategy registered with
``fedjax_sel.selection.register`` appears without an edit here. Each method runs with its
constructor's defaults (its paper's) unless the config overrides them; every cell of a
dataset shares one client lr. A cell that cannot run (the method needs what the dataset or
config lacks, e.g. a recorded trace) or that fails is written with its reason, never left
out. Cells of one program shape (the seeds; availability models whose rounds run the same
code) run as one batched program (``experiment.run_batch``); ``--resume`` (default on) reads
finished cells back.

Writes to --output_dir: ``atlas.csv`` (one row per cell and seed), ``atlas.md`` (mean ± std,
each cell's rank in its row, the winner per availability model in bold, ties with it within
one std marked ≈), ``heatmap_<dataset>_<panel>.png`` (final accuracy relative to
uniform / FedAvg under the same availability) and ``cells/<dataset>/<cell>/seed<k>/``.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import math
import os

import ml_collections
import numpy as np
from absl import app, flags, logging

from experiments import common, grid
from fedjax_sel import aggregation, availability, experiment, selection
from fedjax_sel.core.registry import is_integer
from fedjax_sel.metrics import results
from fedjax_sel.metrics import stats as stats_lib

PANELS = ("selection", "aggregation")
PARTS = {"selection": selection, "aggregator": aggregation, "availability": availability}
CSV_HEADER = [
  "dataset",
  "panel",
  "selection",
  "aggregator",
  "availability",
  "seed",
  "status",
  "reason",
  "optimal_test_loss",
  "final_test_accuracy",
  "target_accuracy",
  "rounds_to_target",
  "rounds",
  "client_accuracy_std",
  "client_accuracy_worst10",
]
# (csv column, table title, higher is better, scale, digits)
METRICS = (
  ("final_test_accuracy", "final test accuracy (%)", True, 100.0, 2),
  ("optimal_test_loss", "optimal (lowest) test loss", False, 1.0, 4),
  ("rounds_to_target", "rounds to the target accuracy", False, 1.0, 0),
  (
    "client_accuracy_std",
    "fairness: std of per-client accuracy (pp, lower is fairer)",
    False,
    100.0,
    2,
  ),
)
TIE = "≈"


@dataclasses.dataclass(frozen=True)
class Cell:
  """One (selection, aggregator, availability) combination of a dataset's panel."""

  dataset: str
  panel: str
  selection: str
  aggregator: str
  availability: str

  @property
  def name(self) -> str:
    """The cell's folder under ``cells/<dataset>/`` (shared by both panels' reference)."""
    return f"{self.selection}+{self.aggregator}+{self.availability}"

  @property
  def method(self) -> str:
    """The name that varies along the panel's columns."""
    return self.selection if self.panel == "selection" else self.aggregator


def _names(text: str, field: str, part: str) -> list[str]:
  """The registry names of a comma-separated config field ("" = every registered one)."""
  known = PARTS[part].names()
  if not isinstance(text, str):
    raise ValueError(f"{field}={text!r}; allowed: a comma-separated string of names")
  names = [s.strip() for s in text.split(",") if s.strip()]
  if not names:
    return known
  for n in names:
    if n not in known:
      raise ValueError(f"{field}: unknown {part} {n!r}; known {part} names: {', '.join(known)}")
  if len(set(names)) != len(names):
    raise ValueError(f"{field}={text!r}: a name repeats; allowed: distinct names")
  return names


def _list(text, field: str, allowed: list[str]) -> list[str]:
  if not isinstance(text, str):
    raise ValueError(f"{field}={text!r}; allowed: a comma-separated string of {allowed}")
  names = [s.strip() for s in text.split(",") if s.strip()]
  bad = [n for n in names if n not in allowed]
  if bad or not names:
    raise ValueError(
      f"{field}={text!r}: {'unknown ' + repr(bad[0]) if bad else 'empty'}; allowed: "
      f"comma-separated names from {', '.join(allowed)}"
    )
  return names


def prepare_config(
  config: ml_collections.ConfigDict, *, quick: bool = False, rounds: int = 0, data_dir: str = ""
) -> ml_collections.ConfigDict:
  """The atlas config after --quick, --rounds and --data_dir (a copy), checked.

  Raises:
    ValueError: a bad value, named with what is allowed (one line).
  """
  c = ml_collections.ConfigDict(config.to_dict())
  datasets = list(c.data.keys())
  _list(c.datasets, "datasets", datasets)
  _list(c.panels, "panels", list(PANELS))
  for part, field in (
    ("selection", "selections"),
    ("aggregator", "aggregators"),
    ("availability", "availabilities"),
  ):
    _names(c[field], field, part)
    overrides = c[f"{part}_hparams"]
    for name in overrides.keys():
      if name not in PARTS[part].names():
        raise ValueError(
          f"{part}_hparams.{name}: unknown {part} {name!r}; known {part} names: "
          f"{', '.join(PARTS[part].names())}"
        )
  _names(c.reference_selection, "reference_selection", "selection")
  _names(c.reference_aggregator, "reference_aggregator", "aggregator")
  _names(c.quick_availability, "quick_availability", "availability")
  if not is_integer(c.workers, strict=True) or c.workers < 1:
    raise ValueError(f"workers={c.workers!r} is out of range; allowed: integers >= 1")
  if not isinstance(c.train, bool):
    raise ValueError(f"train={c.train!r}; allowed: True or False")
  for name in datasets:
    d = c.data[name]
    if d.get("availabilities", ""):
      _names(d.availabilities, f"data.{name}.availabilities", "availability")
    t = d.target_accuracy
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 < float(t) <= 1.0:
      raise ValueError(f"data.{name}.target_accuracy={t!r} is out of range; allowed: (0, 1]")
  c.quick = bool(quick)
  if quick:
    _list(c.quick_datasets, "quick_datasets", datasets)
    c.datasets = c.quick_datasets
    for name in datasets:
      c.data[name].base.rounds = c.quick_rounds
      c.data[name].base.eval_every = c.quick_eval_every
  for name in datasets:
    base = c.data[name].base
    if rounds:
      base.rounds = int(rounds)
    if data_dir and base.dataset not in ("synthetic", "digits"):
      base.data_dir = data_dir
  return c


def dataset_names(config: ml_collections.ConfigDict) -> list[str]:
  return _list(config.datasets, "datasets", list(config.data.keys()))


def cells(config: ml_collections.ConfigDict, dataset: str) -> list[Cell]:
  """The cells of ``dataset``'s panels: the full grid, or under --quick a cross (every
  method under ``quick_availability``, the panel's reference under every availability)."""
  sels = _names(config.selections, "selections", "selection")
  aggs = _names(config.aggregators, "aggregators", "aggregator")
  own = config.data[dataset].get("availabilities", "")
  field = f"data.{dataset}.availabilities" if own else "availabilities"
  avails = _names(own or config.availabilities, field, "availability")
  ref_sel, ref_agg = config.reference_selection, config.reference_aggregator
  out = []
  for panel in _list(config.panels, "panels", list(PANELS)):
    methods = sels if panel == "selection" else aggs
    reference = ref_sel if panel == "selection" else ref_agg
    for av in avails:
      for m in methods:
        if config.get("quick") and av != config.quick_availability and m != reference:
          continue
        if panel == "selection":
          out.append(Cell(dataset, panel, m, ref_agg, av))
        else:
          out.append(Cell(dataset, panel, ref_sel, m, av))
  return out


def cell_config(config: ml_collections.ConfigDict, cell: Cell) -> ml_collections.ConfigDict:
  """The experiment config of one cell: the dataset's base, the three names, the config's
  overrides of their defaults (and the dataset's trace file for ``trace``)."""
  d = config.data[cell.dataset]
  c = ml_collections.ConfigDict(d.base.to_dict())
  for part in ("selection", "aggregator", "availability"):
    name = getattr(cell, part)
    c[part] = name
    hp = dict(config[f"{part}_hparams"].get(name, {}) or {})
    if part == "availability" and name == "trace" and d.trace_file and "trace" not in hp:
      hp["trace"] = d.trace_file
    c[f"{part}_hparams"] = ml_collections.ConfigDict(hp)
  return c


def _overridden(config: ml_collections.ConfigDict, cell: Cell) -> bool:
  return any(
    getattr(cell, part) in config[f"{part}_hparams"]
    for part in ("selection", "aggregator", "availability")
  )


def strict_configs(config: ml_collections.ConfigDict) -> list[ml_collections.ConfigDict]:
  """The configs a bad value in which is a user error, checked up front: each dataset's base,
  and every cell whose hyper-parameters the config sets (a bad override ends in one line,
  not in a cell marked as not runnable)."""
  out = []
  for name in dataset_names(config):
    out.append(ml_collections.ConfigDict(config.data[name].base.to_dict()))
    out += [cell_config(config, cl) for cl in cells(config, name) if _overridden(config, cl)]
  return out


# ----------------------------------------------------------------------------- running


def _runnable(cfg: ml_collections.ConfigDict, seed: int, dataset) -> tuple[str, str]:
  """("ok", "") when the cell builds on this dataset, else its status and reason: "cannot
  run" (the constructor or data refuse it: a ValueError / TypeError naming what is missing)
  or "failed" (any other exception: a broken component)."""
  try:
    experiment.validate_config(common.seed_config(cfg, seed, True))
    experiment.build(cfg, dataset)
  except (ValueError, TypeError) as e:
    return "cannot run", experiment.one_line(e)
  except Exception as e:  # a broken component must not end the grid
    return "failed", f"{type(e).__name__}: {experiment.one_line(e)}"
  return "ok", ""


def _read_seed(folder: str, rounds: int) -> tuple[dict, list[dict]] | None:
  summary = grid.read_finished(folder, rounds)
  return summary and (summary, results.read_jsonl(os.path.join(folder, "metrics.jsonl")))


# config.json fields that do not change a run's numbers: a reused cell may differ in them
REUSE_FREE = ("output_dir", "resume", "tensorboard", "data_dir", "checkpoint_every")


def reuse_cells(source: str, dataset: str, runnable: dict, folder: dict, seeds: list[int]) -> int:
  """``--reuse``: copies into this atlas every finished run of ``source``
  (``cells/<dataset>/<cell>/seed<k>/``) that this atlas would run with the same config and
  has not finished itself; returns how many.

  Raises:
    experiment.ConfigError: a run of ``source`` for one of this atlas's cells ran under other
      shared settings (one line naming the cell and the fields): never mixed silently.
  """
  copied = 0
  for cname, cfg in runnable.items():
    for s in seeds:
      src = os.path.join(source, "cells", dataset, cname, f"seed{s}")
      dst = os.path.join(folder[cname], f"seed{s}")
      if _read_seed(dst, cfg.rounds) is not None or not os.path.exists(
        os.path.join(src, "summary.json")
      ):
        continue
      diff = grid.saved_differences(src, common.seed_config(cfg, s, True).to_dict(), REUSE_FREE)
      if diff:
        raise experiment.ConfigError(
          f"--reuse={source}: {cname} seed {s} ran under other shared settings "
          f"({'; '.join(diff[:6])}{'; ...' if len(diff) > 6 else ''}); allowed: a folder "
          "of runs with this atlas's settings (or drop --reuse)"
        )
      if _read_seed(src, cfg.rounds) is None:
        continue
      grid.copy_run(src, dst)
      copied += 1
  if copied:
    logging.info("atlas %s: %d finished run(s) reused from %s", dataset, copied, source)
  return copied


def same_availability(
  config: ml_collections.ConfigDict, dataset_name: str, dataset, seeds: list[int]
) -> dict[str, str]:
  """``{model: earlier model}`` for each availability model of the dataset's grid that draws
  exactly what an earlier one draws (the same active clients and probabilities in every
  round, from each seed's availability key): the same experiment, named instead of run. On
  Fashion-MNIST with equal client sizes LDF and MDF, whose rates follow data size, give
  every client the same rate, as IDL and always-available do."""
  import jax

  from fedjax_sel.availability import rollout

  base = config.data[dataset_name].base
  info = dataset.client_info()
  draws = {}
  seen = set()
  for cl in cells(config, dataset_name):
    if cl.availability in seen:
      continue
    seen.add(cl.availability)
    try:
      model = experiment.make_components(cell_config(config, cl)).availability
      per_seed = []
      for s in seeds:
        key = jax.random.PRNGKey(int(base.availability_seed) + s)
        active, probs = rollout(model, info, key, int(base.rounds))
        per_seed.append((np.asarray(active), np.asarray(probs)))
    except Exception:  # noqa: BLE001 (a model that cannot run here is listed as such later)
      continue
    draws[cl.availability] = per_seed
  out = {}
  names = list(draws)
  for i, av in enumerate(names):
    for earlier in names[:i]:
      if earlier in out:
        continue
      if all(
        np.array_equal(a1, a2) and np.array_equal(p1, p2)
        for (a1, p1), (a2, p2) in zip(draws[av], draws[earlier])
      ):
        out[av] = earlier
        break
  return out


def run_dataset(
  config: ml_collections.ConfigDict,
  name: str,
  output_dir: str,
  seeds: list[int],
  resume: bool = True,
  reuse: tuple[str, ...] = (),
) -> dict[str, dict]:
  """Runs every cell of one dataset; returns ``{cell name: {"status", "reason", "runs"}}``
  with ``runs`` = [(summary, history) or None per seed]. An availability model that draws
  what an earlier one draws is not run (``same_availability``); ``reuse`` folders' finished
  runs with this atlas's settings are copied in first (``reuse_cells``)."""
  d = config.data[name]
  dataset = experiment.load_data(d.base)
  unique: dict[str, ml_collections.ConfigDict] = {}
  for cl in cells(config, name):
    unique.setdefault(cl.name, cell_config(config, cl))
  out: dict[str, dict] = {}
  runnable = {}
  for cname, cfg in unique.items():
    status, reason = _runnable(cfg, seeds[0], dataset)
    out[cname] = {"status": status, "reason": reason, "runs": [None] * len(seeds)}
    if status == "ok":
      runnable[cname] = cfg
    else:
      logging.warning("atlas %s: cell %s %s: %s", name, cname, status, reason)
  same = same_availability(config, name, dataset, seeds) if config.get("detect_same", True) else {}
  twins = {}  # a cell under a model that draws what an earlier one draws -> that cell
  for cname in list(runnable):
    methods, av = cname.rsplit("+", 1)
    twin = f"{methods}+{same.get(av)}"
    if av in same and twin in runnable:  # the same experiment runs there: not run twice
      del runnable[cname]
      twins[cname] = twin
      out[cname] = {
        "status": f"same as {same[av]}",
        "reason": f"{av} draws the same availability as {same[av]} on this dataset (every "
        "round of every seed): not run, its numbers are that cell's",
        "runs": [None] * len(seeds),
      }
  folder = {c: os.path.join(output_dir, "cells", name, c) for c in unique}
  for source in reuse:
    reuse_cells(source, name, runnable, folder, seeds)
  groups: dict[str, list[str]] = {}
  for cname, cfg in runnable.items():
    key = experiment.batch_key(common.seed_config(cfg, seeds[0], True))
    groups.setdefault(key, []).append(cname)
  # largest first (one compiles while another runs); among equals, the panels' reference
  # (uniform + FedAvg) first, so a grid stopped early still has every row's baseline
  reference = f"{config.reference_selection}+{config.reference_aggregator}+"
  programs = sorted(
    groups.values(), key=lambda g: (-len(g), not any(c.startswith(reference) for c in g))
  )
  if not config.train:  # report only: read back what has finished, train nothing
    for c in runnable:
      out[c]["runs"] = [
        _read_seed(os.path.join(folder[c], f"seed{s}"), runnable[c].rounds) for s in seeds
      ]
      if any(r is None for r in out[c]["runs"]):
        out[c]["status"], out[c]["reason"] = "not finished", "not run yet (train=False)"
    programs = []
  logging.info("atlas %s: %d cells, %d programs", name, len(unique), len(programs))

  def run_program(members: list[str]) -> None:
    try:
      runs = common.run_cells(
        {c: (runnable[c], folder[c]) for c in members},
        seeds,
        dataset_fn=lambda _: dataset,
        resume=resume,
        availability_seed_per_seed=True,
        workers=1,
      )
      for c in members:
        out[c]["runs"] = runs[c]
    except (experiment.Interrupted, KeyboardInterrupt, experiment.ConfigError):
      raise  # a stop, or a user error (a folder holding another config's run): not a cell's
    except Exception as e:  # a broken component or a diverged run: mark, keep the grid going
      status = "diverged" if isinstance(e, experiment.NonFiniteModelError) else "failed"
      reason = f"{type(e).__name__}: {experiment.one_line(e)}"
      logging.warning("atlas %s: program %s %s: %s", name, members, status, reason)
      for c in members:
        got = [_read_seed(os.path.join(folder[c], f"seed{s}"), runnable[c].rounds) for s in seeds]
        out[c]["runs"] = got
        if any(g is None for g in got):
          out[c]["status"], out[c]["reason"] = status, reason

  workers = max(1, min(int(config.workers), len(programs) or 1))
  experiment.run_in_threads(run_program, programs, workers)
  for cname, twin in twins.items():
    out[cname]["runs"] = out[twin]["runs"]
  return out


# ----------------------------------------------------------------------------- metrics


def rounds_to_target(history: list[dict], target: float) -> int | None:
  """The first evaluated round whose test accuracy reaches ``target``; None if none does."""
  for r in history:
    if r.get("test_accuracy") is not None and r["test_accuracy"] >= target:
      return int(r["round"])
  return None


def seed_metrics(summary: dict, history: list[dict], target: float) -> dict:
  """One csv row's numbers: optimal (lowest evaluated) test loss, final accuracy, rounds to
  ``target``, and the spread (std, worst 10 %) of per-client accuracy at the last evaluation."""
  last = history[-1] if history else {}
  var = last.get("client_acc_var")
  return {
    "optimal_test_loss": summary.get("best_test_loss"),
    "final_test_accuracy": summary.get("final_test_accuracy"),
    "target_accuracy": target,
    "rounds_to_target": rounds_to_target(history, target),
    "rounds": summary.get("rounds"),
    "client_accuracy_std": None if var is None else math.sqrt(max(float(var), 0.0)),
    "client_accuracy_worst10": last.get("client_acc_worst10"),
  }


def atlas_rows(
  config: ml_collections.ConfigDict, outcomes: dict[str, dict[str, dict]], seeds: list[int]
) -> list[dict]:
  """One dict per (cell, seed) of every panel, in the csv's columns."""
  rows = []
  for name in dataset_names(config):
    target = float(config.data[name].target_accuracy)
    for cl in cells(config, name):
      o = outcomes[name][cl.name]
      for i, seed in enumerate(seeds):
        row = {k: None for k in CSV_HEADER}
        row.update(dataclasses.asdict(cl))
        row.update(seed=seed, status=o["status"], reason=o["reason"])
        run = o["runs"][i]
        if run is not None:
          row.update(seed_metrics(run[0], run[1], target))
          row["status"] = o["status"] if o["status"].startswith("same as ") else "ok"
        elif o["status"] in ("ok", "not finished"):
          row["status"] = "not finished"
          row["reason"] = o["reason"] or "no finished run"
        rows.append(row)
  return rows


def write_csv(path: str, rows: list[dict]) -> None:
  buf = io.StringIO()
  w = csv.DictWriter(buf, CSV_HEADER, lineterminator="\n")
  w.writeheader()
  for r in rows:
    w.writerow({k: ("" if r[k] is None else r[k]) for k in CSV_HEADER})
  results.atomic_write_text(path, buf.getvalue())


def _stats(rows: list[dict], key: str, rounds: int) -> tuple[float, float, int] | None:
  """(mean, std, seeds that never reached) over the ok seeds; None when no seed ran.
  A seed that never reaches the target counts as ``rounds + 1`` in the mean."""
  ok = [r for r in rows if _measured(r)]
  if not ok:
    return None
  values, never = [], 0
  for r in ok:
    v = r[key]
    if v is None:
      if key != "rounds_to_target":
        continue
      never += 1
      v = rounds + 1
    values.append(float(v))
  if not values:
    return None
  return float(np.mean(values)), float(np.std(values)), never


def _panel(rows: list[dict], dataset: str, panel: str):
  """A panel's rows, the name its methods go by, its methods and availability models in
  order: ``(rows, "selection" | "aggregator", methods, availabilities)``."""
  mine = [r for r in rows if r["dataset"] == dataset and r["panel"] == panel]
  method_key = "selection" if panel == "selection" else "aggregator"
  methods = list(dict.fromkeys(r[method_key] for r in mine))
  return mine, method_key, methods, list(dict.fromkeys(r["availability"] for r in mine))


def _same_row(av: str, same: str, methods: list) -> list[str]:
  return [av, f"same as {same} here"] + [""] * (len(methods) - 1)


def _same_as(rows: list[dict]) -> str:
  """The model an availability row's cells are the same experiment as ("" if none)."""
  status = {r["status"] for r in rows}
  if len(status) == 1 and next(iter(status)).startswith("same as "):
    return next(iter(status))[len("same as ") :]
  return ""


def _measured(row: dict) -> bool:
  """A row with numbers: run here, or the same experiment as a cell run here."""
  return row["status"] == "ok" or (
    row["status"].startswith("same as ") and row.get("final_test_accuracy") not in (None, "")
  )


def _by_seed(rows: list[dict], key: str = "final_test_accuracy") -> dict[int, float]:
  return {int(r["seed"]): float(r[key]) for r in rows if _measured(r) and r[key] is not None}


def effect_table(
  rows: list[dict], dataset: str, panel: str, against: str, reference: str
) -> tuple[list[str], list[list[str]]]:
  """Paired effects on final test accuracy (points), per availability row: each method
  minus the panel's reference (``against="reference"``) or minus the row's best by mean
  (``"best"``), paired by seed: mean [95 % interval] p, ``*`` where p < 0.05
  (``fedjax_sel.metrics.stats.paired``)."""
  mine, method_key, methods, avails = _panel(rows, dataset, panel)
  table = []
  for av in avails:
    here = [r for r in mine if r["availability"] == av]
    same = _same_as(here)
    if same:
      table.append(_same_row(av, same, methods))
      continue
    acc = {m: _by_seed([r for r in here if r[method_key] == m]) for m in methods}
    means = {m: float(np.mean(list(v.values()))) for m, v in acc.items() if v}
    if against == "reference":
      base = reference
    else:
      base = max(means, key=means.get) if means else reference
    line = [av + ("" if against == "reference" else f" (best: {base})")]
    for m in methods:
      if not any(r[method_key] == m for r in here):
        line.append("")  # not in this atlas (--quick's cross)
        continue
      if not acc.get(m) or not acc.get(base):
        line.append("n/a")
        continue
      if m == base:
        line.append("—")
        continue
      e = stats_lib.paired(acc[m], acc[base])
      if not np.isfinite(e.low):
        line.append(f"{100 * e.mean:+.2f} (n={e.n})")
        continue
      text = f"{100 * e.mean:+.2f} [{100 * e.low:+.2f}, {100 * e.high:+.2f}] p={e.p:.3f}"
      line.append(text + (" *" if e.significant() else ""))
    table.append(line)
  return ["availability"] + methods, table


def rank_row(stats: dict[str, tuple | None], higher: bool) -> dict[str, tuple[int, bool]]:
  """Each method's rank in its row (1 = best; equal means share a rank) and whether it ties
  with the winner: ``|mean - winner's mean| <= max(its std, the winner's std)``."""
  valid = {m: s for m, s in stats.items() if s is not None and np.isfinite(s[0])}
  if not valid:
    return {}
  sign = -1.0 if higher else 1.0
  order = sorted(valid, key=lambda m: sign * valid[m][0])
  best = valid[order[0]]
  out = {}
  for m in order:
    mean, std = valid[m][0], valid[m][1]
    rank = 1 + sum(1 for o in valid if sign * valid[o][0] < sign * mean)
    out[m] = (rank, abs(mean - best[0]) <= max(std, best[1]))
  return out


def panel_table(
  rows: list[dict], dataset: str, panel: str, metric: tuple, rounds: int
) -> tuple[list[str], list[list[str]]]:
  """The Markdown table of one panel and metric: availability models as rows, methods as
  columns; each cell mean ± std (rank), the row's winner bold, its ties marked ≈."""
  key, _, higher, scale, digits = metric
  mine, method_key, methods, avails = _panel(rows, dataset, panel)
  table = []
  for av in avails:
    same = _same_as([r for r in mine if r["availability"] == av])
    if same:
      table.append(_same_row(av, same, methods))
      continue
    stats = {}
    for m in methods:
      cell_rows = [r for r in mine if r["availability"] == av and r[method_key] == m]
      stats[m] = _stats(cell_rows, key, rounds) if cell_rows else None
    ranks = rank_row(stats, higher)
    line = [av]
    for m in methods:
      cell_rows = [r for r in mine if r["availability"] == av and r[method_key] == m]
      if not cell_rows:
        line.append("")
        continue
      s = stats[m]
      if s is None:
        line.append(f"n/a ({cell_rows[0]['status']})")
        continue
      text = f"{scale * s[0]:.{digits}f} ± {scale * s[1]:.{digits}f}"
      if key == "rounds_to_target" and s[2]:
        text += f" ({s[2]} never)"
      rank, tie = ranks[m]
      text += f" ({rank})"
      if cell_rows[0]["status"].startswith("same as "):
        text += f" (= {cell_rows[0]['status'][len('same as ') :]})"
      if rank == 1:
        text = f"**{text}**"
      elif tie:
        text += f" {TIE}"
      line.append(text)
    table.append(line)
  return ["availability"] + methods, table


def write_markdown(
  path: str, config: ml_collections.ConfigDict, rows: list[dict], seeds: list[int]
) -> str:
  parts = [
    "# The atlas",
    "",
    f"Mean ± std over seeds {seeds}; (k) is the cell's rank in its row (1 = best), the "
    f"row's winner is in bold, and {TIE} marks a cell within one std of the winner (|mean "
    "difference| <= the larger of the two stds). Rounds to target: a seed that never reaches "
    "it counts as rounds + 1 (the number that never did in parentheses). n/a: the cell did "
    "not run; its reason is listed below the tables and in atlas.csv.",
    "",
  ]
  for name in dataset_names(config):
    d = config.data[name]
    b = d.base
    parts += [
      f"## {d.label}",
      "",
      f"N = {b.num_clients} clients, {b.clients_per_round} per round, {b.rounds} rounds, "
      f"{b.local_steps} local steps of batch {b.batch_size}, shared client lr {b.client_lr} "
      f"(decay {b.lr_decay} per round), evaluation every {b.eval_every} rounds; target "
      f"accuracy {100 * float(d.target_accuracy):g} %.",
      "",
    ]
    for panel in _list(config.panels, "panels", list(PANELS)):
      fixed = (
        f"aggregator {config.reference_aggregator}"
        if panel == "selection"
        else f"selection {config.reference_selection} among the available clients"
      )
      for metric in METRICS:
        header, table = panel_table(rows, name, panel, metric, int(b.rounds))
        parts.append(results.markdown_table(header, table, f"{panel} panel ({fixed}): {metric[1]}"))
      reference = (
        config.reference_selection if panel == "selection" else config.reference_aggregator
      )
      for against, what in (("reference", reference), ("best", "the row's best")):
        header, table = effect_table(rows, name, panel, against, reference)
        title = (
          f"{panel} panel: final test accuracy minus {what}'s (points), paired by seed: "
          "mean [95 % interval] p; * p < 0.05"
        )
        parts.append(results.markdown_table(header, table, title))
    same = {}
    for r in rows:
      if r["dataset"] == name and r["status"].startswith("same as "):
        same.setdefault(r["availability"], r["status"][len("same as ") :])
    if same:
      parts += ["Availability models that are the same experiment as another here (not run):", ""]
      parts += [
        f"- {av}: same as {other} (every round of every seed)" for av, other in same.items()
      ]
      parts.append("")
    skipped = {}
    for r in rows:
      if r["dataset"] == name and not _measured(r) and not r["status"].startswith("same as"):
        skipped.setdefault((r["selection"], r["aggregator"], r["availability"]), r)
    if skipped:
      parts += ["Cells that did not run:", ""]
      for (s, a, av), r in skipped.items():
        parts.append(f"- {s} + {a} under {av}: {r['status']}: {r['reason']}")
      parts.append("")
  text = "\n".join(parts)
  results.atomic_write_text(path, text)
  return text


def plot_heatmap(
  rows: list[dict], config: ml_collections.ConfigDict, dataset: str, panel: str, path: str
) -> None:
  """Final test accuracy minus the panel reference's (uniform / FedAvg) under the same
  availability, in percentage points: annotated cells, a diverging colormap centred on 0,
  negative cells hatched (readable in grayscale), cells that did not run marked n/a."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  reference = config.reference_selection if panel == "selection" else config.reference_aggregator
  mine, method_key, methods, every = _panel(rows, dataset, panel)
  same = {av: _same_as([r for r in mine if r["availability"] == av]) for av in every}
  avails = [av for av in every if not same[av]]
  rounds = int(config.data[dataset].base.rounds)
  effect = config.get("heatmap", "difference") == "effect_size"
  marks = {}

  def mean(av, m):
    s = _stats(
      [r for r in mine if r["availability"] == av and r[method_key] == m],
      "final_test_accuracy",
      rounds,
    )
    return None if s is None else s[0]

  grid = np.full((len(avails), len(methods)), np.nan)
  for i, av in enumerate(avails):
    ref = mean(av, reference)
    ref_seeds = _by_seed(
      [r for r in mine if r["availability"] == av and r[method_key] == reference]
    )
    for j, m in enumerate(methods):
      v = mean(av, m)
      if v is None or ref is None:
        continue
      m_seeds = _by_seed([r for r in mine if r["availability"] == av and r[method_key] == m])
      e = stats_lib.paired(m_seeds, ref_seeds)
      marks[i, j] = "*" if m != reference and e.significant() else ""
      if effect:
        grid[i, j] = 0.0 if m == reference else stats_lib.effect_size(m_seeds, ref_seeds)
      else:
        grid[i, j] = 100 * (v - ref)
  lim = float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0
  lim = max(lim, 0.5)
  fig, ax = plt.subplots(figsize=(1.0 + 0.9 * len(methods), 1.2 + 0.45 * len(avails)))
  cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="#e0e0e0")
  im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-lim, vmax=lim, aspect="auto")
  for i in range(len(avails)):
    for j in range(len(methods)):
      v = grid[i, j]
      if not np.isfinite(v):
        ax.add_patch(
          plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="xx", ec="#909090", lw=0)
        )
        ax.text(j, i, "n/a", ha="center", va="center", fontsize=7)
        continue
      if v < 0:
        ax.add_patch(
          plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", ec="#606060", lw=0)
        )
      dark = abs(v) > 0.6 * lim
      ax.text(
        j,
        i,
        (f"{v:+.1f}".replace("-", "\u2212") + marks.get((i, j), "")),
        ha="center",
        va="center",
        fontsize=7,
        color="white" if dark else "black",
        fontweight="bold" if methods[j] != reference else "normal",
      )
  ax.set_xticks(range(len(methods)), methods, rotation=45, ha="right", fontsize=8)
  ax.set_yticks(range(len(avails)), avails, fontsize=8)
  ax.set_xlabel(f"{method_key} ({panel} panel)")
  ax.set_ylabel("availability model")
  bar = fig.colorbar(im, ax=ax, shrink=0.8)
  if effect:
    bar.set_label(f"effect size d_z vs {reference} (paired by seed); * p < 0.05")
  else:
    bar.set_label(f"final test accuracy − {reference}'s (pp); hatched: worse; * p < 0.05")
  title = f"{config.data[dataset].label}: {panel} panel"
  same_rows = [f"{av} = {same[av]}" for av in every if same[av]]
  if same_rows:
    title += f"\n(not shown, the same experiment here: {', '.join(same_rows)})"
  ax.set_title(title, fontsize=9)
  results.save_figure(fig, path)
  plt.close(fig)


def run_study(
  config: ml_collections.ConfigDict,
  output_dir: str,
  seeds: list[int],
  *,
  resume: bool = True,
  reuse: tuple[str, ...] = (),
) -> dict:
  """Runs every cell of every dataset for every seed; writes atlas.csv, atlas.md, heatmaps.
  ``reuse``: folders of atlas runs (e.g. results/atlas/fashion_mnist) whose finished runs
  with this atlas's settings are copied in instead of run (``--reuse``)."""
  os.makedirs(output_dir, exist_ok=True)
  outcomes = {
    name: run_dataset(config, name, output_dir, seeds, resume, tuple(reuse))
    for name in dataset_names(config)
  }
  rows = atlas_rows(config, outcomes, seeds)
  write_csv(os.path.join(output_dir, "atlas.csv"), rows)
  md = write_markdown(os.path.join(output_dir, "atlas.md"), config, rows, seeds)
  figures = []
  for name in dataset_names(config):
    for panel in _list(config.panels, "panels", list(PANELS)):
      path = os.path.join(output_dir, f"heatmap_{name}_{panel}.png")
      plot_heatmap(rows, config, name, panel, path)
      figures.append(path)
  return {"rows": rows, "markdown": md, "figures": figures, "outcomes": outcomes}


# ----------------------------------------------------------------------------- binary

_DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "atlas.py")
FLAGS = flags.FLAGS


def define_flags() -> None:
  """The binary's flags (defined in ``__main__`` only, so importing this module is safe)."""
  common.define_study_flags(_DEFAULT_CONFIG)
  flags.DEFINE_string(
    "reuse",
    "",
    "comma-separated folders of atlas runs (cells/<dataset>/<cell>/seed<k>/, e.g. "
    "results/atlas/fashion_mnist): every run there with this atlas's settings is taken "
    "instead of run; one with other shared settings is refused",
  )


def reuse_folders() -> tuple[str, ...]:
  """The ``--reuse`` folders, each checked to hold atlas cells.

  Raises:
    ValueError: a folder without ``cells/``, named with what is allowed.
  """
  out = tuple(p.strip() for p in FLAGS.reuse.split(",") if p.strip()) if "reuse" in FLAGS else ()
  for folder in out:
    if not os.path.isdir(os.path.join(folder, "cells")):
      raise ValueError(
        f"--reuse={folder!r} holds no cells/ folder; allowed: a folder of atlas runs, "
        "e.g. results/atlas/fashion_mnist"
      )
  return out


def check_config(argv) -> tuple[ml_collections.ConfigDict, list[int]]:
  """The binary's flags and config, checked before anything runs: ``(config, seeds)``."""
  reuse_folders()
  return common.check_study(argv, prepare_config, strict_configs)


def main(argv):
  study = functools.partial(run_study, reuse=reuse_folders()) if "reuse" in FLAGS else run_study
  common.study_main(argv, check_config, study, "runs/atlas")


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=common.parse_flags)

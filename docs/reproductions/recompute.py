"""Recomputes the derived numbers of the reproduction pages from the committed results.

  python docs/reproductions/recompute.py                 # every paper
  python docs/reproductions/recompute.py fedemd fedgs    # some of them
  python docs/reproductions/recompute.py COMMAND [ARGS]  # one table or figure (below)

Run from the repository root. Reads only ``results/`` (the tables' CSV files and the
committed ``cells/<cell>/seed<k>/{metrics.jsonl,summary.json}``) and trains nothing: every
number a page states that is not printed in a committed table comes from here. Standard
deviations are over seeds with ddof=0, as the study binaries compute them.

The commands print (``--write``: write) the tables and figures that pages and results/
hold; each one's docstring gives its arguments (run it without them to see it):

  fedemd_fig4_table CELLS_DIR [--seed=K] [SCENARIO...]   the FedEMD page's Fig. 4 rows
  fedemd_accuracy_blocks [--blocks=20,...] CELL_DIR...   mean accuracy per block of rounds
  fedemd_fig7 [OUT.png]          results/fedemd_fmnist/supplement/fig7/fig7_seed0.png
  half_precision_curves [FOLDER]  results/half_precision_fmnist/README.md's table
  fl_fdms_process_stats [--write]  results/fl_fdms_fmnist_mlp_markov/process_stats.{md,csv};
                                   simulates the dropout processes (needs jax)
  fedemd_maverick_blocks [--write] [FASHION_MNIST_DIR]  results/fedemd_fmnist/maverick_blocks.md;
                                   replays the cohorts (needs the Fashion-MNIST files, jax)
  fedemd_per_class CELL_DIR...     per_class.md's numbers; needs a run's checkpoints (runs/,
                                   never committed), the dataset and jax
"""

from __future__ import annotations

import csv
import functools
import inspect
import json
import os
import sys

import numpy as np

RESULTS = "results"
# FedEMD: the text's reading with the default lr unit (per round), the text's reading per
# participation, and the first reading (an ablation)
DEFAULT = "fedemd_fmnist/text_reading_lr_per_round_default"
TEXT_PP = "fedemd_fmnist/text_reading_lr_per_participation"
FIRST = "fedemd_fmnist/first_reading_lr_per_participation"


def table(path: str) -> list[dict]:
  with open(f"{RESULTS}/{path}", newline="") as f:
    return list(csv.DictReader(f))


def first(text: str) -> float:
  """``"81.26 ± 0.17"`` -> 81.26; ``">200"`` -> nan."""
  head = text.split("±")[0].strip()
  return float("nan") if head.startswith(">") else float(head)


def md_rows(path: str) -> list[dict]:
  """Rows of every markdown table in a committed .md file, each keyed by its table's header
  (the verdict engine's reader, ``experiments.markdown_tables.markdown_rows``)."""
  repo_imports()
  from experiments.markdown_tables import markdown_rows

  with open(f"{RESULTS}/{path}") as f:
    return markdown_rows(f)


def spread(values) -> str:
  """ "lo-hi" of some numbers, as the pages write a range."""
  return f"{min(values)}-{max(values)}"


def jsonl(path: str) -> list[dict]:
  """The records of a JSON-lines file (``metrics.jsonl``, ``trace.jsonl``), blank lines skipped.

  Not ``fedjax_sel.metrics.results.read_jsonl``: that one forgives a missing file and a torn
  last line (a run in progress), where a committed file must be whole; and importing the
  package would bring in jax, which this script does not need."""
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def summary_of(folder: str) -> dict:
  """The summary.json of one committed cell/seed folder."""
  with open(f"{RESULTS}/{folder}/summary.json") as f:
    return json.load(f)


def cell(folder: str) -> tuple[dict, list[dict]]:
  """(summary, per-evaluation history) of one committed cell/seed folder."""
  return summary_of(folder), jsonl(f"{RESULTS}/{folder}/metrics.jsonl")


def committed_seeds(cell_dir: str) -> list[int]:
  """The seeds of ``results/<cell_dir>/seed<k>/`` that hold a summary.json (sorted; [] when
  the cell has none)."""
  base = f"{RESULTS}/{cell_dir}"
  if not os.path.isdir(base):
    return []
  done = [s for s in os.listdir(base) if os.path.exists(f"{base}/{s}/summary.json")]
  return sorted(int(s.removeprefix("seed")) for s in done)


def mean_std(values) -> str:
  a = np.asarray(values, np.float64)
  return f"{a.mean():.2f} ± {a.std():.2f}"


def rounds_to_reach(history: dict[int, float], target: float) -> int | None:
  """The first evaluated round whose accuracy is >= target (None if none is)."""
  return next((r for r in sorted(history) if history[r] >= target), None)


def r99(history: list[dict], reference: list[dict]) -> int | None:
  """First round reaching 99 % of the reference (Random, same seed) run's best accuracy."""
  target = 0.99 * max(r["test_accuracy"] for r in reference)
  return rounds_to_reach({r["round"]: r["test_accuracy"] for r in history}, target)


def fedgs() -> None:
  rows = table("fedgs_table2/table2_vs_paper.csv")
  methods = list(dict.fromkeys(r["method"] for r in rows))
  modes = list(dict.fromkeys(r["mode"] for r in rows))
  gaps = [abs(float(r["ours - paper"])) for r in rows]
  print(
    f"Synthetic: {sum(g <= 0.02 for g in gaps)} of {len(gaps)} cells within 0.02 of the "
    f"paper, {sum(g <= 0.01 for g in gaps)} within 0.01"
  )
  for key in ("ours", "paper"):
    v = {(r["mode"], r["method"]): float(r[key]) for r in rows}
    print(f"Synthetic, {key}: change of the optimum from IDL (%)")
    for m in methods:
      print(
        f"  {m:16s}",
        "  ".join(f"{mo} {100 * (v[mo, m] / v['IDL', m] - 1):+.1f}" for mo in modes[1:]),
      )
    for mo in modes:
      best = min(methods, key=lambda m, mo=mo: v[mo, m])
      print(f"  best under {mo}: {best} {v[mo, best]:.4f}")
    fedgs_rows = [m for m in methods if m.startswith("FedGS")]
    best_mdf = min(v["MDF0.7", m] for m in fedgs_rows)
    print(
      f"  MDF0.7, best FedGS {best_mdf:.4f}: "
      f"{100 * (1 - best_mdf / v['MDF0.7', 'UniformSample']):.1f} % below UniformSample, "
      f"{100 * (1 - best_mdf / v['MDF0.7', 'MDSample']):.1f} % below MDSample"
    )
    print(
      f"  Power-of-Choice / UniformSample under IDL: "
      f"{v['IDL', 'Power-of-Choice'] / v['IDL', 'UniformSample']:.2f}x"
    )

  fedgs_fmnist("fedgs_fmnist/rounds500/table2_vs_paper.csv", "fedgs_fmnist/cells", "ablation")
  released = "fedgs_table2/fashion_mnist"
  # the study runs two one-device lanes side by side (--lanes=2, experiments/grid.py)
  fedgs_fmnist(f"{released}/table2_vs_paper_seed0.csv", f"{released}/cells", "released", 2)
  fedgs_fmnist_step2(f"{released}/table2_vs_paper_seed0.csv", f"{released}/cells")
  fedgs_synthetic_rows()
  fedgs_table3_table4()


def fmnist_cell_line(s: dict, h: list[dict]) -> str:
  """One Fashion-MNIST Table 2 run: optimum (round), accuracy at the last evaluation (best),
  the fluctuation over rounds 251-500, the sampling counts and the clients available."""
  opt = min(h, key=lambda r: r["test_loss"])
  acc = {r["round"]: 100 * r["test_accuracy"] for r in h}
  late = [r["test_loss"] for r in h if r["round"] > 250]
  counts = np.asarray(s["sampling_counts"])
  available = np.mean([r["num_available_mean"] for r in h])
  return (
    f"{opt['test_loss']:.4f} (r. {opt['round']}), {acc[max(acc)]:.2f} ({max(acc.values()):.2f}), "
    f"{np.mean(np.abs(np.diff(late))):.3f}, {counts.min()}-{counts.max()} "
    f"(std {counts.std():.1f}), available per round {available:.1f}"
  )


# The paper's Table 2, Fashion-MNIST column (IDL, YMF0.9, YC0.9), for the rows that
# the study's step 2 (Power-of-Choice and FedProx, seed 0) adds to the four of step 1.
PAPER_FMNIST_STEP2 = {"power_of_choice": (0.345, 0.326, 0.311), "fedprox": (0.315, 0.331, 0.374)}


def fedgs_fmnist_step2(tables_csv: str, cells: str) -> None:
  """Power-of-Choice and FedProx, seed 0, the released protocol (the chain's step 2), from
  each committed run: its line as the four rows' (optimum, accuracy, fluctuation, counts)
  with the paper's optimum beside it and the run's seconds per round; their changes from
  IDL; the count within 0.02 of the paper with step 1's twelve cells (``tables_csv``); then,
  per mode, the best optimum of every committed row of seed 0."""
  modes = ("idl", "ymf", "yc")
  diffs = [float(r["ours - paper"]) for r in table(tables_csv)]
  opts = {}  # (method, mode): the committed run's optimum
  for method, paper in PAPER_FMNIST_STEP2.items():
    for mode, ref in zip(modes, paper):
      folder = f"{cells}/fashion_mnist-{mode}-{method}"
      if 0 not in committed_seeds(folder):
        print(f"  step 2, {mode}, {method}: not committed yet (paper {ref:.3f})")
        continue
      s, h = cell(f"{folder}/seed0")
      opts[method, mode] = min(r["test_loss"] for r in h)
      diffs.append(opts[method, mode] - ref)
      print(
        f"  step 2, {mode}, {method}: {fmnist_cell_line(s, h)}; paper {ref:.3f}, ours - paper "
        f"{opts[method, mode] - ref:+.4f}; {s['seconds_per_round']:.2f} s per round"
      )
  for method, paper in PAPER_FMNIST_STEP2.items():
    for mode, name, ref in zip(modes[1:], ("YMF0.9", "YC0.9"), paper[1:]):
      if (method, "idl") in opts and (method, mode) in opts:
        print(
          f"  step 2, {method}: IDL->{name} "
          f"{100 * (opts[method, mode] / opts[method, 'idl'] - 1):+.1f} % "
          f"(paper {100 * (ref / paper[0] - 1):+.1f} %)"
        )
  print(
    f"  seed 0 with step 2's committed runs: {sum(abs(d) <= 0.02 for d in diffs)} of "
    f"{len(diffs)} cells within 0.02 of the paper; ours - paper from {min(diffs):+.3f} to "
    f"{max(diffs):+.3f}"
  )
  for mode in ("idl", "ymf", "yc"):
    best = {}
    for folder in sorted(os.listdir(f"{RESULTS}/{cells}")):
      if folder.startswith(f"fashion_mnist-{mode}-") and 0 in committed_seeds(f"{cells}/{folder}"):
        _, h = cell(f"{cells}/{folder}/seed0")
        best[folder.split("-", 2)[2]] = min(r["test_loss"] for r in h)
    ranked = sorted(best.items(), key=lambda kv: kv[1])
    print(
      f"  seed 0, {mode}: the committed rows by optimum: "
      + ", ".join(f"{m} {v:.4f}" for m, v in ranked)
    )


def fedgs_fmnist(tables_csv: str, cells: str, label: str, lanes: int = 1) -> None:
  """Table 2's Fashion-MNIST column, seed 0, from its committed table and per-round files:
  the gaps to the paper, the change of each optimum from IDL, the best row of each mode, and
  per cell the optimum, the accuracy, the late fluctuation and the sampling counts."""
  rows = table(tables_csv)
  gaps = [abs(float(r["ours - paper"])) for r in rows]
  diffs = [float(r["ours - paper"]) for r in rows]
  print(
    f"Fashion-MNIST ({label}), 500 rounds: {sum(g <= 0.02 for g in gaps)} of {len(gaps)} cells "
    f"within 0.02 of the paper; ours - paper from {min(diffs):+.3f} to {max(diffs):+.3f}"
  )
  values = {
    key: {(r["mode"], r["method"]): float(r[key]) for r in rows} for key in ("ours", "paper")
  }
  for key, v in values.items():
    for m in dict.fromkeys(r["method"] for r in rows):
      print(
        f"  {key:5s} {m:16s}",
        "  ".join(
          f"IDL->{mo} {100 * (v[mo, m] / v['IDL', m] - 1):+.1f} %" for mo in ("YMF0.9", "YC0.9")
        ),
      )
  print(
    f"Fashion-MNIST cells ({label}), seed 0: optimum (round), accuracy at 500 (best), fluctuation "
    "= mean |change of test loss| between evaluations in rounds 251-500, sampling counts"
  )
  per_round = []
  for mode in ("idl", "ymf", "yc"):
    for method in ("uniform", "md", "fedgs_a0", "fedgs_a1"):
      s, h = cell(f"{cells}/fashion_mnist-{mode}-{method}/seed0")
      per_round.append(s["seconds_per_round"] / s.get("experiments_in_program", 1))
      print(f"  {mode:3s} {method:8s} {fmnist_cell_line(s, h)}")
  print(
    f"Fashion-MNIST cells ({label}), seed 0: {min(per_round):.2f}-{max(per_round):.2f} s per "
    "run and round (seconds_per_round / experiments_in_program)"
  )
  print(
    f"Fashion-MNIST cells ({label}), seed 0: a 500-round run {500 * min(per_round) / 60:.1f}-"
    f"{500 * max(per_round) / 60:.1f} min, the {len(per_round)} runs of the seed "
    f"{500 * sum(per_round) / 3600:.1f} h; nine rows x three modes x three seeds, 81 runs, at "
    f"their mean rate {81 * 500 * np.mean(per_round) / 3600:.0f} h"
  )
  if lanes > 1:
    print(
      f"  {label}: {lanes} runs side by side, the seed's {len(per_round)} runs "
      f"{500 * sum(per_round) / 3600 / lanes:.1f} h on the clock"
    )
  v = values["ours"]
  for mo in dict.fromkeys(r["mode"] for r in rows):
    ranked = sorted((v[mo, m], m) for m in dict.fromkeys(r["method"] for r in rows))
    print(f"  {label}, best under {mo}: " + ", ".join(f"{m} {x:.4f}" for x, m in ranked[:2]))


def fedgs_synthetic_rows() -> None:
  """Table 2, Synthetic: the FedGS rows' spread over α and the paper's FedProx vs MDSample."""
  rows = table("fedgs_table2/table2_vs_paper.csv")
  v = {(r["mode"], r["method"], k): float(r[k]) for r in rows for k in ("ours", "paper")}
  modes = list(dict.fromkeys(r["mode"] for r in rows))
  fedgs = [m for m in dict.fromkeys(r["method"] for r in rows) if m.startswith("FedGS")]
  for key in ("ours", "paper"):
    idl = [v["IDL", m, key] for m in fedgs]
    print(f"Synthetic, {key}: FedGS under IDL {min(idl):.3f}-{max(idl):.3f} over the five α")
  moved = [
    max(v[mo, m, "ours"] for m in fedgs) - min(v[mo, m, "ours"] for m in fedgs) for mo in modes
  ]
  print(f"Synthetic, ours: α moves every FedGS row by at most {max(moved):.3f} (table2.csv)")
  print(
    "Synthetic, paper: FedProx μ=0.01 - MDSample: "
    + ", ".join(
      f"{mo} {v[mo, 'FedProx μ=0.01', 'paper'] - v[mo, 'MDSample', 'paper']:+.3f}" for mo in modes
    )
  )


def fedgs_table3_table4() -> None:
  syn = next(r for r in table("fedgs_table2/table3.csv") if r["Dataset"].startswith("Synthetic"))
  print(
    f"Table 3, Synthetic: {100 * first(syn['Precision']):.1f} % of all client pairs are oracle "
    f"edges (the precision of a complete graph), F1 {first(syn['F1-Score']):.3f}"
  )
  rows = table("fedgs_table2/table4.csv")
  for j, key in ((1, "FedGS_functional"), (2, "FedGS_cosine")):
    ours = {r["Mode"]: first(r[key]) - first(r["FedGS (oracle 3DG)"]) for r in rows}
    paper = {}
    for r in rows:
      oracle_func_cos = [float(x) for x in r["paper (oracle / func / cos)"].split("/")]
      paper[r["Mode"]] = oracle_func_cos[j] - oracle_func_cos[0]
    for who, diffs in (("ours", ours), ("paper", paper)):
      print(
        f"Table 4, {who}, {key} - oracle 3DG: "
        + ", ".join(f"{m} {d:+.3f}" for m, d in diffs.items())
        + f"; largest |difference| {max(abs(d) for d in diffs.values()):.3f}"
      )


def fl_fdms() -> None:
  # Theorem 2's threshold with the study's constants (experiments/configs/fl_fdms.py and
  # experiments/fl_fdms.py): K = 20 clients, T = 200 rounds, B_max = 3, p = 0.05,
  # beta = (1 - alpha)^2; Theta_t = sqrt((2 ln(2 K^2 T B_max) - 2 ln p) / (beta t)).
  numerator = 2 * np.log(2 * 20**2 * 200 * 3) - 2 * np.log(0.05)
  for a in (0.3, 0.5, 0.7):
    beta = (1 - a) ** 2
    first_case1 = int(np.ceil(numerator / beta))
    first_case2 = int(np.ceil(numerator / (4 * beta)))
    print(
      f"α={a}: Theta_t <= 1 from round {first_case1}, 0.5 Theta_t <= 1 from round "
      f"{first_case2} (a gap in the similarity score [0, 1] can exceed it only then)"
    )
  acc = {r["method"]: r for r in table("fl_fdms_fmnist_mlp/accuracy.csv")}
  conv = {r["method"]: r for r in table("fl_fdms_fmnist_mlp/convergence.csv")}
  for a in ("0.3", "0.5", "0.7"):
    final = {m: first(r[f"α={a}: final test acc (%)"]) for m, r in acc.items()}
    speed = {m: first(r[f"α={a}: mean test acc over rounds (%)"]) for m, r in conv.items()}
    print(
      f"α={a}: FL-FDMS - Dropout: final {final['FL-FDMS'] - final['Dropout']:+.2f}, "
      f"mean acc {speed['FL-FDMS'] - speed['Dropout']:+.2f}; "
      f"FL-FDMS - Stale: final {final['FL-FDMS'] - final['Stale']:+.2f}, "
      f"mean acc {speed['FL-FDMS'] - speed['Stale']:+.2f}; "
      f"Full - FL-FDMS: final {final['Full'] - final['FL-FDMS']:+.2f}, "
      f"mean acc {speed['Full'] - speed['FL-FDMS']:+.2f}"
    )
  fl_fdms_more()
  fl_fdms_markov()
  fl_fdms_general()


def seed_means(path: str, column: str) -> dict[str, float]:
  """{method: seed mean} of one column of a committed study table."""
  return {r["method"]: first(r[column]) for r in table(path)}


def fl_fdms_markov() -> None:
  """The Markov process against the redrawn one, and its two diagnostic runs (α = 0.7)."""
  final, mean = "α={}: final test acc (%)", "α={}: mean test acc over rounds (%)"
  markov = "fl_fdms_fmnist_mlp_markov"
  for a in ("0.3", "0.5", "0.7"):
    full = {
      "final": seed_means("fl_fdms_fmnist_mlp/accuracy.csv", final.format(a))["Full"],
      "mean": seed_means("fl_fdms_fmnist_mlp/convergence.csv", mean.format(a))["Full"],
    }
    fdms = seed_means(f"{markov}/accuracy.csv", final.format(a))["FL-FDMS"]
    fdms_mean = seed_means(f"{markov}/convergence.csv", mean.format(a))["FL-FDMS"]
    stale = (
      seed_means("fl_fdms_fmnist_mlp/convergence.csv", mean.format(a))["Stale"],
      seed_means(f"{markov}/convergence.csv", mean.format(a))["Stale"],
    )
    print(
      f"Markov, α={a}: Full (the redrawn study's run) - FL-FDMS: final "
      f"{full['final'] - fdms:+.2f}, mean acc {full['mean'] - fdms_mean:+.2f}; Stale's mean acc "
      f"redrawn → Markov {stale[0]:.2f} → {stale[1]:.2f} (loses {stale[0] - stale[1]:.2f})"
    )
  kept = f"{markov}/assumption5_alpha0.7/convergence.csv"
  moved = {}
  for m in ("Stale", "FL-FDMS"):
    before = seed_means(f"{markov}/convergence.csv", mean.format("0.7"))[m]
    moved[m] = (before, seed_means(kept, mean.format("0.7"))[m])
    print(
      f"Markov, α=0.7, one client per cluster kept, {m}: mean acc {moved[m][0]:.2f} → "
      f"{moved[m][1]:.2f} ({moved[m][1] - moved[m][0]:+.2f})"
    )
  column = "α=0.7: mean acc over rounds (pp)"
  gap = [
    float(
      next(r for r in table(f"{folder}/differences.csv") if r["comparison"] == "FL-FDMS − Stale")[
        column
      ]
    )
    for folder in (markov, f"{markov}/assumption5_alpha0.7")
  ]
  print(
    f"Markov, α=0.7: FL-FDMS - Stale mean acc {gap[0]:+.2f} → {gap[1]:+.2f} with one client per "
    f"cluster kept (differences.csv): {100 * (1 - gap[1] / gap[0]):.0f} % of the gap is friend "
    "presence"
  )
  floor = f"{markov}/min_similarity_alpha0.7"
  for name, path, column in (
    ("final", "accuracy.csv", final),
    ("mean acc", "convergence.csv", mean),
  ):
    v = seed_means(f"{floor}/{path}", column.format("0.7"))
    floored = next(k for k in v if "floor" in k)
    print(
      f"Markov, α=0.7: the similarity floor moves FL-FDMS's {name} by "
      f"{v[floored] - v['FL-FDMS']:+.2f}"
    )


METHODS_GENERAL = ("dropout", "stale", "fdms")


def fl_fdms_general() -> None:
  """The general non-iid setting (2 classes per client) against the clustered one, under each
  dropout process: FL-FDMS's gain over Dropout and Stale per α, per seed and as seed means
  (the α whose cells are all committed)."""
  final, mean = "α={}: final test acc (%)", "α={}: mean test acc over rounds (%)"
  for general, clustered_folder, label_process in (
    ("fl_fdms_fmnist_mlp_general", "fl_fdms_fmnist_mlp", "general"),
    ("fl_fdms_fmnist_mlp_general_markov", "fl_fdms_fmnist_mlp_markov", "general, Markov"),
  ):
    for a in ("0.3", "0.5", "0.7"):
      done = [set(committed_seeds(f"{general}/cells/alpha{a}_{m}")) for m in METHODS_GENERAL]
      seeds = sorted(set.intersection(*done))
      if not seeds:
        continue
      per_seed = {}
      for m in METHODS_GENERAL:
        runs = [cell(f"{general}/cells/alpha{a}_{m}/seed{k}") for k in seeds]
        per_seed[m] = (
          final_accuracies(runs),
          [100 * np.mean([r["test_accuracy"] for r in h]) for _, h in runs],
        )
      for base, label in (("dropout", "Dropout"), ("stale", "Stale")):
        gain = [
          np.subtract(per_seed["fdms"][i], per_seed[base][i]) for i in range(2)
        ]  # [final, mean] per seed
        clustered = [
          seed_means(f"{clustered_folder}/{path}", col.format(a))
          for path, col in (("accuracy.csv", final), ("convergence.csv", mean))
        ]
        c_gain = [t["FL-FDMS"] - t[label] for t in clustered]
        g_gain = [float(np.mean(g)) for g in gain]
        seeds_text = " / ".join(f"{v:+.2f}" for v in gain[1])
        print(
          f"{label_process}, α={a}, FL-FDMS - {label} (seeds {seeds}): final {g_gain[0]:+.2f}, "
          f"mean acc {g_gain[1]:+.2f} (per seed {seeds_text}); clustered: final "
          f"{c_gain[0]:+.2f}, mean acc {c_gain[1]:+.2f}; general - clustered: final "
          f"{g_gain[0] - c_gain[0]:+.2f}, mean acc {g_gain[1] - c_gain[1]:+.2f}"
        )


def fl_fdms_more() -> None:
  """Sensitivity to α and the oracle friend under the redrawn process."""
  acc = {r["method"]: r for r in table("fl_fdms_fmnist_mlp/accuracy.csv")}
  conv = {r["method"]: r for r in table("fl_fdms_fmnist_mlp/convergence.csv")}
  for m in ("Stale", "FL-FDMS", "Dropout"):
    final = [first(acc[m][f"α={a}: final test acc (%)"]) for a in ("0.3", "0.7")]
    speed = [first(conv[m][f"α={a}: mean test acc over rounds (%)"]) for a in ("0.3", "0.7")]
    print(
      f"redrawn, {m}: lost from α=0.3 to 0.7: final {final[0] - final[1]:.2f}, "
      f"mean acc {speed[0] - speed[1]:.2f} points"
    )
  oacc = {r["method"]: r for r in table("fl_fdms_fmnist_mlp_oracle/accuracy.csv")}
  oconv = {r["method"]: r for r in table("fl_fdms_fmnist_mlp_oracle/convergence.csv")}
  oracle = next(m for m in oacc if "oracle" in m)
  for a in ("0.3", "0.5", "0.7"):
    fcol, scol = f"α={a}: final test acc (%)", f"α={a}: mean test acc over rounds (%)"
    o_final, o_speed = first(oacc[oracle][fcol]), first(oconv[oracle][scol])
    print(
      f"redrawn, α={a}: oracle friend - Stale (the tables' rounded means): final "
      f"{o_final - first(acc['Stale'][fcol]):+.2f}, mean acc "
      f"{o_speed - first(conv['Stale'][scol]):+.2f}"
    )
  for row in table("fl_fdms_fmnist_mlp_oracle/differences.csv"):
    print("redrawn, " + ", ".join(f"{k} {v}" for k, v in row.items()))
  # one client per cluster kept (Assumption 5), Markov: which method loses least
  with open(f"{RESULTS}/fl_fdms_fmnist_mlp_markov/assumption5/sensitivity.csv", newline="") as f:
    for method, final, final_loss, speed, speed_loss in list(csv.reader(f))[1:]:
      print(
        f"Markov, one client per cluster kept, {method}: lost from α=0.3 to 0.7: final "
        f"{final_loss} ({final}), mean acc {speed_loss} ({speed})"
      )


def fedemd_first_reading() -> None:
  # Seed 0 of Table 1's cells is not committed: its values come from the seed-0 tables.
  seed0 = {
    "R@99": {r["method"]: first(r["1 excl"]) for r in table(f"{FIRST}/table1/r99.csv")},
    "final": {r["method"]: first(r["1 excl"]) for r in table(f"{FIRST}/table1/final_accuracy.csv")},
    "share": {r["method"]: first(r["1 excl"]) for r in table(f"{FIRST}/table1/maverick_share.csv")},
  }
  per_seed = {(m, k): [seed0[k][m]] for m in ("Random", "FedEMD") for k in seed0}
  for seed in (1, 2):
    _, ref = cell(f"{FIRST}/table1/cells/1_excl_random/seed{seed}")
    for name, key in (("Random", "random"), ("FedEMD", "fedemd")):
      s, h = cell(f"{FIRST}/table1/cells/1_excl_{key}/seed{seed}")
      reached = r99(h, ref)
      counts = s["sampling_counts"]
      per_seed[name, "R@99"].append(float("nan") if reached is None else reached)
      per_seed[name, "final"].append(100 * s["final_test_accuracy"])
      per_seed[name, "share"].append(100 * counts[0] / sum(counts))
      blocks = [
        100 * np.mean([r["test_accuracy"] for r in h[i : i + 10]]) for i in range(0, 200, 10)
      ]
      print(
        f"Table 1, seed {seed}, {name}: R@99 {reached}, best "
        f"{100 * max(r['test_accuracy'] for r in h):.2f}, mean accuracy per 10 rounds: "
        + " ".join(f"{b:.1f}" for b in blocks)
      )
  for name in ("Random", "FedEMD"):
    r = np.asarray(per_seed[name, "R@99"])
    reached = r[~np.isnan(r)]
    text = mean_std(reached) if reached.size else ">200"
    print(
      f"Table 1, seeds 0-2, {name}: R@99 {text} ({reached.size} of 3 seeds reach it), "
      f"final {mean_std(per_seed[name, 'final'])} %, "
      f"Maverick share {mean_std(per_seed[name, 'share'])} %"
    )
  for folder, scenario in ((f"{FIRST}/table1", "1_excl"), (f"{FIRST}/fig4", "2_excl")):
    rows = table(f"{folder}/participation.csv")
    cum = {k: [int(r[k]) for r in rows] for k in ("Random", "FedEMD")}
    for k, c in cum.items():
      print(
        f"{scenario}, seed 0, {k}: Maverick picks in rounds 1-50 {c[49]}, "
        f"51-100 {c[99] - c[49]}, 101-200 {c[199] - c[99]}"
      )
  for scenario, seed in (
    ("2_excl", 0),
    ("2_excl", 1),
    ("3_excl", 0),
    ("2_shared", 0),
    ("3_shared", 0),
  ):
    _, ref = cell(f"{FIRST}/fig4/cells/{scenario}_random/seed{seed}")
    for key in ("random", "fedemd"):
      s, h = cell(f"{FIRST}/fig4/cells/{scenario}_{key}/seed{seed}")
      accs = np.asarray([r["test_accuracy"] for r in h])
      k = int(scenario[0])
      counts = np.asarray(s["sampling_counts"])
      print(
        f"Fig. 4, {scenario}, seed {seed}, {key}: R@99 {r99(h, ref)}, best "
        f"{100 * accs.max():.2f} (r. {h[int(accs.argmax())]['round']}), final "
        f"{100 * s['final_test_accuracy']:.2f}, Maverick share "
        f"{100 * counts[:k].sum() / counts.sum():.1f} %, mean accuracy per 20 rounds: "
        + " ".join(f"{100 * b:.1f}" for b in accs.reshape(-1, 20).mean(1))
      )


def counts_of(summary: dict) -> np.ndarray:
  """Selections per client; some summaries store the list as a JSON string."""
  c = summary["sampling_counts"]
  return np.asarray(json.loads(c) if isinstance(c, str) else c, np.int64)


def accuracies(history: list[dict]) -> np.ndarray:
  """f64[rounds]: test accuracy (%) at rounds 1..T (the FedEMD cells evaluate every round)."""
  assert [r["round"] for r in history] == list(range(1, len(history) + 1))
  return 100 * np.asarray([r["test_accuracy"] for r in history], np.float64)


# Fig. 4's scenarios, in the order of the page's table
FIG4_SCENARIOS = ("2_excl", "3_excl", "2_shared", "3_shared")
# the page's block tables: 10-round blocks to round 60, then 20-round blocks
BLOCKS = [(a, a + 9) for a in range(1, 60, 10)] + [(a, a + 19) for a in range(61, 200, 20)]


def blocks(acc: np.ndarray, spans=BLOCKS) -> str:
  return " / ".join(f"{acc[a - 1 : b].mean():.1f}" for a, b in spans)


def seconds_of(summaries: list[dict]) -> float:
  """Wall time of the cells' programs (cells run together share one program's seconds)."""
  return sum(s["seconds"] / s.get("experiments_in_program", 1) for s in summaries)


def fedemd_text_table1(folder: str, unit: str) -> None:
  """Table 1 under the text's reading (D_c from distributions, size weights), one lr unit."""
  reached = {"random": [], "fedemd": []}
  final = {"random": [], "fedemd": []}
  summaries = []
  for seed in (0, 1, 2):
    cells = {m: cell(f"{folder}/cells/1_excl_{m}/seed{seed}") for m in ("random", "fedemd")}
    acc = {m: accuracies(h) for m, (_, h) in cells.items()}
    target = 0.99 * acc["random"].max()
    for m, (summary, _) in cells.items():
      summaries.append(summary)
      a = acc[m]
      hit = np.flatnonzero(a >= target)
      reached[m].append(int(hit[0]) + 1 if hit.size else None)
      final[m].append(a[-1])
      print(
        f"Table 1, {unit}, seed {seed}, {m}: R@99 {reached[m][-1] or '> 200'} (target "
        f"{target:.2f}), best {a.max():.2f} (round {int(a.argmax()) + 1}), final {a[-1]:.2f}, "
        f"best of rounds 1-100 {a[:100].max():.2f}, round 20 {a[19]:.1f}, Maverick picks "
        f"{counts_of(summary)[0]} of {counts_of(summary).sum()}"
      )
      print(f"  mean accuracy per block {BLOCKS[0][0]}-{BLOCKS[-1][1]}: {blocks(a)}")
    ahead = np.flatnonzero(acc["fedemd"] > acc["random"]) + 1
    print(
      f"  FedEMD ahead of Random in {ahead.size} of 200 evaluations, the last at round "
      f"{ahead.max() if ahead.size else None}; the target minus FedEMD's best "
      f"{target - acc['fedemd'].max():.2f} points"
    )
  for m in ("random", "fedemd"):
    r = [x for x in reached[m] if x is not None]
    text = mean_std(r) if r else "> 200"
    print(
      f"Table 1, {unit}, seeds 0-2, {m}: R@99 {text} ({len(r)} of 3 seeds reach it), "
      f"final {mean_std(final[m])} %"
    )
  print(
    f"Table 1, {unit}, seeds 0-2: FedEMD - Random final accuracy (seed means) "
    f"{np.mean(final['fedemd']) - np.mean(final['random']):+.2f}"
  )
  print(
    f"Table 1, {unit}: the six cells took {seconds_of(summaries) / 3600:.1f} h; per program "
    "(seconds, cells in it), Random seed 0, FedEMD seed 0, Random seeds 1-2, FedEMD seeds 1-2: "
    + ", ".join(
      f"{summaries[i]['seconds']:.0f} s ({summaries[i].get('experiments_in_program', 1)})"
      for i in (0, 1, 2, 3)
    )
  )


# Table 1's Fashion-MNIST row in the paper: R@99 per aggregation and method (SVB: Sec. 5.1)
TABLE1_PAPER = {
  "FedSGD": {
    "random": "144.0",
    "tifl": "140.3",
    "fedfast": "> 200",
    "fedprox": "135.7",
    "fedemd": "131.3",
  },
  "FedAvg": {
    "random": "110.7",
    "tifl": "146.3",
    "fedfast": "> 200",
    "fedprox": "92.0",
    "fedemd": "79.7",
    "shapley": "> 200",
  },
}


def fedemd_r99_line(
  label: str, cell_dir: str, random_dir: str, paper: str = "", mavericks: int = 1
) -> None:
  """One method's committed seeds that have Random's cell of the same seed: R@99 per seed
  against that Random's best, the mean ± std over the seeds that reach it, best (round),
  final accuracy and the picks of the Mavericks (clients 0 .. mavericks - 1)."""
  with_random = set(committed_seeds(random_dir))
  seeds = [s for s in committed_seeds(cell_dir) if s in with_random]
  paper = f"; paper {paper}" if paper else ""
  if not seeds:
    print(f"{label}: no committed seed{paper}")
    return
  reached, best, final, picks = [], [], [], []
  for seed in seeds:
    summary, history = cell(f"{cell_dir}/seed{seed}")
    _, reference = cell(f"{random_dir}/seed{seed}")
    reached.append(r99(history, reference))
    a = accuracies(history)
    best.append(f"{a.max():.2f} ({int(a.argmax()) + 1})")
    final.append(a[-1])
    picks.append(str(counts_of(summary)[:mavericks].sum()))
  hit = [r for r in reached if r is not None]
  print(
    f"{label}, seeds {', '.join(map(str, seeds))}: R@99 "
    + " / ".join(str(r) if r is not None else "> 200" for r in reached)
    + f", mean {mean_std(hit) if hit else '> 200'} ({len(hit)} of {len(seeds)} seeds reach "
    f"it{paper}); best (round) {' / '.join(best)}; final "
    f"{' / '.join(f'{x:.2f}' for x in final)} %, mean {mean_std(final)} %; "
    f"Maverick picks {' / '.join(picks)} of 1000"
  )


def table1_cell(setup: str, method: str) -> str:
  """The committed cell folder of a Table 1 method (the default set-up): FedAvg's in
  ``table1/``, FedSGD's in ``table1_fedsgd/`` (``_fedsgd`` cells), SVB's in ``svb/``."""
  if method == "shapley":
    return f"{DEFAULT}/svb/cells/1_excl_shapley"
  if setup == "FedSGD":
    return f"{DEFAULT}/table1_fedsgd/cells/1_excl_{method}_fedsgd"
  return f"{DEFAULT}/table1/cells/1_excl_{method}"


def fedemd_table1_whole() -> None:
  """Table 1's ten cells and SVB as far as they are committed (the default set-up): each
  method's R@99 per seed against Random's best in the same aggregation and seed."""
  for setup, methods in TABLE1_PAPER.items():
    for m, paper in methods.items():
      fedemd_r99_line(
        f"Table 1 whole, {setup}, {m}",
        table1_cell(setup, m),
        table1_cell(setup, "random"),
        paper,
      )


def fedemd_fedsgd_is_plain_mean() -> None:
  """FedSGD's epoch reading is FedAvg's local work with the plain mean: FedEMD's FedSGD cell
  (seed 0) has the config of the plain-mean diagnosis cell, run on another CPU."""
  a = accuracies(cell(f"{DEFAULT}/table1_fedsgd/cells/1_excl_fedemd_fedsgd/seed0")[1])
  b = accuracies(cell(f"{DEFAULT}/diagnosis_plain_mean/cells/1_excl_fedemd/seed0")[1])
  print(
    f"FedSGD FedEMD seed 0 against the plain-mean diagnosis cell: {len(a)} rounds, "
    f"max |accuracy difference| {np.abs(a - b).max():.2f} points"
  )


def fedemd_table1_cost() -> None:
  """What Table 1's committed baseline cells took in their lane (two one-device lanes side by
  side): TiFL's, FedFast's and FedProx's under FedAvg and FedSGD, and SVB's; the cells not yet
  committed (if any) at the baselines' mean minutes, SVB's at its own seeds', two lanes at a
  time."""
  seeds = {
    (setup, m): committed_seeds(table1_cell(setup, m))
    for setup, methods in TABLE1_PAPER.items()
    for m in methods
  }
  minutes = [
    summary_of(f"{table1_cell(setup, m)}/seed{s}")["seconds"] / 60
    for setup in ("FedAvg", "FedSGD")
    for m in ("tifl", "fedfast", "fedprox")
    for s in seeds[setup, m]
  ]
  todo = sum(3 - len(done) for (_, m), done in seeds.items() if m != "shapley")
  svb = seeds["FedAvg", "shapley"]
  svb_minutes = [
    summary_of(f"{table1_cell('FedAvg', 'shapley')}/seed{s}")["seconds"] / 60 for s in svb
  ]
  svb_todo = 3 - len(svb)
  mean = float(np.mean(minutes))
  line = (
    f"Table 1 cost: the {len(minutes)} baseline cells (TiFL, FedFast, FedProx under FedAvg and "
    f"FedSGD) took {min(minutes):.0f}-{max(minutes):.0f} min each in a lane (mean {mean:.0f}); "
    f"SVB's seeds {', '.join(map(str, svb))} took "
    f"{' / '.join(f'{m:.0f}' for m in svb_minutes)} min"
  )
  if todo:
    line += f"; {todo} FedAvg and FedSGD cells to run: about {todo * mean / 120:.1f} h in two lanes"
  if svb_todo:
    svb_mean = float(np.mean(svb_minutes))
    hours = svb_todo * svb_mean / 120
    line += f"; SVB's {svb_todo} other seed(s): about {hours:.1f} h in two lanes"
  print(line)


def fedemd_fig4_whole() -> None:
  """Fig. 4's cells as far as they are committed (the default set-up): every method's R@99
  per seed against Random's best in the same scenario and seed (claims 39-48)."""
  folder = f"{DEFAULT}/fig4/cells"
  for scenario in ("2_shared", "3_shared", "2_excl", "3_excl"):
    for m in ("random", "tifl", "fedfast", "fedprox", "fedemd"):
      fedemd_r99_line(
        f"Fig. 4 whole, {scenario}, {m}",
        f"{folder}/{scenario}_{m}",
        f"{folder}/{scenario}_random",
        mavericks=int(scenario[0]),
      )
    # how close each baseline runs to FedEMD (claim 47): the mean absolute gap between the two
    # seed-0 test-accuracy curves over the 200 rounds (their R@99 are printed above)
    fedemd_dir = f"{folder}/{scenario}_fedemd"
    if 0 not in committed_seeds(fedemd_dir):
      continue
    ours = accuracies(cell(f"{fedemd_dir}/seed0")[1])
    gaps = []
    for m in ("random", "tifl", "fedfast", "fedprox"):
      if 0 in committed_seeds(f"{folder}/{scenario}_{m}"):
        a = accuracies(cell(f"{folder}/{scenario}_{m}/seed0")[1])
        gaps.append(f"{m} {np.abs(a - ours).mean():.2f}")
    print(
      f"Fig. 4 whole, {scenario}, seed 0: mean |accuracy - FedEMD's| over 200 rounds: "
      + ", ".join(gaps)
    )


def fedemd_fig4_cost() -> None:
  """What Fig. 4's cells took in their lane (two one-device lanes side by
  side): steps 1 and 3's twelve baseline cells (seed 0), and the seeds 1-2 cells of Random,
  TiFL and FedEMD (steps 2, 4 and 5), from each committed cell's `seconds`; while cells of
  steps 4 and 5 remain, what they should take (a step of k cells takes about ceil(k / 2)
  cells' time)."""
  folder = f"{DEFAULT}/fig4/cells"
  scenarios = ("2_shared", "3_shared", "2_excl", "3_excl")
  minutes = [
    summary_of(f"{folder}/{sc}_{m}/seed0")["seconds"] / 60
    for sc in scenarios
    for m in ("tifl", "fedfast", "fedprox")
  ]
  mean = float(np.mean(minutes))
  line = (
    f"Fig. 4 cost: steps 1 and 3's twelve baseline cells took {min(minutes):.0f}-"
    f"{max(minutes):.0f} min each in a lane (mean {mean:.0f})"
  )
  todo, todo_minutes = 0, 0.0
  for m, scs in (("random", scenarios), ("fedemd", scenarios), ("tifl", scenarios[2:])):
    done = [
      summary_of(f"{folder}/{sc}_{m}/seed{s}")["seconds"] / 60
      for sc in scs
      for s in (1, 2)
      if s in committed_seeds(f"{folder}/{sc}_{m}")
    ]
    left = 2 * len(scs) - len(done)
    todo += left
    # a cell still to run takes what the same method's seeds 1-2 took, else a baseline's
    todo_minutes += left * (float(np.mean(done)) if done else mean)
    if done:
      line += (
        f"; {m}'s seeds 1-2, {len(done)} cells: {min(done):.0f}-{max(done):.0f} min each "
        f"(mean {np.mean(done):.0f})"
      )
  if todo:
    line += f"; {todo} cells of seeds 1-2 to run: about {todo_minutes / 120:.1f} h in two lanes"
  print(line)


def fedemd_fig4_spread() -> None:
  """Fig. 4's spread over seeds (claim 48: the shared scenarios; the exclusive ones beside
  them), Random against FedEMD, over the seeds both have committed: R@99 per seed and its
  std where every seed reaches it, the std of the final and of the best accuracy, and the
  across-seed std of the accuracy curve averaged over the 200 rounds (population std,
  ddof = 0)."""
  folder = f"{DEFAULT}/fig4/cells"
  for scenario in ("2_shared", "3_shared", "2_excl", "3_excl"):
    dirs = {m: f"{folder}/{scenario}_{m}" for m in ("random", "fedemd")}
    seeds = sorted(set(committed_seeds(dirs["random"])) & set(committed_seeds(dirs["fedemd"])))
    if len(seeds) < 2:
      print(f"Fig. 4 spread, {scenario}: seeds {seeds} only; a std needs two")
      continue
    hists = {m: {s: cell(f"{d}/seed{s}")[1] for s in seeds} for m, d in dirs.items()}
    refs = hists["random"]
    for m, hist in hists.items():
      acc = np.stack([accuracies(hist[s]) for s in seeds])
      reached = [r99(hist[s], refs[s]) for s in seeds]
      spread = (
        f"std {np.std(np.asarray(reached, np.float64)):.1f}"
        if None not in reached
        else "std undefined (a seed never reaches it)"
      )
      print(
        f"Fig. 4 spread, {scenario}, {m}, seeds {', '.join(map(str, seeds))}: R@99 "
        + " / ".join(str(r) if r is not None else "> 200" for r in reached)
        + f" ({spread}); final {mean_std(acc[:, -1])} %, best {mean_std(acc.max(1))} %; "
        f"across-seed std of the curve, mean over rounds {acc.std(0).mean():.2f} points "
        f"(rounds 101-200: {acc[:, 100:].std(0).mean():.2f})"
      )


def fedemd_text_fig4() -> None:
  folder = f"{DEFAULT}/fig4"
  summaries = []
  for scenario in FIG4_SCENARIOS:
    k = int(scenario[0])
    cells = {m: cell(f"{folder}/cells/{scenario}_{m}/seed0") for m in ("random", "fedemd")}
    acc = {m: accuracies(h) for m, (_, h) in cells.items()}
    target = 0.99 * acc["random"].max()
    for m, (summary, _) in cells.items():
      summaries.append(summary)
      a = acc[m]
      hit = np.flatnonzero(a >= target)
      c = counts_of(summary)  # per-block picks need the cohorts: maverick_blocks.md
      print(
        f"Fig. 4, text's reading, {scenario}, seed 0, {m}: R@99 "
        f"{int(hit[0]) + 1 if hit.size else '> 200'} (target {target:.2f}), best {a.max():.2f} "
        f"(round {int(a.argmax()) + 1}), final {a[-1]:.2f}, best of rounds 1-100 "
        f"{a[:100].max():.2f}, Maverick picks {c[:k].sum()} of {c.sum()}"
      )
      print(f"  mean accuracy per 20 rounds: {blocks(a, [(x, x + 19) for x in range(1, 200, 20)])}")
      print(
        f"  the target minus the best {target - a.max():.2f}, minus the best of rounds 1-100 "
        f"{target - a[:100].max():.2f}"
      )
    print(f"  FedEMD - Random final {acc['fedemd'][-1] - acc['random'][-1]:+.2f}")
  print(
    f"Fig. 4, text's reading, seed 0: the eight cells took {seconds_of(summaries) / 3600:.1f} h"
  )
  first = []
  for scenario in FIG4_SCENARIOS:
    for m in ("random", "fedemd"):
      first.append(cell(f"{FIRST}/fig4/cells/{scenario}_{m}/seed0")[0])
  print(f"Fig. 4, first reading, seed 0: the eight cells took {seconds_of(first) / 3600:.1f} h")


def fedemd_text_diagnoses() -> None:
  _, stepped = cell(f"{DEFAULT}/table1/cells/1_excl_random/seed0")
  stepped_target = 0.99 * accuracies(stepped).max()
  cells = {
    m: cell(f"{DEFAULT}/diagnosis_no_lr_step/cells/1_excl_{m}/seed0") for m in ("random", "fedemd")
  }
  acc = {m: accuracies(h) for m, (_, h) in cells.items()}
  own = 0.99 * acc["random"].max()
  for m, (summary, _) in cells.items():
    a = acc[m]
    hit, hit_stepped = np.flatnonzero(a >= own), np.flatnonzero(a >= stepped_target)
    print(
      f"no lr step, seed 0, {m}: R@99 {int(hit[0]) + 1 if hit.size else '> 200'} (own target "
      f"{own:.2f}), first round at the stepped run's target ({stepped_target:.2f}) "
      f"{int(hit_stepped[0]) + 1 if hit_stepped.size else 'never'}, best {a.max():.2f} (round "
      f"{int(a.argmax()) + 1}), final {a[-1]:.2f}, best of rounds 1-100 {a[:100].max():.2f}, "
      f"Maverick picks {counts_of(summary)[0]}; mean per 20 rounds, 101-200: "
      + blocks(a, [(x, x + 19) for x in range(101, 200, 20)])
    )
  _, h = cell(f"{DEFAULT}/diagnosis_plain_mean/cells/1_excl_fedemd/seed0")
  a = accuracies(h)
  print(
    f"plain mean, seed 0, fedemd: rounds 1-10 {a[:10].mean():.1f}, 11-20 {a[10:20].mean():.1f}, "
    f"best {a.max():.2f} (round {int(a.argmax()) + 1}), against the size-weighted Random's "
    f"target {stepped_target:.2f}"
  )


def fedemd_maverick_blocks() -> None:
  """Sums of maverick_blocks.md's 50-round blocks, as the pages quote them."""
  for r in md_rows("fedemd_fmnist/maverick_blocks.md"):
    b = [int(r[k]) for k in ("rounds 1-50", "51-100", "101-150", "151-200")]
    print(
      f"Maverick picks, {r['D_c reading']}, {r['scenario']}, {r['method']}, seed {r['seed']}: "
      f"rounds 1-50 {b[0]}, 1-100 {b[0] + b[1]}, 101-200 {b[2] + b[3]}, 151-200 {b[3]}, "
      f"of {sum(b)}"
    )
  rows = table(f"{TEXT_PP}/table1/participation.csv")
  picks = [
    int(r["round"])
    for r, before in zip(rows, [{"FedEMD": 0}] + rows)
    if int(r["FedEMD"]) > int(before["FedEMD"])
  ]
  print(
    f"Table 1, seed 0, FedEMD picks the Maverick at rounds {', '.join(map(str, picks))} "
    f"({len(picks)} in all): its 11th pick at round {picks[10]}, 21st at {picks[20]}, 31st at "
    f"{picks[30]}"
  )


def fedemd_per_class() -> None:
  """per_class.md: how much of FedEMD's gap to Random the Mavericks' classes make."""
  mavericks = {"1 excl": ["1 Trouser"], "2 excl": ["0 T-shirt", "1 Trouser"]}
  mavericks["3 excl"] = mavericks["2 excl"] + ["2 Pullover"]
  for folder in (f"{TEXT_PP}/table1", f"{DEFAULT}/table1", f"{DEFAULT}/fig4"):
    rows = md_rows(f"{folder}/per_class.md")
    by = {
      (r.get("scenario", "1 excl"), r.get("seed", "0"), r["round"], r["method"]): r for r in rows
    }
    for scenario, seed, rnd, method in by:
      if method != "Random" or (scenario, seed, rnd, "FedEMD") not in by:
        continue
      ours, theirs = by[scenario, seed, rnd, "FedEMD"], by[scenario, seed, rnd, "Random"]
      classes = mavericks.get(scenario, ["1 Trouser"])
      trouser = next(k for k in ours if "Trouser" in k)
      share = sum(float(theirs[k]) - float(ours[k]) for k in classes) / 10
      print(
        f"per class, {folder.split('/', 1)[1]}, {scenario}, seed {seed}, round {rnd}: Random - "
        f"FedEMD {float(theirs['all']) - float(ours['all']):.2f} points, of which the Mavericks' "
        f"classes {share:.2f}; Trouser {theirs[trouser]} vs {ours[trouser]}"
      )


def fedemd_ablations() -> None:
  """The ablations' per-seed R@99 follow from a mean ± std over two seeds: mean ∓ std."""
  for folder in (
    "first_reading_size_weighted_lr_per_round",
    "first_reading_size_weighted_lr_per_participation",
  ):
    for r in table(f"fedemd_fmnist/{folder}/table1/r99.csv"):
      parts = [float(x) for x in r["1 excl"].split("±")] if "±" in r["1 excl"] else None
      seeds = (
        f" (the two seeds: {parts[0] - parts[1]:.0f} and {parts[0] + parts[1]:.0f})"
        if parts
        else ""
      )
      print(f"{folder}, {r['method']}: R@99 {r['1 excl']}{seeds}")


def fedemd_first_reading_random() -> None:
  """Random's committed cells under the first reading: the rounds of its best accuracy, and
  seed 1's first rounds (the run the cross-CPU check repeats)."""
  best = []
  for folder in (f"{FIRST}/table1", f"{FIRST}/fig4"):
    for name in sorted(os.listdir(f"{RESULTS}/{folder}/cells")):
      for seed in sorted(os.listdir(f"{RESULTS}/{folder}/cells/{name}")):
        if name.endswith("_random"):
          _, h = cell(f"{folder}/cells/{name}/{seed}")
          best.append(max(h, key=lambda r: r["test_accuracy"])["round"])
  print(
    f"first reading, Random's {len(best)} committed cells (Table 1 and Fig. 4): best accuracy "
    f"at rounds {spread(best)}"
  )
  _, h = cell(f"{FIRST}/table1/cells/1_excl_random/seed1")
  print(
    "first reading, Table 1, seed 1, Random: test accuracy at rounds 1-3 "
    + " / ".join(f"{100 * r['test_accuracy']:.2f}" for r in h[:3])
    + " %"
  )


def fedemd_cost() -> None:
  """Seconds per round of the text's reading's Table 1 (both lr units) and Fig. 4 cells: a
  program's seconds over its rounds, shared among the cells it ran."""
  per_cell = {"random": [], "fedemd": []}
  fig4_random = []
  for folder in (f"{DEFAULT}/table1", f"{TEXT_PP}/table1", f"{DEFAULT}/fig4"):
    for name in sorted(os.listdir(f"{RESULTS}/{folder}/cells")):
      method = name.rsplit("_", 1)[1]
      if method not in per_cell:  # Table 1's other baselines have their own timing
        continue
      for seed in sorted(os.listdir(f"{RESULTS}/{folder}/cells/{name}")):
        s = summary_of(f"{folder}/cells/{name}/{seed}")
        rate = s["seconds"] / s.get("experiments_in_program", 1) / s["rounds"]
        per_cell[method].append(rate)
        if folder.endswith("fig4") and method == "random" and seed == "seed0":
          fig4_random.append(rate)  # the estimate's basis: the seed-0 cells
  for method, rates in per_cell.items():
    print(
      f"cost, text's reading, Table 1 (both lr units) and Fig. 4, {method}: "
      f"{min(rates):.1f}-{max(rates):.1f} s/round over its {len(rates)} cells "
      "(a program's seconds / rounds / cells in it)"
    )
  print(
    f"cost, Fig. 4, random: {np.mean(fig4_random):.1f} s/round on average over its seed-0 cells"
  )


SUPPLEMENT = "fedemd_fmnist/supplement"
SUPPLEMENT_ROUNDS = 200  # App. A's figures span the 200 rounds of Sec. 5


def supplement_trace(label: str, trace: list[dict], maverick_class: int = 1) -> None:
  """A supplement cell's per-round test accuracy and Trouser recall (%), and with SVB its
  per-round fairness U_t and U over the rounds (Def. 3.3)."""
  acc = " / ".join(f"{100 * r['test_accuracy']:.1f}" for r in trace)
  recall = " / ".join(f"{100 * r['class_recall'][maverick_class]:.1f}" for r in trace)
  print(f"supplement, {label}: accuracy {acc}; class {maverick_class} recall {recall}")
  if "fairness" in trace[0]:
    u_t = " / ".join(f"{r['fairness']:.3f}" for r in trace)
    gaps = [
      abs(n / sum(r["sizes"]) - c / sum(r["shapley"]))
      for r in trace
      for c, n, v in zip(r["shapley"], r["sizes"], r["valid"])
      if v and sum(r["shapley"]) != 0
    ]
    print(f"supplement, {label}: fairness U_t {u_t}; U {1 - np.mean(gaps):.3f}")


def fedemd_supplement() -> None:
  """App. A: Table 2's overhead benchmark (``benchmarks/fedemd_overhead.py``) and the
  seconds per round of the supplement's cells (a short timing of ``--config.supplement``),
  and the cost they give: cells x 200 rounds x s/round."""
  with open(f"{RESULTS}/{SUPPLEMENT}/overhead/fedemd_overhead.json") as f:
    bench = json.load(f)
  load = bench["machine"].get("loadavg_1m")
  for m, r in bench["ratio_to_random"].items():
    own = bench["methods"][m]
    print(
      f"supplement, Table 2, {m}: whole round {r['round_s']:.2f}x, per local step "
      f"{r['step_s']:.2f}x, selection step {r['select_s']:.2f}x of Random's (paper "
      f"{bench['paper_ratio'].get(m)}); {own['round_s']:.1f} s/round (median), "
      f"{own['steps']:.0f} local steps in {bench['rounds_timed']} rounds, selection "
      f"{1000 * own['select_s']:.2f} ms (load {load} at the start)"
    )
  rates = {}  # cell -> s/round: the 3-round timings, then the 15-round run's where it has one
  for source in ("round_cost/fig6", "round_cost/fig7", "fig6_15_rounds"):
    folder = f"{RESULTS}/{SUPPLEMENT}/{source}/cells"
    for name in sorted(os.listdir(folder)):
      trace = jsonl(f"{folder}/{name}/seed0/trace.jsonl")
      rates[name] = float(np.mean([r["seconds"] for r in trace[1:]]))  # round 1 compiles
      picks = sum(r["maverick_selected"] for r in trace)
      print(
        f"supplement, s/round, {source}, {name}: {rates[name]:.1f} s/round over rounds "
        f"2-{len(trace)} (Maverick in {picks} of {len(trace)} rounds)"
      )
      if source.startswith("round_cost"):
        supplement_trace(f"{source}, {name}", trace)
  figures = {
    "fig5": ["1_excl_shapley"],
    "fig6": ["iid_random", "1_excl_mav_never", "1_excl_random", "1_excl_mav_always"],
    "fig7": ["iid_random", "iid_sizehet_shapley", "1_excl_random", "1_excl_shapley"],
  }
  for fig, cells in figures.items():
    hours = sum(rates[c] for c in cells) * SUPPLEMENT_ROUNDS / 3600
    print(
      f"supplement, plan, {fig}: {len(cells)} cell(s) x {SUPPLEMENT_ROUNDS} rounds = "
      f"{hours:.1f} h a seed, {3 * hours:.1f} h for seeds 0-2"
    )
  rest = rates["iid_sizehet_shapley"] * SUPPLEMENT_ROUNDS / 3600
  print(f"supplement, plan, fig7 after fig5 and fig6 (its size-het SVB cell): {rest:.1f} h a seed")
  every = sum(rates.values()) * SUPPLEMENT_ROUNDS / 3600
  print(
    f"supplement, plan, all figures ({len(rates)} distinct cells): {every:.1f} h a seed, "
    f"{3 * every:.1f} h for seeds 0-2"
  )


def fedemd_supplement_fig6() -> None:
  """Fig. 6's four cells over their first 15 rounds (seed 0): where mav-always stands
  against mav-random and the i.i.d. upper bound."""
  folder = f"{RESULTS}/{SUPPLEMENT}/fig6_15_rounds/cells"
  acc = {}
  for name in sorted(os.listdir(folder)):
    trace = jsonl(f"{folder}/{name}/seed0/trace.jsonl")
    supplement_trace(f"fig6 (15 rounds), {name}", trace)
    acc[name] = np.array([100 * r["test_accuracy"] for r in trace])
    picks = [r["round"] for r in trace if r["maverick_selected"]]
    print(f"supplement, fig6 (15 rounds), {name}: Maverick picked in rounds {picks}")
  always, rand, iid = acc["1_excl_mav_always"], acc["1_excl_random"], acc["iid_random"]
  ahead = (np.flatnonzero(always > rand) + 1).tolist()
  print(
    f"supplement, fig6 (15 rounds): mav-always ahead of mav-random in rounds {ahead}; "
    f"behind i.i.d. by {(iid - always).min():.1f}-{(iid - always).max():.1f} points "
    f"({iid[-1] - always[-1]:.1f} at round {len(iid)})"
  )


def fedemd_supplement_fig5() -> None:
  """Fig. 5's cell (SVB, one exclusive Maverick) over its first 20 rounds (seed 0): U over
  the rounds with defined values, and the rounds TMC truncated to 0."""
  trace = jsonl(f"{RESULTS}/{SUPPLEMENT}/fig5_20_rounds/cells/1_excl_shapley/seed0/trace.jsonl")
  supplement_trace("fig5 (20 rounds), 1_excl_shapley", trace)
  u_t = np.array([r["fairness"] for r in trace], np.float64)
  defined = (np.flatnonzero(~np.isnan(u_t)) + 1).tolist()
  zero = [r["round"] for r in trace if not any(r["shapley"])]
  print(
    f"supplement, fig5 (20 rounds): U_t defined in rounds {defined} "
    f"({np.nanmin(u_t):.3f} to {np.nanmax(u_t):.3f}); every Shapley value 0 in rounds {zero}"
  )
  for r in trace:
    if r["maverick_selected"]:
      slot = r["cohort"].index(0)
      others = ", ".join(f"{v:.3f}" for j, v in enumerate(r["shapley"]) if j != slot)
      print(
        f"supplement, fig5 (20 rounds): round {r['round']}, the Maverick's Shapley value "
        f"{r['shapley'][slot]:.3f} (others {others}), its share of the cohort's data "
        f"{r['sizes'][slot] / sum(r['sizes']):.2f}"
      )


# App. A.6 / Fig. 7's curves, seed 0: each label's per-round file under results/ (the
# supplement's traces; Table 1's Random and SVB cells for the Maverick curves)
FIG7_CURVES = {
  "i.i.d.-random": f"{SUPPLEMENT}/fig7/cells/iid_random/seed0/trace.jsonl",
  "size-het-svb": f"{SUPPLEMENT}/fig7/cells/iid_sizehet_shapley/seed0/trace.jsonl",
  "maverick-random": f"{DEFAULT}/table1/cells/1_excl_random/seed0/metrics.jsonl",
  "maverick-svb": f"{DEFAULT}/svb/cells/1_excl_shapley/seed0/metrics.jsonl",
}


def fedemd_supplement_fig7() -> None:
  """App. A.6 / Fig. 7 (claim 52), seed 0. i.i.d.-random and size-het-svb are the
  supplement's traces (``supplement/fig7``); maverick-random and maverick-svb are Table 1's
  Random and SVB cells, the same runs as the supplement's cells of those names (their first
  15 and 20 rounds equal Fig. 6's and Fig. 5's traces: printed). Each curve's R@99 against
  99 % of i.i.d.-random's best and against its own best, best (round), final and the mean
  accuracy per 40 rounds."""
  curves = {}
  for label in ("i.i.d.-random", "size-het-svb"):
    path = f"{RESULTS}/{FIG7_CURVES[label]}"
    if not os.path.exists(path):
      print(f"supplement, fig7, {label}: no committed trace")
      continue
    trace = jsonl(path)
    curves[label] = 100 * np.asarray([r["test_accuracy"] for r in trace])
    picks = np.zeros(1 + max(k for r in trace for k in r["selected"]), np.int64)
    for r in trace[20:]:
      picks[r["selected"]] += 1
    print(
      f"supplement, fig7, {label}: picks per client over rounds 21-{len(trace)}: std "
      f"{picks.std():.2f}, from {picks.min()} to {picks.max()}"
    )
    if label == "size-het-svb":
      zero = sum(1 for r in trace if not any(r["shapley"]))
      measured = [r["round"] for r in trace if any(r["shapley"])]
      print(f"supplement, fig7, {label}: rounds with a nonzero Shapley value {measured}")
      defined = int(np.sum(~np.isnan([r["fairness"] for r in trace])))
      print(
        f"supplement, fig7, {label}: every Shapley value 0 (TMC truncation) in {zero} of "
        f"{len(trace)} rounds; U_t defined in {defined}"
      )
    seconds = [r["seconds"] for r in trace]
    print(
      f"supplement, fig7, {label}: {len(trace)} rounds in {sum(seconds) / 3600:.2f} h "
      f"({np.mean(seconds[1:]):.1f} s/round after round 1)"
    )
  for label, trace_of in (
    ("maverick-random", "fig6_15_rounds"),
    ("maverick-svb", "fig5_20_rounds"),
  ):
    folder = os.path.dirname(FIG7_CURVES[label])
    curves[label] = accuracies(cell(folder)[1])
    name = folder.split("/")[-2]
    trace = jsonl(f"{RESULTS}/{SUPPLEMENT}/{trace_of}/cells/{name}/seed0/trace.jsonl")
    t = 100 * np.asarray([r["test_accuracy"] for r in trace])
    print(
      f"supplement, fig7, {label}: results/{folder}; its first {len(t)} rounds against "
      f"{trace_of}'s trace: max |difference| {np.abs(curves[label][: len(t)] - t).max():.4f} points"
    )
  if "i.i.d.-random" not in curves:
    return
  target = 0.99 * curves["i.i.d.-random"].max()
  iid, mav, svb = curves["i.i.d.-random"], curves["maverick-random"], curves["maverick-svb"]
  print(
    f"supplement, fig7, seed 0: maverick-random below i.i.d.-random by "
    f"{(iid[:40] - mav[:40]).mean():.1f} points over rounds 1-40; maverick-svb below "
    f"maverick-random by {mav[-1] - svb[-1]:.2f} points at round {len(mav)}"
  )
  spans = [(a, a + 39) for a in range(1, SUPPLEMENT_ROUNDS, 40)]
  for label, a in curves.items():
    hit, own = np.flatnonzero(a >= target), np.flatnonzero(a >= 0.99 * a.max())
    print(
      f"supplement, fig7, seed 0, {label}: R@99 of i.i.d.-random's best "
      f"{int(hit[0]) + 1 if hit.size else '> 200'} (target {target:.2f}), of its own best "
      f"{int(own[0]) + 1}; best {a.max():.2f} (round {int(a.argmax()) + 1}), final {a[-1]:.2f}; "
      f"mean per 40 rounds {blocks(a, spans)}"
    )


def fedemd_fedsgd_cost() -> None:
  """FedSGD's round at each batch size, timed side by side with Random's FedAvg round
  (``benchmarks/fedemd_round_cost.py``, two runs, each with its own FedAvg round; JSON lines in
  ``fedsgd_batch_cost.jsonl``)."""
  path = f"{RESULTS}/fedemd_fmnist/fedsgd_batch_cost.jsonl"
  rows = jsonl(path)
  for r in rows:
    name = (
      "Random FedAvg"
      if r["aggregation_setup"] == "fedavg"
      else f"Random FedSGD, batch {r['fedsgd_batch_size']}"
    )
    print(
      f"{name}: round {r['train_s_per_round']:.2f} s, evaluation {r['eval_s']:.2f} s, "
      f"round + evaluation {r['s_per_round']:.2f} s, {r['ratio_to_random_fedavg']:.2f}x "
      "Random's FedAvg round of the same run"
    )


def fedemd_fedsgd_readings() -> None:
  """Random, seed 0, Table 1's set-up under FedSGD's two readings and under FedAvg: test
  accuracy at rounds 10, 50, 100, 150, 200 and the best (round)."""
  for name, folder in (
    ("FedSGD, epoch reading", f"{DEFAULT}/table1_fedsgd/cells/1_excl_random_fedsgd/seed0"),
    (
      "FedSGD, gradient reading",
      f"{DEFAULT}/table1_fedsgd_gradient/cells/1_excl_random_fedsgd_gradient/seed0",
    ),
    ("FedAvg, size-weighted", f"{DEFAULT}/table1/cells/1_excl_random/seed0"),
  ):
    _, history = cell(folder)
    acc = {r["round"]: 100 * r["test_accuracy"] for r in history}
    best = max(acc, key=acc.get)
    at = ", ".join(f"{t} {acc[t]:.2f}" for t in (10, 50, 100, 150, 200))
    print(f"Random seed 0, {name}: test accuracy at rounds {at}; best {acc[best]:.2f} ({best})")


def fedemd() -> None:
  print("# the text's reading: D_c from label distributions, size-weighted FedAvg")
  fedemd_text_table1(f"{DEFAULT}/table1", "StepLR per round")
  fedemd_text_table1(f"{TEXT_PP}/table1", "StepLR per participation")
  fedemd_text_fig4()
  fedemd_text_diagnoses()
  fedemd_maverick_blocks()
  fedemd_per_class()
  fedemd_cost()
  fedemd_fedsgd_cost()
  fedemd_fedsgd_readings()
  fedemd_table1_whole()
  fedemd_table1_cost()
  fedemd_fedsgd_is_plain_mean()
  fedemd_fig4_whole()
  fedemd_fig4_cost()
  fedemd_fig4_spread()
  print("# the supplement (App. A): Table 2's overhead, the s/round of Fig. 5-7's cells")
  fedemd_supplement()
  fedemd_supplement_fig6()
  fedemd_supplement_fig5()
  fedemd_supplement_fig7()
  print("# the first reading (ablation): D_c from raw counts, plain mean, StepLR per participation")
  fedemd_first_reading()
  fedemd_first_reading_random()
  fedemd_ablations()


def clustered_sampling() -> None:
  for name in (
    "clustered_sampling_fmnist/table_one_class.csv",
    "clustered_sampling_fmnist/table_dirichlet.csv",
    "clustered_sampling_fmnist_order/table_one_class.csv",  # both client orders
    "clustered_sampling_fmnist_order/numpy1_ties/table_one_class.csv",
    "clustered_sampling_fmnist_order/dirichlet_exact/table_dirichlet.csv",
  ):
    rows = table(name)
    for setup in dict.fromkeys(r["Set-up"] for r in rows):
      acc = {r["Method"]: first(r["final test acc (%)"]) for r in rows if r["Set-up"] == setup}
      spread = {
        r["Method"]: r["final test acc (%)"].split("±")[1].strip()
        for r in rows
        if r["Set-up"] == setup
      }
      print(
        f"{name.rsplit('/', 1)[0]}, {setup}: final accuracy ± seed std: "
        + ", ".join(f"{m} {v:.2f} ± {spread[m]}" for m, v in acc.items())
      )
      sketched, exact = "Alg. 2 (Arccos)", "Alg. 2 (Arccos, exact updates)"
      if sketched in acc and exact in acc:
        print(f"  Alg. 2 exact minus sketched: {acc[exact] - acc[sketched]:+.2f}")
      for reference in ("MD sampling", "Target (one client per class)"):
        if reference in acc:
          print(
            f"  minus {reference}'s: "
            + ", ".join(f"{m} {v - acc[reference]:+.2f}" for m, v in acc.items() if m != reference)
          )
  clustered_sampling_md_law()
  clustered_sampling_cost()


def clustered_sampling_cost() -> None:
  """Wall time of the committed one-class and exact-update runs: their programs' seconds."""
  for folder in (
    "clustered_sampling_fmnist_order",
    "clustered_sampling_fmnist_order/numpy1_ties",
    "clustered_sampling_fmnist_order/dirichlet_exact",
  ):
    summaries = [
      summary_of(f"{folder}/cells/{name}/{seed}")
      for name in sorted(os.listdir(f"{RESULTS}/{folder}/cells"))
      for seed in sorted(os.listdir(f"{RESULTS}/{folder}/cells/{name}"))
    ]
    print(
      f"{folder}: the {len(summaries)} runs' programs took {seconds_of(summaries) / 60:.0f} min "
      "(seconds / experiments_in_program, summed)"
    )


def clustered_sampling_md_law() -> None:
  """MD's closed forms (10 draws over 10 equal classes of 10 clients), its six one-class runs
  and the weight-variance table's shares."""
  print(
    f"MD, closed form: 10 (1 - 0.9^10) = {10 * (1 - 0.9**10):.2f} classes and "
    f"100 (1 - 0.99^10) = {100 * (1 - 0.99**10):.2f} distinct clients per round"
  )
  finals = [
    100
    * cell(f"clustered_sampling_fmnist_order/cells/{order}-md/seed{seed}")[0]["final_test_accuracy"]
    for order in ("one_class", "one_class_by_label")
    for seed in (0, 1, 2)
  ]
  print(
    "MD, one class, both client orders: final accuracy of the six runs "
    f"{min(finals):.1f} to {max(finals):.1f} %"
  )
  for r in table("clustered_sampling_fmnist/table_weight_variance.csv"):
    share = float(r["share of clients with Var <= 1.1 x MD's"])
    print(f"weight variance, {r['Method']}: {100 * share:.0f} % of clients with Var <= 1.1 x MD's")


def fedar() -> None:
  from scipy import stats

  rows = {r["method"]: r for r in table("fedar_fmnist/accuracy.csv")}
  for p in ("0.1", "0.5"):
    col = f"p_min={p}: final test acc (%)"
    mean, std = (float(x) for x in rows["FedAR"][col].split("±"))
    for other in ("MIFA", "FedVARP"):
      m2, s2 = (float(x) for x in rows[other][col].split("±"))
      # the tables hold the population std (ddof=0) of 3 seeds; Welch's test wants ddof=1
      c = np.sqrt(3 / 2)
      test = stats.ttest_ind_from_stats(mean, std * c, 3, m2, s2 * c, 3, equal_var=False)
      print(
        f"p_min={p}: FedAR - {other} {mean - m2:+.2f} points, seed std {std:.2f} / {s2:.2f}, "
        f"Welch's t-test on the table's mean ± std: p = {test.pvalue:.2f}"
      )
  for p in ("0.1", "0.5"):
    col = f"p_min={p}: final test acc (%)"
    ours = first(rows["FedAR"][col])
    print(
      f"p_min={p}: FedAR minus: "
      + ", ".join(f"{m} {ours - first(r[col]):+.2f}" for m, r in rows.items() if m != "FedAR")
    )
  fedar_mlp()


FEDAR_MLP = "fedar_fmnist_mlp"
FEDAR_NAMES = {
  "fedar": "FedAR",
  "mifa": "MIFA",
  "mifa_seen": "MIFA over seen",
  "mifa_step": "MIFA x 1.05",
  "fedvarp": "FedVARP",
  "fedavg_is": "FedAvg-IS",
  "fedavg_s50": "FedAvg (S=50)",
  "scaffold": "Scaffold",
  "fedavg_full": "FedAvg (always available)",
}


@functools.cache
def fedar_runs(folder: str, name: str) -> tuple[tuple[dict, list[dict]], ...]:
  """Every committed, complete seed of one FedAR cell (seed order); () when none. Cached:
  the main study's cells are read by several tables."""
  runs = []
  for seed in committed_seeds(f"{folder}/cells/{name}"):
    summary, history = cell(f"{folder}/cells/{name}/seed{seed}")
    if summary.get("complete"):
      runs.append((summary, history))
  return tuple(runs)


def final_accuracies(runs) -> list[float]:
  """Each run's final test accuracy (%)."""
  return [100 * s["final_test_accuracy"] for s, _ in runs]


def fedar_curve(runs) -> dict[int, float]:
  """Seed-mean test accuracy (%) at every evaluated round all the runs share."""
  by_round = [{h["round"]: 100 * h["test_accuracy"] for h in hist} for _, hist in runs]
  common = sorted(set.intersection(*(set(b) for b in by_round)))
  return {r: float(np.mean([b[r] for b in by_round])) for r in common}


def fedar_reached(curve: dict[int, float], level: float) -> str:
  hit = [r for r, a in curve.items() if a >= level]
  return str(hit[0]) if hit else f"> {max(curve)}"


def fedar_compare(folder: str, p: str, methods) -> None:
  """Final accuracy, FedAR's lead, both paired t-tests, and rounds to 80 / 83 %."""
  from scipy import stats

  ref = fedar_runs(folder, f"pmin{p}_fedar")
  if not ref:
    return
  ref_final = final_accuracies(ref)
  ref_curve = fedar_curve(ref)
  for m in methods:
    name = "fedavg_full" if m == "fedavg_full" else f"pmin{p}_{m}"
    runs = fedar_runs(folder, name)
    if not runs:
      continue
    final = final_accuracies(runs)
    curve = fedar_curve(runs)
    line = f"{folder}, p_min={p}, {FEDAR_NAMES[m]}: final {mean_std(final)} % ({len(runs)} seeds)"
    line += f", reaches 80 % at round {fedar_reached(curve, 80.0)}"
    line += f", 83 % at {fedar_reached(curve, 83.0)}"
    line += f", mean over the evaluations {np.mean(list(curve.values())):.2f} %"
    if m != "fedar" and len(runs) == len(ref):
      seeds = stats.ttest_rel(ref_final, final)
      both = sorted(set(ref_curve) & set(curve))
      rounds = stats.ttest_rel([ref_curve[r] for r in both], [curve[r] for r in both])
      ahead = sum(ref_curve[r] > curve[r] for r in both)
      line += (
        f"; FedAR minus it {np.mean(ref_final) - np.mean(final):+.2f} points, paired by seed "
        f"t = {seeds.statistic:.2f}, p = {seeds.pvalue:.2g} ({len(final)} pairs); by round "
        f"t = {rounds.statistic:.2f}, p = {rounds.pvalue:.2g} ({len(both)} pairs, FedAR ahead "
        f"in {ahead})"
      )
    print(line)


def fedar_bias(folder: str, p: str, methods) -> None:
  """Table 3 from the runs' last evaluation: Mean, Var, Worst / Best 10 % (seed means)."""
  for m in methods:
    runs = fedar_runs(folder, "fedavg_full" if m == "fedavg_full" else f"pmin{p}_{m}")
    if not runs:
      continue
    last = [hist[-1] for _, hist in runs]
    mean = np.mean([100 * h["client_acc_mean"] for h in last])
    var = np.mean([1e4 * h["client_acc_var"] for h in last])
    worst = np.mean([100 * h["client_acc_worst10"] for h in last])
    best = np.mean([100 * h["client_acc_best10"] for h in last])
    print(
      f"{folder}, Table 3 at p_min={p}, {FEDAR_NAMES[m]}: Mean {mean:.1f}, Var {var:.1f}, "
      f"Worst 10 % {worst:.1f}, Best 10 % {best:.1f} ({len(runs)} seeds)"
    )


def fedar_mlp() -> None:
  print("# the MLP study (Fashion-MNIST, 5 seeds)")
  methods = list(FEDAR_NAMES)
  for p in ("0.1", "0.5"):
    fedar_compare(FEDAR_MLP, p, methods)
  fedar_bias(FEDAR_MLP, "0.1", ("fedar", "mifa", "fedvarp", "fedavg_full", "fedavg_is", "scaffold"))
  print("# long absences (mean 10 rounds), p_min = 0.1")
  fedar_compare("fedar_fmnist_mlp_absence10", "0.1", methods)
  print("# Fig. 4: p_min from 0.1 to 0.5")
  for m in ("fedar", "mifa", "fedvarp", "fedavg_is", "scaffold"):
    finals = []
    for p in ("0.1", "0.2", "0.3", "0.4", "0.5"):
      runs = fedar_runs(FEDAR_MLP, f"pmin{p}_{m}")
      if runs:
        finals.append(f"{p}: {np.mean(final_accuracies(runs)):.2f}")
    print(f"Fig. 4, {FEDAR_NAMES[m]}: final test accuracy (%) at p_min " + ", ".join(finals))
  sweep = ("fedar", "mifa", "fedvarp", "fedavg_is", "scaffold")
  finals = {}
  for p in ("0.1", "0.2", "0.3", "0.4", "0.5"):
    runs = {m: fedar_runs(FEDAR_MLP, f"pmin{p}_{m}") for m in sweep}
    if not all(len(r) == 5 for r in runs.values()):
      continue
    acc = {m: np.mean(final_accuracies(r)) for m, r in runs.items()}
    finals[p] = acc["fedar"]
    rank = 1 + sum(acc[m] > acc["fedar"] for m in sweep)
    print(
      f"Fig. 4, p_min={p}: FedAR minus "
      + ", ".join(f"{FEDAR_NAMES[m]} {acc['fedar'] - acc[m]:+.2f}" for m in sweep[1:])
      + f" (FedAR ranks {rank} of {len(sweep)})"
    )
  for m in sweep[1:]:
    ends = [fedar_runs(FEDAR_MLP, f"pmin{p}_{m}") for p in ("0.1", "0.5")]
    if all(len(r) == 5 for r in ends):
      a, b = (np.mean(final_accuracies(r)) for r in ends)
      print(f"Fig. 4: {FEDAR_NAMES[m]}'s final accuracy from p_min 0.1 to 0.5 {b - a:+.2f} points")
  if len(finals) == 5:
    steps = np.diff([finals[p] for p in sorted(finals)])
    print(
      f"Fig. 4: FedAR's final accuracy from p_min 0.1 to 0.5 {finals['0.5'] - finals['0.1']:+.2f} "
      f"points, steps {', '.join(f'{d:+.2f}' for d in steps)}"
    )
  for p in ("0.2", "0.3", "0.4"):
    fedar_compare(FEDAR_MLP, p, sweep)
  print("# Fig. 5: N from 80 to 120 at p_min = 0.1")
  by_n = {}
  for n in (80, 90, 100, 110, 120):
    prefix = "" if n == 100 else f"n{n}_"
    runs = {m: fedar_runs(FEDAR_MLP, f"{prefix}pmin0.1_{m}") for m in sweep}
    if not all(len(r) == 5 for r in runs.values()):
      continue
    by_n[n] = runs
    acc = {m: np.mean(final_accuracies(r)) for m, r in runs.items()}
    loss = {m: np.mean([h[-1]["train_loss"] for _, h in r]) for m, r in runs.items()}
    rank = 1 + sum(acc[m] > acc["fedar"] for m in sweep)
    print(
      f"Fig. 5, N={n}: final test accuracy "
      + ", ".join(f"{FEDAR_NAMES[m]} {acc[m]:.2f}" for m in sweep)
      + f" (FedAR ranks {rank} of {len(sweep)}); final train loss "
      + ", ".join(f"{FEDAR_NAMES[m]} {loss[m]:.3f}" for m in sweep)
    )
  if 80 in by_n and 120 in by_n:
    from scipy import stats

    for m in sweep:
      a80, a120 = (final_accuracies(by_n[n][m]) for n in (80, 120))
      l80, l120 = ([h[-1]["train_loss"] for _, h in by_n[n][m]] for n in (80, 120))
      welch = stats.ttest_ind(a120, a80, equal_var=False).pvalue
      trend = [np.mean(final_accuracies(by_n[n][m])) for n in sorted(by_n)]
      falls = sum(b < a for a, b in zip(trend, trend[1:]))
      change = np.mean(a120) - np.mean(a80)
      print(
        f"Fig. 5, {FEDAR_NAMES[m]} from N=80 to 120: test accuracy {change:+.2f} points "
        f"(Welch's p = {welch:.2g} over seeds; falls in {falls} of {len(trend) - 1} steps), "
        f"train loss {np.mean(l80):.3f} -> {np.mean(l120):.3f}"
      )


# ----------------------------------------------------------------------------- commands
# Tables and figures written from committed files (or, where a command says so, from the
# dataset or a run's checkpoints): ``recompute.py <command> [arguments]``. Unlike the
# studies above they take arguments, and none of them runs without being named.


def repo_imports() -> None:
  """Puts the repository root on ``sys.path``: the commands that build a study import
  ``experiments``, which is not an installed package (``fedjax_sel`` is)."""
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  if root not in sys.path:
    sys.path.insert(0, root)


def usage(command) -> SystemExit:
  """The exit that shows a command's docstring (its usage)."""
  return SystemExit(inspect.cleandoc(command.__doc__))


def flag(argv: list[str], name: str) -> tuple[bool, list[str]]:
  """(whether ``--<name>`` is in argv, argv without it)."""
  rest = [a for a in argv if a != f"--{name}"]
  return len(rest) < len(argv), rest


def accuracy_by_round(cell_dir: str) -> dict[int, float]:
  """{round: test accuracy} from ``cell_dir/metrics.jsonl`` (rounds without one left out)."""
  path = os.path.join(cell_dir, "metrics.jsonl")
  if not os.path.exists(path):
    raise SystemExit(f"no metrics.jsonl in {cell_dir!r}: give a cell's seed<k> folder")
  return {int(r["round"]): float(r["test_accuracy"]) for r in jsonl(path) if "test_accuracy" in r}


def block_means(acc: dict[int, float], spans) -> list[str]:
  """Mean accuracy in % per (first, last) round span, one decimal; '-' for a span with no
  evaluated round."""
  out = []
  for a, b in spans:
    vals = [acc[r] for r in range(a, b + 1) if r in acc]
    out.append(f"{100 * sum(vals) / len(vals):.1f}" if vals else "-")
  return out


def cmd_fedemd_accuracy_blocks(argv: list[str]) -> None:
  """Mean test accuracy (%) per block of rounds, one markdown row a cell (the FedEMD page's
  block tables).

  python docs/reproductions/recompute.py fedemd_accuracy_blocks [--blocks=10,10,...] CELL_DIR...

  CELL_DIR is a cell's seed folder (``.../cells/<scenario>_<method>/seed<k>``) holding the
  ``metrics.jsonl`` the study writes (one line per round, ``test_accuracy`` every round).
  ``--blocks`` gives the block lengths in rounds; the default is the page's (``BLOCKS``):
  10-round blocks through round 60, then 20-round blocks."""
  spans, cells = BLOCKS, []
  for arg in argv:
    if arg.startswith("--blocks="):
      bad = arg.split("=", 1)[1]
      try:
        lengths = [int(b) for b in bad.split(",")]
      except ValueError:
        raise SystemExit(f"--blocks={bad!r}: give integers >= 1, e.g. 20,20") from None
      if not lengths or min(lengths) < 1:
        raise SystemExit(f"--blocks={tuple(lengths)}: give integers >= 1, e.g. 20,20")
      ends = np.cumsum(lengths).tolist()
      spans = [(b - n + 1, b) for n, b in zip(lengths, ends)]
    else:
      cells.append(arg)
  if not cells:
    raise usage(cmd_fedemd_accuracy_blocks)
  rows = [block_means(accuracy_by_round(c), spans) for c in cells]  # all read, then print
  heads = [f"{a}-{b}" for a, b in spans]
  print("| cell | " + " | ".join(heads) + " |")
  print("|---|" + "---|" * len(heads))
  for c, row in zip(cells, rows):
    parts = os.path.normpath(os.path.abspath(c)).split(os.sep)
    name = "/".join(parts[-4:-2:2] + parts[-2:])  # run folder / cell / seed
    print(f"| {name} | " + " | ".join(row) + " |")


def finished_cell(cells_dir: str, scenario: str, method: str, seed: int) -> dict | None:
  """A FedEMD cell's summary plus ``history`` ({round: accuracy}); None if it has not
  finished."""
  folder = os.path.join(cells_dir, f"{scenario}_{method}", f"seed{seed}")
  try:
    with open(os.path.join(folder, "summary.json")) as f:
      summary = json.load(f)
  except FileNotFoundError:
    return None
  if not summary.get("complete"):
    return None
  summary["history"] = accuracy_by_round(folder)
  return summary


def fig4_rows(cells_dir: str, scenarios, seed: int) -> list[str]:
  """The markdown lines of ``fedemd_fig4_table`` (see there)."""
  methods = ("random", "fedemd")
  cells = {(s, m): finished_cell(cells_dir, s, m, seed) for s in scenarios for m in methods}
  reached, best_final, picks = {m: [] for m in methods}, {m: [] for m in methods}, []
  for s in scenarios:
    k = int(s.split("_")[0])
    ref = cells[s, "random"]
    per_method = []
    for m in methods:
      c = cells[s, m]
      if c is None or ref is None:
        reached[m].append("running")
      else:
        r = rounds_to_reach(c["history"], 0.99 * ref["best_test_accuracy"])
        reached[m].append(str(r) if r is not None else f"> {len(c['history'])}")
      best_final[m].append(
        "running"
        if c is None
        else f"{100 * c['best_test_accuracy']:.2f} / {100 * c['final_test_accuracy']:.2f}"
      )
      per_method.append("running" if c is None else str(counts_of(c)[:k].sum()))
    picks.append(" / ".join(per_method))
  done = [c for c in cells.values() if c is not None]
  selections = f" (of {counts_of(done[0]).sum():,} selections)" if done else ""
  return [
    "| | " + " | ".join(s.replace("_", " ") for s in scenarios) + " |",
    "|---|" + "---|" * len(scenarios),
    "| Random R@99 | " + " | ".join(reached["random"]) + " |",
    "| FedEMD R@99 | " + " | ".join(reached["fedemd"]) + " |",
    "| Random best / final acc (%) | " + " | ".join(best_final["random"]) + " |",
    "| FedEMD best / final acc (%) | " + " | ".join(best_final["fedemd"]) + " |",
    f"| Maverick picks Random / FedEMD{selections} | " + " | ".join(picks) + " |",
  ]


def cmd_fedemd_fig4_table(argv: list[str]) -> None:
  """The FedEMD page's Fig. 4 table rows from a study's cells; prints markdown.

  python docs/reproductions/recompute.py fedemd_fig4_table CELLS_DIR [--seed=0] [SCENARIO...]

  CELLS_DIR holds ``<scenario>_<method>/seed<k>/`` folders as ``experiments.fedemd`` writes
  them (``metrics.jsonl`` with ``test_accuracy`` every round, ``summary.json`` with
  ``best_test_accuracy``, ``final_test_accuracy`` and ``sampling_counts``). For each scenario
  (default: 2_excl 3_excl 2_shared 3_shared) it prints R@99 (the first round whose accuracy
  is >= 0.99 x Random's best in the same scenario and seed, as the binary's ``r99.md``),
  best and final accuracy, and the Maverick picks (the first k clients are the Mavericks, k
  from the scenario's name). A cell that has not finished prints "running"."""
  args = [a for a in argv if not a.startswith("--seed=")]
  seeds = [int(a.split("=", 1)[1]) for a in argv if a.startswith("--seed=")]
  if not args:
    raise usage(cmd_fedemd_fig4_table)
  cells_dir, scenarios = args[0], tuple(args[1:]) or FIG4_SCENARIOS
  if not os.path.isdir(cells_dir):
    raise SystemExit(f"no folder {cells_dir!r}: give a study's cells/ folder")
  print("\n".join(fig4_rows(cells_dir, scenarios, seeds[-1] if seeds else 0)))


def fig7_curve(path: str) -> tuple[list[int], list[float]]:
  """(rounds, test accuracy in %) of a trace.jsonl or metrics.jsonl."""
  records = jsonl(path)
  return [r["round"] for r in records], [100 * r["test_accuracy"] for r in records]


def cmd_fedemd_fig7(argv: list[str]) -> None:
  """FedEMD App. A.6 / Fig. 7 from committed files: test accuracy per round of
  i.i.d.-random, size-het-svb, maverick-random and maverick-svb, seed 0 (``FIG7_CURVES``).

  python docs/reproductions/recompute.py fedemd_fig7 [OUT.png]

  The two i.i.d. curves are the supplement's traces; the two Maverick curves are Table 1's
  Random and SVB cells, the same runs as the supplement's cells of those names (``recompute.py
  fedemd`` prints the check, "supplement, fig7"). A curve whose file is not committed is
  left out. Default OUT: ``results/fedemd_fmnist/supplement/fig7/fig7_seed0.png``. Needs
  matplotlib."""
  from fedjax_sel.metrics import results

  out = argv[0] if argv else f"{RESULTS}/{SUPPLEMENT}/fig7/fig7_seed0.png"
  curves = {}
  for label, rel in FIG7_CURVES.items():
    path = f"{RESULTS}/{rel}"
    if os.path.exists(path):
      curves[label] = fig7_curve(path)
    else:
      print(f"{label}: {path} is not committed; left out")
  results.plot_curves(
    curves, out, "FedEMD App. A.6 / Fig. 7, Fashion-MNIST, seed 0", "test accuracy (%)"
  )
  print(f"wrote {out} ({', '.join(curves)})")


MAVERICK_BLOCKS = "fedemd_fmnist/maverick_blocks.md"
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist


def cmd_fedemd_maverick_blocks(argv: list[str]) -> None:
  """Maverick selections per 50-round block, selection only: ``maverick_blocks.md``.

  python docs/reproductions/recompute.py fedemd_maverick_blocks [--write] [FASHION_MNIST_DIR]

  Needs the Fashion-MNIST dataset (the four IDX files; default folder
  /usr/share/datasets/fashion-mnist, where Debian's dataset-fashion-mnist installs them) and
  jax: it replays the cohorts of the FedEMD study's cells (``experiments.fedemd.
  replay_selection``, no training; a few minutes on 2 CPU cores) on the real partitions, for
  both readings of D_c. Random's and FedEMD's cohorts depend neither on the FedAvg weighting
  nor on the lr schedule. Prints the file; ``--write`` writes it to
  ``results/fedemd_fmnist/maverick_blocks.md``."""
  write, args = flag(argv, "write")
  data_dir = args[0] if args else FASHION_MNIST
  repo_imports()
  from experiments import fedemd
  from experiments.configs import fedemd as study_config

  scenarios = ("1_excl", "2_excl", "3_excl", "2_shared", "3_shared")
  rows = []
  for current in ("distribution", "counts"):
    c = study_config.get_config()
    c.fedemd_current = current
    c.maverick_classes = (1, 0, 2)
    c.methods = ("random", "fedemd")
    c.scenarios = scenarios
    c = fedemd.prepare_config(c, data_dir=data_dir)
    pool = fedemd.load_pool(c.base.dataset, c.base.data_dir)
    for scenario in scenarios:
      data = fedemd.maverick_data(c, scenario, pool)
      k = fedemd.parse_scenario(scenario)[0]
      for method in ("random", "fedemd"):
        if method == "random" and current == "counts":
          continue  # Random's cohorts do not depend on the reading
        for seed in (0, 1, 2):
          cfg = fedemd.cell_config(c, method)
          cfg.seed = seed
          cohorts, valid = fedemd.replay_selection(cfg, data, seed)
          per_round = fedemd.counts_per_round(cohorts, valid, 50)[:, :k].sum(1)
          b = per_round.reshape(4, 50).sum(1).tolist()
          reading = current if method == "fedemd" else "(any)"
          name = "FedEMD" if method == "fedemd" else "Random"
          row = [reading, scenario.replace("_", " "), name, seed, *b, int(per_round.sum())]
          rows.append("| " + " | ".join(map(str, row)) + " |")
          print(f"replayed: {rows[-1]}", file=sys.stderr, flush=True)
  text = "\n".join(
    [
      "### FedEMD: Maverick selections per 50-round block (rounds 1-50 / 51-100 / 101-150 / "
      "151-200), selection only",
      "",
      "Replayed with `experiments.fedemd.replay_selection` (no training: Random's and "
      "FedEMD's cohorts do not",
      "depend on the weighting or the lr) on the real Fashion-MNIST partitions, "
      "`maverick_classes=(1,0,2)`.",
      "Command: `python docs/reproductions/recompute.py fedemd_maverick_blocks --write`. "
      "Uniform expectation per",
      "block: 5 x k (k Mavericks).",
      "",
      "| D_c reading | scenario | method | seed | rounds 1-50 | 51-100 | 101-150 | 151-200 | "
      "total |",
      "|---|---|---|---|---|---|---|---|---|",
      *rows,
    ]
  )
  print(text)
  if write:
    with open(f"{RESULTS}/{MAVERICK_BLOCKS}", "w") as f:
      f.write(text + "\n")
    print(f"wrote {RESULTS}/{MAVERICK_BLOCKS}", file=sys.stderr)


def cmd_fedemd_per_class(argv: list[str]) -> None:
  """Per-class test accuracy of FedEMD study cells' checkpoints (a diagnosis, ``per_class.md``).

  python docs/reproductions/recompute.py fedemd_per_class CELL_DIR [CELL_DIR ...]

  CELL_DIR is a run's ``runs/<study>/cells/<cell>/seed<k>``: it needs the run's checkpoints,
  which are never committed (the cells under results/ cannot be read; rerun the study, the
  FedEMD page's commands, to make them), the dataset its config.json names, and jax. Prints
  one line per cell and kept round: the accuracy on the whole test set and per class."""
  if not argv:
    raise usage(cmd_fedemd_per_class)
  repo_imports()
  import jax
  import jax.numpy as jnp
  import ml_collections

  from experiments import fedemd
  from experiments.configs import fedemd as study_config
  from fedjax_sel import experiment
  from fedjax_sel.core import checkpoint

  pool = None
  for folder in argv:
    rounds = checkpoint.all_rounds(folder) if os.path.isdir(folder) else []
    if not rounds:
      raise SystemExit(
        f"no checkpoints in {folder!r}: give a run's runs/<study>/cells/<cell>/seed<k> folder "
        "(results/ holds none)"
      )
    with open(os.path.join(folder, "config.json")) as f:
      cfg = ml_collections.ConfigDict(json.load(f)["config"])
    scenario = os.path.basename(os.path.dirname(folder)).rsplit("_", 1)[0]
    study = study_config.get_config()
    study.base = cfg
    study.maverick_classes = (1, 0, 2)
    if pool is None:
      pool = fedemd.load_pool(cfg.dataset, cfg.data_dir)
    data = fedemd.maverick_data(study, scenario, pool)
    sim, _ = experiment.build(cfg, data)
    state = sim.init(int(cfg.seed))
    tx, ty = jnp.asarray(data.test_x), np.asarray(data.test_y)
    apply = jax.jit(lambda p, x, model=sim.model: jnp.argmax(model.apply(p, x), -1))
    for r in rounds:
      st, _ = checkpoint.restore(folder, state, r)
      pred = np.concatenate(
        [np.asarray(apply(st.params, tx[i : i + 2000])) for i in range(0, len(ty), 2000)]
      )
      per = [100 * np.mean(pred[ty == c] == c) for c in range(10)]
      print(
        f"{folder} round {r}: all {100 * np.mean(pred == ty):.2f}, per class "
        + " ".join(f"{p:.1f}" for p in per),
        flush=True,
      )


PROCESS_STATS = "fl_fdms_fmnist_mlp_markov/process_stats"


def absence_lengths(active: np.ndarray) -> np.ndarray:
  """Lengths of the off runs that start and end inside the window (active: bool[T, N])."""
  out = []
  for column in active.T:
    off = np.concatenate([[False], ~column, [False]]).astype(np.int8)
    starts, ends = np.flatnonzero(np.diff(off) == 1), np.flatnonzero(np.diff(off) == -1)
    out += [e - s for s, e in zip(starts, ends, strict=True) if s > 0 and e < len(column)]
  return np.asarray(out)


def stale_age(active: np.ndarray) -> float:
  """Mean age (rounds since the client's last active round) of the update Stale reuses."""
  last, ages = np.full(active.shape[1], -1), []
  for t, row in enumerate(active):
    dropped = ~row & (last >= 0)
    ages += list(t - last[dropped])
    last[row] = t
  return float(np.mean(ages))


def process_row(name: str, alpha: float, active: np.ndarray, cluster: np.ndarray) -> list[str]:
  """One row of ``process_stats.md``: a dropout process's rollout (active: bool[T, N])."""
  n = active.shape[1]
  off = ~active
  mates = np.stack([(active[:, cluster == cluster[k]]).sum(1) - active[:, k] for k in range(n)], 1)
  pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
  same = np.mean(
    [(active[:, i] & active[:, j]).mean() for i, j in pairs if cluster[i] == cluster[j]]
  )
  other = np.mean(
    [(active[:, i] & active[:, j]).mean() for i, j in pairs if cluster[i] != cluster[j]]
  )
  share = off.mean(1)
  return [
    name,
    f"{alpha:g}",
    f"{off.mean():.3f}",
    f"{share.min():.2f} – {share.max():.2f}",
    f"{absence_lengths(active).mean():.2f}",
    f"{stale_age(active):.2f}",
    f"{100 * (off & (mates == 0)).sum() / off.sum():.1f}",
    f"{100 * same:.1f}",
    f"{100 * other:.1f}",
  ]


def cmd_fl_fdms_process_stats(argv: list[str]) -> None:
  """The two dropout processes of the FL-FDMS study, simulated: ``process_stats.md``.

  python docs/reproductions/recompute.py fl_fdms_process_stats [--write]

  20 clients in 5 contiguous clusters of 4 (the study's set-up), 5,000 rounds from the
  availability key 0, at alpha = 0.3 / 0.5 / 0.7: "redrawn" is ``cluster_dropout`` in
  ``fl_fdms`` mode, "markov" is ``markov_dropout`` with mean_absence = 10, and "markov, one
  per cluster kept" the same with ``keep_per_cluster=5`` (Assumption 5). Needs jax (it
  simulates the processes; no dataset). Prints the table; ``--write`` writes
  ``results/fl_fdms_fmnist_mlp_markov/process_stats.{md,csv}``."""
  write, args = flag(argv, "write")
  if args:
    raise usage(cmd_fl_fdms_process_stats)
  import jax
  import jax.numpy as jnp

  from fedjax_sel import availability
  from fedjax_sel.core.types import ClientInfo
  from fedjax_sel.metrics import results

  n, rounds, mean_absence = 20, 5000, 10.0
  cluster = np.arange(n) // 4
  info = ClientInfo(
    num_examples=jnp.ones((n,), jnp.int32), label_counts=jnp.ones((n, 2), jnp.int32)
  )
  rows = []
  for alpha in (0.3, 0.5, 0.7):
    models = {
      "redrawn": availability.make(
        "cluster_dropout", mode="fl_fdms", dropout_rate=alpha, num_clusters=5
      ),
      "markov": availability.make("markov_dropout", dropout_rate=alpha, mean_absence=mean_absence),
      "markov, one per cluster kept": availability.make(
        "markov_dropout", dropout_rate=alpha, mean_absence=mean_absence, keep_per_cluster=5
      ),
    }
    for name, model in models.items():
      active, _ = availability.rollout(model, info, jax.random.key(0), rounds)
      rows.append(process_row(name, alpha, np.asarray(active), cluster))
  header = [
    "process",
    "α",
    "off share",
    "off share per round (min – max)",
    "mean absence (rounds)",
    "age of Stale's update (rounds)",
    "dropped with no active cluster-mate (%)",
    "cluster-mates both active (%)",
    "other pairs both active (%)",
  ]
  title = (
    f"The FL-FDMS study's dropout processes, {rounds} simulated rounds, 20 clients in 5 "
    f"clusters (markov: mean_absence = {mean_absence:g})"
  )
  if write:
    print(results.write_table(f"{RESULTS}/{PROCESS_STATS}", header, rows, title), end="")
    print(f"wrote {RESULTS}/{PROCESS_STATS}.{{md,csv}}", file=sys.stderr)
  else:
    print(results.markdown_table(header, rows, title), end="")


def cmd_half_precision_curves(argv: list[str]) -> None:
  """The float32 and bfloat16 runs of ``experiments/configs/half_precision.py`` side by side
  (the table "Every evaluation" of ``results/half_precision_fmnist/README.md``).

  python docs/reproductions/recompute.py half_precision_curves [FOLDER]

  FOLDER (default ``results/half_precision_fmnist``) holds ``float32/`` and ``bfloat16/``
  with their ``metrics.jsonl``. Prints a markdown table: test accuracy and loss at each
  evaluated round both runs have, their difference, the non-finite client updates dropped up
  to that round and the seconds up to that round."""
  folder = argv[0] if argv else f"{RESULTS}/half_precision_fmnist"

  def by_round(precision: str) -> dict[int, dict]:
    path = os.path.join(folder, precision, "metrics.jsonl")
    return {r["round"]: r for r in jsonl(path)} if os.path.exists(path) else {}

  full, half = by_round("float32"), by_round("bfloat16")
  print(
    "| round | accuracy f32 | accuracy bf16 | bf16 - f32 (points) | test loss f32 | test loss bf16 "
    "| non-finite updates f32 / bf16 | seconds f32 / bf16 |"
  )
  print("|---|---|---|---|---|---|---|---|")
  for t in sorted(set(full) & set(half)):
    a, b = full[t], half[t]
    print(
      f"| {t} | {100 * a['test_accuracy']:.2f} | {100 * b['test_accuracy']:.2f} | "
      f"{100 * (b['test_accuracy'] - a['test_accuracy']):+.2f} | {a['test_loss']:.3f} | "
      f"{b['test_loss']:.3f} | {a['nonfinite_updates']} / {b['nonfinite_updates']} | "
      f"{a['seconds']:.0f} / {b['seconds']:.0f} |"
    )


STUDIES = {
  "fedgs": fedgs,
  "fl_fdms": fl_fdms,
  "fedemd": fedemd,
  "clustered_sampling": clustered_sampling,
  "fedar": fedar,
}

COMMANDS = {
  "fedemd_accuracy_blocks": cmd_fedemd_accuracy_blocks,
  "fedemd_fig4_table": cmd_fedemd_fig4_table,
  "fedemd_fig7": cmd_fedemd_fig7,
  "fedemd_maverick_blocks": cmd_fedemd_maverick_blocks,
  "fedemd_per_class": cmd_fedemd_per_class,
  "fl_fdms_process_stats": cmd_fl_fdms_process_stats,
  "half_precision_curves": cmd_half_precision_curves,
}

if __name__ == "__main__":
  args = sys.argv[1:]
  if args and args[0] in ("-h", "--help"):
    print(__doc__)
  elif args and args[0] in COMMANDS:
    COMMANDS[args[0]](args[1:])
  else:
    names = args or list(STUDIES)
    unknown = sorted(set(names) - set(STUDIES))
    if unknown:
      raise SystemExit(
        f"unknown studies {unknown}; known: {', '.join(STUDIES)}; or a command first: "
        f"{', '.join(COMMANDS)}"
      )
    for name in names:
      print(f"## {name}")
      STUDIES[name]()

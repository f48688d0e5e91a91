"""Recomputes the derived numbers of the reproduction pages from the committed results.

  python docs/reproductions/recompute.py                 # every paper
  python docs/reproductions/recompute.py fedemd fedgs    # some of them

Run from the repository root. Reads only ``results/`` (the tables' CSV files and the
committed ``cells/<cell>/seed<k>/{metrics.jsonl,summary.json}``) and trains nothing: every
number a page states that is not printed in a committed table comes from here. Standard
deviations are over seeds with ddof=0, as the study binaries compute them.
"""

from __future__ import annotations

import csv
import json
import sys

import numpy as np

RESULTS = "results"


def table(path: str) -> list[dict]:
  with open(f"{RESULTS}/{path}", newline="") as f:
    return list(csv.DictReader(f))


def first(text: str) -> float:
  """``"81.26 ± 0.17"`` -> 81.26; ``">200"`` -> nan."""
  head = text.split("±")[0].strip()
  return float("nan") if head.startswith(">") else float(head)


def cell(folder: str) -> tuple[dict, list[dict]]:
  """(summary, per-evaluation history) of one committed cell/seed folder."""
  with open(f"{RESULTS}/{folder}/summary.json") as f:
    summary = json.load(f)
  with open(f"{RESULTS}/{folder}/metrics.jsonl") as f:
    history = [json.loads(line) for line in f]
  return summary, history


def mean_std(values) -> str:
  a = np.asarray(values, np.float64)
  return f"{a.mean():.2f} ± {a.std():.2f}"


def r99(history: list[dict], reference: list[dict]) -> int | None:
  """First round reaching 99 % of the reference (Random, same seed) run's best accuracy."""
  target = 0.99 * max(r["test_accuracy"] for r in reference)
  return next((r["round"] for r in history if r["test_accuracy"] >= target), None)


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

  rows = table("fedgs_fmnist/rounds500/table2_vs_paper.csv")
  gaps = [abs(float(r["ours - paper"])) for r in rows]
  print(
    f"Fashion-MNIST, 500 rounds: {sum(g <= 0.02 for g in gaps)} of {len(gaps)} cells "
    "within 0.02 of the paper"
  )
  for key in ("ours", "paper"):
    v = {(r["mode"], r["method"]): float(r[key]) for r in rows}
    for m in dict.fromkeys(r["method"] for r in rows):
      print(
        f"  {key:5s} {m:16s}",
        "  ".join(
          f"IDL->{mo} {100 * (v[mo, m] / v['IDL', m] - 1):+.1f} %" for mo in ("YMF0.9", "YC0.9")
        ),
      )
  print(
    "Fashion-MNIST cells, seed 0: optimum (round), accuracy at 500 (best), fluctuation "
    "= mean |change of test loss| between evaluations in rounds 251-500, sampling counts"
  )
  for mode in ("idl", "ymf", "yc"):
    for method in ("uniform", "md", "fedgs_a0", "fedgs_a1"):
      s, h = cell(f"fedgs_fmnist/cells/fashion_mnist-{mode}-{method}/seed0")
      opt = min(h, key=lambda r: r["test_loss"])
      acc = {r["round"]: 100 * r["test_accuracy"] for r in h}
      late = [r["test_loss"] for r in h if r["round"] > 250]
      counts = np.asarray(s["sampling_counts"])
      available = np.mean([r["num_available_mean"] for r in h])
      print(
        f"  {mode:3s} {method:8s} {opt['test_loss']:.4f} (r. {opt['round']}), "
        f"{acc[max(acc)]:.2f} ({max(acc.values()):.2f}), "
        f"{np.mean(np.abs(np.diff(late))):.3f}, {counts.min()}-{counts.max()} "
        f"(std {counts.std():.1f}), available per round {available:.1f}"
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


def fedemd() -> None:
  # Seed 0 of Table 1's cells is not committed: its values come from the seed-0 tables.
  seed0 = {
    "R@99": {r["method"]: first(r["1 excl"]) for r in table("fedemd_fmnist/r99.csv")},
    "final": {r["method"]: first(r["1 excl"]) for r in table("fedemd_fmnist/final_accuracy.csv")},
    "share": {r["method"]: first(r["1 excl"]) for r in table("fedemd_fmnist/maverick_share.csv")},
  }
  per_seed = {(m, k): [seed0[k][m]] for m in ("Random", "FedEMD") for k in seed0}
  for seed in (1, 2):
    _, ref = cell(f"fedemd_fmnist/cells/1_excl_random/seed{seed}")
    for name, key in (("Random", "random"), ("FedEMD", "fedemd")):
      s, h = cell(f"fedemd_fmnist/cells/1_excl_{key}/seed{seed}")
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
  for folder, scenario in (("fedemd_fmnist", "1_excl"), ("fedemd_fmnist_fig4", "2_excl")):
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
    _, ref = cell(f"fedemd_fmnist_fig4/cells/{scenario}_random/seed{seed}")
    for key in ("random", "fedemd"):
      s, h = cell(f"fedemd_fmnist_fig4/cells/{scenario}_{key}/seed{seed}")
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


def clustered_sampling() -> None:
  for name in (
    "clustered_sampling_fmnist/table_one_class.csv",
    "clustered_sampling_fmnist/table_dirichlet.csv",
    "clustered_sampling_fmnist_order/table_one_class.csv",  # both client orders (issue 38)
    "clustered_sampling_fmnist_order/numpy1_ties/table_one_class.csv",
  ):
    rows = table(name)
    for setup in dict.fromkeys(r["Set-up"] for r in rows):
      acc = {r["Method"]: first(r["final test acc (%)"]) for r in rows if r["Set-up"] == setup}
      md = acc.pop("MD sampling", None)
      if md is None:
        continue
      print(
        f"{name.split('/')[0]}, {setup}: final accuracy minus MD's: "
        + ", ".join(f"{m} {v - md:+.2f}" for m, v in acc.items())
      )


def fedar() -> None:
  rows = {r["method"]: r for r in table("fedar_fmnist/accuracy.csv")}
  for p in ("0.1", "0.5"):
    col = f"p_min={p}: final test acc (%)"
    ours = first(rows["FedAR"][col])
    print(
      f"p_min={p}: FedAR minus: "
      + ", ".join(f"{m} {ours - first(r[col]):+.2f}" for m, r in rows.items() if m != "FedAR")
    )


STUDIES = {
  "fedgs": fedgs,
  "fl_fdms": fl_fdms,
  "fedemd": fedemd,
  "clustered_sampling": clustered_sampling,
  "fedar": fedar,
}

if __name__ == "__main__":
  names = sys.argv[1:] or list(STUDIES)
  unknown = sorted(set(names) - set(STUDIES))
  if unknown:
    raise SystemExit(f"unknown studies {unknown}; known: {', '.join(STUDIES)}")
  for name in names:
    print(f"## {name}")
    STUDIES[name]()

r"""This checkout against an earlier commit, side by side, on the experiment binary's runs.

  python -m benchmarks.against_commit --baseline=130459b^ --repeats=3
  python -m benchmarks.against_commit --baseline=main --cases=quickstart --json

The baseline is checked out into a temporary ``git worktree``; each case then runs as a
fresh process in the baseline tree and in this one, alternating (baseline, current,
baseline, current, ...), so load on a shared machine falls on both alike. Each process
imports the package of its own tree (the tree is its working directory and first on
``PYTHONPATH``). Per run: wall seconds of the process, and from its ``summary.json``
``compile_seconds`` (the first block's time beyond the steady rate) and the steady
seconds per round; the medians and the ratios current / baseline are printed, and the
runs' final test losses are compared (equal unless the commits changed the numbers).

Cases: ``quickstart`` (the README's first command: FedAvg on Synthetic(0.5, 0.5), 100
rounds) and ``table2`` (FedGS Table 2's Synthetic protocol on the paper's instance: 30
clients, 6 per round, 10 local steps of B = 10, LN(0.5), FedGS, 200 rounds evaluated
every round).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CASES = {
  "quickstart": ["--rounds=100", "--eval_every=10"],
  "table2": [
    "--synthetic_recipe=fedgs",
    "--num_clients=30",
    "--clients_per_round=6",
    "--local_steps=10",
    "--batch_size=10",
    "--client_lr=0.1",
    "--lr_decay=0.998",
    "--selection=fedgs",
    "--selection_alpha=1.0",
    "--availability=ln",
    "--availability_beta=0.5",
    "--rounds=200",
    "--eval_every=1",
  ],
}


def _root() -> str:
  return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _steady_seconds_per_round(metrics_path: str) -> float | None:
  rows = [json.loads(line) for line in open(metrics_path) if line.strip()]
  if len(rows) < 2:
    return None
  first, last = rows[0], rows[-1]
  return (last["seconds"] - first["seconds"]) / max(last["round"] - first["round"], 1)


def run_once(tree: str, case: str, out: str) -> dict:
  env = dict(os.environ, PYTHONPATH=tree + os.pathsep + os.environ.get("PYTHONPATH", ""))
  env.setdefault("JAX_PLATFORMS", "cpu")
  cmd = [sys.executable, "-m", "experiments.run", *CASES[case], f"--output_dir={out}"]
  t = time.perf_counter()
  proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
  wall = time.perf_counter() - t
  if proc.returncode != 0:
    raise SystemExit(f"{case} failed in {tree}:\n{proc.stderr[-2000:]}")
  summary = json.load(open(os.path.join(out, "summary.json")))
  return {
    "wall_s": wall,
    "compile_s": summary.get("compile_seconds"),
    "round_s": _steady_seconds_per_round(os.path.join(out, "metrics.jsonl")),
    "final_test_loss": summary.get("final_test_loss"),
  }


def _median(rows, key):
  vals = [r[key] for r in rows if r[key] is not None]
  return statistics.median(vals) if vals else None


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--baseline", required=True, help="a git revision, e.g. main or 130459b^")
  p.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
  p.add_argument("--repeats", type=int, default=2)
  p.add_argument("--json", action="store_true", help="one JSON line per case")
  a = p.parse_args(argv)
  cases = [c for c in a.cases.split(",") if c]
  for c in cases:
    if c not in CASES:
      raise SystemExit(f"--cases: {c!r} is not one of {', '.join(CASES)}")
  if a.repeats < 1:
    raise SystemExit(f"--repeats={a.repeats}; allowed: >= 1")
  root = _root()
  rev = subprocess.run(
    ["git", "rev-parse", "--short", a.baseline], cwd=root, capture_output=True, text=True
  )
  if rev.returncode != 0:
    raise SystemExit(f"--baseline={a.baseline!r} is not a revision of this repository")
  tmp = tempfile.mkdtemp(prefix="against_commit_")
  base = os.path.join(tmp, "baseline")
  add = ["git", "worktree", "add", "--detach", "-q", base, a.baseline]
  subprocess.run(add, cwd=root, check=True)
  try:
    for case in cases:
      runs = {"baseline": [], "current": []}
      for i in range(a.repeats):
        for side, tree in (("baseline", base), ("current", root)):
          runs[side].append(run_once(tree, case, os.path.join(tmp, f"{case}_{side}_{i}")))
      row = {
        "case": case,
        "baseline": rev.stdout.strip(),
        "repeats": a.repeats,
        "load_avg": os.getloadavg(),
      }
      for side in runs:
        for key in ("wall_s", "compile_s", "round_s"):
          row[f"{side}_{key}"] = _median(runs[side], key)
      for key in ("wall_s", "compile_s", "round_s"):
        b, c = row[f"baseline_{key}"], row[f"current_{key}"]
        row[f"ratio_{key}"] = c / b if b and c is not None else None
      losses = {r["final_test_loss"] for side in runs for r in runs[side]}
      row["same_final_test_loss"] = len(losses) == 1
      if a.json:
        print(json.dumps(row), flush=True)
      else:
        print(
          f"{case}: wall {row['baseline_wall_s']:.1f} s -> {row['current_wall_s']:.1f} s "
          f"(x{row['ratio_wall_s']:.2f}); compile x{row['ratio_compile_s'] or float('nan'):.2f}; "
          f"round x{row['ratio_round_s'] or float('nan'):.2f}; same final loss: "
          f"{row['same_final_test_loss']}; load {row['load_avg'][0]:.1f}",
          flush=True,
        )
  finally:
    subprocess.run(["git", "worktree", "remove", "--force", base], cwd=root)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
  main()

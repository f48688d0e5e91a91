"""The FedEMD page's Fig. 4 table rows from a study's cells; prints markdown.

  python results/fedemd_fmnist/scripts/fig4_table.py CELLS_DIR [--seed=0] [SCENARIO...]

CELLS_DIR holds ``<scenario>_<method>/seed<k>/`` folders as ``experiments.fedemd`` writes
them (``metrics.jsonl`` with ``test_accuracy`` every round, ``summary.json`` with
``best_test_accuracy``, ``final_test_accuracy`` and ``sampling_counts``). For each scenario
(default: 2_excl 3_excl 2_shared 3_shared) it prints R@99 (the first round whose accuracy is
>= 0.99 x Random's best in the same scenario and seed, as the binary's ``r99.md``), best and
final accuracy, and the Maverick picks (the first k clients are the Mavericks, k from the
scenario's name). A cell that has not finished prints "running". Standard library only.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accuracy_blocks import read_accuracy  # noqa: E402  (the sibling script)

METHODS = ("random", "fedemd")
DEFAULT_SCENARIOS = ("2_excl", "3_excl", "2_shared", "3_shared")


def load_cell(cells_dir: str, scenario: str, method: str, seed: int) -> dict | None:
  """The cell's summary plus ``history`` ({round: accuracy}); None if it has not finished."""
  cell = os.path.join(cells_dir, f"{scenario}_{method}", f"seed{seed}")
  try:
    with open(os.path.join(cell, "summary.json")) as f:
      summary = json.load(f)
  except FileNotFoundError:
    return None
  if not summary.get("complete"):
    return None
  summary["history"] = read_accuracy(cell)
  return summary


def rounds_to_reach(history: dict[int, float], target: float) -> int | None:
  """The first evaluated round whose accuracy is >= target (None if none is)."""
  return next((r for r in sorted(history) if history[r] >= target), None)


def sampling_counts(summary: dict) -> list[int]:
  """Selections per client over the run (``summary.json`` stores the list as a string)."""
  counts = summary["sampling_counts"]
  return [int(c) for c in (json.loads(counts) if isinstance(counts, str) else counts)]


def rows(cells_dir: str, scenarios, seed: int) -> list[str]:
  cells = {(s, m): load_cell(cells_dir, s, m, seed) for s in scenarios for m in METHODS}
  r99, best_final, picks = {m: [] for m in METHODS}, {m: [] for m in METHODS}, []
  for s in scenarios:
    k = int(s.split("_")[0])
    ref = cells[s, "random"]
    per_method = []
    for m in METHODS:
      cell = cells[s, m]
      if cell is None or ref is None:
        r99[m].append("running")
      else:
        reached = rounds_to_reach(cell["history"], 0.99 * ref["best_test_accuracy"])
        r99[m].append(str(reached) if reached is not None else f"> {len(cell['history'])}")
      best_final[m].append(
        "running"
        if cell is None
        else f"{100 * cell['best_test_accuracy']:.2f} / {100 * cell['final_test_accuracy']:.2f}"
      )
      per_method.append("running" if cell is None else str(sum(sampling_counts(cell)[:k])))
    picks.append(" / ".join(per_method))
  done = [c for c in cells.values() if c is not None]
  selections = f" (of {sum(sampling_counts(done[0])):,} selections)" if done else ""
  return [
    "| | " + " | ".join(s.replace("_", " ") for s in scenarios) + " |",
    "|---|" + "---|" * len(scenarios),
    "| Random R@99 | " + " | ".join(r99["random"]) + " |",
    "| FedEMD R@99 | " + " | ".join(r99["fedemd"]) + " |",
    "| Random best / final acc (%) | " + " | ".join(best_final["random"]) + " |",
    "| FedEMD best / final acc (%) | " + " | ".join(best_final["fedemd"]) + " |",
    f"| Maverick picks Random / FedEMD{selections} | " + " | ".join(picks) + " |",
  ]


def main(argv: list[str]) -> None:
  args = [a for a in argv if not a.startswith("--seed=")]
  seeds = [int(a.split("=", 1)[1]) for a in argv if a.startswith("--seed=")]
  if not args:
    raise SystemExit(__doc__)
  cells_dir, scenarios = args[0], tuple(args[1:]) or DEFAULT_SCENARIOS
  if not os.path.isdir(cells_dir):
    raise SystemExit(f"no folder {cells_dir!r}: give a study's cells/ folder")
  print("\n".join(rows(cells_dir, scenarios, seeds[-1] if seeds else 0)))


if __name__ == "__main__":
  main(sys.argv[1:])

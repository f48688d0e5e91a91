"""Prints the float32 and bfloat16 runs of ``experiments/configs/half_precision.py`` side by
side (a Markdown table: test accuracy and loss at each evaluated round, their difference,
the non-finite client updates dropped so far, seconds so far) from the folders' metrics.jsonl.

  python results/half_precision_fmnist/curves.py [folder]   # default: this script's folder
"""

from __future__ import annotations

import json
import os
import sys


def read(path: str) -> dict[int, dict]:
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return {r["round"]: r for r in rows}


def table(folder: str) -> str:
  full = read(os.path.join(folder, "float32", "metrics.jsonl"))
  half = read(os.path.join(folder, "bfloat16", "metrics.jsonl"))
  lines = [
    "| round | accuracy f32 | accuracy bf16 | bf16 - f32 (points) | test loss f32 | test loss bf16 "
    "| non-finite updates f32 / bf16 | seconds f32 / bf16 |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for t in sorted(set(full) & set(half)):
    a, b = full[t], half[t]
    lines.append(
      f"| {t} | {100 * a['test_accuracy']:.2f} | {100 * b['test_accuracy']:.2f} | "
      f"{100 * (b['test_accuracy'] - a['test_accuracy']):+.2f} | {a['test_loss']:.3f} | "
      f"{b['test_loss']:.3f} | {a['nonfinite_updates']} / {b['nonfinite_updates']} | "
      f"{a['seconds']:.0f} / {b['seconds']:.0f} |"
    )
  return "\n".join(lines)


if __name__ == "__main__":
  print(table(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))))

"""FedEMD App. A.6 / Fig. 7 from committed files: test accuracy per round of i.i.d.-random,
size-het-svb, maverick-random and maverick-svb, seed 0.

  python results/fedemd_fmnist/scripts/fig7_plot.py [OUT.png]

The two i.i.d. curves are the supplement's traces (``supplement/fig7/cells/<cell>/seed0/
trace.jsonl``); the two Maverick curves are Table 1's Random and SVB cells, which are the
same runs as the supplement's cells of those names (their configs differ only in ``rounds``,
the output folder and reporting switches, and their accuracy equals the supplement's Fig. 5 /
Fig. 6 traces in every traced round: ``docs/reproductions/recompute.py fedemd`` prints the
check). A curve
whose file is not committed is left out. Default OUT:
``results/fedemd_fmnist/supplement/fig7/fig7_seed0.png``.
"""

import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, ROOT)
from fedjax_sel.metrics import results  # noqa: E402

FEDEMD = os.path.join(ROOT, "results", "fedemd_fmnist")
TABLE1 = "text_reading_lr_per_round_default"
CURVES = {  # label: its per-round file under results/fedemd_fmnist/
  "i.i.d.-random": "supplement/fig7/cells/iid_random/seed0/trace.jsonl",
  "size-het-svb": "supplement/fig7/cells/iid_sizehet_shapley/seed0/trace.jsonl",
  "maverick-random": f"{TABLE1}/table1/cells/1_excl_random/seed0/metrics.jsonl",
  "maverick-svb": f"{TABLE1}/svb/cells/1_excl_shapley/seed0/metrics.jsonl",
}


def curve(path: str) -> tuple[list[int], list[float]]:
  """(rounds, test accuracy in %) of a trace.jsonl or metrics.jsonl."""
  with open(path) as f:
    records = [json.loads(line) for line in f if line.strip()]
  return [r["round"] for r in records], [100 * r["test_accuracy"] for r in records]


def main(out: str) -> None:
  curves = {}
  for label, rel in CURVES.items():
    path = os.path.join(FEDEMD, rel)
    if os.path.exists(path):
      curves[label] = curve(path)
    else:
      print(f"{label}: {os.path.relpath(path, ROOT)} is not committed; left out")
  results.plot_curves(
    curves, out, "FedEMD App. A.6 / Fig. 7, Fashion-MNIST, seed 0", "test accuracy (%)"
  )
  print(f"wrote {os.path.relpath(out, ROOT)} ({', '.join(curves)})")


if __name__ == "__main__":
  main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(FEDEMD, "supplement/fig7/fig7_seed0.png"))

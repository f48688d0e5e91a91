"""Mean test accuracy (%) per block of rounds, one markdown row a cell (the FedEMD page).

  python results/fedemd_fmnist/scripts/accuracy_blocks.py [--blocks=10,10,...] CELL_DIR...

CELL_DIR is a cell's seed folder (``.../cells/<scenario>_<method>/seed<k>``) holding the
``metrics.jsonl`` the study writes (one line per round, ``test_accuracy`` every round).
``--blocks`` gives the block lengths in rounds; the default is the FedEMD page's: 10-round
blocks through round 60, then 20-round blocks. Needs only the standard library.
"""

import json
import os
import sys

DEFAULT_BLOCKS = (10,) * 6 + (20,) * 7


def read_accuracy(cell_dir: str) -> dict[int, float]:
  """{round: test accuracy} from ``cell_dir/metrics.jsonl`` (rounds without one left out)."""
  path = os.path.join(cell_dir, "metrics.jsonl")
  if not os.path.exists(path):
    raise SystemExit(f"no metrics.jsonl in {cell_dir!r}: give a cell's seed<k> folder")
  out = {}
  with open(path) as f:
    for line in f:
      row = json.loads(line)
      if "test_accuracy" in row:
        out[int(row["round"])] = float(row["test_accuracy"])
  return out


def block_means(acc: dict[int, float], blocks) -> list[str]:
  """Mean accuracy in % per block, one decimal; '-' for a block with no evaluated round."""
  out, start = [], 1
  for length in blocks:
    vals = [acc[r] for r in range(start, start + length) if r in acc]
    out.append(f"{100 * sum(vals) / len(vals):.1f}" if vals else "-")
    start += length
  return out


def main(argv: list[str]) -> None:
  blocks = DEFAULT_BLOCKS
  cells = []
  for arg in argv:
    if arg.startswith("--blocks="):
      try:
        blocks = tuple(int(b) for b in arg.split("=", 1)[1].split(","))
      except ValueError:
        bad = arg.split("=", 1)[1]
        raise SystemExit(f"--blocks={bad!r}: give integers >= 1, e.g. 20,20") from None
      if not blocks or min(blocks) < 1:
        raise SystemExit(f"--blocks={blocks}: give integers >= 1, e.g. 20,20")
    else:
      cells.append(arg)
  if not cells:
    raise SystemExit(__doc__)
  rows = [block_means(read_accuracy(cell), blocks) for cell in cells]  # all read, then print
  heads, start = [], 1
  for length in blocks:
    heads.append(f"{start}-{start + length - 1}")
    start += length
  print("| cell | " + " | ".join(heads) + " |")
  print("|---|" + "---|" * len(heads))
  for cell, row in zip(cells, rows):
    parts = os.path.normpath(os.path.abspath(cell)).split(os.sep)
    name = "/".join(parts[-4:-2:2] + parts[-2:])  # run folder / cell / seed
    print(f"| {name} | " + " | ".join(row) + " |")


if __name__ == "__main__":
  main(sys.argv[1:])

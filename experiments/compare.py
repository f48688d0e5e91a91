r"""Compares finished (or running) runs side by side: one table on stdout, one plot.

  python -m experiments.compare runs/fedgs_ln runs/uniform_ln
  python -m experiments.compare runs/seeds_fedgs runs/seeds_uniform --metric=test_accuracy \
      --output=runs/fedgs_vs_uniform.png --format=csv > runs/fedgs_vs_uniform.csv

Each folder is a run folder of ``experiments.run`` (or of a study binary) or a ``--seeds``
folder (its ``seed<k>/`` runs). The table has the final and best test loss and accuracy
(mean ± std over seeds), rounds, seconds per round and the config values in which the runs
differ (``fedjax_sel.metrics.results.compare``); the plot has each folder's ``--metric``
curve (mean over seeds, a band of ± one std). With ``--output_dir`` the table is also
written there as compare.md and compare.csv, and the plot goes there unless ``--output``
says otherwise. Exit code 2 on bad input, with one line on stderr.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from experiments import common
from fedjax_sel.metrics import results

FORMATS = ("md", "csv")

flags.DEFINE_string(
  "metric",
  "test_loss",
  "field of metrics.jsonl to plot against rounds (e.g. test_loss, test_accuracy, train_loss, "
  "client_acc_worst10); a field other than test loss/accuracy also gets a table column",
)
flags.DEFINE_string(
  "output",
  "",
  "path of the plot (PNG); default: compare.png in --output_dir, or in the current folder",
)
flags.DEFINE_string("format", "md", "table format on stdout: md (Markdown) or csv")
flags.DEFINE_string(
  "output_dir", "", "also write the table there as compare.md and compare.csv ('' = don't)"
)
FLAGS = flags.FLAGS

USAGE = "give one or more run folders, e.g. python -m experiments.compare runs/a runs/b"


def plot_path() -> str:
  if FLAGS.output:
    return FLAGS.output
  return os.path.join(FLAGS.output_dir, "compare.png") if FLAGS.output_dir else "compare.png"


def check_flags(argv: list[str]) -> list[str]:
  """The folders to compare; ValueError with one line for a bad flag value."""
  folders = argv[1:]
  if not folders:
    raise ValueError(f"no folders to compare; {USAGE}")
  if FLAGS.format not in FORMATS:
    raise ValueError(f"--format={FLAGS.format!r}; allowed: {', '.join(FORMATS)}")
  if not FLAGS.metric or FLAGS.metric == "round":
    raise ValueError(f"--metric={FLAGS.metric!r}; allowed: a metric field of metrics.jsonl")
  path = plot_path()
  if not path.lower().endswith(".png"):
    raise ValueError(f"--output={path!r}: the plot is a PNG; allowed: a path ending in .png")
  if os.path.isdir(path):
    raise ValueError(f"--output={path!r} is a folder; allowed: a file path ending in .png")
  if FLAGS.output_dir and os.path.exists(FLAGS.output_dir) and not os.path.isdir(FLAGS.output_dir):
    raise ValueError(f"--output_dir={FLAGS.output_dir!r} is a file; allowed: a folder")
  return folders


def main(argv):
  folders = common.checked(check_flags, argv)
  rows = common.checked(results.compare, folders, metric=FLAGS.metric)  # ValueError: bad folders
  print(results.compare_table(rows, FLAGS.format), end="")
  path = plot_path()
  results.plot_compare(rows, path)
  if FLAGS.output_dir:
    for fmt in FORMATS:
      results.atomic_write_text(
        os.path.join(FLAGS.output_dir, f"compare.{fmt}"), results.compare_table(rows, fmt)
      )
  print(f"plot: {path}", file=sys.stderr)


if __name__ == "__main__":
  app.run(main, flags_parser=common.parse_flags)

"""FedEMD App. A.6 / Fig. 7 from committed files (``recompute.py fedemd_fig7``).

Its two Maverick curves are Table 1's Random and SVB cells, not the supplement's own traces:
that rests on the two being the same runs, which these tests check on the committed files
(the configs differ only in the round count, the output folder and reporting switches, and
the accuracy is equal in every round the supplement traced).
"""

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
RECOMPUTE = ROOT / "docs" / "reproductions" / "recompute.py"
SUPPLEMENT = RESULTS / "fedemd_fmnist" / "supplement"
# a Maverick curve of Fig. 7 -> the supplement trace of the same cell that was committed
SAME_RUN = {
  "maverick-random": "fig6_15_rounds/cells/1_excl_random/seed0",
  "maverick-svb": "fig5_20_rounds/cells/1_excl_shapley/seed0",
}
# config fields that may differ: the length, where it is written, what it reports
MAY_DIFFER = {"rounds", "output_dir", "client_accuracy", "half_precision"}


def load_script():
  spec = importlib.util.spec_from_file_location("recompute", RECOMPUTE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def flat(d: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
  return out


@pytest.mark.parametrize("label", sorted(SAME_RUN))
def test_the_maverick_curves_are_the_supplements_runs(label):
  fig7 = load_script()
  cell = (RESULTS / fig7.FIG7_CURVES[label]).parent
  traced = SUPPLEMENT / SAME_RUN[label]
  ours = flat(json.loads((cell / "config.json").read_text())["config"])
  theirs = flat(json.loads((traced / "config.json").read_text())["config"])
  differ = {k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k)}
  assert {k.rsplit(".", 1)[-1] for k in differ} <= MAY_DIFFER, differ
  rounds, acc = fig7.fig7_curve(str(RESULTS / fig7.FIG7_CURVES[label]))
  t_rounds, t_acc = fig7.fig7_curve(str(traced / "trace.jsonl"))
  assert rounds == list(range(1, 201)) and t_rounds == list(range(1, len(t_rounds) + 1))
  # one test image is 0.01 points; the cells store float32, the traces float64
  assert acc[: len(t_acc)] == pytest.approx(t_acc, abs=1e-4)


def test_the_plot_holds_every_committed_curve(tmp_path):
  fig7 = load_script()
  out = tmp_path / "fig7.png"
  printed = subprocess.run(
    [sys.executable, str(RECOMPUTE), "fedemd_fig7", str(out)],
    cwd=ROOT,
    capture_output=True,
    text=True,
    check=True,
  ).stdout
  committed = [label for label, rel in fig7.FIG7_CURVES.items() if (RESULTS / rel).exists()]
  assert out.stat().st_size > 0 and len(committed) >= 3
  assert f"({', '.join(committed)})" in printed

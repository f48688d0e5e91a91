"""docs/reproductions/recompute.py prints the pages' derived numbers from the committed files.

Each case pairs a line that the script prints from ``results/`` with the rounded form the
page shows, so a page number that drifts from the files, or a script that stops printing it,
fails here. The script trains nothing; the whole run takes about a second.
"""

import contextlib
import importlib.util
import io
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "reproductions"


@pytest.fixture(scope="module")
def printed() -> dict[str, str]:
  spec = importlib.util.spec_from_file_location("recompute", DOCS / "recompute.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  out = {}
  cwd = os.getcwd()
  os.chdir(ROOT)
  try:
    for name, study in module.STUDIES.items():
      buffer = io.StringIO()
      with contextlib.redirect_stdout(buffer):
        study()
      out[name] = buffer.getvalue()
  finally:
    os.chdir(cwd)
  return out


CASES = [
  # (study, printed by the script, shown on the page, page)
  ("fedgs", "39 of 45 cells within 0.02", "39 of 45 cells", "fedgs.md"),
  ("fedgs", "6 of 12 cells within 0.02", "6 of 12 cells", "fedgs.md"),
  (
    "fedemd",
    "Table 1, StepLR per round, seeds 0-2, fedemd: R@99 125.33 ± 26.79",
    "125.3 ± 26.8",
    "fedemd.md",
  ),
  (
    "fedemd",
    "Table 1, StepLR per round, seeds 0-2, random: R@99 105.00 ± 2.16",
    "105.0 ± 2.2",
    "fedemd.md",
  ),
  (
    "fedemd",
    "Table 1, StepLR per participation, seeds 0-2, random: R@99 95.00 ± 12.03",
    "95.0 ± 12.0",
    "fedemd.md",
  ),
  ("fedemd", "Table 1, seeds 0-2, Random: R@99 124.67 ± 30.18", "124.7 ± 30.2", "fedemd.md"),
  ("fedemd", "text's reading, seed 0: the eight cells took 3.7 h", "costs 3.7 h", "fedemd.md"),
  ("fedemd", "first reading, seed 0: the eight cells took 3.3 h", "3.3 h under the", "fedemd.md"),
  (
    "fedemd",
    "ahead of Random in 49 of 200 evaluations, the last at round 99",
    "ahead in 49 of the\n200 evaluations, the last at round 99",
    "fedemd.md",
  ),
  (
    "fedemd",
    "plain mean, seed 0, fedemd: rounds 1-10 71.4, 11-20 78.6, best 89.69 (round 102)",
    "Its best is 89.69 % (round 102)",
    "fedemd.md",
  ),
  ("fedemd", "(own target 90.51), first round at", "90.51 %) | 148 |", "fedemd.md"),
  (
    "fl_fdms",
    "Stale: lost from α=0.3 to 0.7: final 0.77 (81.22 → 80.45), mean acc 0.54",
    "(0.54 points, FL-FDMS 1.53, Dropout 2.44)",
    "fl_fdms.md",
  ),
  ("fl_fdms", "FL-FDMS - Stale: final +0.44, mean acc -1.11", "−1.11", "fl_fdms.md"),
  ("fedar", "FedVARP +0.03 points, seed std 0.05 / 0.07", "0.03-0.07 at 0.5", "fedar.md"),
  ("clustered_sampling", "Alg. 1 (sample size) +5.74", "(+5.74", "clustered_sampling.md"),
  (
    "clustered_sampling",
    "MD sampling -9.19, Alg. 1 (sample size) -3.45",
    "3.45 below target",
    "clustered_sampling.md",
  ),
  ("clustered_sampling", "exact minus sketched: -0.49", "| -0.49 |", "clustered_sampling.md"),
  ("clustered_sampling", "Alg. 2 (Arccos) +8.13", "+8.13 (α = 0.001)", "clustered_sampling.md"),
  ("fedar", "p = 0.22", "p = 0.22-0.65", "fedar.md"),
  ("fedar", "p = 0.65", "p = 0.22-0.65", "fedar.md"),
]


@pytest.mark.parametrize("study, line, shown, page", CASES)
def test_the_script_prints_what_the_page_shows(printed, study, line, shown, page):
  assert line in printed[study], f"recompute.py {study} no longer prints {line!r}"
  assert shown in (DOCS / page).read_text(), f"{page} no longer shows {shown!r}"


def test_fedemd_prints_both_readings_and_both_lr_units(printed):
  text = printed["fedemd"]
  for heading in ("# the text's reading", "# the first reading"):
    assert heading in text
  for unit in ("StepLR per round", "StepLR per participation"):
    for seed in (0, 1, 2):
      assert f"Table 1, {unit}, seed {seed}, fedemd: R@99" in text


def test_an_unknown_study_is_refused_with_the_known_names():
  result = subprocess.run(
    [sys.executable, str(DOCS / "recompute.py"), "fedemdd"],
    cwd=ROOT,
    capture_output=True,
    text=True,
  )
  assert result.returncode != 0
  assert "unknown studies ['fedemdd']" in result.stderr and "fedemd" in result.stderr

"""docs/reproductions/recompute.py prints the pages' derived numbers from the committed files.

Each case pairs a line that the script prints from ``results/`` with the rounded form the
page shows, so a page number that drifts from the files, or a script that stops printing it,
fails here. Beyond the pairs, every number in every section of each page must be printed by
the script or stand in a committed table of that paper's study, unless an explicit
allow-list entry (the paper's own numbers, set-up constants, cost estimates) says why. The script
trains nothing; the whole run takes a few seconds.
"""

import contextlib
import importlib.util
import io
import os
import pathlib
import re
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
    "fedemd_appendix.md",
  ),
  (
    "fedemd",
    "Table 1, seeds 0-2, Random: R@99 124.67 ± 30.18",
    "124.7 ± 30.2",
    "fedemd_appendix.md",
  ),
  ("fedemd", "text's reading, seed 0: the eight cells took 3.7 h", "costs 3.7 h", "fedemd.md"),
  ("fedemd", "first reading, seed 0: the eight cells took 3.3 h", "3.3 h under the", "fedemd.md"),
  (
    "fedemd",
    "ahead of Random in 49 of 200 evaluations, the last at round 99",
    "ahead in 49 of the\n200 evaluations, the last at round 99",
    "fedemd_appendix.md",
  ),
  (
    "fedemd",
    "plain mean, seed 0, fedemd: rounds 1-10 71.4, 11-20 78.6, best 89.69 (round 102)",
    "Its best is 89.69 % (round 102)",
    "fedemd_appendix.md",
  ),
  (
    "fedemd",
    "(own target 90.51), first round at",
    "90.51 %) | 148 |",
    "fedemd_appendix.md",
  ),
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
  ("fedgs", "a 500-round run 14.6-14.9 min", "takes about 15 minutes", "fedgs.md"),
  ("fedgs", "the 12 runs of the seed 3.0 h", "runs of one seed take about 3 hours", "fedgs.md"),
  (
    "fedgs",
    "81 runs, at their mean rate 20 h",
    "(81 runs) would take about\n  20 hours",
    "fedgs.md",
  ),
  ("fedemd", "random: 6.0-19.2 s/round", "6.0-19.2 s/round for Random", "fedemd_appendix.md"),
  ("fedemd", "fedemd: 6.1-22.9 s/round", "6.1-22.9 s/round\nfor FedEMD", "fedemd_appendix.md"),
  (
    "fedemd",
    "random: 9.7 s/round on average over its seed-0",
    "9.7\non average in its committed seed-0",
    "fedemd_appendix.md",
  ),
  ("fedemd", "best accuracy at rounds 174-195", "(rounds 174-195", "fedemd_appendix.md"),
  # the run times in clustered_sampling.md's commands (comments in a code block)
  (
    "clustered_sampling",
    "fmnist_order: the 30 runs' programs took 81 min",
    "updates (81 min on two shared CPU cores)",
    "clustered_sampling.md",
  ),
  (
    "clustered_sampling",
    "numpy1_ties: the 9 runs' programs took 8 min",
    "(8 min)",
    "clustered_sampling.md",
  ),
  (
    "clustered_sampling",
    "dirichlet_exact: the 12 runs' programs took 29 min",
    "(29 min)",
    "clustered_sampling.md",
  ),
  (
    "fedemd",
    "seed 1, Random: test accuracy at rounds 1-3 64.03 / 67.49 / 69.52 %",
    "the committed 64.03 / 67.49 / 69.52 %",
    "fedemd_appendix.md",
  ),
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


# Every number a page states in any of its sections (from the first "## " heading on: the
# summary, About, Set-up, How to run, Results, Verdict per claim, Deviations, Figures) is
# either printed by recompute.py or written in a committed table of that paper's study (its
# *.md and *.csv under results/, not the per-run cell files nor the per-round participation
# series), unless an allow-list entry below says why it stands. Code blocks, inline code and
# link targets hold commands and paths, not results, and are not read.
RESULTS = {
  "fedgs": ("fedgs_table2", "fedgs_fmnist", "fedgs_table3_fmnist"),
  "fl_fdms": (
    "fl_fdms_fmnist_mlp",
    "fl_fdms_fmnist_mlp_markov",
    "fl_fdms_fmnist_mlp_oracle",
    "fl_fdms_fmnist_mlp_general",
    "fl_fdms_fmnist_mlp_general_markov",
  ),
  "fedemd": ("fedemd_fmnist",),
  "clustered_sampling": ("clustered_sampling_fmnist", "clustered_sampling_fmnist_order"),
  "fedar": ("fedar_fmnist", "fedar_fmnist_mlp", "fedar_fmnist_mlp_absence10"),
}
# Each paper's pages under docs/reproductions/: its page, and an appendix where one holds the
# readings that are not the default; every number on each is checked against the paper's study.
PAGES = {paper: (f"{paper}.md",) for paper in RESULTS}
PAGES["fedemd"] = ("fedemd.md", "fedemd_appendix.md")


def page_texts(paper: str) -> dict[str, str]:
  return {page: (DOCS / page).read_text() for page in PAGES[paper]}


NUMBER = re.compile(
  r"(?<![\w.])[+−-]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+(?:\.\d+)?)(?![\d.]\d|[A-Za-wyz_])"
)
# references, not measurements: "Fig. 4", "Table 3", "Sec. 3.2", "§17", "α = 0.3", ...
REFERENCE = re.compile(
  r"(?:Fig\.|Figs?\.|Table|Tables|Eq\.|Sec\.|App\.|Appendix|Alg\.|Algorithm|Algorithms|Theorem|"
  r"Assumption|Step|step|[Cc]laims?|§|Case)\s*[\dA-Z][\w.]*(?:\s*(?:and|-|,|/)\s*\d+)*"
  r"|\b(?:seeds?|α|p_min|μ|ε|σ²|ρ|k)\s*[=≤<>]*\s*\d[\d.]*(?:\s*(?:,|/|-|and)\s*\d[\d.]*)*"
  r"|\b(?:CIFAR|ResNet|LeNet|AVX)-\d+|NumPy\s*(?:>=\s*)?[\dx.]+|\b20\d\d\b"
)
# Subsections that hold no result of a committed run, with the reason.
SKIPPED = {
  (
    "fedgs",
    "### Table 2, Fashion-MNIST, released protocol: why PyTorch's initialisation",
  ): "a check's runs, not committed",
  ("fedgs", "### Table 2, Fashion-MNIST, released protocol: the runs and their cost"): "a plan",
}
# the reason of a number the verdict engine prints (quoted outside its generated blocks)
ENGINE = "printed by python -m experiments.claims"
# the reason of the FedEMD appendix's "Seconds per round" rows
ROUND_COST = "a 3-round timing (python -m benchmarks.fedemd_round_cost), not committed"
# the reason of the FedEMD appendix's cost of TiFL's and FedFast's readings of the authors' code
AUTHORS_COST = "a 5-round timing of benchmarks.fedemd_overhead's authors' variants, not committed"
# Lines (the one page line that starts with the text: a table row alone, otherwise its whole
# paragraph or list item, to the next blank line or item) whose every number is a set-up
# constant, the paper's number or a cost estimate, with the reason. A line that also states a
# result of a run is not listed here: its other numbers are allowed one by one in ALLOWED.
LINES = {
  # fedgs, Set-up: the paper's protocol (Sec. 5, App. C) and our copy of it
  ("fedgs", "| data, Synthetic column |"): "set-up: 30 clients, the authors' 75/15/10 split",
  ("fedgs", "| data, Fashion-MNIST column |"): "set-up: the task's client counts and sizes, "
  "MNIST's normalisation constants",
  ("fedgs", "| CIFAR-10 column |"): "the paper's CIFAR-10 partition, not run",
  ("fedgs", "| clients N / per round M |"): "set-up: N and M",
  ("fedgs", "| local work |"): "set-up: E and B",
  ("fedgs", "| learning rate |"): "set-up: lr and its decay",
  ("fedgs", "| rounds |"): "set-up: rounds",
  ("fedgs", "| evaluation |"): "set-up: evaluation period",
  ("fedgs", "| availability |"): "set-up: availability seeds and the YC periods",
  ("fedgs", "| rows |"): "set-up: the rows' α and μ",
  ("fedgs", "| protocol details |"): "the released code's constants (kernel, thresholds)",
  # fl_fdms, Set-up
  ("fl_fdms", "| partition |"): "set-up: clients, groups, classes and images per client",
  ("fl_fdms", "| clients N / per round M |"): "set-up: N",
  ("fl_fdms", "| local work, lr, rounds |"): "set-up: epochs, batch, lr, rounds",
  ("fl_fdms", "| CR constants |"): "set-up: Theorem 2's constants we chose",
  # fedemd, Set-up
  ("fedemd", "| partition, Table 1 |"): "set-up: the paper's K and our client sizes",
  ("fedemd", "| clients N / per round M |"): "set-up: N and M",
  ("fedemd", "| local work |"): "set-up: the paper's local work and StepLR constants",
  ("fedemd", "| FedEMD | α = 0.15, β = 0.0015;"): "set-up: the paper's α and β",
  ("fedemd", "| rounds, evaluation |"): "set-up: rounds and replications",
  # clustered_sampling, Set-up
  ("clustered_sampling", "| partition, Fig. 1 |"): "set-up: clients and samples per client",
  ("clustered_sampling", "| client ids, Fig. 1 |"): "set-up: the authors' client numbering",
  ("clustered_sampling", "| partition, Fig. 2 |"): "set-up: the paper's groups, sizes and α",
  ("clustered_sampling", "| clients N / per round m |"): "set-up: N and m",
  ("clustered_sampling", "| model |"): "set-up: hidden units; the CNN's steps per round",
  ("clustered_sampling", "| local work |"): "set-up: steps and batch",
  ("clustered_sampling", "| learning rate |"): "set-up: the paper's learning rates",
  ("clustered_sampling", "| rounds |"): "set-up: rounds and evaluation period",
  ("clustered_sampling", "| measured |"): "set-up: the paper's and our averaging windows",
  ("clustered_sampling", "| representative gradients (Alg. 2) |"): "set-up: the sketch size",
  ("clustered_sampling", "| similarity measures |"): "set-up: the α of each measure",
  # fedar, Set-up and Deviations
  ("fedar", "| partition |"): "set-up: labels per client, the local test share",
  ("fedar", "| clients N / per round |"): "set-up: N",
  (
    "fedar",
    "| availability | client i available",
  ): "the paper's absences (5-20, over 40 rounds) and 1/p_i for p_i ~ U[p_min, 1]",
  ("fedar", "| local work |"): "set-up: K, batch, lr, weight decay",
  ("fedar", "| model | logistic regression (MNIST)"): "set-up: the MLP's layer widths",
  ("fedar", "| FedAR constants |"): "set-up: ρ, ψ's cap, g(t)",
  ("fedar", "| rounds |"): "set-up: rounds and evaluation period",
  ("fedar", "**Budget of a CNN study (measured, not run).**"): "a timing of a study not run; "
  "nothing of it is committed",
  ("fedar", "**The non-convex study (the MLP, 5 seeds).**"): "set-up: the sweeps' "
  "ranges (p_min 0.1-0.5, N 80-120) and the mean absence of 10 rounds",
  ("fedar", "Cost, measured at load 5-6 on 2 cores"): "a cost estimate: one cell's measured "
  "time per round times the runs and rounds of each study",
  ("fedar", "**What Table 2 pairs.**"): "the paper's p-values and the t they would need "
  "(arithmetic of the t distribution), the number of evaluations of a 500-round run",
  ("fedar", "- **Shorter absences.**"): "the paper's 5-20 rounds",
  ("fedar", "- **Constants the paper does not give**"): "set-up: rounds and g(t)",
  ("fedar", "- **Per-client accuracies are coarse**"): "set-up arithmetic: 30 % of 600 test "
  "images, one image of ~180 is ~0.6 points",
  # How to run and Deviations: timings of runs that are not committed, and the plans and
  # estimates made from them
  ("fl_fdms", "| model |"): "the MLP's layer widths and a 3-round timing of the CNN (not "
  "committed) with the hours it implies",
  (
    "fl_fdms",
    "- **Fashion-MNIST and an MLP instead of MNIST / CIFAR-10 and CNNs**",
  ): "cells x 3 seeds x 200 rounds x the Set-up table's 29.6 s of a CNN round (not committed)",
  ("fedemd", "**SVB's cost**"): "a 3-round timing of SVB beside Random (no SVB run is "
  "committed); 1.5 h is 200 rounds of 26.7 s",
  ("fedemd", "**Seconds per round**, measured side by side"): "the timing's set-up",
  ("fedemd", "| Random, FedAvg |"): ROUND_COST,
  ("fedemd", "| TiFL, FedAvg |"): ROUND_COST,
  ("fedemd", "| FedFast, FedAvg |"): ROUND_COST,
  ("fedemd", "| FedProx, FedAvg |"): ROUND_COST,
  ("fedemd", "| Random, FedSGD |"): ROUND_COST,
  ("fedemd", "Three rounds say little"): "the timing's reading: the Maverick's 6,000 examples "
  "against ~1,100, TiFL's and FedFast's sizes",
  ("fedemd", "| TiFL, FedFast, FedProx under FedAvg |"): "the estimate: runs x rounds x s/round",
  ("fedemd", "| Random, TiFL, FedFast, FedProx, FedEMD under FedSGD"): "the estimate",
  ("fedemd", "| SVB under FedAvg |"): "the estimate, at SVB's 3-round timing",
  ("fedemd", "About 18 h of the 2 cores alone"): "the estimate's total",
  ("fedemd", "**The gradient reading without the padding**"): "the timing's set-up",
  ("fedemd", "**Cost of the authors' readings**"): "the timing's set-up",
  ("fedemd", "| TiFL, authors' code |"): AUTHORS_COST,
  ("fedemd", "| FedFast, authors' code |"): AUTHORS_COST,
  ("fedemd", "TiFL's draw costs what Random's does"): AUTHORS_COST + "; the test set's size",
}
# (page, text on the page): why its numbers stand although no committed file of ours gives
# them: the paper's numbers, set-up constants, and numbers of code rather than of runs.
ALLOWED = {
  ("fedgs", "19.8 %"): "the paper's text (its own table gives +19.9)",
  ("fedgs", "14.3 %"): "the paper's text (its own table gives 14.4)",
  ("fedgs", "≤ 5 %"): "the paper's claim",
  ("fedgs", "almost 200 %"): "the paper's claim",
  # fedgs, "Where the rule changes a verdict": the engine's effects, intervals and p-values
  ("fedgs", "(4.29 % [2.84, 5.74])"): f"{ENGINE} (claim 3)",
  ("fedgs", "(22.8 % [19.5, 26])"): f"{ENGINE} (claim 3)",
  ("fedgs", "(6.27 % [-1.83, 14.4], 7.26 % [-3.84, 18.4])"): f"{ENGINE} (claim 3)",
  ("fedgs", "3.56 % [-5.36, 12.5]"): f"{ENGINE} (claim 4)",
  ("fedgs", "5.96 % [-3.11, 15]"): f"{ENGINE} (claim 4)",
  ("fedgs", "(p = 0.00018-0.0012)"): f"{ENGINE} (claim 5)",
  ("fedgs", "(+0.00198)"): f"{ENGINE} (claim 9)",
  ("fedgs", "0.0476 below every other row under IDL"): f"{ENGINE} (claim 10)",
  ("fedgs", "(the ablation: +0.000645 against"): f"{ENGINE} (claim 10)",
  ("fedgs", "-0.00539 (IDL), +0.00765 (YMF0.9)"): f"{ENGINE} (claim 11)",
  ("fedgs", "(+0.00703 to +0.0272; Power-of-Choice -0.0295 / -0.0323)"): f"{ENGINE} (claim 12)",
  ("fedgs", "26.8 to 41.9 below"): f"{ENGINE} (claim 14)",
  ("fedgs", "(by 0.0227 to 0.138 nats)"): f"{ENGINE} (claim 15)",
  ("fedgs", "(+0.005 [-0.0102, +0.0202])"): f"{ENGINE} (claim 17)",
  ("fedgs", "(+0 [-0.0265, +0.0265], +0 [-0.025, +0.025])"): f"{ENGINE} (claim 17)",
  ("fedgs", "(p = 0.79-1.00)"): f"{ENGINE} (claim 18)",
  ("fedgs", "CIFAR-10 0.874 vs 0.233"): "the paper's Table 3",
  ("fedgs", "T = 24"): "the set-up (Table 1's YC period)",
  ("fl_fdms", "27-57 %"): "complexity.md's 27.06 and 56.61, rounded",
  # fl_fdms, "Where the rule changes a verdict": the engine's effects, intervals and p-values
  ("fl_fdms", "p = 0.01 / 0.00082 / 0.03"): "printed by python -m experiments.claims (claim 19)",
  ("fl_fdms", "p = 0.56 / 0.30 / 0.23"): "printed by python -m experiments.claims (claim 19)",
  ("fl_fdms", "p = 0.47 / 0.31 / 0.11"): "printed by python -m experiments.claims (claim 20)",
  ("fl_fdms", "p = 0.02 / 0.0012"): "printed by python -m experiments.claims (claim 20)",
  ("fl_fdms", "(−0.12 [−0.911, +0.671])"): "printed by python -m experiments.claims (claim 21)",
  ("fl_fdms", "−0.91 [−2.77, +0.949]"): "printed by python -m experiments.claims (claim 21)",
  ("fl_fdms", "(−0.0633 [−0.799, +0.672])"): "printed by python -m experiments.claims (claim 21)",
  ("fl_fdms", "p = 0.0012 / 0.0027"): "printed by python -m experiments.claims (claim 21)",
  ("fl_fdms", "(−1.39 / −2.05 points, p = 0.02 / 0.02"): "printed by python -m experiments.claims "
  "(claim 22)",
  ("fl_fdms", "(−0.795 [−2.04, +0.454], p = 0.11)"): "printed by python -m experiments.claims "
  "(claim 22)",
  ("fl_fdms", "+2.15 and +1.59 points"): "printed by python -m experiments.claims (claim 23)",
  ("fl_fdms", "p = 0.43 / 0.67"): "printed by python -m experiments.claims (claim 23)",
  ("fl_fdms", "+1.19 and −0.0667"): "printed by python -m experiments.claims (claim 23)",
  ("fl_fdms", "(−2.24, p = 0.05,"): "printed by python -m experiments.claims (claim 24)",
  ("fl_fdms", "(+1.79, p = 0.09;"): "printed by python -m experiments.claims (claim 24)",
  (
    "fl_fdms",
    "(by 0.903 points redrawn, p = 0.05; by 10.6 under Markov, p = 0.0011)",
  ): "printed by python -m experiments.claims (claim 26)",
  ("fl_fdms", "(10.7, p = 0.00065)"): "printed by python -m experiments.claims (claim 26)",
  ("fl_fdms", "(p ≤ 0.0013)"): "printed by python -m experiments.claims (claim 27)",
  ("fl_fdms", "(−2.98 points, p = 0.0027)"): "printed by python -m experiments.claims (claim 27)",
  ("fl_fdms", "(−1.09 / −0.467, p = 0.12 / 0.58;"): "printed by python -m experiments.claims "
  "(claim 27)",
  ("fl_fdms", "p = 8e-05"): "printed by python -m experiments.claims (claims 29, 31)",
  ("fl_fdms", "p = 0.0017"): "printed by python -m experiments.claims (claims 29, 31)",
  ("fl_fdms", "[−1.53, +1.54]"): "printed by python -m experiments.claims (claim 29)",
  ("fl_fdms", "−1.53 [−8.5, +5.45]"): "printed by python -m experiments.claims (claim 29)",
  ("fedemd", "110.7"): "the paper's Table 1 (Random's R@99)",
  ("fedemd", "79.7"): "the paper's Table 1 (FedEMD's R@99)",
  ("fedemd", "20.3 / 6.7 / 2.5 / 0.5"): "tests/selection/test_fedemd_dynamics.py, not a run",
  ("fedemd", "26.8 / 19.3 / 12.3 / 6.2"): "tests/selection/test_fedemd_dynamics.py, not a run",
  ("fedemd", "20.9 / 7.2 / 1.8 / 0.3 and 26.3 / 20.0 / 13.2 / 6.5"): "an independent script",
  ("fedemd", "6,000 / (6,000 + 4 × 1,102)"): "the partition's client sizes (Set-up)",
  ("fedemd", "rounds 1-60"): "the layout of a block table",
  ("fedemd", "1.18x the rounds an hour"): "docs/performance.md's two-lane measurement",
  ("clustered_sampling", "300 rounds"): "the set-up",
  ("clustered_sampling", "as 99, 36, 26, 27"): "the tie order of experiments/numpy1_ties.py",
  ("clustered_sampling", "checked by hand on 17 keys"): "the tie order's check",
  ("clustered_sampling", "(3, 3, 3, 2, 3, 4, 2, 3, 2, 3)"): "the tie order's digits per slot",
  ("clustered_sampling", "63 %"): "the paper's text",
  ("fedar", "ResNet-18"): "a model's name",
  ("fedar", "44 %"): "the paper's CIFAR-10 accuracy",
  ("fedar", "46 %"): "the paper's CIFAR-10 accuracy",
  ("fedar", "~6-point lead"): "the paper's Table 3",
  ("fedar", "about 6 points"): "the paper's Table 3",
  ("fedar", "p < 0.001"): "the paper's test",
  ("fedar", "53 % of absences 5-20 rounds, 1.5 % over 40"): "the geometric law of a mean "
  "absence of 10 rounds: 0.9^4 - 0.9^20 and 0.9^40",
  ("fedar", "its margin (432.5 against 325)"): "the paper's Table 3",
  ("fedar", "FedAR 47 % at p_min = 0.5, every baseline below 45 %"): "the paper's Fig. 4 text",
  ("fedar", "FedAR reaches 47 %, every baseline below 45 %"): "the paper's Fig. 4 text",
  ("fedar", "| 40.9 ± 18.1 | 325 | 20.8 ± 4.5 | 67.7 ± 8.7 |"): "the paper's Table 3",
  ("fedar", "| 34.0 ± 13.6 | 182.5 | 19.7 ± 4.2 | 53.8 ± 8.8 |"): "the paper's Table 3",
  ("fedar", "| 41.3 ± 20.7 | 432.5 | 19.4 ± 2.6 | 73.9 ± 11.6 |"): "the paper's Table 3",
  ("fedar", "| 41.0 ± 18.0 | 321.6 | 21.2 ± 4.3 | 69.5 ± 12.6 |"): "the paper's Table 3",
  # fedar, "Where the rule changes a verdict": the engine's effects, intervals and p-values
  (
    "fedar",
    "(+0.076 points, p = 0.0012), FedAvg-IS (+0.34, p = 0.01) and FedAvg (S=50) (+0.648, "
    "p = 0.02) and behind Scaffold (-0.684, p = 0.00073)",
  ): ENGINE + " (claim 67)",
  (
    "fedar",
    "(+0.048, -0.108, +0.038, +0.048 points, p = 0.18-0.49 over seeds 0-4)",
  ): ENGINE + " (claim 75)",
  (
    "fedar",
    "(FedAR -0.182 points, p = 0.008; MIFA -0.244, p = 0.0056; FedVARP -0.348, p = 0.03), "
    "as is one rise out of it (MIFA +0.17, p = 0.0029)",
  ): ENGINE + " (claim 77)",
  ("fedar", "+1.39 % [-11.4, 14.2]"): ENGINE + " (claim 79)",
  (
    "fedar",
    "MIFA -0.112, FedVARP -0.03, FedAvg-IS +1.22 and Scaffold +0.048 points, p = 0.17-0.65",
  ): ENGINE + " (claim 80)",
  ("fedar", "+0.7 points [-1.55, +2.95], p = 0.42"): ENGINE + " (claim 71)",
  ("fedar", "+0.0822 points [-0.019, +0.183], p = 0.09"): ENGINE + " (claim 72)",
  ("fedar", "-5.3 %² [-11.7, +1.13], p = 0.08"): ENGINE + " (claim 73)",
  ("fedemd", "measured 26.7 s/round against Random's 5.4"): "SVB's 3-round timing (appendix, "
  "Cost of the runs), no committed run",
  ("fedemd", "7.0 s/round for Random and 9.2 s/round for FedEMD"): "a 3-round timing, not "
  "committed",
  ("fedemd", "1,500 steps at batch 4 against ~275"): "set-up arithmetic: 6,000 and ~1,100 "
  "images at batch 4",
  ("fedemd", "≈ 0.9 h on an idle machine"): "an estimate from the 3-round timing",
  ("fedemd", "the Maverick's 6,000 examples"): "set-up: the Maverick's client size",
  ("fedemd", "63.77 / 67.58 / 69.59 %"): "a 3-round rerun on another CPU, not committed "
  "(recompute prints the committed 64.03 / 67.49 / 69.52)",
  ("fedemd", "family 25 model 1"): "a CPU's name",
  ("fedemd", "0.11 and 0.001 instead of the paper's 0.15 and 0.0015"): "the authors' code's "
  "α and β, and the paper's",
  ("fedemd", "6.9 % at round 100"): "read from checkpoints that are not committed (the page "
  "says so)",
  ("fedemd", "84.4 % at round 150"): "read from checkpoints that are not committed",
  # fedemd, "Where the rule changes a verdict": the engine's effects, intervals and p-values
  ("fedemd", "95 rounds [58.41, 131.6] against ± 11.07 rounds"): "printed by python -m "
  "experiments.claims (claim 32)",
  ("fedemd", "+20.3 rounds [-62.9, +104], p = 0.40"): "printed by python -m experiments.claims "
  "(claim 33)",
  ("fedemd", "+106 rounds [+69.4, +143], p = 0.0064"): "printed by python -m experiments.claims "
  "(claim 33)",
  ("fedemd", "-9.87 points [-23.1, +3.41], p = 0.09"): "printed by python -m experiments.claims "
  "(claim 35)",
  ("fedemd", "+14.7 rounds [-162, +192], p = 0.76"): "printed by python -m experiments.claims "
  "(claim 38)",
  ("fedemd", "counted as 201"): "the claims file's value for a run that never reaches R@99 in "
  "200 rounds (docs/reproductions/claims/fedemd.yaml)",
  (
    "fedemd",
    "-12 rounds [-29.9, +5.91], p = 0.10 and -39 rounds [-116, +38.5], p = 0.16",
  ): "printed by python -m experiments.claims (claim 40)",
  (
    "fedemd",
    "6.66 against Random's 4.73 rounds (Levene's p = 0.82) and 18.7 against 12.9 (p = 0.75)",
  ): "printed by python -m experiments.claims (claim 41)",
  ("fedemd", "+20.3 rounds [-58.7, +99.4], p = 0.38"): "printed by python -m experiments.claims "
  "(claim 43)",
  ("fedemd", "-1 rounds [-7.57, +5.57], p = 0.58"): "printed by python -m experiments.claims "
  "(claim 45)",
  ("fedemd", "(30.9 against 3.61 rounds with 2 shared Mavericks)"): "printed by python -m "
  "experiments.claims (claim 48)",
  ("fedemd", "p = 0.40 and 0.31"): "printed by python -m experiments.claims (claim 48)",
  ("fedemd", "-8.67 picks [-18.7, +1.37], p = 0.07"): "printed by python -m experiments.claims "
  "(claim 46)",
  ("fedemd", "-7.23 % [-21.1, 6.67]"): "printed by python -m experiments.claims (claim 49)",
  ("clustered_sampling", "P = 39,760"): "the MLP's parameter count, 784 x 50 + 50 + 50 x 10 + 10",
  # clustered_sampling, "Where the rule changes a verdict": the engine's effects, intervals
  # and p-values
  (
    "clustered_sampling",
    "(+5.62 points [+1.48, +9.76], p = 0.02)",
  ): "printed by python -m experiments.claims (claim 54)",
  (
    "clustered_sampling",
    "(+3.01 [-2.43, +8.45], p = 0.16)",
  ): "printed by python -m experiments.claims (claim 54)",
  (
    "clustered_sampling",
    "(Alg. 2 -0.04 [-0.536, +0.456], Alg. 1 +0.13 [-0.458, +0.718])",
  ): "printed by python -m experiments.claims (claim 55)",
  (
    "clustered_sampling",
    "(Alg. 2 -0.5 [-4.7, +3.7], Alg. 1 +0.21 [-3.3, +3.72])",
  ): "printed by python -m experiments.claims (claim 55)",
  (
    "clustered_sampling",
    "(-5.51 and -5.12 points, p = 0.0034 and 0.00026, seeds 0-2)",
  ): "printed by python -m experiments.claims (claim 56)",
  (
    "clustered_sampling",
    "L2 - arccos -0.11 [-2.86, +2.64] and L1 - arccos +0.13 [-1.45, +1.71] points",
  ): "printed by python -m experiments.claims (claim 57)",
  (
    "clustered_sampling",
    "Alg. 1 -0.117 [-19.2, +18.9], Alg. 2 +5.72 [-3.04, +14.5]",
  ): "printed by python -m experiments.claims (claim 58)",
  (
    "clustered_sampling",
    "+9.09 points [+2.62, +15.6], p = 0.03, with random ids +5.72 [-3.04, +14.5], p = 0.11",
  ): "printed by python -m experiments.claims (claim 59)",
  (
    "clustered_sampling",
    "+9.1 points [+2.48, +15.7], p = 0.03, NumPy 1.x ties +5.74 [-3.55, +15], p = 0.12, "
    "random ids -0.117 [-19.2, +18.9], p = 0.98",
  ): "printed by python -m experiments.claims (claim 60)",
}


GENERATED = re.compile(
  r"<!-- generated by python -m experiments\.claims --write: (\w+) -->.*?"
  r"<!-- end of generated block: \1 -->",
  re.S,
)


def page_sections(paper: str, text: str) -> list[tuple[int, str]]:
  """(line number, line) of the checked sections, without code, links, references, table
  headers and the allowed texts."""

  def blank(m: re.Match) -> str:
    return " " + "\n" * m.group().count("\n")

  # the blocks `python -m experiments.claims --write` generates: tests/test_docs_claims.py
  # regenerates them from the committed files and fails on a planted number
  text = GENERATED.sub(blank, text)
  text = re.sub(r"```.*?```", blank, text, flags=re.S)
  text = re.sub(r"`[^`\n]*\n?[^`\n]*`", blank, text)  # inline code, also across a line break
  for (page, allowed), _ in ALLOWED.items():
    if page == paper:
      text = text.replace(allowed, " ")
  lines = text.splitlines()
  openings = [allowed for page, allowed in LINES if page == paper]
  out, section, skipped, paragraph = [], False, False, False
  for i, line in enumerate(lines):
    if line.startswith("## "):
      section, skipped = True, False
    elif line.startswith("### "):
      skipped = (paper, line.strip()) in SKIPPED
    if not line.strip() or line.startswith(("- ", "|", "#")):
      paragraph = False  # a paragraph or list item ends here
    allowed_line = any(line.startswith(o) for o in openings)
    paragraph = paragraph or (allowed_line and not line.startswith("|"))
    keep = section and not skipped and not paragraph and not allowed_line
    header = i + 1 < len(lines) and lines[i + 1].startswith("|---")
    if keep and not line.startswith("#") and not header and not line.startswith("|---"):
      line = re.sub(r"`[^`]*`|\]\([^)]*\)|\b\d{4}-\d\d-\d\d\b", " ", line)
      out.append((i + 1, REFERENCE.sub(" ", line)))
  return out


def numbers(text: str) -> list[str]:
  """The numbers of a text without sign or thousands separator: "+1,000.5" -> "1000.5"."""
  return [m.group().lstrip("+−-").replace(",", "") for m in NUMBER.finditer(text)]


def rounded(found: set[str]) -> set[str]:
  """The numbers and every shorter rounding of each: 0.6707 also gives 0.671, 0.67, 0.7, 1."""
  out = set(found)
  for n in found:
    if "." in n:
      for digits in range(len(n.split(".")[1])):
        out.add(f"{float(n):.{digits}f}")
  return out


def sources(paper: str, printed: str) -> set[str]:
  texts = [printed]
  for folder in RESULTS[paper]:
    for path in sorted((ROOT / "results" / folder).rglob("*")):
      parts = path.relative_to(ROOT / "results").parts
      if (
        path.suffix in (".md", ".csv") and "cells" not in parts and "participation" not in path.name
      ):
        texts.append(path.read_text())
  return rounded(set(numbers("\n".join(texts))))


def unfound(paper: str, page_text: str, printed: str, page: str = "") -> list[str]:
  known = sources(paper, printed)
  return [
    f"{page or paper + '.md'}:{i}: {n}"
    for i, line in page_sections(paper, page_text)
    for n in numbers(line)
    if n not in known and (paper, n) not in ALLOWED
  ]


@pytest.mark.parametrize("paper, page", [(p, page) for p in PAGES for page in PAGES[p]])
def test_every_number_on_the_page_is_printed_or_in_a_committed_table(printed, paper, page):
  missing = unfound(paper, (DOCS / page).read_text(), printed[paper], page)
  assert not missing, "numbers neither printed by recompute.py nor tabulated:\n" + "\n".join(
    missing
  )


def test_a_changed_number_on_a_page_is_flagged(printed):
  text = (DOCS / "fedar.md").read_text()
  assert "FedAvg-IS +1.29" in text
  planted = text.replace("FedAvg-IS +1.29", "FedAvg-IS +1.39")
  assert unfound("fedar", text, printed["fedar"]) == []
  assert [m.split(": ")[1] for m in unfound("fedar", planted, printed["fedar"])] == ["1.39"]


def test_a_generated_block_is_left_to_the_claims_test(printed):
  """The verdict engine's blocks are regenerated by tests/test_docs_claims.py; a number typed
  outside them is still checked."""
  text = (DOCS / "fedemd.md").read_text()
  begin = "<!-- generated by python -m experiments.claims --write: verdicts -->"
  assert begin in text
  inside = text.replace(begin, begin + "\n| planted | 12345.678 |", 1)
  outside = text.replace(begin, "A planted 12345.678 rounds.\n" + begin, 1)
  found = [m.split(": ")[1] for m in unfound("fedemd", text, printed["fedemd"])]
  assert [m.split(": ")[1] for m in unfound("fedemd", inside, printed["fedemd"])] == found
  planted = [m.split(": ")[1] for m in unfound("fedemd", outside, printed["fedemd"])]
  assert sorted(planted) == sorted([*found, "12345.678"])


def test_a_changed_number_outside_the_results_is_flagged(printed):
  """Deviations and why, like every section, is checked: a run's cost there is recomputed."""
  text = (DOCS / "fedgs.md").read_text()
  deviations = text.index("## Deviations and why")
  assert text.index("(1.75-1.79 s per run and round") > deviations
  planted = text.replace("(1.75-1.79 s per run and round", "(1.75-1.89 s per run and round")
  assert unfound("fedgs", text, printed["fedgs"]) == []
  assert [m.split(": ")[1] for m in unfound("fedgs", planted, printed["fedgs"])] == ["1.89"]


def test_an_allowed_list_item_ends_at_the_next_item(printed):
  """A LINES entry allows its own list item only: the item after it is still checked."""
  text = (DOCS / "fl_fdms.md").read_text()
  items = text.split("\n- ")
  allowed = next(i for i, item in enumerate(items) if item.startswith("**Fashion-MNIST and an"))
  assert "The 80 %" in items[allowed + 1]
  planted = text.replace("The 80 %", "The 80.004 %")
  assert unfound("fl_fdms", text, printed["fl_fdms"]) == []
  assert [m.split(": ")[1] for m in unfound("fl_fdms", planted, printed["fl_fdms"])] == ["80.004"]


def test_the_allowed_texts_are_on_their_pages():
  for (paper, allowed), reason in ALLOWED.items():
    pages = page_texts(paper)
    assert any(allowed in text for text in pages.values()), (
      f"{' / '.join(pages)} lack {allowed!r} ({reason})"
    )
  for (paper, opening), reason in LINES.items():
    pages = page_texts(paper)
    lines = [line for text in pages.values() for line in text.splitlines()]
    starts = sum(line.startswith(opening) for line in lines)
    assert starts == 1, f"{starts} lines of {' / '.join(pages)} start with {opening!r} ({reason})"


def test_every_reproduction_page_is_checked():
  """A new page (an appendix, say) under docs/reproductions/ is read by the number check."""
  checked = {page for pages in PAGES.values() for page in pages}
  on_disk = {path.name for path in DOCS.glob("*.md")} - {"README.md"}
  unchecked, gone = sorted(on_disk - checked), sorted(checked - on_disk)
  assert not unchecked and not gone, f"unchecked: {unchecked}, gone: {gone}"

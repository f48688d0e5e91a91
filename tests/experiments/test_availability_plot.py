"""experiments/availability_plot.py: one active matrix per availability mode, rates, PNGs."""

import csv
import os
import subprocess
import sys

import numpy as np

from experiments import availability_plot
from fedjax_sel import availability

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_demo_trace_is_half_on_per_period():
  trace = availability_plot.demo_trace(48, 5)
  assert trace.shape == (48, 5) and trace.dtype == bool
  np.testing.assert_array_equal(trace.mean(0), np.full(5, 0.5))  # 12 of every 24 rounds
  assert trace[0, 0] and not trace[12, 0] and not trace[0, 4]  # (0 + 12) % 24 >= 12


def test_every_registered_mode_has_a_panel():
  labels = availability_plot.modes(10, 4)
  assert {name for name, _ in labels.values()} == set(availability.names())
  assert len(labels) == len(availability.names()) + 1  # cluster_dropout in both modes


def test_quick_binary_writes_one_png_per_mode_and_rates(tmp_path):
  out = tmp_path / "avail"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  p = subprocess.run(
    [sys.executable, "-m", "experiments.availability_plot", "--quick", f"--output_dir={out}"],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert p.returncode == 0, p.stderr[-3000:]
  with open(out / "rates.csv") as f:
    rows = list(csv.reader(f))
  assert rows[0] == [
    "mode",
    "active share (measured)",
    "mean probs",
    "least active client",
    "most active client",
  ]
  rates = {r[0]: [float(v) for v in r[1:]] for r in rows[1:]}
  assert len(rates) == len(availability.names()) + 1
  assert rates["always"] == [1.0, 1.0, 1.0, 1.0] and rates["idl"] == [1.0, 1.0, 1.0, 1.0]
  # fl_fdms mode drops exactly floor(0.5 * 10) = 5 of 10 clients every round.
  assert rates["cluster_dropout (fl_fdms, 0.5)"][0] == 0.5
  assert rates["trace (diurnal demo)"][:2] == [0.5, 0.5]  # --quick: 24 rounds = one period
  for label, (measured, expected, least, most) in rates.items():
    assert 0.0 <= least <= measured <= most <= 1.0, label
    assert abs(measured - expected) < 0.2, label  # the draws follow probs
  for mode in availability.names():
    assert (out / f"active_{mode}.png").stat().st_size > 2000
  assert (out / "active_all.png").stat().st_size > 20000

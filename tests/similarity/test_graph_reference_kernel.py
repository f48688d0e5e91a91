"""The FedGS authors' 3DG kernel exp(-V^2 / sigma), V > eps, worked out by hand."""

import math

import numpy as np
import pytest

from fedjax_sel import selection
from fedjax_sel import similarity as sim


def test_reference_kernel_shortest_paths_by_hand():
  v = np.array([[1.0, 0.5, 0.005], [0.5, 1.0, 0.2], [0.005, 0.2, 1.0]], np.float32)
  g = sim.build_3dg(v, sigma2=0.1, epsilon=0.01, kernel="reference_code")
  d01, d12 = math.exp(-0.25 / 0.1), math.exp(-0.04 / 0.1)  # 0.0821, 0.6703
  adj = np.asarray(g.adjacency)
  assert adj[0, 1] == pytest.approx(d01, rel=1e-6) and adj[1, 2] == pytest.approx(d12, rel=1e-6)
  assert np.isinf(adj[0, 2])  # 0.005 <= eps: no edge
  d02 = d01 + d12  # the only path from 0 to 2 runs through 1
  want = np.array([[0, d01, d02], [d01, 0, d12], [d02, d12, 0]]) / d02
  np.testing.assert_allclose(np.asarray(g.distances), want, rtol=1e-5, atol=1e-7)
  # The paper's kernel on the same V: exp(-V / 0.01) with V >= 0.1 joins only 0-1 and 1-2.
  p = sim.adjacency_3dg(v, 0.01, 0.1)
  assert float(p[0, 1]) == pytest.approx(math.exp(-50.0), rel=1e-4) and np.isinf(p[0, 2])


def test_threshold_is_strict_for_the_reference_kernel_only():
  v = np.array([[1.0, 0.25], [0.25, 1.0]], np.float32)
  assert np.isinf(np.asarray(sim.adjacency_3dg(v, 0.1, 0.25, kernel="reference_code"))[0, 1])
  assert np.isfinite(np.asarray(sim.adjacency_3dg(v, 0.1, 0.25))[0, 1])


def test_kernel_is_validated():
  with pytest.raises(ValueError, match="kernel='code'.*paper, reference_code"):
    sim.build_3dg(np.eye(2, dtype=np.float32), kernel="code")
  with pytest.raises(ValueError, match="kernel='code'"):
    selection.make("fedgs", num_selected=2, kernel="code")

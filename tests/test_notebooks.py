"""Executes every notebook in notebooks/ top to bottom on CPU with tiny settings.

Each notebook reads ``FEDJAX_SEL_TINY=1`` and shrinks its rounds and sizes; here the kernel
runs with ``JAX_PLATFORMS=cpu`` from the notebooks folder, as a user in a checkout would.
Besides "no cell raised", each notebook's printed numbers are checked.
"""

import glob
import math
import os
import re

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


def _execute(path, monkeypatch):
  monkeypatch.setenv("FEDJAX_SEL_TINY", "1")
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  nb = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(
    nb,
    timeout=600,
    kernel_name="python3",
    resources={"metadata": {"path": os.path.dirname(path)}},
  )
  client.execute()
  text = []
  for cell in nb.cells:
    for out in cell.get("outputs", []):
      if out.get("output_type") == "stream":
        text.append(out.get("text", ""))
  return nb, "".join(text)


def _floats(pattern, text):
  return [float(x) for x in re.findall(pattern, text)]


def test_there_are_notebooks():
  names = {os.path.basename(p) for p in NOTEBOOKS}
  assert {"quickstart.ipynb", "fedgs.ipynb", "clustered_sampling.ipynb"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_runs_on_cpu_tiny(path, monkeypatch):
  nb, text = _execute(path, monkeypatch)
  name = os.path.basename(path)
  assert not any(o.get("output_type") == "error" for c in nb.cells for o in c.get("outputs", []))
  images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
  min_figures = {"quickstart.ipynb": 1, "fedgs.ipynb": 2, "clustered_sampling.ipynb": 3}
  assert len(images) >= min_figures.get(name, 0), name
  if name == "quickstart.ipynb":
    losses = _floats(r"final test loss (\d+\.\d+)", text)
    variances = _floats(r"var of sampling counts (\d+\.\d+)", text)
    assert len(losses) == 2 and all(0.0 < v < 5.0 for v in losses)
    # Under the same availability FedGS balances sampling counts better than uniform.
    assert variances[1] < variances[0]
  elif name == "fedgs.ipynb":
    assert text.count("all available: True") == 3
    table = _floats(r"\| (\d+\.\d{3})", text)
    assert table and all(math.isfinite(v) and 0.0 < v < 5.0 for v in table)
  elif name == "clustered_sampling.ipynb":
    assert "rows sum to 1: True" in text and "(sum_k r_ki = m p_i): True" in text
    found = re.search(r"mean variance MD (\S+), Algorithm 1 (\S+)", text)
    md, alg1 = float(found.group(1)), float(found.group(2))
    assert alg1 < md  # Fraboni et al. Eq. 17
    accs = _floats(r"final test accuracy (\d+\.\d+) %", text)
    assert len(accs) == 3 and all(0.0 <= a <= 100.0 for a in accs)

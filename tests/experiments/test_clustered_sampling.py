"""experiments/clustered_sampling.py: data set-ups, weight variance, and the --quick path."""

import csv
import os

import jax.numpy as jnp
import numpy as np

from experiments import clustered_sampling as cs
from experiments.configs import clustered_sampling as config_lib
from fedjax_sel import selection


def _read_csv(path):
  with open(path) as f:
    return list(csv.reader(f))


def test_dirichlet_data_has_the_papers_client_sizes():
  ds = cs.dirichlet_data("digits", 0.01, config_lib.GROUPS, 1.0 / 6.0)
  want = np.repeat([100, 250, 500, 750, 1000], [10, 30, 30, 20, 10])
  assert ds.num_clients == 100
  np.testing.assert_array_equal(np.sort(ds.train.counts), want)
  # "testing samples amounting to a fifth of their training size".
  np.testing.assert_array_equal(ds.test.counts * 5, ds.train.counts)
  # Dir(0.01): almost every client holds (nearly) one class.
  labels = ds.client_info().label_counts
  top_share = np.max(np.asarray(labels), 1) / np.asarray(ds.train.counts)
  assert np.median(top_share) > 0.95


def test_one_class_data_gives_one_digit_per_client():
  ds = cs.one_class_data("digits", 20, 40, 1.0 / 6.0)
  counts = np.asarray(ds.client_info().label_counts)
  assert ds.num_clients == 20 and np.all(ds.train.counts == 40)
  assert np.all(np.sum(counts > 0, axis=1) == 1)
  assert np.all(np.bincount(np.argmax(counts, 1), minlength=10) == 2)  # 2 clients per digit


def test_analytic_variance_of_md_rows_is_eq_14():
  p = np.array([0.1, 0.2, 0.3, 0.4])
  m = 3
  np.testing.assert_allclose(cs.analytic_variance(np.tile(p, (m, 1))), p * (1 - p) / m)


def test_selection_alone_weights_sum_to_one_and_match_eq_14_and_16():
  sizes = np.repeat([100, 250, 500, 750, 1000], [2, 6, 6, 4, 2])
  m, rounds = 5, 4000
  p = sizes / sizes.sum()
  updates = jnp.zeros((len(sizes), 1))
  w_md = np.asarray(
    cs.selection_weight_samples(selection.make("md", num_selected=m), sizes, updates, rounds)
  )
  w_c = np.asarray(
    cs.selection_weight_samples(
      selection.make("clustered_size", num_selected=m), sizes, updates, rounds
    )
  )
  np.testing.assert_allclose(w_md.sum(1), 1.0, atol=1e-5)
  np.testing.assert_allclose(w_c.sum(1), 1.0, atol=1e-5)
  np.testing.assert_allclose(w_md.mean(0), p, atol=0.01)  # unbiased
  np.testing.assert_allclose(w_c.mean(0), p, atol=0.01)
  r = np.asarray(selection.sample_size_distributions(jnp.asarray(sizes), m))
  theory_md, theory_c = p * (1 - p) / m, cs.analytic_variance(r)
  assert abs(w_md.var(0).mean() / theory_md.mean() - 1) < 0.1
  assert abs(w_c.var(0).mean() / theory_c.mean() - 1) < 0.1
  assert theory_c.mean() < theory_md.mean()  # Eq. 17


def test_quick_writes_tables_and_figures(tmp_path):
  cfg = config_lib.get_config()
  out = str(tmp_path)
  cs.run_all(cfg, out, [0], quick=True)
  header = cs.HEADER
  for name, setup in (
    ("table_dirichlet", "Dir(α=0.01)"),
    ("table_one_class", "one class per client"),
  ):
    rows = _read_csv(os.path.join(out, name + ".csv"))
    assert rows[0] == header
    assert [r[1] for r in rows[1:]] == ["MD sampling", "Alg. 2 (Arccos)"]
    for r in rows[1:]:
      assert r[0] == setup
      loss = float(r[2].split(" ± ")[0])
      acc = float(r[4].split(" ± ")[0])
      assert 0.0 < loss < 10.0 and 0.0 <= acc <= 100.0
  w = _read_csv(os.path.join(out, "table_weight_variance.csv"))
  by = {r[0]: r for r in w[1:]}
  assert set(by) == {"MD sampling", "Alg. 1 (sample size)", "Alg. 2 (Arccos)"}
  md, alg1 = float(by["MD sampling"][1]), float(by["Alg. 1 (sample size)"][1])
  assert alg1 < md
  # Clustered sampling selects more distinct clients per round than MD (representativity).
  assert float(by["Alg. 1 (sample size)"][4]) > float(by["MD sampling"][4])
  for png in ("curves_dirichlet_a0.01.png", "curves_one_class.png", "weight_variance.png"):
    assert os.path.getsize(os.path.join(out, png)) > 5000

"""experiments/clustered_sampling.py: data set-ups, weight variance, and the --quick path."""

import csv
import os

import jax.numpy as jnp
import numpy as np
import pytest

from experiments import clustered_sampling as cs
from experiments import numpy1_ties
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


def test_one_class_data_by_label_gives_client_i_the_class_i_over_2():
  """The authors' ids (clients 10d..10d+9 hold digit d; here 2 clients per class)."""
  ds = cs.one_class_data("digits", 20, 40, 1.0 / 6.0, client_order="by_label")
  assert np.all(ds.train.counts == 40) and np.all(ds.test.counts == 8)
  for split in (ds.train, ds.test):
    for i in range(20):
      y = split.y[split.offsets[i] : split.offsets[i] + split.counts[i]]
      assert np.all(y == i // 2)
  rand = np.argmax(
    np.asarray(cs.one_class_data("digits", 20, 40, 1.0 / 6.0).client_info().label_counts), 1
  )
  assert np.bincount(rand).tolist() == [2] * 10 and np.any(np.diff(rand) < 0)


def test_numpy1_introsort_tie_order_by_hand():
  """17 equal keys: one median-of-3 partition (pivot index 8 parked at 15, then the pairs
  (1, 14) ... (7, 8) swapped, the pivot put back at 8), then insertion sorts that move
  nothing; 16 or fewer equal keys stay in id order. Distinct keys: a plain argsort."""
  got = numpy1_ties.introsort_argsort([1.0] * 17).tolist()
  assert got == [0, 14, 13, 12, 11, 10, 9, 15, 8, 6, 5, 4, 3, 2, 1, 7, 16]
  assert numpy1_ties.introsort_argsort([2.0] * 16).tolist() == list(range(16))
  v = np.random.default_rng(0).permutation(200).astype(float)
  np.testing.assert_array_equal(numpy1_ties.introsort_argsort(v), np.argsort(v))
  assert numpy1_ties.authors_alg1_visit_order(17).tolist() == got[::-1]


def test_one_class_data_by_label_numpy1_follows_the_authors_visit_order():
  ds = cs.one_class_data("digits", 20, 40, 1.0 / 6.0, client_order="by_label_numpy1")
  visit = numpy1_ties.authors_alg1_visit_order(20)
  classes = np.argmax(np.asarray(ds.client_info().label_counts), 1)
  np.testing.assert_array_equal(classes, visit // 2)  # the by_label client visit[k] is id k
  assert np.all(ds.train.counts == 40) and np.all(ds.test.counts == 8)


def test_exact_updates_method_sets_a_sketch_dim_above_any_parameter_count():
  cfg = config_lib.get_config()
  c = cs.cell_config(cfg.base, cfg.methods.alg2_exact)
  assert c.selection == "clustered_similarity" and c.sketch_dim >= 2**31 - 1
  assert cs.cell_config(cfg.base, cfg.methods.alg2_arccos).sketch_dim == 256
  cfg.methods.alg2_exact.updates = "full"
  with pytest.raises(ValueError, match="methods.alg2_exact.updates='full'; allowed: sketch, exact"):
    cs.check_methods(cfg, ["md", "alg2_exact"])
  with pytest.raises(ValueError, match=r"client orders \['sorted'\]; allowed: random, by_label"):
    cs.run_all(config_lib.get_config(), "/nonexistent", [0], client_orders=["sorted"])


def test_distinct_classes_counts_classes_of_the_clients_with_weight():
  w = np.array([[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [0.0, 0.0, 0.0, 1.0]])
  np.testing.assert_array_equal(cs.distinct_classes(w, np.array([0, 0, 1, 2])), [1, 3, 1])


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
  one_class = ["MD sampling", "Target (one client per class)", "Alg. 2 (Arccos, exact updates)"]
  for name, setups, methods, head in (
    ("table_dirichlet", ["Dir(α=0.01)"], ["MD sampling", "Alg. 2 (Arccos)"], cs.HEADER_GLOBAL),
    (
      "table_one_class",
      ["one class per client, ids by label", "one class per client, random ids"],
      one_class,
      cs.HEADER_GLOBAL,
    ),
  ):
    rows = _read_csv(os.path.join(out, name + ".csv"))
    assert rows[0] == head
    assert [(r[0], r[1]) for r in rows[1:]] == [(s, m) for s in setups for m in methods]
    for r in rows[1:]:
      loss = float(r[2].split(" ± ")[0])
      acc = float(r[4].split(" ± ")[0])
      assert 0.0 < loss < 10.0 and 0.0 <= acc <= 100.0
  # target sampling: every round's cohort holds one client of each of the 10 classes
  classes = {(r[0], r[1]): r for r in _read_csv(os.path.join(out, "table_one_class_classes.csv"))}
  for order in ("random ids", "ids by label"):
    assert float(classes[(order, "Target (one client per class)")][2]) == 10.0
    assert float(classes[(order, "MD sampling")][2]) < 10.0
  exact = _read_csv(os.path.join(out, "table_alg2_exact_vs_sketched.csv"))
  assert [r[1] for r in exact[1:]] == ["Alg. 2 (Arccos, exact updates)"] * 2
  w = _read_csv(os.path.join(out, "table_weight_variance.csv"))
  by = {r[0]: r for r in w[1:]}
  assert set(by) == {"MD sampling", "Alg. 1 (sample size)", "Alg. 2 (Arccos)"}
  md, alg1 = float(by["MD sampling"][1]), float(by["Alg. 1 (sample size)"][1])
  assert alg1 < md
  # Clustered sampling selects more distinct clients per round than MD (representativity).
  assert float(by["Alg. 1 (sample size)"][4]) > float(by["MD sampling"][4])
  for png in (
    "curves_dirichlet_a0.01.png",
    "curves_one_class_random.png",
    "curves_one_class_by_label.png",
    "weight_variance.png",
  ):
    assert os.path.getsize(os.path.join(out, png)) > 5000


def test_weight_variance_per_seed_holds_the_first_seeds_table(tmp_path):
  """With several seeds the selection-only part writes a row per method and seed (the
  verdicts pair them by seed); its seed-0 rows are the seed-0 table's numbers."""
  out = str(tmp_path)
  cs.run_all(config_lib.get_config(), out, [0, 1], quick=True, parts=("weights",))
  first = {r[0]: r for r in _read_csv(os.path.join(out, "table_weight_variance.csv"))[1:]}
  rows = _read_csv(os.path.join(out, "table_weight_variance_per_seed.csv"))
  assert rows[0] == ["Method", "seed", "mean_i Var[ω_i] (measured)", "distinct clients per round"]
  assert sorted((r[0], r[1]) for r in rows[1:]) == sorted((m, s) for m in first for s in "01")
  for r in rows[1:]:
    if r[1] == "0":
      assert (float(r[2]), float(r[3])) == pytest.approx(
        (float(first[r[0]][1]), float(first[r[0]][4])), rel=1e-3
      )
  seed1 = {r[0]: float(r[2]) for r in rows[1:] if r[1] == "1"}
  assert seed1["Alg. 1 (sample size)"] < seed1["MD sampling"]

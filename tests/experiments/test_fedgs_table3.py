"""experiments/fedgs_table2.py, Table 3: the procedure's options and the Fashion-MNIST path.

The options (``c.table3``): ``normalize`` ("oracle": only the oracle similarity is min-max
normalized, the paper's Appendix C; "all": the constructed ones too), ``self_loops`` (the
authors' measurement counts the N self-loops as edges), ``warmup_rounds`` (0: the
updates are taken from the initial model, "just before training starts").
"""

import csv
import json
import math
import os

import jax.numpy as jnp
import ml_collections
import pytest

from experiments import fedgs_table2
from experiments.configs import fedgs_table2 as config_lib
from fedjax_sel import similarity
from tests.data.test_idx import write_dataset

# Four clients; the oracle joins (0, 1) and (2, 3). The constructed similarity ranks the
# same two pairs highest (0.9, 0.8) but every other pair is 0.6, above every epsilon of
# the grid, so thresholded as it is the graph is complete.
CONSTRUCTED = jnp.array(
  [
    [1.0, 0.9, 0.6, 0.6],
    [0.9, 1.0, 0.6, 0.6],
    [0.6, 0.6, 1.0, 0.8],
    [0.6, 0.6, 0.8, 1.0],
  ]
)
ORACLE_EDGES = jnp.array(
  [
    [False, True, False, False],
    [True, False, False, False],
    [False, False, False, True],
    [False, False, True, False],
  ]
)


def _t3(**overrides):
  t3 = ml_collections.ConfigDict(config_lib.get_config().table3.to_dict())
  for k, v in overrides.items():
    t3[k] = v
  return t3


def test_defaults_are_the_papers_procedure():
  t3 = config_lib.get_config().table3
  assert (t3.warmup_rounds, t3.normalize, t3.self_loops) == (0, "oracle", False)
  assert tuple(t3.epsilons) == (0.0, 0.01, 0.05, 0.1, 0.5)
  assert (t3.oracle_epsilon, t3.sigma2) == (0.1, 0.01)
  assert fedgs_table2.table3_procedure(t3) == (
    "updates from the initial model; min-max on the oracle only; edges i < j"
  )


def test_unnormalized_similarity_is_the_complete_graph():
  # 6 predicted edges, 2 of them the oracle's: P = 1/3, R = 1, F1 = 0.5 at every epsilon
  # of the grid; ties keep the smallest, 0.
  p, r, f, eps = fedgs_table2.best_f1(CONSTRUCTED, ORACLE_EDGES, _t3())
  assert (p, r, f, eps) == pytest.approx((1 / 3, 1.0, 0.5, 0.0))


def test_minmax_normalized_similarity_separates_the_pairs():
  # (V - 0.6) / 0.3: the oracle pairs become 1 and 2/3, the others 0, so epsilon = 0.01
  # already keeps exactly the two oracle edges.
  p, r, f, eps = fedgs_table2.best_f1(CONSTRUCTED, ORACLE_EDGES, _t3(normalize="all"))
  assert (p, r, f, eps) == pytest.approx((1.0, 1.0, 1.0, 0.01))


def test_self_loops_raise_the_scores_of_the_complete_graph():
  # The 4 self-loops join both edge sets: 6 hits of 10 predicted, 6 oracle edges.
  p, r, f, _ = fedgs_table2.best_f1(CONSTRUCTED, ORACLE_EDGES, _t3(self_loops=True))
  assert (p, r, f) == pytest.approx((0.6, 1.0, 0.75))


@pytest.mark.parametrize(
  "field, value, allowed",
  [
    ("normalize", "none", "allowed: oracle, all"),
    ("warmup_rounds", -1, "allowed: integers >= 0"),
    ("self_loops", "yes", "allowed: True, False"),
  ],
)
def test_bad_options_name_the_allowed_values(field, value, allowed):
  # a plain ConfigDict (as a config file could build one): no type check of its own
  t3 = ml_collections.ConfigDict({**config_lib.get_config().table3.to_dict(), field: value})
  with pytest.raises(ValueError, match=f"table3.{field}=.*{allowed}"):
    fedgs_table2.check_table3(t3)


def _spy_rounds(monkeypatch) -> list[int]:
  """The round of the global model each ``client_updates`` call starts from."""
  seen = []
  real = fedgs_table2.client_updates

  def spy(sim, state, num_clients, key):
    seen.append(int(state.round))
    return real(sim, state, num_clients, key)

  monkeypatch.setattr(fedgs_table2, "client_updates", spy)
  return seen


@pytest.mark.slow  # ~40 s on 2 busy cores, mostly compiling the round and the cohort
def test_updates_are_taken_after_warmup_rounds(small_synthetic, monkeypatch):
  warmup = 2
  base = ml_collections.ConfigDict(config_lib.get_config().datasets.synthetic.base.to_dict())
  base.num_clients, base.clients_per_round, base.local_steps = 12, 4, 2
  base.synthetic_recipe = "fedprox"
  seen = _spy_rounds(monkeypatch)
  rows = fedgs_table2.table3_rows(base, small_synthetic, _t3(warmup_rounds=warmup), seed=0)
  assert seen == [warmup]
  for p, r, f, _ in rows.values():
    assert math.isclose(f, 2 * p * r / (p + r), rel_tol=1e-5) if p + r else f == 0.0


@pytest.mark.slow  # ~35 s of CPU (70 s on 2 busy cores): the CNN's compilation
def test_fashion_mnist_path_on_fake_idx_files(tmp_path, monkeypatch):
  """The Fashion-MNIST column (the released protocol's partition, CNN, standardized
  inputs) read from four IDX files written here; --quick sizes; by default the updates
  start from the initial model (round 0)."""
  folder = str(tmp_path / "fmnist")
  write_dataset(folder, 400, 100, size=28)
  out = str(tmp_path / "out")
  seen = _spy_rounds(monkeypatch)
  tables = fedgs_table2.run_all(
    config_lib.get_config(),
    out,
    [0],
    quick=True,
    data_dir=folder,
    datasets=["fashion_mnist"],
    parts=("table3",),
  )
  with open(os.path.join(out, "table3.csv")) as f:
    rows = list(csv.reader(f))
  assert rows[0][-1] == "paper (precision / recall / F1)"
  assert [r[:2] for r in rows[1:]] == [
    ["FashionMNIST", "functional similarity"],
    ["FashionMNIST", "cosine similarity"],
  ]
  assert rows[1][-1] == "0.9761 / 0.7097 / 0.8218" and rows[2][-1].endswith("0.5448")
  for r in rows[1:]:
    p, rec, f1 = (float(x.split(" ± ")[0]) for x in r[2:5])
    assert 0.0 <= p <= 1.0 and 0.0 <= rec <= 1.0
    assert math.isclose(f1, 2 * p * rec / (p + rec), rel_tol=1e-4) if p + rec else f1 == 0
  assert seen == [0] and "updates from the initial model" in tables["table3"]
  with open(os.path.join(out, "table3_config.json")) as f:
    saved = json.load(f)
  assert saved["table3"]["warmup_rounds"] == 0 and saved["seeds"] == [0]
  fm = saved["datasets"]["FashionMNIST"]
  assert (fm["partition"], fm["model"], fm["input_normalization"]) == (
    "easyfl_quantity",
    "cnn_mnist",
    "standardize",
  )
  # the oracle of this partition: 2 labels per client, so the oracle 3DG joins the
  # clients that share a label
  ds = fedgs_table2.Column(
    "fashion_mnist", config_lib.get_config().datasets.fashion_mnist, True, folder, 0
  ).data
  counts = ds.client_info().label_counts
  shares = (counts > 0).astype(jnp.float32) @ (counts > 0).astype(jnp.float32).T > 0
  oracle = similarity.graph_edges(
    similarity.adjacency_3dg(fedgs_table2.oracle_similarity(ds), 0.01, 0.1)
  )
  assert jnp.array_equal(oracle, shares & ~jnp.eye(ds.num_clients, dtype=bool))

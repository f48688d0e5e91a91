"""experiments/fedemd.py, App. A (``--config.supplement``): fairness U, mav-always / mav-never,
SVB's recorded Shapley values, the supplement's data and config checks, a tiny run."""

import json
import re
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import fedemd
from experiments.configs import fedemd as fedemd_config
from fedjax_sel import selection
from fedjax_sel.core.types import Selection
from fedjax_sel.selection import shapley


# ----------------------------------------------------------------------------- fairness U
def test_fairness_is_one_when_contribution_follows_data_size():
  per_round, total = fedemd.fairness_utility([[1.0, 1.0, 2.0]], [[10, 10, 20]], [[True] * 3])
  np.testing.assert_allclose(per_round, [1.0])
  assert total == pytest.approx(1.0)


def test_fairness_by_hand():
  # round 1: rc = (.75, .25), q = (.5, .5): sum |q - rc| = .5, U_1 = 1 - .5 / 2 = .75
  # round 2: rc = (.5, .5), q = (.25, .75): .5, U_2 = .75
  # round 3 (3 slots): rc = q = 1/3 each: U_3 = 1
  # U = 1 - (.5 + .5 + 0) / (2 + 2 + 3) = 1 - 1/7 (Eq. 5 weighs every slot alike)
  c = [[3.0, 1.0, 9.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
  n = [[1, 1, 5], [1, 3, 0], [2, 2, 2]]
  valid = [[True, True, False], [True, True, False], [True, True, True]]
  per_round, total = fedemd.fairness_utility(c, n, valid)
  np.testing.assert_allclose(per_round, [0.75, 0.75, 1.0])
  assert total == pytest.approx(1.0 - 1.0 / 7.0)


def test_fairness_of_a_maverick_that_contributes_less_than_its_size():
  # a Maverick with 6,000 of 10,400 examples measured at a quarter of the total contribution
  sizes = [[6000, 1100, 1100, 1100, 1100]]
  contrib = [[1.0, 0.75, 0.75, 0.75, 0.75]]
  _, total = fedemd.fairness_utility(contrib, sizes, [[True] * 5])
  q = np.array(sizes[0]) / 10400
  rc = np.array(contrib[0]) / 4.0
  assert total == pytest.approx(1 - np.abs(q - rc).mean())
  assert total == pytest.approx(1 - (2 * (6000 / 10400 - 0.25)) / 5)


def test_fairness_leaves_out_rounds_whose_contributions_sum_to_zero():
  per_round, total = fedemd.fairness_utility(
    [[1.0, -1.0], [2.0, 2.0]], [[1, 1], [1, 3]], [[True, True], [True, True]]
  )
  assert np.isnan(per_round[0])
  assert per_round[1] == pytest.approx(0.75)
  assert total == pytest.approx(0.75)
  _, none = fedemd.fairness_utility([[0.0, 0.0]], [[1, 1]], [[True, True]])
  assert np.isnan(none)


@pytest.mark.parametrize(
  "c,n,match",
  [
    ([[1.0, 1.0]], [[1, 1, 1]], "the same"),
    ([1.0, 1.0], [1, 1], "the same"),
    ([[1.0, 1.0]], [[1, -2]], "negative"),
  ],
)
def test_fairness_bad_input(c, n, match):
  valid = np.ones(np.shape(c), bool)
  with pytest.raises(ValueError, match=match):
    fedemd.fairness_utility(c, n, valid)


# ----------------------------------------------------------------------------- mav-always / never
def _ctx(num_clients):
  return types.SimpleNamespace(num_examples=jnp.arange(1, num_clients + 1, dtype=jnp.float32))


@pytest.mark.parametrize("include", [True, False])
def test_maverick_selection_always_or_never_holds_the_mavericks(include):
  n, m, mav = 12, 4, [0, 5]
  sel = fedemd.make_maverick_selection(m, mav, n, include)
  state = sel.init(jax.random.PRNGKey(0), None)
  avail = jnp.ones((n,), bool).at[7].set(False)
  ctx = _ctx(n)
  for r in range(50):
    chosen, state = sel.select(state, jax.random.PRNGKey(r), avail, jnp.int32(r), ctx)
    cohort = np.asarray(chosen.cohort)[np.asarray(chosen.valid)]
    assert np.asarray(chosen.valid).all()
    assert len(set(cohort.tolist())) == m  # distinct clients
    assert 7 not in cohort  # unavailable
    assert set(mav) <= set(cohort.tolist()) if include else not set(mav) & set(cohort.tolist())
    # FedAvg weights n_k / sum n over the cohort
    sizes = np.arange(1, n + 1)[np.asarray(chosen.cohort)]
    np.testing.assert_allclose(chosen.weights, sizes / sizes.sum(), rtol=1e-6)


def test_mav_never_draws_every_other_client_uniformly():
  n, m = 10, 3
  sel = fedemd.make_maverick_selection(m, [0], n, include=False)
  counts = np.zeros(n)
  for r in range(3000):
    chosen, _ = sel.select((), jax.random.PRNGKey(r), jnp.ones((n,), bool), 0, _ctx(n))
    np.add.at(counts, np.asarray(chosen.cohort), 1)
  assert counts[0] == 0
  # each of the 9 others is picked with probability 3 / 9: 1000 of 3000, std ~ 26
  assert np.all(np.abs(counts[1:] - 1000) < 130)


@pytest.mark.parametrize(
  "args,match",
  [
    ((5, [], 50, True), "at least one distinct"),
    ((5, [50], 50, True), r"\[0, 50\)"),
    ((5, [1, 1], 50, False), "distinct"),
    ((2, [0, 1], 50, True), "fewer Mavericks than slots"),
    ((5, [0], 50, "yes"), "include='yes'"),
    ((0, [0], 50, False), "num_selected"),
  ],
)
def test_maverick_selection_bad_input(args, match):
  with pytest.raises(ValueError, match=match):
    fedemd.make_maverick_selection(*args)


# ----------------------------------------------------------------------------- SVB's record
def test_recorded_shapley_values_are_the_rounds_own():
  n, m, d = 6, 3, 4
  inner = selection.make("shapley", num_selected=m, num_permutations=4, truncation_tol=0.0)
  sel = fedemd.record_shapley(inner, fedemd.SHAPLEY_MOMENTUM)
  target = jnp.linspace(-1.0, 1.0, d)

  def eval_value(params):
    return -jnp.sum((params["w"] - target) ** 2)

  params = {"w": jnp.zeros((d,))}
  state = sel.init(jax.random.PRNGKey(3), types.SimpleNamespace(num_examples=jnp.ones((n,))))
  for r, cohort in enumerate([[0, 1, 2], [2, 3, 0], [0, 4, 2]]):
    ctx = types.SimpleNamespace(params=params, eval_value=eval_value, round=jnp.int32(r))
    chosen = Selection(
      cohort=jnp.asarray(cohort, jnp.int32),
      valid=jnp.asarray([True, True, r != 1]),
      weights=jnp.asarray([0.5, 0.3, 0.2]),
    )
    deltas = {"w": jax.random.normal(jax.random.PRNGKey(10 + r), (m, d))}
    state = sel.observe(state, chosen, deltas, jnp.zeros((m,)), ctx)

    def value_fn(mask, deltas=deltas, chosen=chosen):
      return eval_value(shapley.coalition_params(params, deltas, chosen.weights, mask))

    key = jax.random.fold_in(state.inner.key, r)
    expected = shapley.shapley_values(key, value_fn, chosen.valid, 4, 0.0)
    # clients 0 and 2 are measured again in rounds 2-3: read back through the EMA
    np.testing.assert_allclose(state.shapley, expected, atol=1e-5)
    np.testing.assert_array_equal(state.cohort, cohort)
    assert float(state.shapley[2]) == 0.0 or r != 1  # the invalid slot of round 2


def test_record_shapley_keeps_svbs_selection():
  n, m = 8, 3
  inner = selection.make("shapley", num_selected=m)
  sel = fedemd.record_shapley(inner, 0.5)
  info = types.SimpleNamespace(num_examples=jnp.ones((n,)))
  key, avail, ctx = jax.random.PRNGKey(1), jnp.ones((n,), bool), _ctx(n)
  a, _ = inner.select(inner.init(key, info), key, avail, 0, ctx)
  b, _ = sel.select(sel.init(key, info), key, avail, 0, ctx)
  np.testing.assert_array_equal(a.cohort, b.cohort)
  with pytest.raises(ValueError, match=r"momentum=1.0; allowed: \[0, 1\)"):
    fedemd.record_shapley(inner, 1.0)


# ----------------------------------------------------------------------------- data, config
def test_supplement_iid_data():
  config = fedemd.prepare_config(fedemd_config.get_config(), quick=True)
  pool = fedemd.load_pool("digits", "")
  equal = fedemd.supplement_data(config, "iid", pool)
  het = fedemd.supplement_data(config, "iid_sizehet", pool)
  eq_sizes, het_sizes = np.asarray(equal.train.counts), np.asarray(het.train.counts)
  assert eq_sizes.sum() == het_sizes.sum() == len(pool[1])  # every example, once
  assert eq_sizes.max() - eq_sizes.min() <= 1
  assert het_sizes.max() > 3 * het_sizes.min()  # lognormal sigma 1
  assert equal.extras["mavericks"] == het.extras["mavericks"] == []
  mav = fedemd.supplement_data(config, "1_excl", pool)
  assert mav.extras["mavericks"] == [0]


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("supplement", "fig8", "supplement='fig8'; allowed: '' .* 'fig5', 'fig6', 'fig7'"),
    ("size_het_sigma", 0.0, r"size_het_sigma=0.0; allowed: a number in \(0, 10\)"),
    ("size_het_sigma", 12.0, r"size_het_sigma=12.0"),
    ("methods", ("random", "mav_always"), "mav_always.*--config.supplement=fig6"),
  ],
)
def test_supplement_config_errors(field, value, match):
  config = fedemd_config.get_config()
  config[field] = value
  with pytest.raises(ValueError, match=match):
    fedemd.prepare_config(config)


def test_supplement_refuses_fedsgd():
  config = fedemd_config.get_config()
  config.supplement = "fig6"
  config.aggregation_setup = "fedsgd"
  with pytest.raises(ValueError, match="aggregation_setup='fedsgd' with supplement='fig6'"):
    fedemd.prepare_config(config)


def test_supplement_cells_are_the_figures():
  config = fedemd.prepare_config(fedemd_config.get_config())
  assert fedemd.supplement_cells(config) == ()
  config.supplement = "fig6"
  assert [m for _, m in fedemd.supplement_cells(config)] == [
    "random",
    "mav_never",
    "random",
    "mav_always",
  ]
  assert [c.selection for c in fedemd.cell_configs(config)] == ["uniform"] * 4


# ----------------------------------------------------------------------------- tiny runs
def test_tiny_fig6_and_fig5_runs(tmp_path):
  config = fedemd.prepare_config(fedemd_config.get_config(), quick=True, rounds=3)
  config.supplement = "fig6"
  out = fedemd.run_study(config, str(tmp_path / "fig6"), [0])
  traces = out["traces"]
  assert [r["maverick_selected"] for r in traces["1_excl", "mav_always"][0]] == [1, 1, 1]
  assert [r["maverick_selected"] for r in traces["1_excl", "mav_never"][0]] == [0, 0, 0]
  assert all(len(r["selected"]) == 5 for tr in traces.values() for r in tr[0])
  # same round keys: mav-never's cohort is Random's whenever Random skips the Maverick
  for rand, never in zip(traces["1_excl", "random"][0], traces["1_excl", "mav_never"][0]):
    if rand["maverick_selected"] == 0:
      assert rand["selected"] == never["selected"]
  assert (tmp_path / "fig6" / "supplement_fig6.md").exists()

  config.supplement = "fig5"
  out = fedemd.run_study(config, str(tmp_path / "fig5"), [0])
  (trace,) = out["traces"]["1_excl", "shapley"]
  u_t, total = fedemd.fairness_utility(
    [r["shapley"] for r in trace], [r["sizes"] for r in trace], [r["valid"] for r in trace]
  )
  np.testing.assert_allclose(u_t, [r["fairness"] for r in trace])
  assert 0.0 < total <= 1.0
  # a finished trace is read back, not run again
  again = fedemd.run_study(config, str(tmp_path / "fig5"), [0])
  reread = again["traces"]["1_excl", "shapley"][0]
  assert [r["seconds"] for r in reread] == [r["seconds"] for r in trace]  # the same records


# ----------------------------------------------------------------------------- Table 2
@pytest.mark.parametrize(
  "argv,match",
  [
    (["--methods=random,fedavg"], "--methods='random,fedavg'; allowed: any of"),
    (["--methods=tifl,fedemd"], "allowed: a list that includes random"),
    (["--rounds=0"], "--rounds=0, --select_repeats=20; allowed: integers >= 1"),
    (["--methods=random,tifl/paper"], "allowed: any of .*, tifl/authors, fedfast/authors"),
    (["--baselines=paper"], "--baselines='paper'; allowed: any of papers, authors"),
  ],
)
def test_overhead_benchmark_bad_flags(argv, match, capsys):
  from benchmarks import fedemd_overhead

  with pytest.raises(SystemExit):
    fedemd_overhead.parse_args(argv)
  assert re.search(match, capsys.readouterr().err)


@pytest.mark.slow  # two rounds of five methods on digits, about a minute on 2 cores
def test_overhead_benchmark_quick_json(capsys):
  from benchmarks import fedemd_overhead

  assert fedemd_overhead.main(["--json", "--quick"]) == 0
  record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert set(record["methods"]) == {"random", "tifl", "fedfast", "fedprox", "fedemd"}
  assert record["ratio_to_random"]["random"] == {"round_s": 1.0, "step_s": 1.0, "select_s": 1.0}
  assert record["paper_ratio"]["tifl"] == 2.4
  for m in record["methods"].values():
    assert len(m["round_samples_s"]) == 2 and m["steps"] > 0


def test_overhead_benchmark_variants_of_the_two_readings():
  from benchmarks import fedemd_overhead

  assert fedemd_overhead.parse_args([]).methods == [
    "random",
    "tifl",
    "fedfast",
    "fedprox",
    "fedemd",
  ]
  both = fedemd_overhead.parse_args(["--methods=random,tifl,fedfast", "--baselines=papers,authors"])
  assert both.methods == ["random", "tifl", "tifl/authors", "fedfast", "fedfast/authors"]
  named = fedemd_overhead.parse_args(["--methods=random,tifl/papers,fedfast/authors"])
  assert named.methods == ["random", "tifl", "fedfast/authors"]


@pytest.mark.slow  # two rounds of Random and the authors' TiFL on digits
def test_overhead_benchmark_quick_authors_variant(capsys):
  from benchmarks import fedemd_overhead

  assert fedemd_overhead.main(["--json", "--quick", "--methods=random,tifl/authors"]) == 0
  record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert set(record["methods"]) == {"random", "tifl/authors"}
  assert record["paper_ratio"]["tifl/authors"] == 2.4
  assert record["methods"]["tifl/authors"]["steps"] > 0
  assert set(record["tifl_authors_measurement_s"]) == {"local_model_values(M)", "one global eval"}


def test_shapley_truncation_is_passed_only_when_changed():
  config = fedemd.prepare_config(fedemd_config.get_config())
  assert "truncation_tol" not in fedemd.cell_config(config, "shapley").selection_hparams
  config.shapley_truncation_tol = 0.0
  assert fedemd.cell_config(config, "shapley").selection_hparams.truncation_tol == 0.0
  config.shapley_truncation_tol = 1.5
  with pytest.raises(
    ValueError, match=r"shapley_truncation_tol=1.5; allowed: a number in \[0, 1\]"
  ):
    fedemd.prepare_config(config)


def test_a_stopped_trace_continues_from_its_checkpoint(tmp_path, monkeypatch):
  """A supplement trace stopped after round 3 (checkpoint every 2 rounds) continues from
  round 2 with --resume: the same records as a run without the stop, round 3 run again."""
  config = fedemd.prepare_config(fedemd_config.get_config(), quick=True, rounds=4)
  config.supplement = "fig5"  # SVB: its moving Shapley averages are part of the state
  config.base.checkpoint_every = 2
  whole = fedemd.run_study(config, str(tmp_path / "whole"), [0])["traces"]["1_excl", "shapley"]

  append = fedemd.results.append_jsonl
  calls = []

  def stop_after_three(path, record):
    calls.append(record["round"])
    append(path, record)
    if len(calls) == 3:
      raise KeyboardInterrupt

  monkeypatch.setattr(fedemd.results, "append_jsonl", stop_after_three)
  with pytest.raises(KeyboardInterrupt):
    fedemd.run_study(config, str(tmp_path / "stopped"), [0])
  folder = tmp_path / "stopped" / "cells" / "1_excl_shapley" / "seed0"
  assert fedemd.checkpoint.all_rounds(str(folder)) == [2]
  before = fedemd.results.read_jsonl(str(folder / "trace.jsonl"))
  assert [r["round"] for r in before] == [1, 2, 3]
  calls.clear()
  monkeypatch.setattr(
    fedemd.results, "append_jsonl", lambda path, r: (calls.append(r["round"]), append(path, r))
  )
  resumed = fedemd.run_study(config, str(tmp_path / "stopped"), [0])["traces"]
  resumed = resumed["1_excl", "shapley"]
  assert calls == [3, 4]  # rounds 1-2 come from the checkpoint and the kept records
  assert [r["seconds"] for r in resumed[0][:2]] == [r["seconds"] for r in before[:2]]

  def same_fields(trace):  # every field but the round's seconds; NaN (U_t undefined) as text
    return [
      json.dumps({k: v for k, v in r.items() if k != "seconds"}, sort_keys=True) for r in trace
    ]

  assert same_fields(resumed[0]) == same_fields(whole[0])
  assert len(fedemd.results.read_jsonl(str(folder / "trace.jsonl"))) == 4
  assert fedemd.checkpoint.all_rounds(str(folder)) == []  # a finished trace keeps none

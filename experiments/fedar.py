r"""FedAR (Jiang et al.): client unavailability with memory and staleness-rectified weights.

  python -m experiments.fedar --output_dir=runs/fedar
  python -m experiments.fedar --quick --output_dir=/tmp/fedar
  python -m experiments.fedar --data_dir=~/tensorflow_datasets --output_dir=runs/fedar_mnist
  # the paper's Fig. 4 (p_min sweep) and Fig. 5 (number of clients N), same cells/ folder:
  python -m experiments.fedar --config.sweep=pmin --output_dir=runs/fedar
  python -m experiments.fedar --config.sweep=num_clients --output_dir=runs/fedar
  # the paper's SVHN with ResNet-18 (GroupNorm), weight decay 0.001 (Sec. 6.1):
  python -m experiments.fedar --data_dir=~/tensorflow_datasets --output_dir=runs/fedar_svhn \
    --config.real_dataset=svhn_cropped --config.real_model=resnet18 \
    --config.base.client_weight_decay=0.001

100 clients with two classes each (``shards``, 2 labels per client); client i is available
each round with a fixed p_i ~ U[p_min, 1] (``bernoulli``); every available client trains
K = 5 local steps (lr 0.1, batch 64). Methods: FedAR (rho = 0.1), MIFA, FedVARP, FedAvg-IS,
FedAvg (S = 50), Scaffold (client update ``scaffold`` + FedAvg) and FedAvg with every client
always available (the ideal reference of the bias table); two MIFA controls: ``mifa_seen``
(averaged over the clients seen so far: FedAR with rho = 0, no cutoff) and ``mifa_step``
(MIFA's update times ``mifa_step_scale``, FedAR's larger step).

Writes ``accuracy.{csv,md}`` (final test accuracy and train loss, methods x p_min; Fig. 2),
``bias.{csv,md}`` (per-client accuracy mean, variance, worst 10 %, best 10 % at
``bias_p_min``; Table 3), ``per_seed.{csv,md}`` (every run's final test accuracy and train
loss), ``per_round.{csv,md}`` (every cell's seed-mean test accuracy at each evaluated round),
``significance.{csv,md}`` (FedAR against each method at each p_min: mean difference and the
paired t-test, pairs by ``significance_pairs``: seeds or rounds; Table 2),
``fig2_pmin<p>.png`` (train loss and test accuracy curves), ``fig3_distribution.png``
(histogram of per-client accuracies) and ``cells/`` to --output_dir.

With ``--config.sweep=pmin`` (Fig. 4) or ``--config.sweep=num_clients`` (Fig. 5) it runs
that sweep instead and writes ``sweep_<sweep>.{csv,md}`` (final values, methods x sweep
value), ``sweep_<sweep>.png``, ``sweep_<sweep>_per_seed.{csv,md}``,
``sweep_<sweep>_per_round.{csv,md}`` and ``sweep_<sweep>_significance.{csv,md}``. A cell is
named by what it changes: ``pmin<p>_<method>`` (the main study's names, so a sweep into the
same --output_dir reads the main study's finished cells back) and ``n<N>_pmin<p>_<method>``
where N is not the base's.

References:
  Jiang, Zhou, Zhang, Chakraborty, "FedAR: Addressing Client Unavailability in Federated
  Learning with Local Update Approximation and Rectification", Sec. 6, Fig. 2-5, Tables 2-3.
"""

from __future__ import annotations

import os

import jax
import ml_collections
import numpy as np
from absl import app, flags

from experiments import common
from experiments.fl_fdms import dataset_cache, final_state
from fedjax_sel import availability, experiment, models
from fedjax_sel.core.registry import check_count, check_range
from fedjax_sel.data import loaders
from fedjax_sel.metrics import results
from fedjax_sel.metrics import stats as stats_lib

METHODS = {
  "fedar": "FedAR",
  "mifa": "MIFA",
  "mifa_seen": "MIFA over seen clients (control)",
  "mifa_step": "MIFA, FedAR's step (control)",
  "fedvarp": "FedVARP",
  "fedavg_is": "FedAvg-IS",
  "fedavg_s50": "FedAvg (S=50)",
  "scaffold": "Scaffold",
  "fedavg_full": "FedAvg (all clients always available)",
}
BIAS_METHODS = ("fedar", "mifa", "fedvarp", "fedavg_full")  # the rows of Table 3
REFERENCE = "fedar"  # the significance table tests FedAR against every other method
# --config.sweep: "none" (the main study: Fig. 2, Tables 2-3) or a hyper-parameter figure,
# with the column name of its swept value
SWEEPS = {"none": "", "pmin": "p_min", "num_clients": "N"}
# --config.significance_pairs: what Table 2's paired t-test pairs ("We compare the test
# accuracy of FedAR against each of the baselines", pairs unnamed), with the words of its
# table title: the final test accuracy of each seed, or the test-accuracy curve (seed mean)
# at each evaluated round (``significance_rows``)
PAIRINGS = {
  "seeds": "over seeds (each seed's final test accuracy)",
  "rounds": "over evaluated rounds (the seed-mean test accuracy curve)",
}
TINY_ENV = common.TINY_ENV


def check_real_choice(config: ml_collections.ConfigDict) -> None:
  """``real_dataset`` / ``real_model`` (what --data_dir runs) name a TFDS dataset and a model."""
  if config.real_dataset not in loaders.TFDS_NAMES:
    raise ValueError(
      f"real_dataset={config.real_dataset!r}; allowed: {', '.join(loaders.TFDS_NAMES)}"
    )
  if config.real_model not in models.names():
    raise ValueError(f"real_model={config.real_model!r}; allowed: {', '.join(models.names())}")


def prepare_config(
  config: ml_collections.ConfigDict, *, quick: bool = False, rounds: int = 0, data_dir: str = ""
) -> ml_collections.ConfigDict:
  """The study config after --quick, --rounds and --data_dir (a copy)."""
  c = ml_collections.ConfigDict(config.to_dict())
  for field in ("methods", "sweep_methods"):
    unknown = sorted(set(c[field]) - set(METHODS))
    if unknown:
      raise ValueError(f"unknown method(s) {unknown} in {field}; known: {', '.join(METHODS)}")
  for p in (*c.p_mins, *c.sweep_p_mins, c.sweep_fixed_p_min):
    if not 0.0 <= float(p) <= 1.0:
      raise ValueError(f"p_min={p!r} is out of range; allowed: [0, 1]")
  for n in c.sweep_num_clients:
    check_count("num_clients", n, strict=True)
  if c.sweep not in SWEEPS:
    raise ValueError(f"sweep={c.sweep!r} is not allowed; allowed: {', '.join(SWEEPS)}")
  if c.significance_pairs not in PAIRINGS:
    allowed = ", ".join(PAIRINGS)
    raise ValueError(
      f"significance_pairs={c.significance_pairs!r} is not allowed; allowed: {allowed}"
    )
  for field in ("sweep_p_mins", "sweep_num_clients"):
    if not c[field]:
      raise ValueError(f"{field}={tuple(c[field])!r} is empty; allowed: one value or more")
    if len(set(c[field])) < len(c[field]):
      raise ValueError(f"{field}={tuple(c[field])!r} repeats a value; allowed: distinct values")
  # the check of MIFA's step_scale, named by the study's field
  check_range(
    "mifa_step_scale",
    c.mifa_step_scale,
    0.0,
    float("inf"),
    low_inclusive=False,
    high_inclusive=False,
  )
  if float(c.mean_absence) > 0:  # every p_min the study may use must allow it
    for p in sorted({*c.p_mins, *c.sweep_p_mins, c.sweep_fixed_p_min}):
      availability.make("bernoulli", p_min=float(p), mean_absence=float(c.mean_absence))
  elif float(c.mean_absence) < 0:
    raise ValueError(
      f"mean_absence={c.mean_absence!r} is out of range; allowed: 0 (independent rounds) or >= 1"
    )
  check_real_choice(c)
  if quick:
    c.base.rounds = c.quick_rounds
    c.base.eval_every = c.quick_eval_every
    c.p_mins = tuple(c.quick_p_mins)
    c.methods = tuple(c.quick_methods)
    c.bias_p_min = float(c.p_mins[0])
    c.plot_distribution = False
    c.sweep_methods = tuple(c.quick_sweep_methods)
    c.sweep_p_mins = tuple(c.quick_sweep_p_mins)
    c.sweep_num_clients = tuple(c.quick_sweep_num_clients)
  if rounds:
    c.base.rounds = int(rounds)
  if data_dir:
    c.base.data_dir = data_dir
    if c.base.dataset in ("synthetic", "digits"):
      c.base.dataset = c.real_dataset
      c.base.model = c.real_model
  return c


def cell_config(
  config: ml_collections.ConfigDict,
  method: str,
  p_min: float | None,
  num_clients: int | None = None,
):
  """The experiment config of one (method, p_min) cell; ``fedavg_full`` ignores p_min.

  ``num_clients`` (Fig. 5) replaces the base's N (None: the base's); a base where every
  available client trains (clients_per_round >= N) keeps doing so.
  """
  c = ml_collections.ConfigDict(config.base.to_dict())
  empty = ml_collections.ConfigDict
  if num_clients is not None:
    every = int(c.clients_per_round) >= int(c.num_clients)
    c.num_clients = int(num_clients)
    c.clients_per_round = c.num_clients if every else min(int(c.clients_per_round), c.num_clients)
  if method == "fedavg_full":
    c.availability = "always"
    c.availability_hparams = empty()
    c.aggregator = "fedavg"
    c.aggregator_hparams = empty()
    return c
  c.availability_hparams = empty({"p_min": float(p_min)})
  if float(config.mean_absence) > 0:  # on/off chains with the same p_i (0: independent rounds)
    c.availability_hparams.mean_absence = float(config.mean_absence)
  if method == "fedar":
    c.aggregator = "fedar"
    c.aggregator_hparams = empty({"rho": float(config.rho)})
  elif method in ("mifa", "fedvarp", "fedavg_is"):
    c.aggregator = method
    c.aggregator_hparams = empty()
  elif method == "mifa_seen":  # = FedAR with rho = 0 and no cutoff
    c.aggregator = "mifa"
    c.aggregator_hparams = empty({"average_over": "seen"})
  elif method == "mifa_step":  # a float hparam: batches with plain MIFA
    c.aggregator = "mifa"
    c.aggregator_hparams = empty({"step_scale": float(config.mifa_step_scale)})
  elif method == "fedavg_s50":
    c.selection = "uniform"
    c.clients_per_round = min(int(config.fedavg_cohort), int(c.num_clients))
    c.aggregator = "fedavg"
    c.aggregator_hparams = empty()
  elif method == "scaffold":
    c.client_update = "scaffold"
    c.aggregator = "fedavg"
    c.aggregator_hparams = empty()
  return c


def cells(config: ml_collections.ConfigDict) -> list[tuple[str, str, float | None]]:
  out = []
  if "fedavg_full" in config.methods:
    out.append(("fedavg_full", "fedavg_full", None))
  for p in config.p_mins:
    for m in config.methods:
      if m != "fedavg_full":
        out.append((f"pmin{float(p):g}_{m}", m, float(p)))
  return out


def name_of(method: str, p_min: float | None, num_clients: int | None = None) -> str:
  """A cell's folder name: ``pmin<p>_<method>`` (``fedavg_full``: no p_min), prefixed with
  ``n<N>_`` where N is not the base's (``num_clients`` not None)."""
  prefix = "" if num_clients is None else f"n{int(num_clients)}_"
  return prefix + ("fedavg_full" if method == "fedavg_full" else f"pmin{float(p_min):g}_{method}")


def sweep_cells(
  config: ml_collections.ConfigDict,
) -> list[tuple[str, str, float, int | None, float | int]]:
  """``[(cell name, method, p_min, num_clients or None, swept value)]`` of ``config.sweep``.

  ``"pmin"``: every p_min of ``sweep_p_mins`` (the main study's cell names); ``"num_clients"``:
  every N of ``sweep_num_clients`` at ``sweep_fixed_p_min`` (None where N is the base's, so
  that cell is the main study's too). A ``fedavg_full`` cell repeats under every p_min.
  """
  base_n = int(config.base.num_clients)
  out = []
  if config.sweep == "pmin":
    for p in config.sweep_p_mins:
      for m in config.sweep_methods:
        out.append((name_of(m, p), m, float(p), None, float(p)))
  elif config.sweep == "num_clients":
    p = float(config.sweep_fixed_p_min)
    for n in config.sweep_num_clients:
      num_clients = None if int(n) == base_n else int(n)
      for m in config.sweep_methods:
        out.append((name_of(m, p, num_clients), m, p, num_clients, int(n)))
  return out


def study_cells(
  config: ml_collections.ConfigDict,
) -> list[tuple[str, str, float | None, int | None]]:
  """``[(cell name, method, p_min, num_clients)]`` that ``run_study`` runs (by ``sweep``)."""
  if config.sweep == "none":
    return [(name, m, p, None) for name, m, p in cells(config)]
  return [(name, m, p, n) for name, m, p, n, _ in sweep_cells(config)]


def per_seed_rows(runs: dict, seeds: list[int], keyed: list[tuple[str, str, object]]) -> list:
  """``[cell, method label, key, seed, final test acc (%), final train loss]`` of every run.

  ``keyed`` is ``[(cell name, method, key value)]``; ``runs[cell]`` lists the runs in the
  order of ``seeds``. The accuracy is rounded to 4 decimals (in %) and the loss to 6, the
  values ``per_seed.csv`` holds, so the significance table recomputes from the file.
  """
  rows = []
  for name, method, key in keyed:
    for seed, (summary, history) in zip(seeds, runs[name], strict=True):
      acc = round(100 * float(summary["final_test_accuracy"]), 4)
      rows.append([name, METHODS[method], key, int(seed), acc, round(history[-1]["train_loss"], 6)])
  return rows


def per_round_rows(runs: dict, keyed: list[tuple[str, str, object]]) -> list:
  """``[cell, method label, key, round, mean test acc over seeds (%)]`` at every round the
  cell evaluated: the test-accuracy curve of Fig. 2, the values the "rounds" pairing tests.

  ``keyed`` is ``[(cell name, method, key value)]``; ``runs[cell]`` lists ``(summary,
  history)`` per seed, ``history`` the run's ``metrics.jsonl`` records. A round is the
  cell's when every seed of the cell has a record of it (matched by the record's ``round``,
  not its position: a seed stopped early drops the rounds it lacks for the whole cell), so
  each value is a mean over the same seeds. Every evaluated round is kept (each
  ``eval_every``-th and the last, from the first evaluation on): the paper names no window
  and Fig. 2's curves, whose test accuracy this is, span the whole run. The mean is rounded
  to 4 decimals (in %), the value ``per_round.csv`` holds, so the test recomputes from it.
  """
  rows = []
  for name, method, key in keyed:
    curves = [
      {int(r["round"]): float(r["test_accuracy"]) for r in history if "test_accuracy" in r}
      for _, history in runs[name]
    ]
    shared = set(curves[0]).intersection(*curves[1:])
    for t in sorted(shared):
      acc = round(100 * float(np.mean([c[t] for c in curves])), 4)
      rows.append([name, METHODS[method], key, t, acc])
  return rows


def paired_test(reference: dict, other: dict) -> tuple[float, float, float, int]:
  """``(mean difference, t, p, pairs)``: ``reference`` minus ``other``, paired by key
  (``fedjax_sel.metrics.stats.paired``: same seed, the same availability draw and initial
  model; same round, the same point of training). t and p are the paired t-test's
  (``scipy.stats.ttest_rel``, two-sided), nan with fewer than two pairs."""
  r = stats_lib.paired(reference, other)
  return r.mean, r.t, r.p, r.n


def significance_rows(pair_rows: list, key_values: list, labels: list[str]) -> list[list[str]]:
  """FedAR against each method of ``labels`` at each key value (Table 2).

  ``pair_rows`` are ``per_seed_rows`` (the "seeds" pairing: each seed's final test
  accuracy, paired by seed) or ``per_round_rows`` (the "rounds" pairing: the seed-mean test
  accuracy at each evaluated round, paired by round number; where the two cells evaluated
  different rounds, only the rounds both hold are pairs). Both are ``[cell, label, key, pair
  key, test acc (%), ...]``. Rows ``[method, key, mean difference (points), t, p, pairs]``,
  FedAR minus the method in points of test accuracy (with "rounds": the mean gap between
  the curves); "n/a" for t and p with fewer than two pairs.

  The rounds of one curve are not independent draws (each round's model is the last one
  plus a step), so "rounds" p-values say how consistently one curve lies above the other,
  not how likely the gap is to repeat under another seed; "seeds" is that test.
  """
  acc: dict = {}
  for _, label, key, pair, value, *_ in pair_rows:
    acc.setdefault((label, key), {})[pair] = value
  reference = METHODS[REFERENCE]
  rows = []
  for key in key_values:
    for label in labels:
      if label == reference:
        continue
      diff, t, p, n = paired_test(acc[(reference, key)], acc[(label, key)])
      tested = n >= 2
      rows.append(
        [
          label,
          key,
          f"{diff:+.2f}",
          f"{t:.3f}" if tested else "n/a",
          f"{p:.3g}" if tested else "n/a",
          n,
        ]
      )
  return rows


def write_significance(
  output_dir: str,
  stem: str,
  per_seed: list,
  per_round: list,
  key: str,
  key_values: list,
  methods,
  title: str,
  pairs: str = "seeds",
) -> str:
  """``<stem>_per_seed``, ``<stem>_per_round`` and, where FedAR ran beside another method,
  ``<stem>_significance`` tables (no prefix for an empty stem), the t-test pairing by
  ``pairs`` (``PAIRINGS``); returns the significance table's Markdown."""
  prefix = f"{stem}_" if stem else ""
  per_seed_header = ["cell", "method", key, "seed", "final test acc (%)", "final train loss"]
  results.write_table(
    os.path.join(output_dir, f"{prefix}per_seed"),
    per_seed_header,
    [[c, m, f"{k:g}", s, f"{a:.4f}", f"{loss:.6f}"] for c, m, k, s, a, loss in per_seed],
    f"{title}: every run's final values",
  )
  per_round_header = ["cell", "method", key, "round", "mean test acc over seeds (%)"]
  results.write_table(
    os.path.join(output_dir, f"{prefix}per_round"),
    per_round_header,
    [[c, m, f"{k:g}", t, f"{a:.4f}"] for c, m, k, t, a in per_round],
    f"{title}: every cell's test accuracy at each evaluated round, mean over seeds",
  )
  if REFERENCE not in methods or set(methods) == {REFERENCE}:
    return ""
  header = [
    "method",
    key,
    "paired by",
    "FedAR minus method (points)",
    "t",
    "p (paired t-test)",
    "pairs",
  ]
  pair_rows = {"seeds": per_seed, "rounds": per_round}[pairs]
  rows = significance_rows(pair_rows, key_values, [METHODS[m] for m in methods])
  return results.write_table(
    os.path.join(output_dir, f"{prefix}significance"),
    header,
    [[m, f"{k:g}", pairs, *rest] for m, k, *rest in rows],
    f"{title}: FedAR against each method, paired t-test {PAIRINGS[pairs]}, two-sided",
  )


def final_rows(runs: dict, methods, names: dict[str, list[str]]) -> list[list[str]]:
  """``[label, acc mean ± std per column..., loss mean ± std per column...]`` per method;
  ``names[method]`` lists the method's cell of each column (std over seeds, ddof 0)."""
  rows = []
  for m in methods:
    accs, losses = [], []
    for name in names[m]:
      r = runs[name]
      accs.append(common.fmt(*common.mean_std([100 * s["final_test_accuracy"] for s, _ in r]), 2))
      losses.append(common.fmt(*common.mean_std([h[-1]["train_loss"] for _, h in r]), 3))
    rows.append([METHODS[m]] + accs + losses)
  return rows


def bias_row(summaries: list[dict]) -> list[str]:
  """Table 3 cells from final summaries' last metrics: mean ± across-client std, var, tails.

  ``summaries`` are the last metrics records (one per seed). Mean is shown as in the paper:
  mean accuracy (%) ± the standard deviation across clients (sqrt of Var), averaged over
  seeds; Var is the across-client variance in %^2; worst / best 10 % are mean ± std over
  seeds.
  """
  mean = np.mean([100 * r["client_acc_mean"] for r in summaries])
  var = np.mean([1e4 * r["client_acc_var"] for r in summaries])
  worst = common.mean_std([100 * r["client_acc_worst10"] for r in summaries])
  best = common.mean_std([100 * r["client_acc_best10"] for r in summaries])
  return [
    f"{mean:.1f} ± {np.sqrt(var):.1f}",
    f"{var:.1f}",
    common.fmt(*worst, 1),
    common.fmt(*best, 1),
  ]


def run_study(
  config: ml_collections.ConfigDict,
  output_dir: str,
  seeds: list[int],
  *,
  resume: bool = True,
) -> dict:
  """Runs every (method, p_min) cell for every seed; writes tables and figures.

  With ``config.sweep`` other than "none", runs that sweep instead (``run_sweep``).
  """
  if config.sweep != "none":
    return run_sweep(config, output_dir, seeds, resume=resume)
  os.makedirs(output_dir, exist_ok=True)
  load = dataset_cache()
  cfgs = {name: cell_config(config, method, p) for name, method, p in cells(config)}
  # every cell and seed; those of one program shape (e.g. the p_min sweep) run as one
  runs = common.run_named_cells(cfgs, output_dir, seeds, dataset_fn=load, resume=resume)
  base = config.base
  setup = setup_text(config)
  p_mins = [float(p) for p in config.p_mins]
  header = (
    ["method"]
    + [f"p_min={p:g}: final test acc (%)" for p in p_mins]
    + [f"p_min={p:g}: final train loss" for p in p_mins]
  )
  rows = final_rows(
    runs, config.methods, {m: [name_of(m, p) for p in p_mins] for m in config.methods}
  )
  md = results.write_table(
    os.path.join(output_dir, "accuracy"),
    header,
    rows,
    f"FedAR Fig. 2 (final values, mean ± std over seeds {seeds}): {setup}, {base.rounds} rounds",
  )
  keyed = [(name_of(m, p), m, p) for p in p_mins for m in config.methods]
  per_seed = per_seed_rows(runs, seeds, keyed)
  per_round = per_round_rows(runs, keyed)
  md += "\n" + write_significance(
    output_dir,
    "",
    per_seed,
    per_round,
    "p_min",
    p_mins,
    config.methods,
    f"FedAR Table 2 ({setup}, {base.rounds} rounds, seeds {seeds})",
    config.significance_pairs,
  )
  bias_header = ["method", "Mean (%)", "Var (%²)", "Worst 10% (%)", "Best 10% (%)"]
  bias_rows = []
  bp = float(config.bias_p_min)
  for m in [m for m in BIAS_METHODS if m in config.methods] + [
    m for m in config.methods if m not in BIAS_METHODS
  ]:
    bias_rows.append([METHODS[m]] + bias_row([h[-1] for _, h in runs[name_of(m, bp)]]))
  md += "\n" + results.write_table(
    os.path.join(output_dir, "bias"),
    bias_header,
    bias_rows,
    f"FedAR Table 3: per-client accuracy at p_min={bp:g} after {base.rounds} rounds "
    f"({setup}; Mean ± across-client std; tails ± std over seeds)",
  )

  figures = []
  for p in p_mins:
    path = os.path.join(output_dir, f"fig2_pmin{p:g}.png")
    curves = {}
    for m in config.methods:
      hist = [h for _, h in runs[name_of(m, p)]]
      x, loss = common.mean_curve(hist, "train_loss")
      _, acc = common.mean_curve(hist, "test_accuracy")
      curves[METHODS[m]] = (x, loss, [100 * v for v in acc])
    plot_fig2(curves, path, f"FedAR Fig. 2: {setup}, p_min={p:g}, mean of {len(seeds)} seed(s)")
    figures.append(path)
  if config.plot_distribution:
    accs = {}
    for m in [m for m in BIAS_METHODS if m in config.methods]:
      name = name_of(m, bp)
      cfg = ml_collections.ConfigDict(cfgs[name].to_dict())
      cfg.seed = seeds[0]
      dataset = load(cfg)
      sim, _ = experiment.build(cfg, dataset)
      folder = os.path.join(output_dir, "cells", name, f"seed{seeds[0]}")
      state = final_state(cfg, folder, dataset, sim)
      _, acc_k, has = sim.client_eval(jax.device_put(state.params))
      accs[METHODS[m]] = 100 * np.asarray(acc_k)[np.asarray(has)]
    path = os.path.join(output_dir, "fig3_distribution.png")
    plot_distribution(
      accs, path, f"FedAR Fig. 3: per-client accuracy, p_min={bp:g}, {setup}, seed {seeds[0]}"
    )
    figures.append(path)
  return {
    "accuracy": (header, rows),
    "bias": (bias_header, bias_rows),
    "per_seed": per_seed,
    "per_round": per_round,
    "markdown": md,
    "figures": figures,
    "runs": runs,
  }


def setup_text(config: ml_collections.ConfigDict) -> str:
  """The set-up in words, for table and figure titles."""
  base = config.base
  return (
    f"{base.dataset}, N={base.num_clients}, {base.labels_per_client} classes/client, "
    f"{base.model}, K={base.local_steps}"
  )


def run_sweep(
  config: ml_collections.ConfigDict,
  output_dir: str,
  seeds: list[int],
  *,
  resume: bool = True,
) -> dict:
  """Fig. 4 (``sweep="pmin"``) or Fig. 5 (``"num_clients"``): every method of
  ``sweep_methods`` at every swept value, for every seed; tables and the figure."""
  os.makedirs(output_dir, exist_ok=True)
  sweep, key = config.sweep, SWEEPS[config.sweep]
  todo = sweep_cells(config)
  cfgs = {name: cell_config(config, m, p, n) for name, m, p, n, _ in todo}
  runs = common.run_named_cells(cfgs, output_dir, seeds, dataset_fn=dataset_cache(), resume=resume)
  methods = tuple(config.sweep_methods)
  values = list(dict.fromkeys(v for *_, v in todo))
  names = {m: [name for name, mm, *_ in todo if mm == m] for m in methods}
  base = config.base
  if sweep == "pmin":
    figure, setup = "Fig. 4", setup_text(config)
  else:
    figure = "Fig. 5"
    setup = (
      f"{base.dataset}, p_min={float(config.sweep_fixed_p_min):g}, "
      f"{base.labels_per_client} classes/client, {base.model}, K={base.local_steps}"
    )
  header = (
    ["method"]
    + [f"{key}={v:g}: final test acc (%)" for v in values]
    + [f"{key}={v:g}: final train loss" for v in values]
  )
  rows = final_rows(runs, methods, names)
  title = f"FedAR {figure} ({setup}, {base.rounds} rounds, seeds {seeds})"
  md = results.write_table(
    os.path.join(output_dir, f"sweep_{sweep}"),
    header,
    rows,
    f"{title}: final values, mean ± std over seeds",
  )
  keyed = [(name, m, v) for name, m, _, _, v in todo]
  per_seed = per_seed_rows(runs, seeds, keyed)
  per_round = per_round_rows(runs, keyed)
  md += "\n" + write_significance(
    output_dir,
    f"sweep_{sweep}",
    per_seed,
    per_round,
    key,
    values,
    methods,
    title,
    config.significance_pairs,
  )
  path = os.path.join(output_dir, f"sweep_{sweep}.png")
  points = {}
  for m in methods:
    acc = [common.mean_std([100 * s["final_test_accuracy"] for s, _ in runs[n]]) for n in names[m]]
    loss = [common.mean_std([h[-1]["train_loss"] for _, h in runs[n]]) for n in names[m]]
    points[METHODS[m]] = (values, acc, loss)
  xlabel = "p_min" if sweep == "pmin" else "number of clients N"
  plot_sweep(points, path, xlabel, f"{title}; error bars: ± std over seeds")
  return {
    "table": (header, rows),
    "per_seed": per_seed,
    "per_round": per_round,
    "markdown": md,
    "figures": [path],
    "runs": runs,
  }


def plot_sweep(points: dict, path: str, xlabel: str, title: str) -> None:
  """Final train loss and test accuracy against the swept value, mean ± std over seeds as
  error bars, one line per method (Figs. 4-5). ``points[label] = (values, [(acc mean, std)],
  [(loss mean, std)])``."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
  for label, (values, acc, loss) in points.items():
    a.errorbar(values, *zip(*loss, strict=True), marker="o", capsize=3, label=label)
    b.errorbar(values, *zip(*acc, strict=True), marker="o", capsize=3, label=label)
  a.set_ylabel("final training loss (cross-entropy, nats)")
  b.set_ylabel("final test accuracy (%)")
  for ax in (a, b):
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
  b.legend(fontsize=8)
  fig.suptitle(title, fontsize=10)
  results.save_figure(fig, path)
  plt.close(fig)


def plot_fig2(curves: dict, path: str, title: str) -> None:
  """Train loss and test accuracy against rounds, side by side (Fig. 2)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
  for name, (x, loss, acc) in curves.items():
    a.plot(x, loss, label=name)
    b.plot(x, acc, label=name)
  a.set_xlabel("communication round")
  a.set_ylabel("training loss (cross-entropy, nats)")
  b.set_xlabel("communication round")
  b.set_ylabel("test accuracy (%)")
  for ax in (a, b):
    ax.grid(alpha=0.3)
  b.legend(fontsize=8)
  fig.suptitle(title, fontsize=10)
  results.save_figure(fig, path)
  plt.close(fig)


def plot_distribution(accs: dict, path: str, title: str) -> None:
  """Histogram of per-client accuracies, one step outline per method (Fig. 3)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6.4, 4.2))
  bins = np.linspace(0, 100, 21)
  for name, a in accs.items():
    ax.hist(a, bins=bins, histtype="step", lw=1.5, label=f"{name} (mean {np.mean(a):.1f} %)")
  ax.set_xlabel("client accuracy on its local test set (%)")
  ax.set_ylabel("number of clients")
  ax.set_title(title, fontsize=9)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  results.save_figure(fig, path)
  plt.close(fig)


# ----------------------------------------------------------------------------- binary

_DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "fedar.py")
FLAGS = flags.FLAGS


def define_flags() -> None:
  """The binary's flags (defined in ``__main__`` only, so importing this module is safe)."""
  common.define_study_flags(_DEFAULT_CONFIG)


def check_config(argv) -> tuple[ml_collections.ConfigDict, list[int]]:
  """The binary's flags and config, checked before anything runs: ``(config, seeds)``
  (``common.check_study``: the study's checks, then every cell's config for every seed)."""
  return common.check_study(
    argv, prepare_config, lambda c: [cell_config(c, m, p, n) for _, m, p, n in study_cells(c)]
  )


def main(argv):
  common.study_main(argv, check_config, run_study, "runs/fedar")


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=common.parse_flags)

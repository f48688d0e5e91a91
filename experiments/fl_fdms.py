r"""FL-FDMS (Wang & Xu): friend model substitution for dropped clients, clustered set-up.

  python -m experiments.fl_fdms --output_dir=runs/fl_fdms
  python -m experiments.fl_fdms --quick --output_dir=/tmp/fl_fdms
  python -m experiments.fl_fdms --data_dir=~/tensorflow_datasets --output_dir=runs/fl_fdms_mnist

20 clients in 5 clusters (``clustered`` partition), or with ``--config.setting=general`` the
paper's general non-iid setting (``shards``: 2 classes per client, the default
``general_partition``, or ``dirichlet``; the oracle friend is left out there). Dropout
process (``--config.process``):
"redrawn", every round exactly floor(alpha N) clients drop, drawn afresh (``cluster_dropout``
in ``fl_fdms`` mode: each cluster keeps one active client, the paper's Assumption 5), or
"markov", persistent absences (``markov_dropout``: each client an on/off chain, off a share
alpha of the rounds, absences of ``--config.mean_absence`` rounds on average). Methods: Full
(no dropout, oracle), Dropout, Stale, FL-FDMS, FL-FDMS with complexity reduction (CR) at
Theta_t (Case 1) and 0.5 Theta_t (Case 2), and FL-FDMS with the oracle friend (the true
cluster; a control).

Writes to --output_dir: ``accuracy.{csv,md}`` (final test accuracy, methods x alpha),
``convergence.{csv,md}`` (mean accuracy over rounds, rounds to ``convergence_target``,
mean absolute change of accuracy between evaluations),
``complexity.{csv,md}`` (share of pairwise similarity computations saved by CR, from the
fdms aggregator's ``pairs_saved`` / ``pairs_computed`` counters), ``fig1_alpha<a>.png``
(accuracy curves, the paper's Fig. 1), ``fig4_similarity.png`` (final similarity scores,
Fig. 4) and ``cells/<cell>/seed<k>/`` (one run each).

References:
  Wang & Xu, "Combating Client Dropout in Federated Learning via Friend Model Substitution",
  Sec. 6, Figs. 1, 4 and 5.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import jax
import ml_collections
import numpy as np
from absl import app, flags, logging

from experiments import common
from fedjax_sel import aggregation, availability, experiment
from fedjax_sel.core import checkpoint
from fedjax_sel.metrics import results

METHODS = {
  "full": "Full",
  "dropout": "Dropout",
  "stale": "Stale",
  "fdms": "FL-FDMS",
  "fdms_cr": "FL-FDMS + CR (Θ_t, Case 1)",
  "fdms_cr_half": "FL-FDMS + CR (0.5 Θ_t, Case 2)",
  "fdms_oracle": "FL-FDMS, oracle friend (true cluster)",
  # not the paper's: a friend below the floor c.fdms_min_similarity is not used (the mean is)
  "fdms_floor": "FL-FDMS, similarity floor (not the paper's)",
}
# The dropout process: "redrawn" (``cluster_dropout`` mode ``fl_fdms``: exactly floor(alpha N)
# clients drop, drawn afresh each round, one per cluster kept) or "markov" (``markov_dropout``:
# each client an on/off chain, off a share alpha of the rounds, absences of ``mean_absence``
# rounds on average).
PROCESSES = ("redrawn", "markov")
# The data: the paper's clustered setting or its general non-iid setting (``general_partition``
# of GENERAL_PARTITIONS; the methods needing true clusters, NEEDS_CLUSTERS, are left out there).
SETTINGS = ("clustered", "general")
GENERAL_PARTITIONS = ("shards", "dirichlet")
NEEDS_CLUSTERS = ("fdms_oracle",)
CR_METHODS = ("fdms", "fdms_cr", "fdms_cr_half")
TINY_ENV = common.TINY_ENV


def prepare_config(
  config: ml_collections.ConfigDict, *, quick: bool = False, rounds: int = 0, data_dir: str = ""
) -> ml_collections.ConfigDict:
  """The study config after --quick, --rounds and --data_dir (a copy; the input is unchanged).

  With ``data_dir`` the base dataset/model become ``real_dataset``/``real_model`` (the
  paper's MNIST + CNN) unless the config already names a TFDS dataset.
  """
  c = ml_collections.ConfigDict(config.to_dict())
  unknown = sorted(set(c.methods) - set(METHODS))
  if unknown:
    raise ValueError(f"unknown method(s) {unknown}; known: {', '.join(METHODS)}")
  for a in c.alphas:
    if not 0.0 <= float(a) < 1.0:
      raise ValueError(f"alpha={a!r} is out of range; allowed: [0, 1)")
  if c.process not in PROCESSES:
    raise ValueError(f"process={c.process!r} is not allowed; allowed: {list(PROCESSES)}")
  if c.setting not in SETTINGS:
    raise ValueError(f"setting={c.setting!r} is not allowed; allowed: {list(SETTINGS)}")
  if c.general_partition not in GENERAL_PARTITIONS:
    raise ValueError(
      f"general_partition={c.general_partition!r} is not allowed; "
      f"allowed: {list(GENERAL_PARTITIONS)}"
    )
  if c.setting == "general":
    c.base.partition = c.general_partition  # labels_per_client / partition_alpha of the base
    left_out = [m for m in c.methods if m in NEEDS_CLUSTERS]
    if left_out:
      logging.warning(
        "method(s) %s left out: they need true clusters, and setting='general' has none",
        left_out,
      )
      c.methods = tuple(m for m in c.methods if m not in NEEDS_CLUSTERS)
      c.quick_methods = tuple(m for m in c.quick_methods if m not in NEEDS_CLUSTERS)
  if not isinstance(c.assumption5, bool):
    raise ValueError(f"assumption5={c.assumption5!r} is not allowed; allowed: [True, False]")
  if c.assumption5 and c.process != "markov":
    raise ValueError("assumption5=True needs process='markov' (the redrawn process keeps it)")
  if "fdms_floor" in c.methods:  # with the aggregator's own message for a bad floor
    aggregation.make("fdms", min_similarity=c.fdms_min_similarity)
  if c.process == "markov":
    for a in c.alphas:  # mean_absence >= 1 and >= alpha / (1 - alpha), with the model's message
      availability.make("markov_dropout", dropout_rate=float(a), mean_absence=c.mean_absence)
  if quick:
    c.base.rounds = c.quick_rounds
    c.base.eval_every = c.quick_eval_every
    c.alphas = tuple(c.quick_alphas)
    c.methods = tuple(c.quick_methods)
  if rounds:
    c.base.rounds = int(rounds)
  if data_dir:
    c.base.data_dir = data_dir
    if c.base.dataset in ("synthetic", "digits"):
      c.base.dataset = c.real_dataset
      c.base.model = c.real_model
  return c


def cell_config(config: ml_collections.ConfigDict, method: str, alpha: float | None):
  """The experiment config of one (method, alpha) cell; alpha is ignored by ``full``."""
  c = ml_collections.ConfigDict(config.base.to_dict())
  n, g = c.num_clients, c.num_groups
  if method == "full":
    c.availability = "always"
    c.availability_hparams = ml_collections.ConfigDict()
    c.aggregator = "full"
    c.aggregator_hparams = ml_collections.ConfigDict({"weighting": config.weighting})
    return c
  if config.process == "markov":
    c.availability = "markov_dropout"
    c.availability_hparams = ml_collections.ConfigDict(
      {"dropout_rate": float(alpha), "mean_absence": float(config.mean_absence)}
    )
    if config.assumption5:
      c.availability_hparams.keep_per_cluster = g
  else:
    c.availability_hparams.dropout_rate = float(alpha)
    c.availability_hparams.num_clusters = g
  if method in ("dropout", "stale"):
    c.aggregator = method
    c.aggregator_hparams = ml_collections.ConfigDict({"weighting": config.weighting})
    return c
  c.aggregator = "fdms"
  hp = {"weighting": config.weighting}
  if method == "fdms_oracle":
    hp["friend"] = "oracle"  # clusters from the label sets: the clustered partition's groups
  if method == "fdms_floor":
    hp["min_similarity"] = float(config.fdms_min_similarity)
  if method in ("fdms_cr", "fdms_cr_half"):
    hp.update(
      complexity_reduction=True,
      num_rounds=int(c.rounds),
      confidence=float(config.cr_confidence),
      # Assumption 6: a pair is co-active in about a (1 - alpha)^2 share of the rounds.
      beta=max((1.0 - float(alpha)) ** 2, 1e-3),
      max_friends=max(n // g - 1, 1),
      theta_scale=0.5 if method == "fdms_cr_half" else 1.0,
    )
  c.aggregator_hparams = ml_collections.ConfigDict(hp)
  return c


def cells(config: ml_collections.ConfigDict) -> list[tuple[str, str, float | None]]:
  """``[(cell name, method, alpha)]``; Full runs once (it has no dropout)."""
  out = []
  if "full" in config.methods:
    out.append(("full", "full", None))
  for a in config.alphas:
    for m in config.methods:
      if m != "full":
        out.append((f"alpha{float(a):g}_{m}", m, float(a)))
  return out


def setting_text(config: ml_collections.ConfigDict) -> str:
  """The clients' data in words, for table and figure titles."""
  base = config.base
  if config.get("setting", "clustered") != "general":
    return f"{base.num_clients} clients in {base.num_groups} clusters"
  if base.partition == "dirichlet":
    how = f"class shares ~ Dir({float(base.partition_alpha):g})"
  else:
    how = f"{base.labels_per_client} classes per client"
  return f"{base.num_clients} clients, general non-iid setting ({how})"


def process_text(config: ml_collections.ConfigDict) -> str:
  """The dropout process in words, for table titles."""
  if config.process == "markov":
    kept = ", one client per cluster kept" if config.assumption5 else ""
    return (
      f"Markov dropout (each client off a share α of the rounds, absences of "
      f"{float(config.mean_absence):g} rounds on average{kept})"
    )
  return "redrawn dropout (exactly ⌊αN⌋ clients drop, drawn afresh each round)"


def dataset_cache() -> Callable[[ml_collections.ConfigDict], object]:
  """A ``dataset_fn`` for ``common.run_cell`` that loads each distinct dataset once."""
  cache: dict = {}
  keys = (
    "dataset",
    "partition",
    "num_clients",
    "data_seed",
    "num_groups",
    "labels_per_client",
    "partition_alpha",
    "test_fraction",
    "examples_per_client",
    "data_dir",
    "synthetic_alpha",
    "synthetic_beta",
  )

  def load(c):
    k = tuple(str(c[name]) for name in keys)
    if k not in cache:
      cache[k] = experiment.load_data(c)
    return cache[k]

  return load


def final_state(cfg: ml_collections.ConfigDict, folder: str, dataset, sim=None):
  """The whole RoundState of the newest checkpoint of a finished run in ``folder``.

  The tree structure comes from ``jax.eval_shape`` of ``Simulation.init`` (abstract, so no
  parameters are initialised); leaves are read like ``checkpoint.restore`` reads them.
  ``sim`` is the run's Simulation, built from ``cfg`` when None.
  """
  if sim is None:
    sim, _ = experiment.build(cfg, dataset)
  seed, aseed = cfg.seed, None if cfg.availability_seed < 0 else cfg.availability_seed
  template = jax.eval_shape(lambda: sim.init(seed, aseed))
  leaves, treedef = jax.tree_util.tree_flatten(template)
  path = os.path.join(
    checkpoint.checkpoint_dir(folder), f"ckpt_{checkpoint.latest_round(folder):08d}.npz"
  )
  with np.load(path) as f:
    arrays = [f[f"leaf_{i}"] for i in range(len(leaves))]
  for arr, ref in zip(arrays, leaves, strict=True):
    if arr.shape != ref.shape:
      raise ValueError(f"checkpoint {path} does not match the config of {folder}")
  return jax.tree_util.tree_unflatten(treedef, arrays)


def curve_of(history: list[dict]) -> list[float]:
  """Test accuracy at each evaluation."""
  return [r["test_accuracy"] for r in history]


def rounds_to(history: list[dict], target: float) -> int | None:
  """The first evaluated round with test accuracy >= target (None if never)."""
  return next((int(r["round"]) for r in history if r["test_accuracy"] >= target), None)


def fluctuation(history: list[dict]) -> float:
  """Mean absolute change of test accuracy between consecutive evaluations (0 if < 2).

  The paper's Fig. 1 claim that FL-FDMS "reduces the fluctuations caused by the client
  dropout on the convergence curve", as one number per run.
  """
  acc = np.asarray(curve_of(history), dtype=np.float64)
  return float(np.mean(np.abs(np.diff(acc)))) if acc.size > 1 else 0.0


def saved_share(pairs_saved: float, pairs_computed: float) -> float:
  """Share of the co-active pairs whose similarity score was not computed (0 if none)."""
  total = float(pairs_saved) + float(pairs_computed)
  return float(pairs_saved) / total if total > 0 else 0.0


# The paper's Sec. 6 comparisons: (row label, method a, method b), a minus b.
COMPARISONS = (
  ("FL-FDMS − Dropout", "fdms", "dropout"),
  ("FL-FDMS − Stale", "fdms", "stale"),
  ("Full − FL-FDMS", "full", "fdms"),
  ("oracle friend − FL-FDMS", "fdms_oracle", "fdms"),
  ("oracle friend − Stale", "fdms_oracle", "stale"),
  ("similarity floor − FL-FDMS", "fdms_floor", "fdms"),
)


def claim_tables(
  final: dict, speed: dict, methods: list[str], alphas: list[float]
) -> tuple[tuple[list, list], tuple[list, list]]:
  """The differences the paper's claims are about, in points of accuracy (seed means).

  Args:
    final: {(method, alpha): mean final test accuracy (%)}; Full's entry under every alpha.
    speed: {(method, alpha): mean test accuracy over the evaluations (%)}, likewise.
    methods: the methods run.
    alphas: the dropout ratios, in order.

  Returns:
    ``differences`` (header, rows): one row per pair of COMPARISONS whose methods both ran,
    a minus b in final and in mean accuracy per alpha; ``sensitivity`` (header, rows): per
    method (but Full), the loss from the first to the last alpha, final and mean accuracy.
  """
  diff_header = (
    ["comparison"]
    + [f"α={a:g}: final acc (pp)" for a in alphas]
    + [f"α={a:g}: mean acc over rounds (pp)" for a in alphas]
  )
  diff_rows = []
  for label, x, y in COMPARISONS:
    if x in methods and y in methods:
      diff_rows.append(
        [label]
        + [f"{final[x, a] - final[y, a]:+.2f}" for a in alphas]
        + [f"{speed[x, a] - speed[y, a]:+.2f}" for a in alphas]
      )
  lo, hi = alphas[0], alphas[-1]
  sens_header = [
    "method",
    f"final acc α={lo:g} → α={hi:g} (%)",
    "loss (pp)",
    f"mean acc α={lo:g} → α={hi:g} (%)",
    "loss (pp)",
  ]
  sens_rows = [
    [
      METHODS[m],
      f"{final[m, lo]:.2f} → {final[m, hi]:.2f}",
      f"{final[m, lo] - final[m, hi]:.2f}",
      f"{speed[m, lo]:.2f} → {speed[m, hi]:.2f}",
      f"{speed[m, lo] - speed[m, hi]:.2f}",
    ]
    for m in methods
    if m != "full"
  ]
  return (diff_header, diff_rows), (sens_header, sens_rows)


def run_study(
  config: ml_collections.ConfigDict,
  output_dir: str,
  seeds: list[int],
  *,
  resume: bool = True,
) -> dict:
  """Runs every cell for every seed, writes tables and figures; returns them.

  Returns:
    dict with ``accuracy``, ``convergence``, ``complexity``, ``differences`` and
    ``sensitivity`` (each ``(header, rows)``), ``markdown`` (the tables), ``figures`` (PNG
    paths) and ``runs`` (cell name -> [(summary, history)]).
  """
  os.makedirs(output_dir, exist_ok=True)
  load = dataset_cache()
  cfgs = {name: cell_config(config, method, alpha) for name, method, alpha in cells(config)}
  # every cell and seed; those of one program shape run as one
  runs = common.run_named_cells(cfgs, output_dir, seeds, dataset_fn=load, resume=resume)
  base = config.base
  setup = f"{base.dataset}, {setting_text(config)}, {base.model}, {process_text(config)}"

  def acc_cell(name):
    if name not in runs:
      return "—"
    m, s = common.mean_std([100 * r[0]["final_test_accuracy"] for r in runs[name]])
    return common.fmt(m, s, 2)

  def name_of(method, alpha):
    return "full" if method == "full" else f"alpha{float(alpha):g}_{method}"

  alphas = [float(a) for a in config.alphas]
  acc_header = ["method"] + [f"α={a:g}: final test acc (%)" for a in alphas]
  acc_rows = [[METHODS[m]] + [acc_cell(name_of(m, a)) for a in alphas] for m in config.methods]
  md = results.write_table(
    os.path.join(output_dir, "accuracy"),
    acc_header,
    acc_rows,
    f"FL-FDMS Fig. 1 (final accuracy, mean ± std over seeds {seeds}): {setup}, "
    f"{base.rounds} rounds",
  )

  # Convergence speed and smoothness (the paper's Fig. 1 claims, read off the curves).
  target = float(config.convergence_target)
  cv_header = (
    ["method"]
    + [f"α={a:g}: mean test acc over rounds (%)" for a in alphas]
    + [f"α={a:g}: rounds to {100 * target:g} % acc" for a in alphas]
    + [f"α={a:g}: mean |Δ acc| between evaluations (pp)" for a in alphas]
  )
  cv_rows = []
  for m in config.methods:
    means, reach, wobble = [], [], []
    for a in alphas:
      hists = [h for _, h in runs[name_of(m, a)]]
      means.append(common.fmt(*common.mean_std([100 * np.mean(curve_of(h)) for h in hists]), 2))
      wobble.append(common.fmt(*common.mean_std([100 * fluctuation(h) for h in hists]), 2))
      reached = [rounds_to(h, target) for h in hists]
      ok = [r for r in reached if r is not None]
      text = common.fmt(*common.mean_std(ok), 1) if ok else f">{base.rounds}"
      if ok and len(ok) < len(reached):
        text += f" ({len(ok)}/{len(reached)} seeds)"
      reach.append(text)
    cv_rows.append([METHODS[m]] + means + reach + wobble)
  md += "\n" + results.write_table(
    os.path.join(output_dir, "convergence"),
    cv_header,
    cv_rows,
    f"FL-FDMS Fig. 1 (speed and smoothness): mean test accuracy over the evaluations, first "
    f"evaluated round reaching {100 * target:g} % and mean change between evaluations "
    f"({setup})",
  )

  # Complexity reduction: share of similarity computations saved (state counters).
  cx_header = (
    ["method"]
    + [f"α={a:g}: similarity computations saved (%)" for a in alphas]
    + [f"α={a:g}: scores computed" for a in alphas]
  )
  cx_rows = []
  similarity = None
  cr_methods = [m for m in CR_METHODS if m in config.methods]
  # The counters live in each run's final checkpoint; runs read back from results/ (which
  # keeps config.json, metrics.jsonl and summary.json only) have none: the table and Fig. 4
  # are then left as they are, the other tables are written.
  no_state = [
    os.path.join(output_dir, "cells", name_of(m, a), f"seed{seed}")
    for m in cr_methods
    for a in alphas
    for seed in seeds
    if checkpoint.latest_round(os.path.join(output_dir, "cells", name_of(m, a), f"seed{seed}"))
    is None
  ]
  if no_state:
    logging.warning(
      "complexity table and Fig. 4 not written: %d run(s) without a final checkpoint (%s%s); "
      "the counters are in the checkpoints",
      len(no_state),
      no_state[0],
      ", ..." if len(no_state) > 1 else "",
    )
    cr_methods = []
  for m in cr_methods:
    shares, computed = [], []
    for a in alphas:
      name = name_of(m, a)
      per_seed, comp = [], []
      for seed in seeds:
        cfg = ml_collections.ConfigDict(cfgs[name].to_dict())
        cfg.seed = seed
        folder = os.path.join(output_dir, "cells", name, f"seed{seed}")
        st = final_state(cfg, folder, load(cfg)).aggregation_state
        per_seed.append(100 * saved_share(st.pairs_saved, st.pairs_computed))
        comp.append(float(st.pairs_computed))
        if m == "fdms" and similarity is None and abs(a - config.similarity_alpha) < 1e-9:
          sim_matrix = np.where(np.asarray(st.co_rounds) > 0, np.asarray(st.similarity), np.nan)
          similarity = (sim_matrix, a, seed)
      shares.append(common.fmt(*common.mean_std(per_seed), 2))
      computed.append(f"{np.mean(comp):.0f}")
    cx_rows.append([METHODS[m]] + shares + computed)
  if not no_state:
    md += "\n" + results.write_table(
      os.path.join(output_dir, "complexity"),
      cx_header,
      cx_rows,
      f"FL-FDMS Fig. 5(a): similarity computations saved by complexity reduction ({setup})",
    )

  # The claims' differences (seed means), and each method's loss from the first to last alpha.
  final, speed = {}, {}
  for m in config.methods:
    for a in alphas:
      hists = [h for _, h in runs[name_of(m, a)]]
      final[m, a] = float(np.mean([100 * r[0]["final_test_accuracy"] for r in runs[name_of(m, a)]]))
      speed[m, a] = float(np.mean([100 * np.mean(curve_of(h)) for h in hists]))
  (df_header, df_rows), (sn_header, sn_rows) = claim_tables(
    final, speed, list(config.methods), alphas
  )
  md += "\n" + results.write_table(
    os.path.join(output_dir, "differences"),
    df_header,
    df_rows,
    f"FL-FDMS Sec. 6 claims: differences of seed means in points of accuracy ({setup})",
  )
  md += "\n" + results.write_table(
    os.path.join(output_dir, "sensitivity"),
    sn_header,
    sn_rows,
    f"FL-FDMS Sec. 6 (Stale the most sensitive to α): seed means at the lowest and highest α "
    f"({setup})",
  )

  figures = []
  for a in alphas:
    curves = {}
    for m in config.methods:
      name = name_of(m, a)
      rounds, acc = common.mean_curve([h for _, h in runs[name]], "test_accuracy")
      curves[METHODS[m]] = (rounds, [100 * v for v in acc])
    path = os.path.join(output_dir, f"fig1_alpha{a:g}.png")
    if config.get("setting", "clustered") == "general":
      where = f"general non-iid ({base.partition}, N={base.num_clients})"
    else:
      where = f"clustered (N={base.num_clients}, {base.num_groups} clusters)"
    results.plot_curves(
      curves,
      path,
      f"FL-FDMS Fig. 1: {base.dataset} + {base.model}, {where}, α={a:g}, "
      f"mean of {len(seeds)} seed(s)",
      "test accuracy (%)",
    )
    figures.append(path)
  if similarity is not None:
    general = config.get("setting", "clustered") == "general"
    path = os.path.join(output_dir, "fig4_similarity.png")
    plot_similarity(
      similarity[0],
      path,
      f"FL-FDMS Fig. 4: final similarity scores R (α={similarity[1]:g}, "
      f"seed {similarity[2]}, {base.dataset} + {base.model})",
      *(["client j (general non-iid setting: no clusters)"] if general else []),
    )
    figures.append(path)
  return {
    "accuracy": (acc_header, acc_rows),
    "complexity": (cx_header, cx_rows),
    "convergence": (cv_header, cv_rows),
    "differences": (df_header, df_rows),
    "sensitivity": (sn_header, sn_rows),
    "markdown": md,
    "figures": figures,
    "runs": runs,
  }


def plot_similarity(
  matrix: np.ndarray,
  path: str,
  title: str,
  xlabel: str = "client j (clusters are consecutive ids)",
) -> None:
  """Heat map of the [N, N] running similarity scores (NaN = never compared, grey)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(5.6, 4.6))
  cmap = plt.get_cmap("viridis").with_extremes(bad="lightgrey")
  im = ax.imshow(matrix, cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
  n = matrix.shape[0]
  ticks = np.arange(0, n, max(1, n // 10))
  ax.set_xticks(ticks)
  ax.set_yticks(ticks)
  ax.set_xlabel(xlabel)
  ax.set_ylabel("client i")
  ax.set_title(title + "\n(grey: pair never co-active)", fontsize=9)
  fig.colorbar(im, ax=ax, label="R_ij = mean of (cos + 1) / 2 (unitless, 0 to 1)")
  results.save_figure(fig, path)
  plt.close(fig)


# ----------------------------------------------------------------------------- binary

_DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "fl_fdms.py")
FLAGS = flags.FLAGS


def define_flags() -> None:
  """The binary's flags (defined in ``__main__`` only, so importing this module is safe)."""
  common.define_study_flags(_DEFAULT_CONFIG)


def check_config(argv) -> tuple[ml_collections.ConfigDict, list[int]]:
  """The binary's flags and config, checked before anything runs: ``(config, seeds)``
  (``common.check_study``: the study's checks, then every cell's config for every seed)."""
  return common.check_study(
    argv, prepare_config, lambda c: [cell_config(c, m, a) for _, m, a in cells(c)]
  )


def main(argv):
  common.study_main(argv, check_config, run_study, "runs/fl_fdms")


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=common.parse_flags)

r"""FedGS (Wang et al., AAAI 2023): Table 2, Fig. 4, Table 3 and Table 4.

  python -m experiments.fedgs_table2 --output_dir=runs/fedgs_table2            # Synthetic
  python -m experiments.fedgs_table2 --output_dir=runs/fedgs_quick --quick      # smoke test
  python -m experiments.fedgs_table2 --data_dir=~/tensorflow_datasets \
      --datasets=synthetic,fashion_mnist,cifar10 --output_dir=runs/fedgs_all

Table 2: optimal (lowest) test loss of every method (UniformSample, MDSample,
Power-of-Choice, FedProx mu=0.01, FedGS alpha in {0, 0.5, 1, 2, 5}) under every availability
mode of each dataset's column, mean +- std over ``--seeds``. The FashionMNIST and CIFAR-10
columns run only when ``--data_dir`` holds those TFDS datasets (or when named in
``--datasets``). Fig. 4: final sampling counts per client. Table 3: precision / recall / F1
of the 3DG built from cosine / functional similarity against the oracle 3DG. Table 4:
FedGS on the oracle vs the constructed 3DGs. Every cell/seed runs under
``output_dir/cells/<cell>/seed<k>/`` (finished ones are read back with ``--resume``);
``--seed_from=results/<folder>`` (or ``--collect=results/<folder>``, which also keeps each run
there as it finishes; ``experiments/grid.py``) first copies the committed finished runs
there, so the same command on a fresh machine trains only the runs that folder lacks.
The Fashion-MNIST column runs the authors' released protocol by default;
``--config.fmnist_protocol=ours`` the one of the committed ``results/fedgs_fmnist/
rounds*/`` ablation (``experiments/configs/fedgs_table2.py``). A cell folder that holds
runs of the other protocol is refused (use another ``--output_dir``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app, flags, logging

from experiments import common, grid
from experiments.configs import fedgs_table2 as config_lib
from fedjax_sel import data as data_lib
from fedjax_sel import experiment, similarity
from fedjax_sel.metrics import results

CONFIG_FILE = os.path.join(os.path.dirname(__file__), "configs", "fedgs_table2.py")
PARTS = ("table2", "fig4", "table3", "table4")
REAL_DATASETS = ("fashion_mnist", "cifar10")

# Table 2 of the paper (optimal test loss, mean over 3 seeds): {dataset: {mode: {method}}}.
PAPER_TABLE2 = {
  "synthetic": {
    "idl": dict(
      uniform=0.302,
      md=0.302,
      power_of_choice=0.691,
      fedprox=0.301,
      fedgs_a0=0.307,
      fedgs_a0_5=0.311,
      fedgs_a1=0.328,
      fedgs_a2=0.306,
      fedgs_a5=0.317,
    ),
    "ln": dict(
      uniform=0.320,
      md=0.322,
      power_of_choice=0.362,
      fedprox=0.346,
      fedgs_a0=0.305,
      fedgs_a0_5=0.306,
      fedgs_a1=0.306,
      fedgs_a2=0.307,
      fedgs_a5=0.307,
    ),
    "sln": dict(
      uniform=0.324,
      md=0.328,
      power_of_choice=0.352,
      fedprox=0.376,
      fedgs_a0=0.320,
      fedgs_a0_5=0.319,
      fedgs_a1=0.318,
      fedgs_a2=0.320,
      fedgs_a5=0.321,
    ),
    "ldf": dict(
      uniform=0.330,
      md=0.328,
      power_of_choice=0.557,
      fedprox=0.319,
      fedgs_a0=0.309,
      fedgs_a0_5=0.308,
      fedgs_a1=0.308,
      fedgs_a2=0.308,
      fedgs_a5=0.309,
    ),
    "mdf": dict(
      uniform=0.362,
      md=0.326,
      power_of_choice=0.301,
      fedprox=0.410,
      fedgs_a0=0.310,
      fedgs_a0_5=0.311,
      fedgs_a1=0.311,
      fedgs_a2=0.311,
      fedgs_a5=0.311,
    ),
  },
  "cifar10": {
    "idl": dict(
      uniform=0.975,
      md=0.971,
      power_of_choice=1.287,
      fedprox=0.972,
      fedgs_a0=1.006,
      fedgs_a0_5=0.977,
      fedgs_a1=0.968,
      fedgs_a2=0.970,
      fedgs_a5=0.976,
    ),
    "ln": dict(
      uniform=1.042,
      md=1.037,
      power_of_choice=1.108,
      fedprox=1.056,
      fedgs_a0=0.976,
      fedgs_a0_5=0.973,
      fedgs_a1=0.972,
      fedgs_a2=0.975,
      fedgs_a5=0.974,
    ),
    "sln": dict(
      uniform=1.038,
      md=1.048,
      power_of_choice=1.078,
      fedprox=1.162,
      fedgs_a0=1.002,
      fedgs_a0_5=1.000,
      fedgs_a1=0.996,
      fedgs_a2=1.001,
      fedgs_a5=0.996,
    ),
    "ldf": dict(
      uniform=1.049,
      md=1.051,
      power_of_choice=1.267,
      fedprox=1.039,
      fedgs_a0=0.974,
      fedgs_a0_5=0.966,
      fedgs_a1=0.971,
      fedgs_a2=0.973,
      fedgs_a5=0.972,
    ),
    "mdf": dict(
      uniform=0.999,
      md=0.991,
      power_of_choice=1.026,
      fedprox=0.995,
      fedgs_a0=0.967,
      fedgs_a0_5=0.974,
      fedgs_a1=0.963,
      fedgs_a2=0.969,
      fedgs_a5=0.972,
    ),
  },
  "fashion_mnist": {
    "idl": dict(
      uniform=0.315,
      md=0.315,
      power_of_choice=0.345,
      fedprox=0.315,
      fedgs_a0=0.302,
      fedgs_a0_5=0.299,
      fedgs_a1=0.300,
      fedgs_a2=0.310,
      fedgs_a5=0.307,
    ),
    "ymf": dict(
      uniform=0.331,
      md=0.333,
      power_of_choice=0.326,
      fedprox=0.331,
      fedgs_a0=0.310,
      fedgs_a0_5=0.312,
      fedgs_a1=0.308,
      fedgs_a2=0.303,
      fedgs_a5=0.303,
    ),
    "yc": dict(
      uniform=0.333,
      md=0.338,
      power_of_choice=0.311,
      fedprox=0.374,
      fedgs_a0=0.324,
      fedgs_a0_5=0.312,
      fedgs_a1=0.310,
      fedgs_a2=0.312,
      fedgs_a5=0.307,
    ),
  },
}
# Table 3 of the paper: {dataset: {similarity: (precision, recall, F1)}}.
PAPER_TABLE3 = {
  "cifar10": {"functional": (0.8789, 0.8700, 0.8744), "cosine": (1.0000, 0.1316, 0.2327)},
  "fashion_mnist": {"functional": (0.9761, 0.7097, 0.8218), "cosine": (0.3765, 0.9853, 0.5448)},
}
# Table 4 of the paper: {dataset: {mode: (oracle, functional, cosine)}}.
PAPER_TABLE4 = {
  "synthetic": {
    "idl": (0.306, 0.304, 0.304),
    "ln": (0.305, 0.306, 0.304),
    "sln": (0.318, 0.319, 0.318),
    "ldf": (0.308, 0.306, 0.307),
    "mdf": (0.310, 0.310, 0.309),
  },
  "cifar10": {
    "idl": (0.968, 0.963, 0.971),
    "ln": (0.972, 0.972, 0.973),
    "sln": (0.996, 0.991, 0.994),
    "ldf": (0.966, 0.975, 0.967),
    "mdf": (0.963, 0.962, 0.965),
  },
  "fashion_mnist": {
    "idl": (0.299, 0.305, 0.304),
    "ymf": (0.303, 0.307, 0.307),
    "yc": (0.307, 0.314, 0.313),
  },
}

QUICK_METHODS = "uniform,fedgs_a1"


def define_flags():
  """Defines this binary's flags; returns the ``--config`` holder."""
  common.define_flags()
  flags.DEFINE_string("parts", ",".join(PARTS), f"what to produce, any of {PARTS}")
  flags.DEFINE_string(
    "datasets",
    "",
    "comma-separated datasets (synthetic, fashion_mnist, cifar10); '' = "
    "synthetic, plus the real ones when --data_dir is given",
  )
  flags.DEFINE_string(
    "methods",
    "",
    "comma-separated methods of the config ('' = the paper's rows; 'all' = the paper's rows "
    f"and the config's extra_methods; --quick: {QUICK_METHODS})",
  )
  flags.DEFINE_string("modes", "", "subset of the availability modes ('' = each dataset's)")
  return common.define_config_file(CONFIG_FILE, "the paper's settings (ml_collections config file)")


def split_names(text: str, allowed: Sequence[str], what: str) -> list[str]:
  names = [s.strip() for s in text.split(",") if s.strip()]
  bad = [s for s in names if s not in allowed]
  if bad:
    raise ValueError(f"unknown {what} {bad}; allowed: {', '.join(allowed)}")
  return names


# ------------------------------------------------------------------------------ data


def load_dataset(base: ml_collections.ConfigDict, sizes: str = "") -> data_lib.FederatedData:
  """The dataset of a column (Appendix C); real datasets read from ``base.data_dir``."""
  if base.dataset == "synthetic" or not sizes:
    return experiment.load_data(base)
  kwargs = {"sizes": sizes}
  if base.partition == "dirichlet":
    kwargs["alpha"] = base.partition_alpha
  return data_lib.load(
    base.dataset,
    base.num_clients,
    base.partition,
    seed=base.data_seed,
    data_dir=base.data_dir or None,
    test_fraction=base.test_fraction,
    **kwargs,
  )


def quick_base(base: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Tiny settings for smoke tests: a few rounds; small real datasets."""
  c = ml_collections.ConfigDict(base.to_dict())
  c.rounds = min(c.rounds, 10)
  c.eval_every = 5
  c.checkpoint_every = 0
  if c.dataset != "synthetic":
    c.num_clients, c.clients_per_round = 10, 2
    c.local_steps, c.batch_size, c.rounds, c.eval_every = 2, 8, 4, 2
  return c


def parse_seeds_of(text: str) -> dict[str, set[int]]:
  """A column's ``seeds_of``, ``"power_of_choice:0,fedprox:0"`` (``method:seed[+seed]``):
  those methods run only those seeds there (the rest run every seed of ``--seeds``).

  Raises:
    ValueError: a malformed entry, named with what is allowed.
  """
  out: dict[str, set[int]] = {}
  for part in [p.strip() for p in text.split(",") if p.strip()]:
    m = re.fullmatch(r"(\w+):(\d+(?:\+\d+)*)", part)
    if not m:
      raise ValueError(
        f"seeds_of entry {part!r}; allowed: method:seed[+seed...], e.g. fedprox:0 or md:0+1"
      )
    out[m.group(1)] = {int(x) for x in m.group(2).split("+")}
  return out


class Column:
  """One dataset column: base config, modes and the (lazily loaded, cached) dataset."""

  def __init__(
    self, key: str, spec: ml_collections.ConfigDict, quick: bool, data_dir: str, rounds: int
  ):
    self.key = key
    self.label = spec.label
    base = ml_collections.ConfigDict(spec.base.to_dict())
    if data_dir:
      base.data_dir = os.path.expanduser(data_dir)
    if quick:
      base = quick_base(base)
    if rounds:
      base.rounds = rounds
    self.base = base
    self.sizes = spec.sizes if not quick else ""
    self.modes = [m for m in spec.modes.split(",") if m][: 2 if quick else None]
    self.availability_seed_per_seed = bool(spec.get("availability_seed_per_seed", False))
    self.run_order = spec.get("run_order", "cell")
    if self.run_order not in common.RUN_ORDERS:
      raise ValueError(
        f"datasets.{key}.run_order={self.run_order!r}; allowed: {', '.join(common.RUN_ORDERS)}"
      )
    self.seeds_of = parse_seeds_of(spec.get("seeds_of", ""))
    self._data = None

  def method_seeds(self, method: str, seeds: Sequence[int]) -> list[int]:
    """The seeds of ``seeds`` that ``method`` runs in this column (``seeds_of``)."""
    return [s for s in seeds if method not in self.seeds_of or s in self.seeds_of[method]]

  @property
  def data(self) -> data_lib.FederatedData:
    if self._data is None:
      self._data = load_dataset(self.base, self.sizes)
    return self._data


def cell_config(
  column: Column,
  method: ml_collections.ConfigDict,
  mode: ml_collections.ConfigDict,
  oracle: bool = True,
) -> ml_collections.ConfigDict:
  """The experiment config of one (dataset, method, availability mode) cell; ``oracle=False``
  leaves out Synthetic's oracle features (which load the data), for the up-front checks."""
  c = ml_collections.ConfigDict(column.base.to_dict())
  c.selection = method.selection
  c.selection_hparams = ml_collections.ConfigDict(method.selection_hparams.to_dict())
  c.client_update = method.client_update
  c.client_update_hparams = ml_collections.ConfigDict(method.client_update_hparams.to_dict())
  c.availability = mode.availability
  c.availability_hparams = ml_collections.ConfigDict(mode.availability_hparams.to_dict())
  hp = c.selection_hparams
  if (
    oracle
    and c.selection == "fedgs"
    and hp.get("similarity", "oracle") == "oracle"
    and c.dataset == "synthetic"
  ):
    # Appendix C: Synthetic's oracle features are the clients' true local models (W_k, b_k).
    hp.oracle_features = np.asarray(column.data.extras["true_params"]).tolist()
  return c


def apply_fmnist_protocol(cfg: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """``cfg`` with its ``fmnist_protocol`` applied: itself for ``"reference_code"`` (the
  config's own settings), a copy with ``config_lib.FMNIST_OURS`` on the Fashion-MNIST base
  and Table 1's YC for ``"ours"``."""
  name = cfg.get("fmnist_protocol", "reference_code")
  if not isinstance(name, str) or name not in config_lib.FMNIST_PROTOCOLS:
    raise ValueError(f"fmnist_protocol={name!r}; allowed: {', '.join(config_lib.FMNIST_PROTOCOLS)}")
  if name == "reference_code":
    return cfg
  out = ml_collections.ConfigDict(cfg.to_dict())
  for field, value in config_lib.FMNIST_OURS.items():
    out.datasets.fashion_mnist.base[field] = value
  out.modes.yc.availability_hparams = ml_collections.ConfigDict(config_lib.FMNIST_OURS_YC)
  return out


def run_cells(
  column: Column,
  cells: dict[str, ml_collections.ConfigDict],
  output_dir: str,
  seeds: list[int],
  resume: bool,
) -> dict[str, list[tuple[dict, list[dict]]]]:
  """Every cell for every seed; seeds and cells that differ only in numbers (FedGS's alpha)
  run as one batched program each (``common.run_cells``)."""
  out = common.run_cells(
    {name: (c, os.path.join(output_dir, "cells", name)) for name, c in cells.items()},
    seeds,
    lambda _c: column.data,
    resume=resume,
    availability_seed_per_seed=column.availability_seed_per_seed,
    order=column.run_order,
    cell_seeds={n: column.method_seeds(n.split("-")[-1], seeds) for n in cells},
  )
  for name, res in out.items():
    best = [s["best_test_loss"] for s, _ in res]
    logging.info("%s: best test loss %s", name, common.fmt(*common.mean_std(best)))
  return out


# ------------------------------------------------------------------------------ Table 2


def table2(columns, cfg, method_keys, output_dir, seeds, resume, mode_filter=()):
  """Runs Table 2 and writes ``table2.{csv,md}`` and ``table2_vs_paper.{csv,md}``."""
  runs = {}
  for col in columns:
    modes = [m for m in col.modes if not mode_filter or m in mode_filter]
    cells = {}
    for mode in modes:
      for mk in method_keys:
        cells[f"{col.key}-{mode}-{mk}"] = cell_config(col, cfg.methods[mk], cfg.modes[mode])
    for name, res in run_cells(col, cells, output_dir, seeds, resume).items():
      _, mode, mk = name.split("-")
      runs[(col.key, mode, mk)] = res
  header = ["Method"]
  keys = []
  for col in columns:
    for mode in col.modes:
      if any((col.key, mode, mk) in runs for mk in method_keys):
        header.append(f"{col.label} {cfg.modes[mode].label}")
        keys.append((col.key, mode))
  rows = []
  for mk in method_keys:
    ran = {len(runs.get((d, mode, mk), [])) for d, mode in keys} - {0}
    fewer = [c.method_seeds(mk, seeds) for c in columns if c.method_seeds(mk, seeds) != seeds]
    only = f" (seed {'+'.join(map(str, fewer[0]))})" if fewer and ran else ""
    row = [cfg.methods[mk].label + only]
    for d, mode in keys:
      best = [s["best_test_loss"] for s, _ in runs.get((d, mode, mk), [])]
      row.append(common.fmt(*common.mean_std(best), digits=3) if best else "")
    rows.append(row)
  title = (
    f"FedGS Table 2: optimal test loss, {seeds_phrase(seeds)}, {rounds_phrase(columns)} "
    f"({', '.join(c.label for c in columns)})"
  )
  md = results.write_table(os.path.join(output_dir, "table2"), header, rows, title)
  cmp_rows = []
  for d, mode in keys:
    for mk in method_keys:
      best = [s["best_test_loss"] for s, _ in runs.get((d, mode, mk), [])]
      if not best:
        continue
      mean, std = common.mean_std(best)
      paper = PAPER_TABLE2.get(d, {}).get(mode, {}).get(mk)
      diff = mean - paper if paper is not None else float("nan")
      cmp_rows.append(
        [
          d,
          cfg.modes[mode].label,
          cfg.methods[mk].label,
          round(mean, 4),
          round(std, 4),
          paper if paper is not None else "",
          round(diff, 4),
          "yes" if abs(diff) > 0.02 else "no",
        ]
      )
  results.write_table(
    os.path.join(output_dir, "table2_vs_paper"),
    ["dataset", "mode", "method", "ours", "std", "paper", "ours - paper", "|diff| > 0.02"],
    cmp_rows,
    f"FedGS Table 2: ours vs paper (optimal test loss); ours: {seeds_phrase(seeds)}, "
    f"{rounds_phrase(columns)}; paper: mean of 3 seeds",
  )
  _plot_table2_curves(runs, cfg, columns, method_keys, output_dir)
  return runs, md


def _plot_table2_curves(runs, cfg, columns, method_keys, output_dir):
  """Test-loss curves (seed mean) per (dataset, mode), as the paper's Fig. 5."""
  for col in columns:
    for mode in col.modes:
      curves = {}
      for mk in method_keys:
        res = runs.get((col.key, mode, mk))
        if res:
          curves[cfg.methods[mk].label] = common.mean_curve([h for _, h in res], "test_loss")
      if curves:
        results.plot_curves(
          curves,
          os.path.join(output_dir, f"curves_{col.key}_{mode}.png"),
          f"{col.label}, {cfg.modes[mode].label}: N={col.base.num_clients}, "
          f"M={col.base.clients_per_round}, E={col.base.local_steps}",
          "test loss (cross-entropy, nats)",
        )


# ------------------------------------------------------------------------------ Fig. 4


def fig4(runs, cfg, columns, output_dir):
  """Final sampling counts per client, one bar panel per method (seed mean)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  wanted = [tuple(s.split(":")) for s in cfg.fig4.cells.split(",") if s]
  methods = [m for m in cfg.fig4.methods.split(",") if m]
  written = []
  for col in columns:
    for d, mode in wanted:
      if d != col.key:
        continue
      present = [m for m in methods if (d, mode, m) in runs]
      if not present:
        continue
      fig, axes = plt.subplots(
        1, len(present), figsize=(3.6 * len(present), 3.2), sharey=True, squeeze=False
      )
      n, m_sel, t = col.base.num_clients, col.base.clients_per_round, col.base.rounds
      for ax, mk in zip(axes[0], present):
        counts = np.mean([s["sampling_counts"] for s, _ in runs[(d, mode, mk)]], axis=0)
        ax.bar(np.arange(n), counts, color="C0", label="times sampled")
        ax.axhline(m_sel * t / n, color="C3", ls="--", label="uniform share M·T/N")
        ax.set_title(f"{cfg.methods[mk].label}\nvar = {np.var(counts):.1f}", fontsize=9)
        ax.set_xlabel("client id")
      axes[0][0].set_ylabel(f"times sampled in {t} rounds")
      axes[0][0].legend(fontsize=7)
      fig.suptitle(
        f"Final sampling counts: {col.label}, {cfg.modes[mode].label} "
        f"(N={n}, M={m_sel}, mean over seeds)",
        y=1.06,
      )
      path = os.path.join(output_dir, f"fig4_{d}_{mode}.png")
      results.save_figure(fig, path)
      plt.close(fig)
      written.append(path)
  return written


def seeds_phrase(seeds) -> str:
  """How a table's heading names its seeds: a spread over several, or one seed's value."""
  seeds = list(seeds)
  if len(seeds) == 1:
    return f"seed {seeds[0]} only (± 0.000: one seed, not a spread)"
  return f"mean ± std over seeds {seeds}"


def rounds_phrase(columns) -> str:
  """``"500 rounds"``, or each column's rounds where they differ."""
  rounds = {col.label: int(col.base.rounds) for col in columns}
  if len(set(rounds.values())) == 1:
    return f"{next(iter(rounds.values()))} rounds"
  return ", ".join(f"{r} rounds ({label})" for label, r in rounds.items())


# ------------------------------------------------------------------------------ Table 3


def client_updates(sim, state, num_clients: int, key) -> tuple[object, object]:
  """Every client's local update from the current global model (all clients available).

  Returns (deltas pytree [N, ...], local params pytree [N, ...]); clients run in cohorts of
  M with the simulation's own cohort trainer (one compile).
  """
  m = sim.num_selected
  chunks = []
  for start in range(0, num_clients, m):
    ids = jnp.arange(start, start + m) % num_clients
    valid = jnp.arange(start, start + m) < num_clients
    aux = sim.client_update.prepare(state.client_state, ids)
    lr = sim.slot_lr(state, ids)
    res = sim.trainer(state.params, ids, valid, jax.random.fold_in(key, start), lr, aux)
    chunks.append(res.deltas)
  deltas = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs)[:num_clients], *chunks)
  local = jax.tree_util.tree_map(lambda g, d: g[None] + d, state.params, deltas)
  return deltas, local


def oracle_similarity(ds: data_lib.FederatedData):
  if ds.extras and "true_params" in ds.extras:
    return similarity.model_parameter_similarity(jnp.asarray(ds.extras["true_params"]))
  return similarity.label_distribution(ds.client_info().label_counts)


TABLE3_NORMALIZE = ("oracle", "all")


def check_table3(t3: ml_collections.ConfigDict) -> None:
  """Validates ``c.table3``'s procedure fields (named errors, before anything runs)."""
  if t3.normalize not in TABLE3_NORMALIZE:
    raise ValueError(f"table3.normalize={t3.normalize!r}; allowed: {', '.join(TABLE3_NORMALIZE)}")
  if not isinstance(t3.warmup_rounds, int) or t3.warmup_rounds < 0:
    raise ValueError(f"table3.warmup_rounds={t3.warmup_rounds!r}; allowed: integers >= 0")
  if not isinstance(t3.get("self_loops", False), bool):
    raise ValueError(f"table3.self_loops={t3.self_loops!r}; allowed: True, False")


def best_f1(
  sim_matrix, oracle_adj, t3: ml_collections.ConfigDict
) -> tuple[float, float, float, float]:
  """(precision, recall, F1, epsilon) of the 3DG of ``sim_matrix`` at its best epsilon.

  ``t3.normalize == "all"`` min-max normalizes ``sim_matrix`` first; ``t3.self_loops``
  counts the N self-loops as edges (``similarity.graph_f1(include_diagonal=...)``). Ties
  keep the smallest epsilon.
  """
  v = similarity.minmax_normalize(sim_matrix) if t3.normalize == "all" else sim_matrix
  best = None
  for eps in t3.epsilons:
    adj = similarity.adjacency_3dg(v, t3.sigma2, float(eps))
    scores = similarity.graph_f1(adj, oracle_adj, include_diagonal=bool(t3.get("self_loops")))
    p, r, f = (float(x) for x in scores)
    if best is None or f > best[2]:
      best = (p, r, f, float(eps))
  return best


def table3_rows(
  config: ml_collections.ConfigDict, ds: data_lib.FederatedData, t3, seed: int = 0
) -> dict[str, tuple[float, float, float, float]]:
  """Best (over epsilon) precision/recall/F1 of cosine and functional 3DGs vs the oracle.

  The paper's procedure (the defaults of ``c.table3``): every client trains its E local
  steps from the initial global model ("the server can obtain the 3DG just before training
  starts", Sec. 3.2; ``t3.warmup_rounds`` > 0 first trains the global model that many
  rounds with FedAvg, uniform, full availability). Cosine: Eq. 11 on the full updates;
  functional: Eq. 12, mean output-layer logits of the local models on Gaussian noise with
  the mean/std of a server validation batch (the first 64 global test inputs). Both are
  clipped cosines in [0, 1] and are thresholded as they are; the oracle (label
  distributions, or Synthetic's true models) is min-max normalized (Appendix C).
  ``t3.normalize="all"`` normalizes the constructed similarities too.

  Returns:
    {"cosine" | "functional": (precision, recall, f1, best epsilon)}.
  """
  check_table3(t3)
  c = ml_collections.ConfigDict(config.to_dict())
  c.selection, c.availability = "uniform", "idl"
  c.selection_hparams = ml_collections.ConfigDict()
  c.availability_hparams = ml_collections.ConfigDict()
  c.client_update, c.client_update_hparams = "sgd", ml_collections.ConfigDict()
  c.aggregator = "fedavg"
  sim, _ = experiment.build(c, ds)
  state = sim.init(seed)
  if t3.warmup_rounds:
    state, _ = sim.run_rounds(state, int(t3.warmup_rounds))
  key = jax.random.PRNGKey(seed + 7)
  deltas, local = client_updates(sim, state, ds.num_clients, key)
  flat = similarity.flatten_stacked(deltas)
  val = jnp.asarray(ds.test_x[:64])
  noise = similarity.noise_inputs(
    jax.random.PRNGKey(seed + 11), 64, ds.input_shape, jnp.mean(val), jnp.std(val)
  )
  emb = jax.vmap(lambda p: similarity.functional_embedding(sim.model.apply, p, noise))(local)
  oracle_adj = similarity.adjacency_3dg(oracle_similarity(ds), t3.sigma2, t3.oracle_epsilon)
  return {
    "functional": best_f1(similarity.functional(emb), oracle_adj, t3),
    "cosine": best_f1(similarity.cosine(flat), oracle_adj, t3),
  }


def table3_procedure(t3: ml_collections.ConfigDict) -> str:
  """One line naming the procedure of ``c.table3`` (the paper's, or which fields differ)."""
  parts = [
    "updates from the initial model"
    if not t3.warmup_rounds
    else f"updates after {t3.warmup_rounds} FedAvg rounds",
    "min-max on the oracle only" if t3.normalize == "oracle" else "min-max on every similarity",
    "self-loops counted" if t3.get("self_loops") else "edges i < j",
  ]
  return "; ".join(parts)


def table3(columns, cfg, output_dir, seeds, quick):
  """Table 3 on each column's dataset (Synthetic: oracle = true local models; others:
  label distributions) plus the offline digits stand-in for FashionMNIST. Writes
  ``table3.{csv,md}`` and ``table3_config.json`` (``c.table3`` and each dataset's config).
  """
  t3 = ml_collections.ConfigDict(cfg.table3.to_dict())
  check_table3(t3)
  if quick:
    t3.warmup_rounds = min(t3.warmup_rounds, 2)
  specs = [(col.label, col.base, col.data) for col in columns]
  if not any(col.key == "fashion_mnist" for col in columns):
    # Offline stand-in for FashionMNIST's "two labels per client" partition.
    base = ml_collections.ConfigDict(cfg.datasets.fashion_mnist.base.to_dict())
    base.dataset, base.model, base.data_dir = "digits", "mlp", ""
    base.num_clients = 20 if quick else 50
    base.clients_per_round = 5
    if quick:
      base.local_steps = 2
    specs.append(
      ("digits (2 labels/client; FashionMNIST stand-in)", base, experiment.load_data(base))
    )
  rows = []
  for label, base, ds in specs:
    per_seed = [table3_rows(base, ds, t3, s) for s in seeds]
    for name in ("functional", "cosine"):
      p, r, f = (common.mean_std([x[name][i] for x in per_seed]) for i in range(3))
      eps = [x[name][3] for x in per_seed]
      key = {"CIFAR10": "cifar10", "FashionMNIST": "fashion_mnist"}.get(label)
      paper = PAPER_TABLE3.get(key, {}).get(name)
      rows.append(
        [
          label,
          f"{name} similarity",
          common.fmt(*p),
          common.fmt(*r),
          common.fmt(*f),
          ",".join(f"{e:g}" for e in eps),
          " / ".join(f"{v:.4f}" for v in paper) if paper else "",
        ]
      )
  results.write_json(
    os.path.join(output_dir, "table3_config.json"),
    {
      "table3": t3.to_dict(),
      "procedure": table3_procedure(t3),
      "seeds": list(seeds),
      "datasets": {label: base.to_dict() for label, base, _ in specs},
    },
  )
  title = (
    f"FedGS Table 3: 3DG edges vs the oracle 3DG (eps={t3.oracle_epsilon}, "
    f"sigma^2={t3.sigma2}), best eps per seed, seeds {seeds}; {table3_procedure(t3)}"
  )
  return results.write_table(
    os.path.join(output_dir, "table3"),
    [
      "Dataset",
      "Method",
      "Precision",
      "Recall",
      "F1-Score",
      "best eps",
      "paper (precision / recall / F1)",
    ],
    rows,
    title,
  )


# ------------------------------------------------------------------------------ Table 4


def table4(columns, cfg, runs2, output_dir, seeds, resume, alphas, mode_filter=()):
  """FedGS on the oracle 3DG (from Table 2's runs) vs the functional / cosine 3DG; each
  entry is the best over the alpha grid of the seed-mean optimal test loss."""
  sims = [s for s in cfg.table4.similarities.split(",") if s]
  rows = []
  for col in columns:
    modes = [m for m in col.modes if not mode_filter or m in mode_filter]
    cells = {}
    for mode in modes:
      for sim_name in sims:
        for a in alphas:
          method = ml_collections.ConfigDict(cfg.methods.fedgs_a1.to_dict())
          method.selection_hparams.alpha = float(a)
          method.selection_hparams.similarity = sim_name
          name = f"{col.key}-{mode}-fedgs_{sim_name}_a{a:g}".replace(".", "_")
          cells[name] = cell_config(col, method, cfg.modes[mode])
    res = run_cells(col, cells, output_dir, seeds, resume)
    for mode in modes:
      row = [col.label, cfg.modes[mode].label]
      oracle = [
        common.mean_std([s["best_test_loss"] for s, _ in runs2[(col.key, mode, mk)]])
        for mk in cfg.methods.keys()
        if mk.startswith("fedgs_a") and (col.key, mode, mk) in runs2
      ]
      row.append(common.fmt(*min(oracle), digits=3) if oracle else "")
      for sim_name in sims:
        names = [f"{col.key}-{mode}-fedgs_{sim_name}_a{a:g}".replace(".", "_") for a in alphas]
        vals = [common.mean_std([s["best_test_loss"] for s, _ in res[nm]]) for nm in names]
        row.append(common.fmt(*min(vals), digits=3))
      paper = PAPER_TABLE4.get(col.key, {}).get(mode)
      row.append(" / ".join(f"{v:.3f}" for v in paper) if paper else "")
      rows.append(row)
  header = (
    ["Dataset", "Mode", "FedGS (oracle 3DG)"]
    + [f"FedGS_{s}" for s in sims]
    + ["paper (oracle / func / cos)"]
  )
  title = f"FedGS Table 4: best over alpha in {list(alphas)} of the optimal test loss"
  return results.write_table(os.path.join(output_dir, "table4"), header, rows, title)


# ------------------------------------------------------------------------------ main


def study_columns(cfg, datasets: Sequence[str], quick: bool, data_dir: str, rounds: int):
  """The dataset columns (default: Synthetic, and the real ones when ``data_dir`` is given)."""
  if not datasets:
    datasets = ["synthetic"] + (list(REAL_DATASETS) if data_dir else [])
  return [Column(d, cfg.datasets[d], quick, data_dir, rounds) for d in datasets]


def study_methods(cfg, methods: Sequence[str], quick: bool) -> list[str]:
  """The method rows (default: the paper's, or ``QUICK_METHODS`` with ``quick``)."""
  method_keys = list(methods) or (QUICK_METHODS if quick else cfg.method_order).split(",")
  unknown = sorted(set(method_keys) - set(cfg.methods.keys()))
  if unknown:
    raise ValueError(f"unknown methods {unknown}; allowed: {', '.join(cfg.methods.keys())}")
  return method_keys


def run_all(
  cfg: ml_collections.ConfigDict,
  output_dir: str,
  seeds: list[int],
  *,
  quick: bool = False,
  data_dir: str = "",
  rounds: int = 0,
  resume: bool = True,
  datasets: Sequence[str] = (),
  methods: Sequence[str] = (),
  modes: Sequence[str] = (),
  parts: Sequence[str] = PARTS,
  seed_from: str = "",
) -> dict[str, str]:
  """Runs the requested parts and writes their tables/figures; returns {part: markdown}.
  ``seed_from``: a folder of committed finished runs, copied in first (see ``--seed_from``).
  """
  cfg = apply_fmnist_protocol(cfg)
  columns = study_columns(cfg, datasets, quick, data_dir, rounds)
  method_keys = study_methods(cfg, methods, quick)
  os.makedirs(output_dir, exist_ok=True)
  for folder in [p for p in seed_from.split(",") if p.strip()] if resume else []:
    grid.seed_from(folder.strip(), output_dir)
  out = {}
  runs2 = {}
  if "table2" in parts or "fig4" in parts or "table4" in parts:
    runs2, out["table2"] = table2(columns, cfg, method_keys, output_dir, seeds, resume, modes)
  if "fig4" in parts:
    out["fig4"] = "\n".join(fig4(runs2, cfg, columns, output_dir))
  if "table3" in parts:
    out["table3"] = table3(columns, cfg, output_dir, seeds[:1] if quick else seeds, quick)
  if "table4" in parts:
    alphas = (1.0,) if quick else tuple(cfg.table4.alphas)
    t4_modes = modes or ((columns[0].modes[0],) if quick else ())
    out["table4"] = table4(columns, cfg, runs2, output_dir, seeds, resume, alphas, t4_modes)
  return out


def check_config(argv) -> dict:
  """The binary's flags and config, checked before anything runs: ``run_all``'s arguments.

  Raises:
    ValueError: a bad flag or config value (the experiment config of every Table 2 cell
      checked as ``common.run_cells`` would check it), named with what is allowed.
  """
  common.check_arguments(argv)
  f = flags.FLAGS
  if not f.output_dir:
    raise common.UsageError("--output_dir is required; allowed: a folder for the results")
  cfg = _CONFIG[0].value
  datasets = split_names(f.datasets, list(cfg.datasets.keys()), "datasets")
  text = f.methods
  if text.strip() == "all":
    text = cfg.method_order + "," + cfg.get("extra_methods", "")
  methods = split_names(text, list(cfg.methods.keys()), "methods")
  modes = split_names(f.modes, list(cfg.modes.keys()), "modes")
  parts = split_names(f.parts, PARTS, "parts")
  seeds = common.parse_seeds(f.seeds)
  if f.quick and not f["seeds"].present:
    seeds = seeds[:1]
  protocol = apply_fmnist_protocol(cfg)  # validates --config.fmnist_protocol
  if "table3" in parts:
    check_table3(cfg.table3)
  method_keys = study_methods(protocol, methods, f.quick)
  for col in study_columns(protocol, datasets, f.quick, f.data_dir, f.rounds):
    cells = [
      cell_config(col, protocol.methods[mk], protocol.modes[mode], oracle=False)
      for mode in col.modes
      if not modes or mode in modes
      for mk in method_keys
    ]
    common.validate_cells(cells, seeds, col.availability_seed_per_seed)
  return dict(
    cfg=cfg,
    output_dir=f.output_dir,
    seeds=seeds,
    quick=f.quick,
    data_dir=f.data_dir,
    rounds=f.rounds,
    resume=f.resume,
    datasets=datasets,
    methods=methods,
    modes=modes,
    parts=parts,
  )


def main(argv):
  args = common.checked(check_config, argv)
  common.start_lanes(args["output_dir"])
  # One line, no traceback: the message names the dataset and how to get it, or the folder
  # that holds another protocol's runs.
  with common.user_errors():
    tables = run_all(**args)
  for part, text in tables.items():
    print(text if part != "fig4" else f"Fig. 4: {text}")
  print(f"results: {args['output_dir']}/")


_CONFIG = []

if __name__ == "__main__":
  _CONFIG.append(define_flags())
  app.run(main, flags_parser=common.parse_flags)

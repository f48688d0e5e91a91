r"""FedAR (Jiang et al.): client unavailability with memory and staleness-rectified weights.

  python -m experiments.fedar --output_dir=runs/fedar
  python -m experiments.fedar --quick --output_dir=/tmp/fedar
  python -m experiments.fedar --data_dir=~/tensorflow_datasets --output_dir=runs/fedar_mnist
  # the paper's SVHN with ResNet-18 (GroupNorm), weight decay 0.001 (Sec. 6.1):
  python -m experiments.fedar --data_dir=~/tensorflow_datasets --output_dir=runs/fedar_svhn \
    --config.real_dataset=svhn_cropped --config.real_model=resnet18 \
    --config.base.client_weight_decay=0.001

100 clients with two classes each (``shards``, 2 labels per client); client i is available
each round with a fixed p_i ~ U[p_min, 1] (``bernoulli``); every available client trains
K = 5 local steps (lr 0.1, batch 64). Methods: FedAR (rho = 0.1), MIFA, FedVARP, FedAvg-IS,
FedAvg (S = 50), Scaffold (client update ``scaffold`` + FedAvg) and FedAvg with every client
always available (the ideal reference of the bias table).

Writes ``accuracy.{csv,md}`` (final test accuracy and train loss, methods x p_min; Fig. 2),
``bias.{csv,md}`` (per-client accuracy mean, variance, worst 10 %, best 10 % at
``bias_p_min``; Table 3), ``fig2_pmin<p>.png`` (train loss and test accuracy curves),
``fig3_distribution.png`` (histogram of per-client accuracies) and ``cells/`` to
--output_dir.

References:
  Jiang, Zhou, Zhang, Chakraborty, "FedAR: Addressing Client Unavailability in Federated
  Learning with Local Update Approximation and Rectification", Sec. 6, Fig. 2-3, Table 3.
"""

from __future__ import annotations

import os

import jax
import ml_collections
import numpy as np
from absl import app, flags

from experiments import common
from experiments.fl_fdms import dataset_cache, final_state
from fedjax_sel import experiment, models
from fedjax_sel.data import loaders
from fedjax_sel.metrics import results

METHODS = {
  "fedar": "FedAR",
  "mifa": "MIFA",
  "fedvarp": "FedVARP",
  "fedavg_is": "FedAvg-IS",
  "fedavg_s50": "FedAvg (S=50)",
  "scaffold": "Scaffold",
  "fedavg_full": "FedAvg (all clients always available)",
}
BIAS_METHODS = ("fedar", "mifa", "fedvarp", "fedavg_full")  # the rows of Table 3
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
  unknown = sorted(set(c.methods) - set(METHODS))
  if unknown:
    raise ValueError(f"unknown method(s) {unknown}; known: {', '.join(METHODS)}")
  for p in c.p_mins:
    if not 0.0 <= float(p) <= 1.0:
      raise ValueError(f"p_min={p!r} is out of range; allowed: [0, 1]")
  check_real_choice(c)
  if quick:
    c.base.rounds = c.quick_rounds
    c.base.eval_every = c.quick_eval_every
    c.p_mins = tuple(c.quick_p_mins)
    c.methods = tuple(c.quick_methods)
    c.bias_p_min = float(c.p_mins[0])
    c.plot_distribution = False
  if rounds:
    c.base.rounds = int(rounds)
  if data_dir:
    c.base.data_dir = data_dir
    if c.base.dataset in ("synthetic", "digits"):
      c.base.dataset = c.real_dataset
      c.base.model = c.real_model
  return c


def cell_config(config: ml_collections.ConfigDict, method: str, p_min: float | None):
  """The experiment config of one (method, p_min) cell; ``fedavg_full`` ignores p_min."""
  c = ml_collections.ConfigDict(config.base.to_dict())
  empty = ml_collections.ConfigDict
  if method == "fedavg_full":
    c.availability = "always"
    c.availability_hparams = empty()
    c.aggregator = "fedavg"
    c.aggregator_hparams = empty()
    return c
  c.availability_hparams = empty({"p_min": float(p_min)})
  if method == "fedar":
    c.aggregator = "fedar"
    c.aggregator_hparams = empty({"rho": float(config.rho)})
  elif method in ("mifa", "fedvarp", "fedavg_is"):
    c.aggregator = method
    c.aggregator_hparams = empty()
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


def name_of(method: str, p_min: float) -> str:
  return "fedavg_full" if method == "fedavg_full" else f"pmin{float(p_min):g}_{method}"


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
  """Runs every (method, p_min) cell for every seed; writes tables and figures."""
  os.makedirs(output_dir, exist_ok=True)
  load = dataset_cache()
  cfgs = {name: cell_config(config, method, p) for name, method, p in cells(config)}
  # every cell and seed; those of one program shape (e.g. the p_min sweep) run as one
  runs = common.run_named_cells(cfgs, output_dir, seeds, dataset_fn=load, resume=resume)
  base = config.base
  setup = (
    f"{base.dataset}, N={base.num_clients}, {base.labels_per_client} classes/client, "
    f"{base.model}, K={base.local_steps}"
  )
  p_mins = [float(p) for p in config.p_mins]
  header = (
    ["method"]
    + [f"p_min={p:g}: final test acc (%)" for p in p_mins]
    + [f"p_min={p:g}: final train loss" for p in p_mins]
  )
  rows = []
  for m in config.methods:
    accs, losses = [], []
    for p in p_mins:
      r = runs[name_of(m, p)]
      accs.append(common.fmt(*common.mean_std([100 * s["final_test_accuracy"] for s, _ in r]), 2))
      losses.append(common.fmt(*common.mean_std([h[-1]["train_loss"] for _, h in r]), 3))
    rows.append([METHODS[m]] + accs + losses)
  md = results.write_table(
    os.path.join(output_dir, "accuracy"),
    header,
    rows,
    f"FedAR Fig. 2 (final values, mean ± std over seeds {seeds}): {setup}, {base.rounds} rounds",
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
    "markdown": md,
    "figures": figures,
    "runs": runs,
  }


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
    argv, prepare_config, lambda c: [cell_config(c, m, a) for _, m, a in cells(c)]
  )


def main(argv):
  common.study_main(argv, check_config, run_study, "runs/fedar")


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=common.parse_flags)

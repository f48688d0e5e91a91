r"""Clustered Sampling (Fraboni et al., ICML 2021): MD vs Algorithm 1 vs Algorithm 2.

  python -m experiments.clustered_sampling --output_dir=runs/clustered_sampling
  python -m experiments.clustered_sampling --output_dir=/tmp/cs --quick

Two set-ups (Sec. 6): the unbalanced Dirichlet one (100 clients of 100..1000 samples,
Dir(alpha) classes, alpha in {0.001, 0.01, 0.1, 10}; Fig. 2 / 6 / 7) and one class per
client (Fig. 1). Offline the data is scikit-learn's ``digits`` resampled with replacement
to the paper's client sizes (the paper: CIFAR-10 and MNIST); ``--dataset=mnist``,
``fashion_mnist`` (their IDX files, found in the usual places or in ``--data_dir``) or
``cifar10`` (TFDS, ``--data_dir``) uses real images instead. Outputs: ``table_dirichlet``
and ``table_one_class`` (final / best test loss and accuracy, mean +- std over seeds),
``table_weight_variance`` (per-client aggregation-weight variance of each scheme, measured
by running the selection alone for many rounds, and the paper's Eq. 14 / 16), loss and
accuracy curves and the variance figure as PNG.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app, flags, logging
from ml_collections import config_flags

from experiments import common
from fedjax_sel import experiment, selection, similarity
from fedjax_sel.core.types import ClientInfo, SelectionContext
from fedjax_sel.data import loaders, partitions
from fedjax_sel.metrics import results

CONFIG_FILE = os.path.join(os.path.dirname(__file__), "configs", "clustered_sampling.py")
PARTS = ("dirichlet", "one_class", "weights")
QUICK_GROUPS = ((2, 100), (6, 250), (6, 500), (4, 750), (2, 1000))


def define_flags():
  """Defines this binary's flags; returns the ``--config`` holder."""
  common.define_flags()
  flags.DEFINE_string("parts", ",".join(PARTS), f"what to produce, any of {PARTS}")
  flags.DEFINE_string(
    "dataset",
    "digits",
    "digits (offline), mnist, fashion_mnist (IDX files or TFDS), cifar10, emnist (TFDS)",
  )
  flags.DEFINE_string("alphas", "", "subset of the Dirichlet alphas ('' = the paper's)")
  flags.DEFINE_string("methods", "", "subset of the methods ('' = all)")
  return config_flags.DEFINE_config_file(
    "config", CONFIG_FILE, "the paper's settings (ml_collections config file)"
  )


# ------------------------------------------------------------------------------ data


def model_name(base: ml_collections.ConfigDict) -> str:
  """The model as a plot title names it (the MLP with its hidden width)."""
  return f"MLP {int(base.mlp_hidden)} hidden" if base.model == "mlp" else str(base.model)


def pool(dataset: str, data_dir: str = "") -> tuple[np.ndarray, ...]:
  """(x, y, test_x, test_y, num_classes) of a centralized dataset (``loaders.load_pool``)."""
  return tuple(loaders.load_pool(dataset, data_dir or None))


def resample(x: np.ndarray, y: np.ndarray, size: int, seed: int) -> tuple[np.ndarray, ...]:
  """``size`` examples of the pool, every example used floor or ceil(size / n) times.

  A small pool (digits) cannot hold the paper's 58,200 examples; drawing with replacement
  is what Fraboni et al.'s partition code does on CIFAR-10 too.
  """
  if size <= len(y):
    return x, y
  reps = math.ceil(size / len(y))
  idx = np.random.default_rng(seed).permutation(np.tile(np.arange(len(y)), reps))
  return x[idx], y[idx]


def dirichlet_data(dataset, alpha, groups, test_fraction, seed=0, data_dir=""):
  """Fraboni et al.'s unbalanced Dirichlet(alpha) federated dataset (Sec. 6)."""
  x, y, tx, ty, c = pool(dataset, data_dir)
  train_sizes = partitions.group_sizes(groups)
  # Partition sizes count train + local test: n_train + n_train / 5 = n_train / (1 - f).
  sizes = np.round(train_sizes / (1.0 - test_fraction)).astype(np.int64)
  x, y = resample(x, y, int(sizes.sum()) + len(sizes), seed)
  return loaders.federate(
    x,
    y,
    tx,
    ty,
    c,
    len(sizes),
    "dirichlet",
    seed=seed,
    test_fraction=test_fraction,
    name=f"{dataset}/dirichlet(alpha={alpha:g}), size groups",
    alpha=float(alpha),
    sizes=sizes,
  )


def one_class_data(dataset, num_clients, examples_per_client, test_fraction, seed=0, data_dir=""):
  """One class per client, 10 clients per class, equal sizes (Sec. 6, MNIST)."""
  x, y, tx, ty, c = pool(dataset, data_dir)
  per_client = round(examples_per_client / (1.0 - test_fraction))
  x, y = resample(x, y, int(1.1 * num_clients * per_client), seed)
  return loaders.federate(
    x,
    y,
    tx,
    ty,
    c,
    num_clients,
    "shards",
    seed=seed,
    test_fraction=test_fraction,
    examples_per_client=examples_per_client,
    name=f"{dataset}/one class per client",
    labels_per_client=1,
  )


# ------------------------------------------------------------------------------ runs


def cell_config(base, method, **overrides) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict(base.to_dict())
  c.selection = method.selection
  c.selection_hparams = ml_collections.ConfigDict(method.selection_hparams.to_dict())
  for k, v in overrides.items():
    c[k] = v
  return c


def run_setup(name, ds, base, cfg, method_keys, output_dir, seeds, resume, **overrides):
  """Runs every method on one dataset; returns {method: [(summary, history)]}."""
  cells = {
    mk: (
      cell_config(base, cfg.methods[mk], num_clients=ds.num_clients, **overrides),
      os.path.join(output_dir, "cells", f"{name}-{mk}"),
    )
    for mk in method_keys
  }
  out = common.run_cells(cells, seeds, lambda _c: ds, resume=resume)
  for mk in method_keys:
    logging.info(
      "%s %s: final test loss %s",
      name,
      mk,
      common.fmt(*common.mean_std([s["final_test_loss"] for s, _ in out[mk]])),
    )
  return out


def summary_rows(label, runs, cfg, method_keys):
  rows = []
  for mk in method_keys:
    res = runs[mk]
    row = [label, cfg.methods[mk].label]
    for key in ("final_test_loss", "best_test_loss"):
      row.append(common.fmt(*common.mean_std([s[key] for s, _ in res])))
    for key in ("final_test_accuracy", "best_test_accuracy"):
      m, s = common.mean_std([100 * r[key] for r, _ in res])
      row.append(common.fmt(m, s, digits=2))
    tail = [np.mean([r["train_loss"] for r in h[-max(1, len(h) // 5) :]]) for _, h in res]
    row.append(common.fmt(*common.mean_std(tail)))
    rows.append(row)
  return rows


HEADER = [
  "Set-up",
  "Method",
  "final test loss",
  "best test loss",
  "final test acc (%)",
  "best test acc (%)",
  "train loss (last 20 % of evals)",
]


def plot_setup(runs, cfg, method_keys, path, title):
  """Global test loss and test accuracy vs round, one line per method (seed mean).

  The paper plots the global training loss (Eq. 1); the engine's ``train_loss`` is the
  cohort's mean loss during local training, which in one-class-per-client set-ups is
  near zero whatever the global model does, so the global test loss stands in for it.
  """
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
  for mk in method_keys:
    hs = [h for _, h in runs[mk]]
    r, loss = common.mean_curve(hs, "test_loss")
    _, acc = common.mean_curve(hs, "test_accuracy")
    a.plot(r, loss, label=cfg.methods[mk].label)
    b.plot(r, 100 * np.asarray(acc), label=cfg.methods[mk].label)
  a.set_xlabel("server iteration (round)")
  a.set_ylabel("global test loss (cross-entropy, nats)")
  b.set_xlabel("server iteration (round)")
  b.set_ylabel("test accuracy (%)")
  for ax in (a, b):
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  fig.suptitle(title)
  results.save_figure(fig, path)
  plt.close(fig)


# ------------------------------------------------------------------------------ weights


def representative_updates(base, ds, seed=0):
  """Every client's local update from the initial global model (f32[N, P])."""
  c = cell_config(
    base,
    ml_collections.ConfigDict({"selection": "uniform", "selection_hparams": {}}),
    num_clients=ds.num_clients,
  )
  sim, _ = experiment.build(c, ds)
  state = sim.init(seed)
  m, n = sim.num_selected, ds.num_clients
  chunks = []
  for start in range(0, n, m):
    ids = jnp.arange(start, start + m) % n
    valid = jnp.arange(start, start + m) < n
    aux = sim.client_update.prepare(state.client_state, ids)
    res = sim.trainer(
      state.params, ids, valid, jax.random.PRNGKey(start), sim.slot_lr(state, ids), aux
    )
    chunks.append(similarity.flatten_stacked(res.deltas))
  return jnp.concatenate(chunks)[:n]


def selection_weight_samples(strategy, num_examples, updates, num_rounds: int, seed: int = 0):
  """Runs a selection strategy alone for ``num_rounds`` rounds (one ``lax.scan``).

  Every client is available; ``ctx.update_sketch`` holds ``updates`` (fixed representative
  gradients). Returns f32[num_rounds, N], each client's aggregation weight
  omega_i(S) = sum of the weights of the slots holding client i (Fraboni et al., Sec. 3.2).
  """
  n = num_examples.shape[0]
  num_examples = jnp.asarray(num_examples, jnp.int32)
  label_counts = jnp.zeros((n, 1), jnp.int32)
  state0 = strategy.init(jax.random.PRNGKey(seed), ClientInfo(num_examples, label_counts))
  avail = jnp.ones((n,), bool)

  @jax.jit
  def run(state, updates, num_examples):
    def body(s, t):
      ctx = SelectionContext(
        params=None,
        client_losses=lambda ids: jnp.zeros(ids.shape, jnp.float32),
        update_sketch=updates,
        embeddings=jnp.zeros((n, 0)),
        seen=jnp.ones((n,), bool),
        avail_probs=jnp.ones((n,), jnp.float32),
        num_examples=num_examples,
        eval_value=lambda p: jnp.float32(0),
        round=t,
      )
      sel, s = strategy.select(s, jax.random.fold_in(jax.random.PRNGKey(seed), t), avail, t, ctx)
      w = jnp.zeros((n,), jnp.float32).at[sel.cohort].add(jnp.where(sel.valid, sel.weights, 0.0))
      return s, w

    return jax.lax.scan(body, state, jnp.arange(num_rounds))[1]

  return run(state0, jnp.asarray(updates, jnp.float32), num_examples)


def analytic_variance(r: np.ndarray) -> np.ndarray:
  """Eq. 16: Var[omega_i] = (1/m^2) sum_k r_ki (1 - r_ki) for distributions r f32[m, N]."""
  m = r.shape[0]
  return np.sum(r * (1.0 - r), axis=0) / m**2


def weight_variance(cfg, base, ds, method_keys, output_dir, num_rounds, seed=0):
  """Per-client aggregation-weight variance of every scheme; writes the table and figure."""
  m = int(base.clients_per_round)
  n_i = np.asarray(ds.train.counts)
  p = n_i / n_i.sum()
  updates = representative_updates(base, ds, seed)
  measured, distinct = {}, {}
  for mk in method_keys:
    meth = cfg.methods[mk]
    strat = selection.make(meth.selection, num_selected=m, **meth.selection_hparams.to_dict())
    w = np.asarray(selection_weight_samples(strat, n_i, updates, num_rounds, seed))
    measured[mk] = w.var(axis=0)
    distinct[mk] = float(np.mean(np.sum(w > 0, axis=1)))
  theory = {
    "md": p * (1 - p) / m,  # Eq. 14
    "alg1": analytic_variance(np.asarray(selection.sample_size_distributions(jnp.asarray(n_i), m))),
  }
  rows = []
  for mk in method_keys:
    th = theory.get(mk)
    rows.append(
      [
        cfg.methods[mk].label,
        float(np.mean(measured[mk])),
        float(np.max(measured[mk])),
        float(np.mean(th)) if th is not None else "",
        distinct[mk],
        float(np.mean(measured[mk] <= 1.1 * measured["md"])) if "md" in measured else "",
      ]
    )
  md_text = results.write_table(
    os.path.join(output_dir, "table_weight_variance"),
    [
      "Method",
      "mean_i Var[ω_i] (measured)",
      "max_i Var[ω_i]",
      "mean_i Var[ω_i] (Eq. 14/16)",
      "distinct clients per round",
      "share of clients with Var <= 1.1 x MD's",
    ],
    rows,
    f"Aggregation-weight variance over {num_rounds} selection-only rounds ({ds.name}, "
    f"N={len(n_i)}, m={m})",
  )
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  order = np.lexsort((np.arange(len(n_i)), n_i))
  fig, ax = plt.subplots(figsize=(8, 4))
  for j, mk in enumerate(method_keys):
    ax.plot(
      np.arange(len(n_i)),
      measured[mk][order],
      ".",
      ms=4,
      color=f"C{j}",
      label=f"{cfg.methods[mk].label} (measured)",
    )
    if mk in theory:
      ax.plot(
        np.arange(len(n_i)),
        theory[mk][order],
        "-",
        lw=1,
        color=f"C{j}",
        label=f"{cfg.methods[mk].label} (Eq. {14 if mk == 'md' else 16})",
      )
  ax.set_xlabel("client (sorted by number of training samples)")
  ax.set_ylabel("Var of aggregation weight ω_i (unitless)")
  ax.set_yscale("log")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  ax.set_title(f"Aggregation-weight variance per client: {ds.name}, m={m}, {num_rounds} rounds")
  results.save_figure(fig, os.path.join(output_dir, "weight_variance.png"))
  plt.close(fig)
  return md_text


# ------------------------------------------------------------------------------ main


def run_all(
  cfg,
  output_dir,
  seeds,
  *,
  quick=False,
  rounds=0,
  resume=True,
  dataset="digits",
  data_dir="",
  alphas: Sequence[float] = (),
  methods: Sequence[str] = (),
  parts: Sequence[str] = PARTS,
) -> dict[str, str]:
  """Runs the requested parts; returns {part: markdown}."""
  os.makedirs(output_dir, exist_ok=True)
  base = ml_collections.ConfigDict(cfg.base.to_dict())
  base.dataset = dataset
  base.data_dir = data_dir
  if dataset == "cifar10":
    base.model = "cnn_cifar"
  elif dataset == "mnist":
    base.model = "mlp"
  groups = tuple(tuple(g) for g in cfg.dirichlet.groups)
  method_keys = list(methods) or cfg.method_order.split(",")
  num_rounds_w = int(cfg.weights.rounds)
  one_class_n, one_class_e = 100, int(cfg.one_class.examples_per_client)
  if quick:
    base.rounds, base.eval_every, base.checkpoint_every = 6, 3, 0
    groups = QUICK_GROUPS
    num_rounds_w = 200
    one_class_n, one_class_e = 20, 40
    method_keys = list(methods) or ["md", "alg2_arccos"]
  if rounds:
    base.rounds = rounds
  all_alphas = list(cfg.dirichlet.alphas)
  alphas = list(alphas) or (all_alphas[1:2] if quick else all_alphas)
  out = {}
  if "dirichlet" in parts:
    rows = []
    for a in alphas:
      lr = cfg.dirichlet.lrs[all_alphas.index(a)] if a in all_alphas else cfg.dirichlet.lrs[0]
      ds = dirichlet_data(dataset, a, groups, base.test_fraction, base.data_seed, data_dir)
      steps = 2 if quick else int(cfg.dirichlet.local_steps)
      keys = [
        k
        for k in method_keys
        if k not in cfg.dirichlet.measure_methods.split(",")
        or a in tuple(cfg.dirichlet.measure_alphas)
      ]
      runs = run_setup(
        f"dirichlet_a{a:g}",
        ds,
        base,
        cfg,
        keys,
        output_dir,
        seeds,
        resume,
        client_lr=float(lr),
        local_steps=steps,
      )
      rows += summary_rows(f"Dir(α={a:g})", runs, cfg, keys)
      plot_setup(
        runs,
        cfg,
        keys,
        os.path.join(output_dir, f"curves_dirichlet_a{a:g}.png"),
        f"{dataset}, {model_name(base)}, unbalanced Dir(α={a:g}), N={ds.num_clients}, m="
        f"{base.clients_per_round}, {steps} local steps, lr={lr:g}",
      )
    out["dirichlet"] = results.write_table(
      os.path.join(output_dir, "table_dirichlet"),
      HEADER,
      rows,
      f"Clustered sampling, unbalanced Dirichlet set-up ({dataset}), seeds {seeds}",
    )
  if "one_class" in parts:
    ds = one_class_data(
      dataset, one_class_n, one_class_e, base.test_fraction, base.data_seed, data_dir
    )
    oc = cfg.one_class
    steps = 2 if quick else int(oc.local_steps)
    keys = [k for k in method_keys if k not in cfg.dirichlet.measure_methods.split(",")]
    runs = run_setup(
      "one_class",
      ds,
      base,
      cfg,
      keys,
      output_dir,
      seeds,
      resume,
      client_lr=float(oc.client_lr),
      local_steps=steps,
    )
    out["one_class"] = results.write_table(
      os.path.join(output_dir, "table_one_class"),
      HEADER,
      summary_rows("one class per client", runs, cfg, keys),
      f"Clustered sampling, one class per client ({dataset}), seeds {seeds}",
    )
    plot_setup(
      runs,
      cfg,
      keys,
      os.path.join(output_dir, "curves_one_class.png"),
      f"{dataset}, {model_name(base)}, one class per client, N={ds.num_clients}, m="
      f"{base.clients_per_round}, {steps} local steps, lr={oc.client_lr:g}",
    )
  if "weights" in parts:
    a = float(cfg.weights.alpha)
    ds = dirichlet_data(dataset, a, groups, base.test_fraction, base.data_seed, data_dir)
    wb = ml_collections.ConfigDict(base.to_dict())
    wb.local_steps = 2 if quick else int(cfg.dirichlet.local_steps)
    wb.client_lr = float(cfg.dirichlet.lrs[0])
    weight_keys = method_keys if not quick or methods else ["md", "alg1", "alg2_arccos"]
    out["weights"] = weight_variance(cfg, wb, ds, weight_keys, output_dir, num_rounds_w)
  return out


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  f = flags.FLAGS
  if not f.output_dir:
    raise app.UsageError("--output_dir is required")
  cfg = _CONFIG[0].value
  parts = [s for s in f.parts.split(",") if s]
  bad = sorted(set(parts) - set(PARTS))
  if bad:
    raise app.UsageError(f"unknown parts {bad}; allowed: {', '.join(PARTS)}")
  methods = [s for s in f.methods.split(",") if s]
  bad = sorted(set(methods) - set(cfg.methods.keys()))
  if bad:
    raise app.UsageError(f"unknown methods {bad}; allowed: {', '.join(cfg.methods.keys())}")
  if f.dataset not in loaders.REAL_DATASETS:
    raise app.UsageError(f"--dataset={f.dataset!r}; allowed: {', '.join(loaders.REAL_DATASETS)}")
  alphas = [float(s) for s in f.alphas.split(",") if s]
  seeds = common.parse_seeds(f.seeds)
  if f.quick and not f["seeds"].present:
    seeds = seeds[:1]
  tables = run_all(
    cfg,
    f.output_dir,
    seeds,
    quick=f.quick,
    rounds=f.rounds,
    resume=f.resume,
    dataset=f.dataset,
    data_dir=f.data_dir,
    alphas=alphas,
    methods=methods,
    parts=parts,
  )
  for text in tables.values():
    print(text)
  print(f"results: {f.output_dir}/")


_CONFIG = []

if __name__ == "__main__":
  _CONFIG.append(define_flags())
  app.run(main)

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

The one-class set-up runs under each client order of ``one_class.client_orders`` (the
``shards`` partition's ``client_order``: ``random`` ids, or ``by_label`` ids as in the
authors' data) with the "target" reference row and Algorithm 2 on sketched and exact
updates; ``table_one_class_classes`` counts the distinct classes of each round's cohort
when the selection runs alone (Fig. 1's representativity panel).
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

from experiments import common, numpy1_ties
from fedjax_sel import experiment, selection, similarity
from fedjax_sel.core.types import ClientInfo, SelectionContext
from fedjax_sel.data import federated, loaders, partitions
from fedjax_sel.metrics import results

CONFIG_FILE = os.path.join(os.path.dirname(__file__), "configs", "clustered_sampling.py")
PARTS = ("dirichlet", "one_class", "weights")
QUICK_GROUPS = ((2, 100), (6, 250), (6, 500), (4, 750), (2, 1000))
# sketch_dim of updates="exact": any value >= the parameter count P keeps the exact updates
# (the simulation uses d = min(sketch_dim, P); make_projection's identity marker).
EXACT_SKETCH_DIM = 2**31 - 1
UPDATES = ("sketch", "exact")
ORDER_NAMES = {
  "random": "random ids",
  "by_label": "ids by label",
  "by_label_numpy1": "ids by label, Alg. 1 ties as NumPy 1.x",
}
# The partition's orders, and by_label renumbered in the order the authors' Algorithm 1 code
# visits equal-size clients under NumPy 1.x (experiments/numpy1_ties.py; study-only).
CLIENT_ORDERS = (*partitions.CLIENT_ORDERS, "by_label_numpy1")


def reorder_clients(ds, perm):
  """``ds`` with new client k = old client ``perm[k]`` (train and local test splits)."""
  splits = []
  for split in (ds.train, ds.test):
    xs, ys = zip(*(split.client(int(k)) for k in perm))
    splits.append(federated.split_from_lists(list(xs), list(ys)))
  return ds._replace(train=splits[0], test=splits[1])


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
  flags.DEFINE_string(
    "client_orders",
    "",
    f"one-class client orders, any of {CLIENT_ORDERS} ('' = the config's)",
  )
  return common.define_config_file(CONFIG_FILE, "the paper's settings (ml_collections config file)")


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


def one_class_data(
  dataset,
  num_clients,
  examples_per_client,
  test_fraction,
  seed=0,
  data_dir="",
  client_order="random",
):
  """One class per client, 10 clients per class, equal sizes (Sec. 6, MNIST).

  ``client_order``: the ``shards`` partition's ``"random"`` ids or ``"by_label"`` ids
  (clients 10d..10d+9 hold class d, as in the authors' data): the same clients renumbered
  (each holds the same pool examples; its local train/test split is drawn in id order).
  ``"by_label_numpy1"``: the by_label clients renumbered so that id k is the k-th client the
  authors' Algorithm 1 visits under NumPy 1.x's argsort of equal sizes (so our Algorithm 1,
  which takes equal sizes in id order, forms the authors' distributions).
  """
  if client_order == "by_label_numpy1":
    ds = one_class_data(
      dataset, num_clients, examples_per_client, test_fraction, seed, data_dir, "by_label"
    )
    ds = reorder_clients(ds, numpy1_ties.authors_alg1_visit_order(ds.num_clients))
    return ds._replace(name=f"{dataset}/one class per client, {ORDER_NAMES[client_order]}")
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
    name=f"{dataset}/one class per client, {ORDER_NAMES.get(client_order, client_order)}",
    labels_per_client=1,
    client_order=client_order,
  )


# ------------------------------------------------------------------------------ runs


def check_methods(cfg, keys) -> None:
  """Refuses a method whose ``updates`` is not one of ``UPDATES`` (one-line message)."""
  for k in keys:
    u = cfg.methods[k].get("updates", "sketch")
    if u not in UPDATES:
      raise ValueError(f"methods.{k}.updates={u!r}; allowed: {', '.join(UPDATES)}")


def cell_config(base, method, **overrides) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict(base.to_dict())
  c.selection = method.selection
  c.selection_hparams = ml_collections.ConfigDict(method.selection_hparams.to_dict())
  if method.get("updates", "sketch") == "exact":
    c.sketch_dim = EXACT_SKETCH_DIM
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


def global_train_tail(history, rounds=50):
  """Mean global training loss over the evaluations of the last ``rounds`` rounds (the
  paper's Fig. 2 plots a 50-round rolling mean); None when the run did not record it."""
  if not history or "global_train_loss" not in history[-1]:
    return None
  last = history[-1]["round"]
  return float(np.mean([r["global_train_loss"] for r in history if r["round"] > last - rounds]))


def summary_rows(label, runs, cfg, method_keys, global_train=False):
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
    if global_train:
      g = [global_train_tail(h) for _, h in res]
      row.append(common.fmt(*common.mean_std(g)) if all(v is not None for v in g) else "n/a")
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
# "n/a" where the runs did not record it (the global_train_loss config field off or absent)
HEADER_GLOBAL = HEADER + ["global train loss (last 50 rounds)"]


def plot_setup(runs, cfg, method_keys, path, title):
  """Global test loss and test accuracy vs round, one line per method (seed mean).

  The paper plots the global training loss (Eq. 1): when the runs recorded it
  (``global_train_loss``, every client's training split) it is the first panel; the
  engine's ``train_loss`` is the cohort's mean loss during local training, near zero in
  one-class-per-client set-ups whatever the global model does, so it is not plotted.
  """
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  with_global = all("global_train_loss" in h[-1] for mk in method_keys for _, h in runs[mk])
  panels = (["global_train_loss"] if with_global else []) + ["test_loss", "test_accuracy"]
  ylabels = {
    "global_train_loss": "global training loss (cross-entropy, nats)",
    "test_loss": "global test loss (cross-entropy, nats)",
    "test_accuracy": "test accuracy (%)",
  }
  fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.8))
  for mk in method_keys:
    hs = [h for _, h in runs[mk]]
    for ax, key in zip(axes, panels):
      r, v = common.mean_curve(hs, key)
      scale = 100 if key == "test_accuracy" else 1
      ax.plot(r, scale * np.asarray(v), label=cfg.methods[mk].label)
  for ax, key in zip(axes, panels):
    ax.set_xlabel("server iteration (round)")
    ax.set_ylabel(ylabels[key])
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


def selection_weight_samples(
  strategy, num_examples, updates, num_rounds: int, seed: int = 0, label_counts=None
):
  """Runs a selection strategy alone for ``num_rounds`` rounds (one ``lax.scan``).

  Every client is available; ``ctx.update_sketch`` holds ``updates`` (fixed representative
  gradients); ``label_counts`` (i32[N, C], default zeros) goes to the strategy's ``init``.
  Returns f32[num_rounds, N], each client's aggregation weight
  omega_i(S) = sum of the weights of the slots holding client i (Fraboni et al., Sec. 3.2).
  """
  n = num_examples.shape[0]
  num_examples = jnp.asarray(num_examples, jnp.int32)
  if label_counts is None:
    label_counts = jnp.zeros((n, 1), jnp.int32)
  label_counts = jnp.asarray(label_counts, jnp.int32)
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


def distinct_classes(weights: np.ndarray, client_class: np.ndarray) -> np.ndarray:
  """f32[R]: the number of distinct classes among the clients with weight > 0 each round."""
  onehot = np.eye(int(client_class.max()) + 1)[client_class]
  return np.sum((np.asarray(weights) > 0).astype(np.float64) @ onehot > 0, axis=1)


def projected(base, updates: np.ndarray) -> np.ndarray:
  """The simulation's sketches of ``updates`` f32[N, P]: the same projection (sketch_seed 0,
  ``base.sketch_dim`` dims) as ``Simulation`` keeps in ``update_sketch``."""
  p = updates.shape[1]
  k_proj, _ = jax.random.split(jax.random.PRNGKey(0))
  proj = similarity.make_projection(k_proj, p, min(int(base.sketch_dim), p))
  return np.asarray(similarity.sketch(jnp.asarray(updates), proj))


def one_class_classes(cfg, base, datasets, method_keys, output_dir, num_rounds, seed=0):
  """Distinct classes (and clients) per round of each selection run alone, per order.

  Algorithm 2 clusters the clients' first updates from the initial model (exact or
  sketched as its ``updates`` says), fixed over the rounds: the representativity of Fig. 1's
  top-left panel once every client has been seen. Writes ``table_one_class_classes``.
  """
  m = int(base.clients_per_round)
  rows = []
  for order, ds in datasets.items():
    counts = np.asarray(ds.client_info().label_counts)
    client_class = np.argmax(counts, 1)
    n_i = np.asarray(ds.train.counts)
    updates = np.asarray(representative_updates(base, ds, seed))
    sketched = projected(base, updates)
    for mk in method_keys:
      meth = cfg.methods[mk]
      strat = selection.make(meth.selection, num_selected=m, **meth.selection_hparams.to_dict())
      u = updates if meth.get("updates", "sketch") == "exact" else sketched
      w = np.asarray(selection_weight_samples(strat, n_i, u, num_rounds, seed, counts))
      classes = distinct_classes(w, client_class)
      rows.append(
        [
          ORDER_NAMES[order],
          meth.label,
          float(classes.mean()),
          float(np.mean(classes == client_class.max() + 1)),
          float(np.mean(np.sum(w > 0, axis=1))),
        ]
      )
  return results.write_table(
    os.path.join(output_dir, "table_one_class_classes"),
    [
      "Client ids",
      "Method",
      "distinct classes per round",
      "share of rounds with every class",
      "distinct clients per round",
    ],
    rows,
    f"One class per client: each selection alone for {num_rounds} rounds, m={m}, seed {seed}"
    " (Alg. 2 on the clients' first updates from the initial model)",
  )


def analytic_variance(r: np.ndarray) -> np.ndarray:
  """Eq. 16: Var[omega_i] = (1/m^2) sum_k r_ki (1 - r_ki) for distributions r f32[m, N]."""
  m = r.shape[0]
  return np.sum(r * (1.0 - r), axis=0) / m**2


def weight_variance(cfg, base, ds, method_keys, output_dir, num_rounds, seeds=(0,)):
  """Per-client aggregation-weight variance of every scheme; writes the table and figure of
  the first seed and, with several seeds, ``table_weight_variance_per_seed`` (a row per
  method and seed: the verdicts' seeds)."""
  m = int(base.clients_per_round)
  n_i = np.asarray(ds.train.counts)
  p = n_i / n_i.sum()
  per_seed = []
  for seed in seeds:
    updates = representative_updates(base, ds, seed)
    measured, distinct = {}, {}
    for mk in method_keys:
      meth = cfg.methods[mk]
      strat = selection.make(meth.selection, num_selected=m, **meth.selection_hparams.to_dict())
      w = np.asarray(selection_weight_samples(strat, n_i, updates, num_rounds, seed))
      measured[mk] = w.var(axis=0)
      distinct[mk] = float(np.mean(np.sum(w > 0, axis=1)))
      per_seed.append([meth.label, seed, float(np.mean(measured[mk])), distinct[mk]])
    if seed == seeds[0]:
      first = measured, distinct
  measured, distinct = first
  if len(seeds) > 1:
    results.write_table(
      os.path.join(output_dir, "table_weight_variance_per_seed"),
      ["Method", "seed", "mean_i Var[ω_i] (measured)", "distinct clients per round"],
      per_seed,
      f"Aggregation-weight variance over {num_rounds} selection-only rounds ({ds.name}, "
      f"N={len(n_i)}, m={m}), per seed",
    )
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
  client_orders: Sequence[str] = (),
  classes_rounds: int | None = None,
) -> dict[str, str]:
  """Runs the requested parts; returns {part: markdown}.

  ``client_orders`` (default the config's ``one_class.client_orders``) and
  ``classes_rounds`` (selection-only rounds of ``table_one_class_classes``; default the
  config's ``one_class.classes_rounds``, 0 = none) concern the one-class part.
  """
  bad = sorted(set(client_orders) - set(CLIENT_ORDERS))
  if bad:
    raise ValueError(f"client orders {bad}; allowed: {', '.join(CLIENT_ORDERS)}")
  if classes_rounds is None:
    classes_rounds = int(cfg.one_class.get("classes_rounds", 0))
  os.makedirs(output_dir, exist_ok=True)
  base = study_base(cfg, dataset, data_dir)
  groups = tuple(tuple(g) for g in cfg.dirichlet.groups)
  method_keys = list(methods) or cfg.method_order.split(",")
  check_methods(cfg, method_keys)
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
      rows += summary_rows(f"Dir(α={a:g})", runs, cfg, keys, global_train=True)
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
      HEADER_GLOBAL,
      rows,
      f"Clustered sampling, unbalanced Dirichlet set-up ({dataset}), seeds {seeds}",
    )
  if "one_class" in parts:
    oc = cfg.one_class
    steps = 2 if quick else int(oc.local_steps)
    oc_keys = list(methods) or oc.method_order.split(",")
    if quick and not methods:
      oc_keys = ["md", "target", "alg2_exact"]
    keys = [k for k in oc_keys if k not in cfg.dirichlet.measure_methods.split(",")]
    check_methods(cfg, keys)
    orders = list(client_orders) or list(oc.client_orders)
    rows, exact_rows, datasets = [], [], {}
    for order in orders:
      ds = one_class_data(
        dataset,
        one_class_n,
        one_class_e,
        base.test_fraction,
        base.data_seed,
        data_dir,
        client_order=order,
      )
      datasets[order] = ds
      runs = run_setup(
        "one_class" if order == "random" else f"one_class_{order}",
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
      label = f"one class per client, {ORDER_NAMES[order]}"
      order_rows = summary_rows(label, runs, cfg, keys, global_train=True)
      rows += order_rows
      exact_rows += [
        r for k, r in zip(keys, order_rows) if cfg.methods[k].selection == "clustered_similarity"
      ]
      plot_setup(
        runs,
        cfg,
        keys,
        os.path.join(output_dir, f"curves_one_class_{order}.png"),
        f"{dataset}, {model_name(base)}, one class per client ({ORDER_NAMES[order]}), N="
        f"{ds.num_clients}, m={base.clients_per_round}, {steps} local steps, "
        f"lr={oc.client_lr:g}",
      )
    out["one_class"] = results.write_table(
      os.path.join(output_dir, "table_one_class"),
      HEADER_GLOBAL,
      rows,
      f"Clustered sampling, one class per client ({dataset}), client orders {orders}, "
      f"seeds {seeds}",
    )
    if exact_rows:
      results.write_table(
        os.path.join(output_dir, "table_alg2_exact_vs_sketched"),
        HEADER_GLOBAL,
        exact_rows,
        f"Algorithm 2 on exact updates vs {int(base.sketch_dim)}-dim sketches, one class per "
        f"client ({dataset}), seeds {seeds}",
      )
    if classes_rounds:
      cb = ml_collections.ConfigDict(base.to_dict())
      cb.local_steps, cb.client_lr = steps, float(oc.client_lr)
      out["one_class_classes"] = one_class_classes(
        cfg, cb, datasets, keys, output_dir, 50 if quick else int(classes_rounds)
      )
  if "weights" in parts:
    a = float(cfg.weights.alpha)
    ds = dirichlet_data(dataset, a, groups, base.test_fraction, base.data_seed, data_dir)
    wb = ml_collections.ConfigDict(base.to_dict())
    wb.local_steps = 2 if quick else int(cfg.dirichlet.local_steps)
    wb.client_lr = float(cfg.dirichlet.lrs[0])
    weight_keys = method_keys if not quick or methods else ["md", "alg1", "alg2_arccos"]
    out["weights"] = weight_variance(
      cfg, wb, ds, weight_keys, output_dir, num_rounds_w, tuple(seeds)
    )
  return out


def study_base(cfg, dataset: str, data_dir: str) -> ml_collections.ConfigDict:
  """The experiment config every cell starts from: the config's base on ``dataset``."""
  base = ml_collections.ConfigDict(cfg.base.to_dict())
  base.dataset = dataset
  base.data_dir = data_dir
  if dataset == "cifar10":
    base.model = "cnn_cifar"
  elif dataset == "mnist":
    base.model = "mlp"
  return base


def check_config(argv) -> dict:
  """The binary's flags and config, checked before anything runs: ``run_all``'s arguments.

  Raises:
    ValueError: a bad flag or config value (the experiment config of every method checked as
      ``common.run_cells`` would check it, on the Dirichlet set-up's clients), named with
      what is allowed.
  """
  common.check_arguments(argv)
  f = flags.FLAGS
  if not f.output_dir:
    raise common.UsageError("--output_dir is required; allowed: a folder for the results")
  cfg = _CONFIG[0].value
  parts = [s for s in f.parts.split(",") if s]
  bad = sorted(set(parts) - set(PARTS))
  if bad:
    raise common.UsageError(f"unknown parts {bad}; allowed: {', '.join(PARTS)}")
  methods = [s for s in f.methods.split(",") if s]
  bad = sorted(set(methods) - set(cfg.methods.keys()))
  if bad:
    raise common.UsageError(f"unknown methods {bad}; allowed: {', '.join(cfg.methods.keys())}")
  if f.dataset not in loaders.REAL_DATASETS:
    raise common.UsageError(f"--dataset={f.dataset!r}; allowed: {', '.join(loaders.REAL_DATASETS)}")
  client_orders = [s for s in f.client_orders.split(",") if s]
  bad = sorted(set(client_orders) - set(CLIENT_ORDERS))
  if bad:
    raise common.UsageError(f"unknown client orders {bad}; allowed: {', '.join(CLIENT_ORDERS)}")
  try:
    alphas = [float(s) for s in f.alphas.split(",") if s]
  except ValueError:
    raise common.UsageError(
      f"--alphas={f.alphas!r}; allowed: comma-separated numbers > 0, e.g. 0.01,10"
    ) from None
  seeds = common.parse_seeds(f.seeds)
  if f.quick and not f["seeds"].present:
    seeds = seeds[:1]
  keys = methods or sorted(
    set(cfg.method_order.split(",")) | set(cfg.one_class.method_order.split(","))
  )
  bad = sorted(set(keys) - set(cfg.methods.keys()))
  if bad:
    raise ValueError(f"method_order names {bad}; allowed: {', '.join(cfg.methods.keys())}")
  check_methods(cfg, keys)
  base = study_base(cfg, f.dataset, f.data_dir)
  num_clients = sum(int(n) for n, _ in (QUICK_GROUPS if f.quick else cfg.dirichlet.groups))
  cells = [cell_config(base, cfg.methods[k], num_clients=num_clients) for k in keys]
  common.validate_cells(cells, seeds)
  return dict(
    cfg=cfg,
    output_dir=f.output_dir,
    seeds=seeds,
    quick=f.quick,
    rounds=f.rounds,
    resume=f.resume,
    dataset=f.dataset,
    data_dir=f.data_dir,
    alphas=alphas,
    methods=methods,
    parts=parts,
    client_orders=client_orders,
  )


def main(argv):
  args = common.checked(check_config, argv)
  common.start_lanes(args["output_dir"])
  with common.user_errors():
    tables = run_all(**args)
  for text in tables.values():
    print(text)
  print(f"results: {args['output_dir']}/")


_CONFIG = []

if __name__ == "__main__":
  _CONFIG.append(define_flags())
  app.run(main, flags_parser=common.parse_flags)

r"""FedEMD (Huang et al.): client selection with Mavericks -- R@99 and Maverick participation.

  python -m experiments.fedemd --output_dir=runs/fedemd
  python -m experiments.fedemd --quick --output_dir=/tmp/fedemd
  python -m experiments.fedemd --data_dir=~/tensorflow_datasets --output_dir=runs/fedemd_fmnist
  # STL-10 with the shallow 3-conv + 2-FC CNN and Supplement A.10's STL-10 settings:
  python -m experiments.fedemd --data_dir=~/tensorflow_datasets --output_dir=runs/fedemd_stl10 \
    --config.real_dataset=stl10 --config.real_model=cnn_stl10 --config.base.batch_size=10 \
    --config.base.client_lr=0.01 --config.base.client_momentum=0.5 \
    --config.base.lr_step_size=500 --config.base.lr_step_gamma=0.5 \
    --config.fedemd_alpha=0.11 --config.fedemd_beta=0.001
  python -m experiments.fedemd ... --config.aggregation_setup=fedsgd  # Table 1's FedSGD half
  # the study before issue 41 (raw counts in D_c, plain mean, per-participation StepLR):
  python -m experiments.fedemd ... --config.fedemd_current=counts \
    --config.base.aggregator_hparams.weighting=uniform \
    --config.base.lr_schedule_unit=participation --config.base.lr_step_size=10

50 clients, 5 selected per round (always available), FedAvg, one local epoch. Mavericks
(clients 0..m-1) own whole classes: with ``k_excl`` each of the k Mavericks owns all the
examples of its own class; with ``k_shared`` the k Mavericks split one class equally. The
other clients share the remaining classes i.i.d. in equal parts. Methods (Table 1): Random
(uniform), TiFL, FedFast, FedProx (Random selection, FedProx local update), Shapley-value-based
selection (SVB) and FedEMD, under one of Table 1's aggregations
(``--config.aggregation_setup``): FedAvg (default) or FedSGD, which the paper uses as "one
local epoch" and "simple averaging" against FedAvg's size-aware weights. Two readings
(``--config.fedsgd_reading``): ``"epoch"`` (default: the same local epoch as FedAvg, the plain
mean of the models, as the authors' code averages; cells ``<scenario>_<method>_fedsgd``) and
``"gradient"`` (McMahan et al.'s FedSGD: one full-batch gradient step per client, the plain
mean; cells ``<scenario>_<method>_fedsgd_gradient``).

TiFL and FedFast as the papers describe them (``--config.baselines=papers``, default; their
hyper-parameters in ``--config.tifl.*`` and ``--config.fedfast.*``) or as the FedEMD authors'
released code runs them (``--config.baselines=authors``; cells ``<scenario>_tifl_authors``
and ``<scenario>_fedfast_authors``, before any FedSGD suffix): TiFL with
``rule="accuracy_weighted"`` (per-client test accuracy of the last local model, the reservoir
favouring low accuracy) and FedFast with ``features="label_counts"``,
``init="random_points"``, one client from each of M clusters (``fedjax_sel/selection/
tifl.py``, ``fedfast.py``).

R@99 (Sec. 5, App. A.5): the first round at which a method's test accuracy reaches 99 % of
the highest test accuracy reached by Random selection in the same scenario and seed;
averaged over seeds; ">T" when it is never reached within the T rounds.

Writes ``r99.{csv,md}`` (methods x scenarios), ``final_accuracy.{csv,md}``,
``maverick_share.{csv,md}`` (share of all selections that went to Mavericks),
``fig4_r99.png`` (R@99 against the number of exclusive / shared Mavericks, the paper's
Fig. 4), ``accuracy_<scenario>.png`` (Fig. 3-style curves) and ``participation.png``
(cumulative Maverick selections over rounds; also ``participation.{csv,md}``) to
--output_dir.

References:
  Huang, Hong, Chen, Roos, "Is Shapley Value fair? Improving Client Selection for Mavericks
  in Federated Learning", Sec. 5, Table 1, Fig. 3-4, App. A.4-A.10.
"""

from __future__ import annotations

import inspect
import os
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app, flags, logging

from experiments import common
from fedjax_sel import experiment, models
from fedjax_sel.core import checkpoint
from fedjax_sel.core import simulation as sim_lib
from fedjax_sel.core.registry import is_integer
from fedjax_sel.core.types import (
  Array,
  ClientInfo,
  PRNGKey,
  PyTree,
  Selection,
  SelectionContext,
  SelectionStrategy,
)
from fedjax_sel.data import loaders, partitions
from fedjax_sel.data.federated import FederatedData, split_from_indices
from fedjax_sel.data.loaders import num_local_test
from fedjax_sel.experiment.config import _check_same_config, _fingerprint
from fedjax_sel.metrics import results
from fedjax_sel.selection import common as selection_common
from fedjax_sel.selection import fedemd as fedemd_selection
from fedjax_sel.selection import shapley as shapley_selection

METHODS = {
  "random": "Random",
  "tifl": "TiFL",
  "fedfast": "FedFast",
  "fedprox": "FedProx",
  "shapley": "Shapley (SVB)",
  "fedemd": "FedEMD",
}
SELECTION = {
  "random": "uniform",
  "tifl": "tifl",
  "fedfast": "fedfast",
  "fedprox": "uniform",
  "shapley": "shapley",
  "fedemd": "fedemd",
}
# Methods whose cohorts depend on the training (losses, updates, Shapley values): their
# participation trace re-runs them round by round (``trace_shapley``) instead of a replay.
TRAINING_DEPENDENT = ("tifl", "fedfast", "shapley")
AGGREGATION_SETUPS = ("fedavg", "fedsgd")
# TiFL and FedFast: as their papers describe them, or as the FedEMD authors' code runs them
BASELINES = ("papers", "authors")
BASELINE_METHODS = ("tifl", "fedfast")
# FedSGD's readings: "epoch" (FedAvg's local epoch, the plain mean) or "gradient" (one
# full-batch gradient step per client, the plain mean)
FEDSGD_READINGS = ("epoch", "gradient")
TINY_ENV = common.TINY_ENV
# SVB's EMA factor (the study keeps the ``shapley`` default); App. A.3 reads the per-round
# Shapley values back from it (``record_shapley``)
_SHAPLEY_DEFAULTS = inspect.signature(shapley_selection.make_shapley).parameters
SHAPLEY_MOMENTUM = _SHAPLEY_DEFAULTS["momentum"].default
SHAPLEY_TRUNCATION_TOL = _SHAPLEY_DEFAULTS["truncation_tol"].default


# ----------------------------------------------------------------------------- data


def parse_scenario(name: str) -> tuple[int, bool]:
  """``"2_excl"`` -> (2, False); ``"3_shared"`` -> (3, True)."""
  try:
    count, kind = name.split("_")
    count = int(count)
  except ValueError:
    raise ValueError(f"scenario {name!r} must look like '1_excl' or '2_shared'") from None
  if kind not in ("excl", "shared") or count < 1:
    raise ValueError(f"scenario {name!r}: allowed '<k>_excl' or '<k>_shared' with k >= 1")
  return count, kind == "shared"


def maverick_partition(
  labels: np.ndarray,
  num_clients: int,
  num_mavericks: int,
  shared: bool,
  maverick_classes: tuple[int, ...],
  rng: np.random.Generator,
) -> list[np.ndarray]:
  """Index lists of a Maverick partition (FedEMD Def. 3.1, Sec. 5.2, App. A.4).

  Clients ``0..num_mavericks-1`` are the Mavericks. Exclusive: Maverick j holds every
  example of class ``maverick_classes[j]``. Shared: the Mavericks split every example of
  ``maverick_classes[0]`` equally. The examples of all other classes are shuffled and split
  into equal parts (sizes differ by at most one) among the ``num_clients - num_mavericks``
  other clients, so each non-Maverick has a balanced distribution over the remaining
  classes. With C balanced classes an exclusive Maverick holds about (N - k) / (C - k)
  times the data of a non-Maverick (5.4x for N = 50, C = 10, k = 1), close to FedEMD App.
  A.4's "the Maverick owns K times as much data as the other clients" (K = 5 selected).

  Args:
    labels: i32[n] pool labels.
    num_clients: N > num_mavericks.
    num_mavericks: k >= 1.
    shared: the Mavericks share one class instead of owning one each.
    maverick_classes: at least k classes (exclusive) or 1 class (shared).
    rng: numpy generator.

  Returns:
    N index arrays into ``labels``.
  """
  labels = np.asarray(labels)
  if not 1 <= num_mavericks < num_clients:
    raise ValueError(
      f"num_mavericks={num_mavericks} is out of range; allowed: [1, num_clients - 1]"
    )
  owned = [int(maverick_classes[0])] if shared else [int(c) for c in maverick_classes]
  if not shared and len(owned) < num_mavericks:
    raise ValueError(
      f"{num_mavericks} exclusive Mavericks need {num_mavericks} maverick_classes; "
      f"got {tuple(maverick_classes)}"
    )
  owned = owned[: 1 if shared else num_mavericks]
  parts: list[np.ndarray] = []
  if shared:
    pool = rng.permutation(np.flatnonzero(labels == owned[0]))
    parts.extend(np.array_split(pool, num_mavericks))
  else:
    parts.extend(rng.permutation(np.flatnonzero(labels == c)) for c in owned)
  rest = rng.permutation(np.flatnonzero(~np.isin(labels, owned)))
  parts.extend(np.array_split(rest, num_clients - num_mavericks))
  return [np.asarray(p, np.int64) for p in parts]


def load_pool(dataset: str, data_dir: str):
  """``(x, y, test_x, test_y, num_classes)`` of a real dataset (``loaders.load_pool``)."""
  return tuple(loaders.load_pool(dataset, data_dir or None))


def maverick_data(config: ml_collections.ConfigDict, scenario: str, pool=None) -> FederatedData:
  """The FederatedData of one scenario (partition seed ``base.data_seed``)."""
  base = config.base
  pool = pool if pool is not None else load_pool(base.dataset, base.data_dir)
  k, shared = parse_scenario(scenario)
  rng = np.random.default_rng(base.data_seed)
  parts = maverick_partition(
    pool[1], base.num_clients, k, shared, tuple(config.maverick_classes), rng
  )
  extras = {"partition": "mavericks", "mavericks": list(range(k)), "shared": shared}
  return federated_data(config, pool, parts, rng, f"mavericks({scenario})", extras)


def federated_data(config, pool, parts, rng, name: str, extras: dict) -> FederatedData:
  """FederatedData of the clients' index lists ``parts``: each client's examples shuffled
  and split by ``base.test_fraction`` into local train and test; the pool's test set is the
  global one."""
  x, y, tx, ty, num_classes = pool
  train_idx, test_idx = [], []
  for idx in parts:
    idx = rng.permutation(idx)
    n_test = num_local_test(len(idx), float(config.base.test_fraction))
    test_idx.append(idx[:n_test])
    train_idx.append(idx[n_test:])
  return FederatedData(
    train=split_from_indices(x, y, train_idx),
    test=split_from_indices(x, y, test_idx),
    test_x=np.asarray(tx, np.float32),
    test_y=np.asarray(ty, np.int32),
    num_classes=int(num_classes),
    name=f"{config.base.dataset}/{name}",
    extras=extras,
  )


# ----------------------------------------------------------------------------- study


def prepare_config(
  config: ml_collections.ConfigDict, *, quick: bool = False, rounds: int = 0, data_dir: str = ""
) -> ml_collections.ConfigDict:
  """The study config after --quick, --rounds and --data_dir (a copy)."""
  c = ml_collections.ConfigDict(config.to_dict())
  unknown = sorted(set(c.methods) - set(METHODS))
  if set(unknown) & set(SUPPLEMENT_METHODS):
    raise ValueError(
      f"method(s) {unknown} are App. A.4's: allowed only through --config.supplement=fig6; "
      f"methods allowed: {', '.join(METHODS)}"
    )
  if unknown:
    raise ValueError(f"unknown method(s) {unknown}; known: {', '.join(METHODS)}")
  repeated = sorted({m for m in c.methods if list(c.methods).count(m) > 1})
  if repeated:
    raise ValueError(
      f"methods={tuple(c.methods)!r} names {', '.join(repeated)} more than once; allowed: each "
      "method once (their cells would share a folder)"
    )
  check_supplement(c)
  if "random" not in c.methods:
    raise ValueError("methods must include 'random': R@99 is relative to Random selection")
  for s in c.scenarios:
    parse_scenario(s)
  if c.aggregation_setup not in AGGREGATION_SETUPS:
    raise ValueError(
      f"aggregation_setup={c.aggregation_setup!r}; allowed: {', '.join(AGGREGATION_SETUPS)}"
    )
  if c.get("fedsgd_reading", "epoch") not in FEDSGD_READINGS:
    raise ValueError(f"fedsgd_reading={c.fedsgd_reading!r}; allowed: {', '.join(FEDSGD_READINGS)}")
  b = c.get("fedsgd_batch_size", 0)
  if not is_integer(b) or b < 0:
    raise ValueError(
      f"fedsgd_batch_size={b!r}; allowed: an integer >= 0 (0 = the largest client's size)"
    )
  if c.get("baselines", "papers") not in BASELINES:
    raise ValueError(f"baselines={c.baselines!r}; allowed: {', '.join(BASELINES)}")
  if c.fedemd_current not in fedemd_selection.CURRENT_READINGS:
    raise ValueError(
      f"fedemd_current={c.fedemd_current!r}; allowed: {list(fedemd_selection.CURRENT_READINGS)}"
    )
  if c.real_dataset not in loaders.TFDS_NAMES:
    raise ValueError(f"real_dataset={c.real_dataset!r}; allowed: {', '.join(loaders.TFDS_NAMES)}")
  if c.real_model not in models.names():
    raise ValueError(f"real_model={c.real_model!r}; allowed: {', '.join(models.names())}")
  if quick:
    c.base.rounds = c.quick_rounds
    c.scenarios = tuple(c.quick_scenarios)
    c.trace_shapley = False
  if rounds:
    c.base.rounds = int(rounds)
  if data_dir:
    c.base.data_dir = data_dir
    if c.base.dataset == "digits":
      c.base.dataset = c.real_dataset
      c.base.model = c.real_model
  return c


def fedavg_name(
  base: ml_collections.ConfigDict, setup: str = "fedavg", reading: str = "epoch"
) -> str:
  """The aggregation as the plot titles name it: FedAvg with its weighting, or FedSGD under
  its reading; and the client lr schedule."""
  w = base.aggregator_hparams.get("weighting", "selection")
  agg = "FedAvg (plain mean)" if w == "uniform" else "FedAvg (size-weighted)"
  if setup == "fedsgd":
    agg = (
      "FedSGD (one full-batch step, plain mean)"
      if reading == "gradient"
      else "FedSGD (one local epoch, plain mean)"
    )
  if base.lr_schedule != "step":
    return agg
  return f"{agg}, StepLR {base.lr_step_size} per {base.lr_schedule_unit}"


def protocol_name(config: ml_collections.ConfigDict) -> str:
  """What every table heading names: FedEMD's D_c reading, FedAvg's weighting, the lr unit."""
  setup = config.get("aggregation_setup", "fedavg")
  reading = config.get("fedsgd_reading", "epoch")
  text = (
    f"FedEMD D_c from label {config.fedemd_current}, {fedavg_name(config.base, setup, reading)}"
  )
  if config.get("baselines", "papers") == "authors":
    text += ", TiFL and FedFast as the authors' code runs them"
  return text


def cell_name(config: ml_collections.ConfigDict, scenario: str, method: str) -> str:
  """A cell's folder under ``cells/``: ``<scenario>_<method>`` (FedAvg, the committed cells'
  names), ``<scenario>_<method>_fedsgd`` (FedSGD, the epoch reading) or
  ``<scenario>_<method>_fedsgd_gradient``; TiFL's and FedFast's with ``baselines="authors"``
  as ``<scenario>_<method>_authors`` followed by the same suffixes."""
  suffix = ""
  if method in BASELINE_METHODS and config.get("baselines", "papers") == "authors":
    suffix = "_authors"
  if config.get("aggregation_setup", "fedavg") == "fedsgd":
    suffix += "_fedsgd"
    if config.get("fedsgd_reading", "epoch") == "gradient":
      suffix += "_gradient"
  return f"{scenario}_{method}{suffix}"


def max_client_examples(dataset: FederatedData) -> int:
  """The largest client's training examples: FedSGD's batch size (one full-batch step)."""
  return int(np.max(np.asarray(dataset.train.counts)))


def cell_config(
  config: ml_collections.ConfigDict, method: str, max_examples: int = 0
) -> ml_collections.ConfigDict:
  """One method's run config. ``max_examples``: the largest client's examples, FedSGD's
  batch size (0 keeps the base batch, e.g. when only checking the config)."""
  c = ml_collections.ConfigDict(config.base.to_dict())
  c.selection = {**SELECTION, **SUPPLEMENT_SELECTION}[method]
  hp = {}
  authors = config.get("baselines", "papers") == "authors"
  if method == "tifl" and authors:
    hp = {"rule": "accuracy_weighted"}
  elif method == "tifl":
    t = config.tifl
    hp = {
      "num_tiers": int(t.num_tiers),
      "credits": int(t.credits) or -(-int(c.rounds) // max(int(t.num_tiers), 1)),
      "interval": int(t.interval),
      "tier_by": str(t.tier_by),
      "accuracy_from": str(t.accuracy_from),
    }
    if t.get("short_tier", "fill") != "fill":  # the default keeps the cells' configs
      hp["short_tier"] = str(t.short_tier)
  elif method == "fedfast" and authors:
    hp = {
      "num_clusters": int(c.clients_per_round),
      "features": "label_counts",
      "allocation": "equal",
      "kmeans_iters": int(config.fedfast.kmeans_iters),
      "init": "random_points",
    }
  elif method == "fedfast":
    f = config.fedfast
    hp = {
      "num_clusters": int(f.num_clusters) or int(c.clients_per_round),
      "features": str(f.features),
      "allocation": str(f.allocation),
      "kmeans_iters": int(f.kmeans_iters),
    }
    if f.get("init", "kmeans++") != "kmeans++":  # the default keeps the cells' configs
      hp["init"] = str(f.init)
    c.sketch_dim = int(config.fedfast_sketch_dim)
  elif method == "fedprox":
    c.client_update = "fedprox"
    c.client_update_hparams = ml_collections.ConfigDict({"mu": float(config.fedprox_mu)})
  elif method == "fedemd":
    hp = {
      "alpha": float(config.fedemd_alpha),
      "beta": float(config.fedemd_beta),
      "current": str(config.fedemd_current),
    }
  elif method == "shapley":
    hp = {"num_permutations": int(config.shapley_permutations)}
    tol = config.get("shapley_truncation_tol", SHAPLEY_TRUNCATION_TOL)
    if tol != SHAPLEY_TRUNCATION_TOL:  # the default keeps the cells' configs as they were
      hp["truncation_tol"] = tol
  c.selection_hparams = ml_collections.ConfigDict(hp)
  if config.get("aggregation_setup", "fedavg") == "fedsgd":
    # FedSGD averages the cohort simply (FedEMD Sec. 5.4, "simple averaging rather than
    # weighted"; Sec. 5.1: "FedSGD always considers one local epoch")
    c.aggregator_hparams = ml_collections.ConfigDict({"weighting": "uniform"})
    if config.get("fedsgd_reading", "epoch") == "gradient":
      _fedsgd_gradient(c, int(config.get("fedsgd_batch_size", 0)), max_examples)
  return c


def _fedsgd_gradient(c: ml_collections.ConfigDict, chunk: int, max_examples: int) -> None:
  """McMahan et al.'s FedSGD on a cell config: each selected client computes one gradient on
  all its data at the global model; one step of lr eta is -eta x that gradient (momentum's
  first step is the gradient itself), so the server's step is -eta x the mean gradient.
  ``chunk`` > 0 adds the gradient up over batches of ``chunk`` (client update "fedsgd", plain
  SGD: the same step without padding every client to the largest; FedProx's proximal term
  has zero gradient at the global model, so its cell is Random's); 0 is one batch of
  ``max_examples`` (the largest client), every client padded to it."""
  c.local_steps = 0
  c.local_epochs = 1
  if chunk:
    c.client_update = "fedsgd"
    c.client_update_hparams = ml_collections.ConfigDict()
    c.client_optimizer = "sgd"
    c.client_momentum = 0.0
    c.batch_size = chunk
  elif max_examples:
    c.batch_size = int(max_examples)


def rounds_to_reach(history: list[dict], target: float) -> int | None:
  """The first evaluated round whose test accuracy is >= target (None if none is)."""
  for record in history:
    if record["test_accuracy"] >= target:
      return int(record["round"])
  return None


def r_at(
  histories: list[list[dict]], random_histories: list[list[dict]], fraction: float = 0.99
) -> list[int | None]:
  """R@A per seed: rounds to reach ``fraction`` x Random's best accuracy (same seed)."""
  out = []
  for h, ref in zip(histories, random_histories, strict=True):
    target = fraction * max(r["test_accuracy"] for r in ref)
    out.append(rounds_to_reach(h, target))
  return out


def format_rounds(values: list[int | None], num_rounds: int) -> str:
  """``"mean ± std"`` over the seeds that reached the target; ``">T"`` if none did."""
  reached = [v for v in values if v is not None]
  if not reached:
    return f">{num_rounds}"
  text = common.fmt(*common.mean_std(reached), 1)
  if len(reached) < len(values):
    text += f" ({len(reached)}/{len(values)} seeds reached; >{num_rounds} for the rest)"
  return text


def replay_selection(cfg: ml_collections.ConfigDict, dataset: FederatedData, seed: int):
  """The cohorts a run of ``cfg`` picks, without training (selection that ignores training).

  Starts from the run's own ``Simulation.init`` state (keys, availability and selection
  states) and repeats the selection part of ``_round_step``: round t selects with
  ``split(fold_in(state.key, t))[0]`` among the clients drawn with
  ``fold_in(state.availability_key, t)``. Exact for strategies whose state does not depend
  on the local updates (uniform, fedemd, md, ...); the tests compare it with the run's
  sampling counts.

  Returns:
    (cohort i32[T, M], valid bool[T, M]).
  """
  sim, _ = experiment.build(cfg, dataset)
  state = sim.init(seed, None if cfg.availability_seed < 0 else cfg.availability_seed)

  def step(carry, t):
    av_state, sel_state = carry
    k_sel_t, _ = jax.random.split(jax.random.fold_in(state.key, t))
    probs = sim.availability.probs(av_state, t)
    avail, av_state = sim.availability.sample(
      av_state, jax.random.fold_in(state.availability_key, t), t
    )
    ctx = sim.context(state.replace(round=t), probs)
    chosen, sel_state = sim.selection.select(sel_state, k_sel_t, avail, t, ctx)
    return (av_state, sel_state), (chosen.cohort, chosen.valid)

  init = (state.availability_state, state.selection_state)
  _, (cohorts, valid) = jax.jit(
    lambda c: jax.lax.scan(step, c, jnp.arange(cfg.rounds, dtype=jnp.int32))
  )(init)
  return np.asarray(cohorts), np.asarray(valid)


def traced_selection(cfg: ml_collections.ConfigDict, dataset: FederatedData, seed: int):
  """The per-round selection counts of a real run (trains; for Shapley): i32[T, N]."""
  sim, _ = experiment.build(cfg, dataset)
  state = sim.init(seed, None if cfg.availability_seed < 0 else cfg.availability_seed)
  rows, before = [], np.zeros(sim.num_clients, np.int64)
  for _ in range(cfg.rounds):
    state, _ = sim.run_rounds(state, 1)
    now = np.asarray(state.sampling_counts, np.int64)
    rows.append(now - before)
    before = now
  return np.stack(rows)


def counts_per_round(cohorts: np.ndarray, valid: np.ndarray, num_clients: int) -> np.ndarray:
  """i32[T, N] selections per round and client from cohorts i32[T, M], valid bool[T, M]."""
  out = np.zeros((cohorts.shape[0], num_clients), np.int64)
  for t in range(cohorts.shape[0]):
    np.add.at(out[t], cohorts[t][valid[t]], 1)
  return out


def run_study(
  config: ml_collections.ConfigDict,
  output_dir: str,
  seeds: list[int],
  *,
  resume: bool = True,
) -> dict:
  """Runs every (scenario, method) cell for every seed; writes tables and figures
  (``config.supplement``: that figure's cells instead, ``run_supplement``)."""
  if config.get("supplement", ""):
    return run_supplement(config, output_dir, seeds, resume=resume)
  os.makedirs(output_dir, exist_ok=True)
  base = config.base
  pool = load_pool(base.dataset, base.data_dir)
  data = {s: maverick_data(config, s, pool) for s in config.scenarios}
  runs = {}
  for s in config.scenarios:  # one dataset per scenario; its methods' seeds run together
    biggest = max_client_examples(data[s])
    res = common.run_cells(
      {
        m: (
          cell_config(config, m, biggest),
          os.path.join(output_dir, "cells", cell_name(config, s, m)),
        )
        for m in config.methods
      },
      seeds,
      dataset_fn=lambda c, d=data[s]: d,
      resume=resume,
    )
    for m in config.methods:
      runs[s, m] = res[m]
  rounds_total = int(base.rounds)
  setup = f"{base.dataset}, N={base.num_clients}, M={base.clients_per_round}, {base.model}"
  protocol = protocol_name(config)
  scen = list(config.scenarios)
  header = ["method"] + [s.replace("_", " ") for s in scen]
  r99 = {}
  for s in scen:
    ref = [h for _, h in runs[s, "random"]]
    for m in config.methods:
      r99[s, m] = r_at([h for _, h in runs[s, m]], ref, float(config.target))
  r99_rows = [
    [METHODS[m]] + [format_rounds(r99[s, m], rounds_total) for s in scen] for m in config.methods
  ]
  pct = f"{100 * config.target:g}"
  md = results.write_table(
    os.path.join(output_dir, "r99"),
    header,
    r99_rows,
    f"FedEMD Fig. 4 / Table 1: R@{pct} (rounds to {pct} % of Random's best accuracy; "
    f"mean ± std over seeds {seeds}), {setup}, {rounds_total} rounds; {protocol}",
  )
  acc_rows = [
    [METHODS[m]]
    + [
      common.fmt(*common.mean_std([100 * r[0]["final_test_accuracy"] for r in runs[s, m]]), 2)
      for s in scen
    ]
    for m in config.methods
  ]
  md += "\n" + results.write_table(
    os.path.join(output_dir, "final_accuracy"),
    header,
    acc_rows,
    f"FedEMD: final test accuracy (%) after {rounds_total} rounds, seeds {seeds}, {setup}; "
    f"{protocol}",
  )
  share_rows = []
  for m in config.methods:
    row = [METHODS[m]]
    for s in scen:
      mav = data[s].extras["mavericks"]
      shares = []
      for summary, _ in runs[s, m]:
        counts = np.asarray(summary["sampling_counts"], np.float64)
        shares.append(100 * counts[mav].sum() / max(counts.sum(), 1))
      row.append(common.fmt(*common.mean_std(shares), 2))
    share_rows.append(row)
  fair = ", ".join(f"{s}: {100 * parse_scenario(s)[0] / base.num_clients:g} %" for s in scen)
  md += "\n" + results.write_table(
    os.path.join(output_dir, "maverick_share"),
    header,
    share_rows,
    f"FedEMD: share of all selections that went to Mavericks (%) (uniform expectation {fair}), "
    f"seeds {seeds}; {protocol}",
  )

  figures = []
  for s in scen:
    curves = {}
    for m in config.methods:
      x, y = common.mean_curve([h for _, h in runs[s, m]], "test_accuracy")
      curves[METHODS[m]] = (x, [100 * v for v in y])
    path = os.path.join(output_dir, f"accuracy_{s}.png")
    results.plot_curves(
      curves,
      path,
      f"FedEMD: {s.replace('_', ' ')} Maverick(s), {setup}, mean of {len(seeds)} seed(s),\n"
      f"{protocol}",
      "test accuracy (%)",
    )
    figures.append(path)
  path = os.path.join(output_dir, "fig4_r99.png")
  plot_r99(
    r99,
    scen,
    list(config.methods),
    rounds_total,
    path,
    f"FedEMD Fig. 4: R@{pct} vs number of Mavericks ({setup}),\n{protocol}",
  )
  figures.append(path)

  s = config.participation_scenario if config.participation_scenario in scen else scen[0]
  traces, mav = {}, data[s].extras["mavericks"]
  seed = seeds[0]
  for m in config.methods:
    cfg = cell_config(config, m, max_client_examples(data[s]))
    cfg.seed = seed
    if m in TRAINING_DEPENDENT:
      if not config.trace_shapley:
        continue
      per_round = traced_selection(cfg, data[s], seed)
    else:
      cohorts, valid = replay_selection(cfg, data[s], seed)
      per_round = counts_per_round(cohorts, valid, base.num_clients)
    final = np.asarray(runs[s, m][seeds.index(seed)][0]["sampling_counts"])
    if not np.array_equal(per_round.sum(0), final):
      logging.warning("participation trace of %s differs from its run's sampling counts", m)
    traces[METHODS[m]] = np.cumsum(per_round[:, mav].sum(1))
  names = list(traces)
  results.write_table(
    os.path.join(output_dir, "participation"),
    ["round"] + names,
    [[t + 1] + [int(traces[n][t]) for n in names] for t in range(int(base.rounds))],
    f"FedEMD: cumulative Maverick selections, {s}, seed {seed}; D_c from label "
    f"{config.fedemd_current} (the cohorts do not depend on the weighting or the lr)",
  )
  path = os.path.join(output_dir, "participation.png")
  plot_participation(
    traces,
    len(mav) * base.clients_per_round / base.num_clients,
    path,
    f"FedEMD: Maverick participation, {s.replace('_', ' ')}, {setup}, seed {seed},\n"
    f"FedEMD D_c from label {config.fedemd_current}",
  )
  figures.append(path)
  return {
    "r99": (header, r99_rows),
    "final_accuracy": (header, acc_rows),
    "maverick_share": (header, share_rows),
    "r99_values": r99,
    "participation": traces,
    "markdown": md,
    "figures": figures,
    "runs": runs,
  }


def dodge_offsets(count: int, width: float = 0.08) -> np.ndarray:
  """x offsets of ``count`` series drawn side by side at one tick, centred on it."""
  return width * (np.arange(count) - (count - 1) / 2)


def plot_r99(r99, scenarios, methods, num_rounds, path, title) -> None:
  """R@99 against the number of Mavericks, exclusive and shared panels (Fig. 4)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True, layout="constrained")
  for ax, shared, label in ((axes[0], False, "exclusive"), (axes[1], True, "shared")):
    # One exclusive Maverick is also the one-Maverick point of the shared panel.
    ks = sorted(
      {
        parse_scenario(s)[0]
        for s in scenarios
        if parse_scenario(s)[1] == shared or parse_scenario(s)[0] == 1
      }
    )
    offsets = dodge_offsets(len(methods))
    for j, m in enumerate(methods):
      xs, ys, es = [], [], []
      for k in ks:
        name = f"{k}_{'shared' if shared and k > 1 else 'excl'}"
        if name not in scenarios:
          continue
        vals = [v if v is not None else num_rounds for v in r99[name, m]]
        xs.append(k + offsets[j])
        ys.append(np.mean(vals))
        es.append(np.std(vals))
      if xs:
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=METHODS[m])
    ax.set_xlabel(f"number of {label} Mavericks")
    ax.set_xticks(ks)
    ax.grid(alpha=0.3)
    ax.set_title(f"{label} Mavericks")
  axes[0].set_ylabel(f"R@99 (communication rounds; {num_rounds} = not reached)")
  axes[1].legend(fontsize=8)
  fig.suptitle(title, fontsize=10)
  results.save_figure(fig, path)
  plt.close(fig)


def plot_participation(traces: dict, uniform_rate: float, path: str, title: str) -> None:
  """Cumulative selections of the Mavericks against rounds, one line per method."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6.4, 4.2))
  num_rounds = 1
  for name, cum in traces.items():
    rounds = np.arange(1, len(cum) + 1)
    num_rounds = max(num_rounds, len(cum))
    ax.plot(rounds, cum, label=name)
  r = np.arange(1, num_rounds + 1)
  ax.plot(r, uniform_rate * r, "k--", lw=1, label="uniform expectation")
  ax.set_xlabel("communication round")
  ax.set_ylabel("cumulative Maverick selections (count)")
  ax.set_title(title, fontsize=9)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  results.save_figure(fig, path)
  plt.close(fig)


# ----------------------------------------------------------------------------- supplement
# App. A.3-A.6 (``--config.supplement``): each figure is a fixed list of (scenario, method)
# cells run round by round, with the per-round facts the figure needs in ``trace.jsonl``.
SUPPLEMENTS = {
  # Fig. 5: SVB's data-size fairness (Def. 3.3) with one exclusive Maverick
  "fig5": (("1_excl", "shapley"),),
  # Fig. 6: the i.i.d. upper bound, mav-never (lower bound), mav-random and mav-always
  "fig6": (
    ("iid", "random"),
    ("1_excl", "mav_never"),
    ("1_excl", "random"),
    ("1_excl", "mav_always"),
  ),
  # Fig. 7: i.i.d.-random, size-het-svb, maverick-random, maverick-svb
  "fig7": (
    ("iid", "random"),
    ("iid_sizehet", "shapley"),
    ("1_excl", "random"),
    ("1_excl", "shapley"),
  ),
}
SUPPLEMENT_METHODS = {"mav_always": "mav-always", "mav_never": "mav-never"}
# the selection name a supplement method's config records; its cohorts are built here
SUPPLEMENT_SELECTION = {"mav_always": "uniform", "mav_never": "uniform"}
IID_SCENARIOS = ("iid", "iid_sizehet")
SUPPLEMENT_LABELS = {
  ("iid", "random"): "i.i.d.-random",
  ("iid_sizehet", "shapley"): "size-het-svb",
  ("1_excl", "random"): "mav-random",
  ("1_excl", "shapley"): "maverick-svb",
  ("1_excl", "mav_never"): "mav-never",
  ("1_excl", "mav_always"): "mav-always",
}


def make_maverick_selection(
  num_selected: int, mavericks: list[int], num_clients: int, include: bool
) -> SelectionStrategy:
  """FedEMD App. A.4's protocols that know the Mavericks: always or never select them.

  ``include=True`` (mav-always): every Maverick takes one slot of every round (while
  available), the other ``M - k`` slots are drawn uniformly without replacement among the
  available non-Mavericks. ``include=False`` (mav-never): M slots drawn uniformly among the
  available non-Mavericks. Aggregation weights are FedAvg's ``n_k / sum n`` over the cohort
  (as Random's).

  Args:
    num_selected: M, the number of cohort slots.
    mavericks: the Mavericks' client ids (k >= 1; k < M for mav-always).
    num_clients: N.
    include: always (True) or never (False) select the Mavericks.

  References:
    Huang et al., FedEMD, App. A.4 and Fig. 6 (mav-always, mav-never).
  """
  num_selected = selection_common.check_num_selected(num_selected)
  if not isinstance(include, (bool, np.bool_)):
    raise ValueError(f"include={include!r}; allowed: True (mav-always) or False (mav-never)")
  ids = [int(i) for i in mavericks]
  if not ids or len(set(ids)) != len(ids) or min(ids) < 0 or max(ids) >= num_clients:
    raise ValueError(
      f"mavericks={list(mavericks)}; allowed: at least one distinct client id in [0, {num_clients})"
    )
  if include and len(ids) >= num_selected:
    raise ValueError(
      f"{len(ids)} Maverick(s) with clients_per_round={num_selected}; allowed for "
      "mav-always: fewer Mavericks than slots"
    )
  is_maverick = np.zeros((num_clients,), bool)
  is_maverick[ids] = True
  maverick_ids = np.asarray(ids, np.int32)
  num_drawn = num_selected - len(ids) if include else num_selected

  def init(key: PRNGKey, info: ClientInfo) -> selection_common.EmptyState:
    del key, info
    return selection_common.EmptyState()

  def select(state, key: PRNGKey, avail: Array, t: Array, ctx: SelectionContext):
    del t
    others = avail & ~jnp.asarray(is_maverick)
    cohort, valid = selection_common.uniform_without_replacement(key, others, num_drawn)
    if include:
      cohort = jnp.concatenate([jnp.asarray(maverick_ids), cohort])
      valid = jnp.concatenate([avail[maverick_ids], valid])
    weights = selection_common.fedavg_weights(ctx.num_examples, cohort, valid)
    return selection_common.make_selection(cohort, valid, weights), state

  return SelectionStrategy(init=init, select=select, num_selected=num_selected)


class ShapleyRecordState(NamedTuple):
  """SVB's state and what its last ``observe`` measured (FedEMD Def. 3.2 needs them).

  Attributes:
    inner: the ``shapley`` strategy's state.
    shapley: f32[M], the Shapley value of each slot in the last observed round (0: invalid).
    cohort: i32[M], that round's cohort.
    valid: bool[M], its filled slots.
  """

  inner: PyTree
  shapley: Array
  cohort: Array
  valid: Array


def record_shapley(inner: SelectionStrategy, momentum: float) -> SelectionStrategy:
  """SVB that also keeps each round's per-slot Shapley values in its state.

  The ``shapley`` strategy keeps only an EMA per client: ``new = sv`` at a client's first
  measurement, else ``momentum * old + (1 - momentum) * sv``. The round's ``sv`` is read back
  from the EMA before and after ``observe`` (``sv = (new - momentum * old) / (1 -
  momentum)``), so the selection is SVB's own, unchanged, and no coalition is evaluated twice.

  Args:
    inner: ``selection.make("shapley", ...)``.
    momentum: its ``momentum`` hyper-parameter, in [0, 1).
  """
  if not 0.0 <= float(momentum) < 1.0:
    raise ValueError(f"momentum={momentum!r}; allowed: [0, 1)")
  m = inner.num_selected

  def init(key: PRNGKey, info: ClientInfo) -> ShapleyRecordState:
    return ShapleyRecordState(
      inner.init(key, info),
      jnp.zeros((m,), jnp.float32),
      jnp.zeros((m,), jnp.int32),
      jnp.zeros((m,), bool),
    )

  def select(state: ShapleyRecordState, key, avail, t, ctx):
    chosen, new_inner = inner.select(state.inner, key, avail, t, ctx)
    return chosen, state._replace(inner=new_inner)

  def observe(state: ShapleyRecordState, chosen: Selection, deltas, losses, ctx):
    new_inner = inner.observe(state.inner, chosen, deltas, losses, ctx)
    old = state.inner.value[chosen.cohort]
    first = state.inner.count[chosen.cohort] == 0
    new = new_inner.value[chosen.cohort]
    sv = jnp.where(first, new, (new - momentum * old) / (1.0 - momentum))
    return ShapleyRecordState(
      new_inner, jnp.where(chosen.valid, sv, 0.0), chosen.cohort, chosen.valid
    )

  return inner._replace(init=init, select=select, observe=observe)


def fairness_utility(contributions, sizes, valid) -> tuple[np.ndarray, float]:
  """FedEMD's data-size fairness (Def. 3.2, Eq. 4) and its system utility U (Def. 3.3, Eq. 5).

  In round t with cohort slots k: ``rc_k = c_k / sum_i c_i`` (relative contribution) and
  ``q_k = n_k / sum_i n_i`` (relative data size), sums over the round's valid slots; the
  round's fairness is ``U_t = 1 - mean_k |q_k - rc_k|`` and the system's is
  ``U = 1 - 1 / (T K) sum_t sum_k |q_k - rc_k|`` (= the mean of the U_t with K slots a round).
  U = 1 is ideal. A round whose contributions sum to 0 has no ``rc`` and is left out (NaN).

  Args:
    contributions: f[T, M], c_k(t) (here each slot's Shapley value).
    sizes: f[T, M], n_k of each slot's client.
    valid: bool[T, M], the filled slots.

  Returns:
    (U_t f64[T], U over the rounds whose U_t is defined; NaN if none is).

  References:
    Huang et al., FedEMD, Def. 3.2-3.3 (Eq. 4-5).
  """
  c, n = np.asarray(contributions, np.float64), np.asarray(sizes, np.float64)
  valid = np.asarray(valid, bool)
  if c.ndim != 2 or c.shape != n.shape or c.shape != valid.shape:
    raise ValueError(
      f"contributions {c.shape}, sizes {n.shape} and valid {valid.shape}; allowed: the same [T, M]"
    )
  c, n = np.where(valid, c, 0.0), np.where(valid, n, 0.0)
  if np.any(n < 0):
    raise ValueError(f"sizes has negative entries (min {n.min()}); allowed: n_k >= 0")
  k = np.sum(valid, axis=1)
  c_total, n_total = c.sum(1, keepdims=True), n.sum(1, keepdims=True)
  defined = (c_total[:, 0] != 0) & (n_total[:, 0] > 0) & (k > 0)
  rc = c / np.where(c_total != 0, c_total, 1.0)
  q = n / np.where(n_total > 0, n_total, 1.0)
  gap = np.where(valid, np.abs(q - rc), 0.0).sum(1)
  per_round = np.where(defined, 1.0 - gap / np.maximum(k, 1), np.nan)
  total = float(1.0 - gap[defined].sum() / k[defined].sum()) if defined.any() else float("nan")
  return per_round, total


def check_supplement(c: ml_collections.ConfigDict) -> None:
  """The supplement's own settings (ValueError naming the bad value and what is allowed)."""
  c.supplement = c.get("supplement", "")
  c.size_het_sigma = c.get("size_het_sigma", 1.0)
  if c.supplement not in ("",) + tuple(SUPPLEMENTS):
    raise ValueError(
      f"supplement={c.supplement!r}; allowed: '' (Table 1 / Fig. 4) or "
      f"{', '.join(repr(s) for s in SUPPLEMENTS)}"
    )
  sigma = c.size_het_sigma
  if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not 0 < sigma < 10:
    raise ValueError(f"size_het_sigma={sigma!r}; allowed: a number in (0, 10)")
  tol = c.get("shapley_truncation_tol", SHAPLEY_TRUNCATION_TOL)
  if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol <= 1:
    raise ValueError(f"shapley_truncation_tol={tol!r}; allowed: a number in [0, 1]")
  if c.supplement and c.aggregation_setup != "fedavg":
    raise ValueError(
      f"aggregation_setup={c.aggregation_setup!r} with supplement={c.supplement!r}; "
      "allowed: 'fedavg' (App. A.3-A.6 use FedAvg)"
    )


def supplement_cells(config: ml_collections.ConfigDict) -> tuple[tuple[str, str], ...]:
  """The (scenario, method) cells of ``config.supplement`` (none without one)."""
  return SUPPLEMENTS.get(config.supplement, ())


def supplement_data(config: ml_collections.ConfigDict, scenario: str, pool) -> FederatedData:
  """A supplement scenario's data: ``iid`` (every class, equal sizes), ``iid_sizehet``
  (every class, lognormal sizes of sigma ``size_het_sigma``: App. A.6 does not say how
  heterogeneous) or a Maverick scenario (``maverick_data``)."""
  if scenario not in IID_SCENARIOS:
    return maverick_data(config, scenario, pool)
  base = config.base
  y = pool[1]
  rng = np.random.default_rng(base.data_seed)
  sizes = None
  if scenario == "iid_sizehet":
    sizes = partitions.lognormal_sizes(len(y), base.num_clients, config.size_het_sigma, rng)
  parts = partitions.iid(y, base.num_clients, rng, sizes)
  extras = {"partition": scenario, "mavericks": [], "shared": False}
  return federated_data(config, pool, parts, rng, scenario, extras)


def traced_simulation(cfg: ml_collections.ConfigDict, dataset: FederatedData, method: str):
  """The Simulation of a supplement cell: the config's own, with mav-always / mav-never's
  selection or SVB's recording one swapped in (same model, data, aggregator, engine)."""
  sim, _ = experiment.build(cfg, dataset)
  mav = list(dataset.extras.get("mavericks", []))
  if method in SUPPLEMENT_METHODS:
    sel = make_maverick_selection(
      sim.num_selected, mav, sim.num_clients, include=method == "mav_always"
    )
  elif method == "shapley":
    sel = record_shapley(sim.selection, SHAPLEY_MOMENTUM)
  else:
    return sim
  return sim_lib.Simulation(
    dataset, sim.model, sim.availability, sel, sim.aggregator, sim.client_update, sim.config
  )


def run_traced_cell(
  cfg: ml_collections.ConfigDict,
  dataset: FederatedData,
  method: str,
  folder: str,
  resume: bool = True,
) -> list[dict]:
  """Runs one supplement cell round by round; writes and returns its ``trace.jsonl``.

  Each round's record: ``round``, ``test_accuracy`` and ``class_recall`` (per class, on the
  global test set), ``selected`` (client ids), ``maverick_selected``, ``seconds`` (of the
  round and its evaluation); with SVB also ``shapley`` and ``sizes`` (per slot),
  ``cohort``, ``valid`` and ``fairness`` (U_t, Def. 3.3). A finished trace (``rounds``
  records) is read back with ``resume``. The state is checkpointed every
  ``cfg.checkpoint_every`` rounds (0: at every evaluation, here every round), so an
  unfinished trace continues with ``resume`` from its newest checkpoint, the records after
  it dropped: the same records as a run without the stop (tested), at most
  ``checkpoint_every - 1`` rounds run again.
  """
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, "trace.jsonl")
  done = results.read_jsonl(path) if resume else []
  if len(done) == int(cfg.rounds):
    return done
  sim = traced_simulation(cfg, dataset, method)
  state = sim.init(int(cfg.seed), None if cfg.availability_seed < 0 else cfg.availability_seed)
  fingerprint = _fingerprint(cfg)
  records: list[dict] = []
  if resume and checkpoint.latest_round(folder) is not None:
    state, extra = checkpoint.restore(folder, state)
    _check_same_config(extra.get("config"), fingerprint, folder)
    records = [r for r in done if r["round"] <= int(state.round)]
    if len(records) != int(state.round):  # the trace lost records the checkpoint has
      raise ValueError(
        f"{path} holds {len(records)} records up to the checkpoint of round "
        f"{int(state.round)}; remove {checkpoint.checkpoint_dir(folder)} to start the cell again"
      )
    logging.info("resuming the trace %s from round %d", folder, int(state.round))
  else:
    checkpoint.clear(folder)
  results.write_jsonl(path, records)
  results.write_json(
    os.path.join(folder, "config.json"),
    {
      "method": method,
      "selection_built_by": "experiments/fedemd.py" if method in SUPPLEMENT_METHODS else "registry",
      "config": cfg.to_dict(),
    },
  )
  mav = set(dataset.extras.get("mavericks", []))
  sizes = np.asarray(dataset.train.counts, np.float64)
  test_x, test_y = np.asarray(dataset.test_x), np.asarray(dataset.test_y)
  predict = jax.jit(lambda p, x: jnp.argmax(sim.model.apply(p, x / sim.x_divisor), -1))
  before = np.asarray(state.sampling_counts, np.int64)
  every = int(cfg.get("checkpoint_every", 0)) or 1  # 0: at every evaluation (every round)
  for t in range(len(records), int(cfg.rounds)):
    start = time.perf_counter()
    state, _ = sim.run_rounds(state, 1)
    pred = np.concatenate(
      [np.asarray(predict(state.params, test_x[i : i + 2000])) for i in range(0, len(test_y), 2000)]
    )
    now = np.asarray(state.sampling_counts, np.int64)
    selected = np.flatnonzero(now - before).tolist()
    before = now
    rec = {
      "round": t + 1,
      "test_accuracy": float(np.mean(pred == test_y)),
      "class_recall": [
        float(np.mean(pred[test_y == c] == c)) if np.any(test_y == c) else float("nan")
        for c in range(dataset.num_classes)
      ],
      "selected": selected,
      "maverick_selected": sum(1 for k in selected if k in mav),
    }
    if method == "shapley":
      st = state.selection_state
      cohort, valid = np.asarray(st.cohort), np.asarray(st.valid)
      sv = np.asarray(st.shapley, np.float64)
      u_t, _ = fairness_utility(sv[None], sizes[cohort][None], valid[None])
      rec.update(
        shapley=sv.tolist(),
        sizes=sizes[cohort].tolist(),
        cohort=cohort.tolist(),
        valid=valid.tolist(),
        fairness=float(u_t[0]),
      )
    rec["seconds"] = time.perf_counter() - start
    results.append_jsonl(path, rec)
    records.append(rec)
    if (t + 1) % every == 0 and t + 1 < int(cfg.rounds):
      checkpoint.save_kept(folder, state, t + 1, {"config": fingerprint})
    if (t + 1) % 10 == 0:
      logging.info("%s: round %d, accuracy %.4f", folder, t + 1, rec["test_accuracy"])
  checkpoint.clear(folder)  # the finished trace is read back, never resumed
  return records


def block_means(values: list[float], block: int) -> list[float]:
  """Means of consecutive blocks of ``block`` values (the last may be shorter); NaN values
  are left out, a block of NaN only is NaN."""
  out = []
  for i in range(0, len(values), block):
    part = np.asarray(values[i : i + block], np.float64)
    part = part[~np.isnan(part)]
    out.append(float(part.mean()) if part.size else float("nan"))
  return out


def run_supplement(
  config: ml_collections.ConfigDict, output_dir: str, seeds: list[int], *, resume: bool = True
) -> dict:
  """Runs ``config.supplement``'s cells for every seed; writes its table and figure."""
  os.makedirs(output_dir, exist_ok=True)
  base = config.base
  pool = load_pool(base.dataset, base.data_dir)
  cells = supplement_cells(config)
  data = {s: supplement_data(config, s, pool) for s in {s for s, _ in cells}}
  traces = {}
  for s, m in cells:
    cfg = cell_config(config, m)
    traces[s, m] = []
    for seed in seeds:
      c = common.seed_config(cfg, seed)
      folder = os.path.join(output_dir, "cells", f"{s}_{m}", f"seed{seed}")
      traces[s, m].append(run_traced_cell(c, data[s], m, folder, resume))
  rounds = int(base.rounds)
  block = max(1, rounds // 10)
  starts = list(range(1, rounds + 1, block))
  header = ["cell", "quantity"] + [f"{a}-{min(a + block - 1, rounds)}" for a in starts]
  mav_class = int(config.maverick_classes[0])
  rows, curves = [], {}
  for (s, m), runs in traces.items():
    label = SUPPLEMENT_LABELS[s, m]
    acc = np.mean([[100 * r["test_accuracy"] for r in tr] for tr in runs], 0).tolist()
    recall = np.mean([[100 * r["class_recall"][mav_class] for r in tr] for tr in runs], 0)
    rows.append([label, "test accuracy (%)"] + [f"{v:.2f}" for v in block_means(acc, block)])
    rows.append(
      [label, f"recall of class {mav_class} (%)"]
      + [f"{v:.2f}" for v in block_means(recall.tolist(), block)]
    )
    curves[label] = (list(range(1, rounds + 1)), acc)
    if m == "shapley":
      # round-major (round 1 of every seed, round 2, ...): a block pools its seeds' rounds
      u_t = np.asarray([[r["fairness"] for r in tr] for tr in runs], np.float64).T.ravel()
      rows.append(
        [label, "fairness U_t (Def. 3.3)"]
        + [f"{v:.3f}" for v in block_means(u_t.tolist(), block * len(runs))]
      )
      cum = [fairness_of(runs, t) for t in (starts[1:] + [rounds + 1])]
      rows.append([label, "U over rounds 1..block end"] + [f"{v:.3f}" for v in cum])
  title = (
    f"FedEMD App. A ({config.supplement}): block means over seeds {seeds}, "
    f"{base.dataset}, N={base.num_clients}, M={base.clients_per_round}, {base.model}, "
    f"{fedavg_name(base)}"
  )
  md = results.write_table(
    os.path.join(output_dir, f"supplement_{config.supplement}"), header, rows, title
  )
  path = os.path.join(output_dir, f"supplement_{config.supplement}.png")
  results.plot_curves(curves, path, title[:90], "test accuracy (%)")
  return {"markdown": md, "figures": [path], "traces": traces, "rows": (header, rows)}


def fairness_of(runs: list[list[dict]], end: int) -> float:
  """U (Def. 3.3) over rounds 1 .. end - 1 of every seed's SVB trace (their slots pooled)."""
  recs = [r for tr in runs for r in tr if r["round"] < end]
  if not recs:
    return float("nan")
  return fairness_utility(
    [r["shapley"] for r in recs], [r["sizes"] for r in recs], [r["valid"] for r in recs]
  )[1]


# ----------------------------------------------------------------------------- binary

_DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "fedemd.py")
FLAGS = flags.FLAGS


def define_flags() -> None:
  """The binary's flags (defined in ``__main__`` only, so importing this module is safe)."""
  common.define_study_flags(_DEFAULT_CONFIG)


def check_config(argv) -> tuple[ml_collections.ConfigDict, list[int]]:
  """The binary's flags and config, checked before anything runs: ``(config, seeds)``
  (``common.check_study``: the study's checks, then every cell's config for every seed)."""
  return common.check_study(argv, prepare_config, cell_configs)


def cell_configs(config: ml_collections.ConfigDict) -> list[ml_collections.ConfigDict]:
  """Every cell's run config: the supplement's cells, or one per method."""
  if config.get("supplement", ""):
    return [cell_config(config, m) for _, m in supplement_cells(config)]
  return [cell_config(config, m) for m in config.methods]


def main(argv):
  common.study_main(argv, check_config, run_study, "runs/fedemd")


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=common.parse_flags)

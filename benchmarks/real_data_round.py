r"""Seconds per round of the paper cells on the real Fashion-MNIST (the budget of issue 15).

  python -m benchmarks.real_data_round --json                       # both cells
  python -m benchmarks.real_data_round --json --cells=fedgs_fmnist --rounds=5
  python -m benchmarks.real_data_round --json --cells=fedemd_fmnist --cpu_devices=2   # both cores
  python -m benchmarks.real_data_round --half_precision --cells=fedgs_fmnist --rounds=5

Cells, each built exactly as its study builds it:

- ``fedgs_fmnist``: FedGS Table 2's Fashion-MNIST column (``experiments/configs/
  fedgs_table2.py``'s ``fashion_mnist_base``: 100 clients with two labels each, cnn_mnist,
  10 clients x 10 steps x batch 32), IDL availability, uniform selection.
- ``fedemd_fmnist``: FedEMD's ``1_excl`` scenario with Random selection
  (``experiments/configs/fedemd.py`` on Fashion-MNIST: 50 clients, 5 a round, one
  Maverick owning 'Trouser', one local epoch at batch 4, momentum 0.9, cnn_mnist).

Per cell: the first ``run_rounds(1)`` (compile included), then ``run_rounds(R)`` timed
(training only), a second ``evaluate`` timed (global test set + local test sets), then R
rounds as ``experiment.run`` runs them with an evaluation every round (``run_rounds(1)``,
``evaluate``, metrics to the host: ``round_with_eval_s``; FedEMD's R@99 needs it). The
data is read through ``loaders.load_pool`` (IDX files from the usual places or
``--data_dir``). Prints one JSON object per cell with ``--json``, with the machine's load.

``--client_accuracy=compare`` (the evaluation that follows what is read): the cell twice,
built from the same data, its evaluation with the clients' local test splits
(``client_accuracy=True``, every run before) and without (the FedGS study's default), a
round + evaluation of each in turn, ``--rounds`` times (``interleaved_medians``: load hits
both alike); prints both medians and their ratio, and checks that the two runs' test losses
are equal bit for bit.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax

from benchmarks import _common as C
from experiments import fedemd
from experiments.configs import fedemd as fedemd_config
from experiments.configs import fedgs_table2 as fedgs_config
from fedjax_sel import experiment
from fedjax_sel.core import simulation as sim_lib

CELLS = ("fedgs_fmnist", "fedemd_fmnist")


def build(
  cell: str,
  data_dir: str,
  client_accuracy: bool | None = None,
  data=None,
  half_precision: bool = False,
):
  """(Simulation, FederatedData, config) of one cell (``client_accuracy``: None keeps the
  study's setting; ``data``: a dataset built before, reused; ``half_precision``: the
  config field, bfloat16 compute over float32 params)."""
  if cell == "fedgs_fmnist":
    c = fedgs_config.fashion_mnist_base()
    c.availability, c.selection = "idl", "uniform"
    c.data_dir = data_dir
    if client_accuracy is not None:
      c.client_accuracy = client_accuracy
    c.half_precision = half_precision
    sim, data = experiment.build(c, data)
    return sim, data, c
  study = fedemd.prepare_config(
    fedemd_config.get_config(), data_dir=data_dir or "/usr/share/datasets/fashion-mnist"
  )
  study.base.data_dir = data_dir  # '' = search the usual places
  data = fedemd.maverick_data(study, "1_excl")
  c = fedemd.cell_config(study, "random")
  if client_accuracy is not None:
    c.client_accuracy = client_accuracy
  c.half_precision = half_precision
  sim, _ = experiment.build(c, data)
  return sim, data, c


def interleaved_rounds(sims: dict, rounds: int, parts: bool = False) -> tuple[dict, dict]:
  """Each simulation's rounds as ``experiment.run`` runs them with ``eval_every=1`` (a
  round, its evaluation, metrics to the host), one simulation after another in turn
  (``interleaved_medians``: load hits all alike). With ``parts``, a training round alone
  and an evaluation alone are timed the same way too (``<name>/train``, ``<name>/eval``).
  Returns (timings, {name: test losses of the evaluated rounds})."""
  states = {k: [s.init(0)] for k, s in sims.items()}
  losses: dict = {k: [] for k in sims}

  def round_and_eval(name):
    def step():
      state, m = sims[name].run_rounds(states[name][0], 1)
      states[name][0] = state
      ev = sim_lib.to_host(sims[name].evaluate(state))
      sim_lib.to_host(m)
      losses[name].append(ev["test_loss"])
      return state.round

    return step

  def train(name):
    def step():  # run_rounds donates the state: keep the new one
      states[name][0] = sims[name].run_rounds(states[name][0], 1)[0]
      return states[name][0].params

    return step

  fns = {k: round_and_eval(k) for k in sims}
  if parts:
    for k, s in sims.items():
      fns[f"{k}/train"] = train(k)
      fns[f"{k}/eval"] = lambda s=s, k=k: s.evaluate(states[k][0])
  return C.interleaved_medians(fns, rounds, warmup=1), losses


def compare_half_precision(cell: str, rounds: int, data_dir: str) -> dict:
  """The cell in float32 and under ``half_precision``, same data and seed, interleaved: a
  round + its evaluation, a training round alone, an evaluation alone; the ratios
  (float32 seconds / bfloat16 seconds) and the host's SIMD flags."""
  full, data, c = build(cell, data_dir)
  half, _, _ = build(cell, data_dir, data=data, half_precision=True)
  t, losses = interleaved_rounds({"float32": full, "bfloat16": half}, rounds, parts=True)
  med = {k: v["median_s"] for k, v in t.items()}
  return {
    "cell": cell,
    "dataset": c.dataset,
    "model": c.model,
    "clients_per_round": int(c.clients_per_round),
    "batch_size": int(c.batch_size),
    "rounds_timed": rounds,
    "seconds": {k: round(v, 4) for k, v in med.items()},
    "round_with_eval_speedup": round(med["float32"] / med["bfloat16"], 3),
    "train_speedup": round(med["float32/train"] / med["bfloat16/train"], 3),
    "eval_speedup": round(med["float32/eval"] / med["bfloat16/eval"], 3),
    "test_loss_float32": losses["float32"][-1],
    "test_loss_bfloat16": losses["bfloat16"][-1],
    "samples_s": {k: v["samples_s"] for k, v in t.items()},
    "parallelism": full.trainer.kind,
    "devices": jax.device_count(),
    "host": C.host_simd(),
    "machine": C.machine_info(),
  }


def compare_client_accuracy(cell: str, rounds: int, data_dir: str) -> dict:
  """Seconds of a round + its evaluation (as ``experiment.run`` with ``eval_every=1``) with
  and without the per-client pass over the local test splits, interleaved, same data."""
  sim_on, data, c = build(cell, data_dir, client_accuracy=True)
  sim_off, _, _ = build(cell, data_dir, client_accuracy=False, data=data)
  sims = {"client_accuracy": sim_on, "global_only": sim_off}
  t, losses = interleaved_rounds(sims, rounds)
  before, after = t["client_accuracy"]["median_s"], t["global_only"]["median_s"]
  return {
    "cell": cell,
    "dataset": c.dataset,
    "model": c.model,
    "local_test_examples": int(data.test.counts.sum()),
    "global_test_examples": int(len(data.test_y)),
    "rounds_timed": rounds,
    "round_with_eval_s_client_accuracy": round(before, 3),
    "round_with_eval_s_global_only": round(after, 3),
    "ratio": round(before / after, 3),
    "samples_s": {k: v["samples_s"] for k, v in t.items()},
    "same_test_losses": losses["client_accuracy"] == losses["global_only"],
    "parallelism": sim_on.trainer.kind,
    "devices": jax.device_count(),
    "machine": C.machine_info(),
  }


def measure(cell: str, rounds: int, data_dir: str) -> dict:
  t0 = time.perf_counter()
  sim, data, c = build(cell, data_dir)
  build_s = time.perf_counter() - t0
  state = sim.init(0)
  t0 = time.perf_counter()
  state, _ = sim.run_rounds(state, 1)
  jax.block_until_ready(state.params)
  first_s = time.perf_counter() - t0
  steps_before = float(state.useful_steps)
  t0 = time.perf_counter()
  state, _ = sim.run_rounds(state, rounds)
  jax.block_until_ready(state.params)
  train_s = (time.perf_counter() - t0) / rounds
  steps = (float(state.useful_steps) - steps_before) / rounds
  jax.block_until_ready(sim.evaluate(state))
  t0 = time.perf_counter()
  ev = sim.evaluate(state)
  jax.block_until_ready(ev)
  eval_s = time.perf_counter() - t0
  # rounds as experiment.run runs them with eval_every=1: one round, then its evaluation
  # (metrics to the host), round after round
  t0 = time.perf_counter()
  for _ in range(rounds):
    state, m = sim.run_rounds(state, 1)
    sim_lib.to_host(sim.evaluate(state))
    sim_lib.to_host(m)
  round_with_eval_s = (time.perf_counter() - t0) / rounds
  return {
    "cell": cell,
    "dataset": c.dataset,
    "model": c.model,
    "num_clients": int(data.num_clients),
    "clients_per_round": int(c.clients_per_round),
    "batch_size": int(c.batch_size),
    "train_examples": int(data.train.counts.sum()),
    "local_test_examples": int(data.test.counts.sum()),
    "global_test_examples": int(len(data.test_y)),
    "rounds_timed": rounds,
    "build_data_s": round(build_s, 2),
    "first_round_with_compile_s": round(first_s, 2),
    "train_s_per_round": round(train_s, 3),
    "local_steps_per_round": round(steps, 1),
    "train_ms_per_step": round(1000 * train_s / max(steps, 1.0), 2),
    "evaluate_s": round(eval_s, 3),
    "round_with_eval_s": round(round_with_eval_s, 3),
    "parallelism": sim.trainer.kind,
    "devices": jax.device_count(),
    "test_accuracy_after": round(float(ev["test_accuracy"]), 4),
    "machine": C.machine_info(),
  }


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--json", action="store_true", help="one JSON object per cell")
  p.add_argument("--cells", default=",".join(CELLS), help=f"any of {', '.join(CELLS)}")
  p.add_argument("--rounds", type=int, default=3, help="rounds timed after the first (>= 1)")
  p.add_argument("--data_dir", default="", help="IDX folder ('' = search the usual places)")
  p.add_argument(
    "--cpu_devices", type=int, default=0, help="expose this many CPU cores as JAX devices"
  )
  p.add_argument(
    "--client_accuracy",
    default="study",
    help="study (the cell's own setting), compare (with and without the per-client pass "
    "over the local test splits, side by side)",
  )
  p.add_argument(
    "--half_precision",
    action="store_true",
    help="each cell in float32 and under half_precision (bfloat16 compute over float32 "
    "params), side by side: the ratios and the host's SIMD flags",
  )
  a = p.parse_args(argv)
  cells = [s for s in a.cells.split(",") if s]
  bad = sorted(set(cells) - set(CELLS))
  if bad or not cells:
    p.error(f"--cells={a.cells!r}; allowed: any of {', '.join(CELLS)}")
  if a.rounds < 1:
    p.error(f"--rounds={a.rounds}; allowed: integers >= 1")
  if a.client_accuracy not in ("study", "compare"):
    p.error(f"--client_accuracy={a.client_accuracy!r}; allowed: study, compare")
  if a.cpu_devices:
    C.set_cpu_devices(a.cpu_devices)
  for cell in cells:
    if a.half_precision:
      record = compare_half_precision(cell, a.rounds, a.data_dir)
      line = (
        f"{cell}: bfloat16 / float32 speed-up: round + evaluation "
        f"x{record['round_with_eval_speedup']}, training x{record['train_speedup']}, "
        f"evaluation x{record['eval_speedup']}; host {record['host']}"
      )
    elif a.client_accuracy == "compare":
      record = compare_client_accuracy(cell, a.rounds, a.data_dir)
      line = (
        f"{cell}: round + evaluation {record['round_with_eval_s_client_accuracy']} s with "
        f"client accuracy, {record['round_with_eval_s_global_only']} s without "
        f"(x{record['ratio']}); same test losses: {record['same_test_losses']}"
      )
    else:
      record = measure(cell, a.rounds, a.data_dir)
      line = (
        f"{cell}: {record['train_s_per_round']} s/round training "
        f"({record['local_steps_per_round']} steps), evaluate {record['evaluate_s']} s, "
        f"round + evaluation {record['round_with_eval_s']} s, "
        f"first round with compile {record['first_round_with_compile_s']} s"
      )
    print(json.dumps(record) if a.json else line, flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())

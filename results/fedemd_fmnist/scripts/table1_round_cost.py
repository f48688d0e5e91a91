r"""Seconds per round of Table 1's methods beside Random, measured side by side in one process.

  python results/fedemd_fmnist/scripts/table1_round_cost.py --rounds=3 \
    [--data_dir=/usr/share/datasets/fashion-mnist] [--methods=random,tifl,fedfast,fedprox] \
    [--fedsgd_batch_sizes=128]   # e.g. 0,128: FedSGD padded to the largest client, and summed

The FedEMD study's default set-up on Fashion-MNIST (one exclusive Maverick owning 'Trouser', the
CNN, 2 CPU devices as the study's runs use), each cell built as ``experiments.fedemd`` builds it:
FedAvg cells of every listed method and Random's FedSGD cell (one per ``--fedsgd_batch_sizes``
entry: 0 = one batch of the largest client, every client padded to it; B > 0 = the full-batch
gradient added up over batches of B, the study's default). Each cell compiles and runs one round
first; then the timed rounds go round-robin (cell 1, cell 2, ..., cell 1, ...), so the machine's
noise falls on every cell alike. One evaluation (the global test set and the clients' local test
splits, as every round of the study) is timed per cell too.
Prints one JSON object per cell: the median seconds of a training round, of an evaluation,
their sum, and its ratio to Random's (FedAvg).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jax

jax.config.update("jax_num_cpu_devices", 2)

from experiments import fedemd  # noqa: E402
from experiments.configs import fedemd as fedemd_config  # noqa: E402
from fedjax_sel import experiment  # noqa: E402


def _block(tree):
  return jax.tree_util.tree_map(lambda x: x.block_until_ready(), tree)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--rounds", type=int, default=3, help="timed rounds per cell")
  p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
  p.add_argument("--methods", default="random,tifl,fedfast,fedprox")
  p.add_argument("--fedsgd", default="random", help="methods also timed under FedSGD")
  p.add_argument(
    "--fedsgd_batch_sizes", default="128", help="FedSGD's fedsgd_batch_size values to time"
  )
  a = p.parse_args()
  if a.rounds < 1:
    p.error(f"--rounds={a.rounds}; allowed: an integer >= 1")
  base = fedemd_config.get_config()
  base.maverick_classes = (1, 0, 2)
  base.scenarios = ("1_excl",)
  cells = [(m, "fedavg") for m in a.methods.split(",") if m]
  sizes = [int(b) for b in a.fedsgd_batch_sizes.split(",") if b]
  if any(b < 0 for b in sizes):
    p.error(f"--fedsgd_batch_sizes={a.fedsgd_batch_sizes}; allowed: integers >= 0")
  cells += [(m, f"fedsgd:{b}") for m in a.fedsgd.split(",") if m for b in sizes]
  data = None
  sims = {}
  for method, setup in cells:
    config = fedemd.prepare_config(base, data_dir=a.data_dir)
    config.aggregation_setup = setup.split(":")[0]
    if ":" in setup:
      config.fedsgd_batch_size = int(setup.split(":")[1])
    if data is None:
      data = fedemd.maverick_data(config, "1_excl")
    cfg = fedemd.cell_config(config, method, fedemd.max_client_examples(data))
    sim, _ = experiment.build(cfg, data)
    state = sim.init(0)
    t0 = time.perf_counter()
    state, _ = sim.run_rounds(state, 1)
    _block(state)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    _block(sim.evaluate(state))
    sims[method, setup] = {
      "name": f"{method} ({setup})",
      "sim": sim,
      "state": state,
      "train": [],
      "eval": [],
      "first": first,
    }
    sims[method, setup]["first_eval"] = time.perf_counter() - t0
    print(f"compiled {method} ({setup}): first round {first:.1f} s", file=sys.stderr, flush=True)
  for _ in range(a.rounds):
    for cell in sims.values():
      t0 = time.perf_counter()
      cell["state"], _ = cell["sim"].run_rounds(cell["state"], 1)
      _block(cell["state"])
      cell["train"].append(time.perf_counter() - t0)
      t0 = time.perf_counter()
      _block(cell["sim"].evaluate(cell["state"]))
      cell["eval"].append(time.perf_counter() - t0)
      print(
        f"{cell['name']}: round {cell['train'][-1]:.2f} s, evaluation {cell['eval'][-1]:.2f} s",
        file=sys.stderr,
        flush=True,
      )
  ref = None
  for (method, setup), cell in sims.items():
    train = statistics.median(cell["train"])
    ev = statistics.median(cell["eval"])
    total = train + ev
    ref = total if ref is None and (method, setup) == ("random", "fedavg") else ref
    print(
      json.dumps(
        {
          "method": method,
          "aggregation_setup": setup.split(":")[0],
          "fedsgd_batch_size": int(setup.split(":")[1]) if ":" in setup else None,
          "train_s_per_round": round(train, 3),
          "eval_s": round(ev, 3),
          "s_per_round": round(total, 3),
          "ratio_to_random_fedavg": round(total / ref, 3) if ref else None,
          "first_round_s_with_compile": round(cell["first"], 1),
          "timed_rounds": a.rounds,
        }
      ),
      flush=True,
    )


if __name__ == "__main__":
  main()

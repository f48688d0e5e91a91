r"""FedEMD Table 1: seconds per round of its methods beside Random, side by side in one process.

  python -m benchmarks.fedemd_round_cost --rounds=3 \
    [--data_dir=/usr/share/datasets/fashion-mnist] [--methods=random,tifl,fedfast,fedprox] \
    [--fedsgd_batch_sizes=128]   # e.g. 0,128: FedSGD padded to the largest client, and summed
  python -m benchmarks.fedemd_round_cost --quick   # digits + MLP, 1 round (smoke test)

The FedEMD study's default set-up on Fashion-MNIST (one exclusive Maverick owning 'Trouser', the
CNN, 2 CPU devices as the study's runs use: ``--cpu_devices``), each cell built as
``experiments.fedemd`` builds it: FedAvg cells of every listed method and Random's FedSGD cell
(one per ``--fedsgd_batch_sizes`` entry: 0 = one batch of the largest client, every client padded
to it; B > 0 = the full-batch gradient added up over batches of B, the study's default). Each
cell compiles and runs one round first; then the timed rounds go round-robin (cell 1, cell 2,
..., cell 1, ...), so the machine's noise falls on every cell alike. One evaluation (the global
test set and the clients' local test splits, as every round of the study) is timed per cell too.
Prints one JSON object per cell: the median seconds of a training round, of an evaluation,
their sum, and its ratio to Random's (FedAvg). The FedEMD page's "Seconds per round" table and
``results/fedemd_fmnist/fedsgd_batch_cost.jsonl`` (two runs) are its output.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from benchmarks import _common as C


def build_cells(args) -> dict:
  """{(method, setup): cell} with each cell's Simulation, its state after one round and that
  round's (compile included) and one evaluation's seconds; setup is ``fedavg`` or
  ``fedsgd:<batch size>``."""
  from experiments import fedemd
  from experiments.configs import fedemd as fedemd_config
  from fedjax_sel import experiment

  base = fedemd_config.get_config()
  base.maverick_classes = (1, 0, 2)
  base.scenarios = ("1_excl",)
  cells = [(m, "fedavg") for m in args.methods]
  cells += [(m, f"fedsgd:{b}") for m in args.fedsgd for b in args.fedsgd_batch_sizes]
  data = None
  sims = {}
  for method, setup in cells:
    config = fedemd.prepare_config(base, quick=args.quick, data_dir=args.data_dir)
    config.aggregation_setup = setup.split(":")[0]
    if ":" in setup:
      config.fedsgd_batch_size = int(setup.split(":")[1])
    if data is None:
      data = fedemd.maverick_data(config, "1_excl")
    cfg = fedemd.cell_config(config, method, fedemd.max_client_examples(data))
    sim, _ = experiment.build(cfg, data)
    state = sim.init(0)
    t0 = time.perf_counter()
    state, _ = C.block(sim.run_rounds(state, 1))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    C.block(sim.evaluate(state))
    sims[method, setup] = {
      "name": f"{method} ({setup})",
      "sim": sim,
      "state": state,
      "train": [],
      "eval": [],
      "first": first,
      "first_eval": time.perf_counter() - t0,
    }
    print(f"compiled {method} ({setup}): first round {first:.1f} s", file=sys.stderr, flush=True)
  return sims


def bench(args) -> list[dict]:
  """One record per cell (see the module's docstring), Random's FedAvg cell the reference."""
  sims = build_cells(args)
  for _ in range(args.rounds):
    for cell in sims.values():
      t0 = time.perf_counter()
      cell["state"], _ = C.block(cell["sim"].run_rounds(cell["state"], 1))
      cell["train"].append(time.perf_counter() - t0)
      t0 = time.perf_counter()
      C.block(cell["sim"].evaluate(cell["state"]))
      cell["eval"].append(time.perf_counter() - t0)
      print(
        f"{cell['name']}: round {cell['train'][-1]:.2f} s, evaluation {cell['eval'][-1]:.2f} s",
        file=sys.stderr,
        flush=True,
      )
  records, ref = [], None
  for (method, setup), cell in sims.items():
    train = statistics.median(cell["train"])
    ev = statistics.median(cell["eval"])
    total = train + ev
    ref = total if ref is None and (method, setup) == ("random", "fedavg") else ref
    records.append(
      {
        "method": method,
        "aggregation_setup": setup.split(":")[0],
        "fedsgd_batch_size": int(setup.split(":")[1]) if ":" in setup else None,
        "train_s_per_round": round(train, 3),
        "eval_s": round(ev, 3),
        "s_per_round": round(total, 3),
        "ratio_to_random_fedavg": round(total / ref, 3) if ref else None,
        "first_round_s_with_compile": round(cell["first"], 1),
        "timed_rounds": args.rounds,
      }
    )
  return records


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--rounds", type=int, default=3, help="timed rounds per cell")
  p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
  p.add_argument("--methods", default="random,tifl,fedfast,fedprox")
  p.add_argument("--fedsgd", default="random", help="methods also timed under FedSGD")
  p.add_argument(
    "--fedsgd_batch_sizes", default="128", help="FedSGD's fedsgd_batch_size values to time"
  )
  p.add_argument("--cpu_devices", type=int, default=2, help="expose this many CPU cores")
  p.add_argument("--quick", action="store_true", help="digits + MLP, 1 round (smoke test)")
  a = p.parse_args(argv)
  if a.rounds < 1:
    p.error(f"--rounds={a.rounds}; allowed: an integer >= 1")
  a.methods = [m for m in a.methods.split(",") if m]
  a.fedsgd = [m for m in a.fedsgd.split(",") if m]
  sizes = [b for b in a.fedsgd_batch_sizes.split(",") if b]
  if not all(b.isdigit() for b in sizes):
    p.error(f"--fedsgd_batch_sizes={a.fedsgd_batch_sizes}; allowed: integers >= 0")
  a.fedsgd_batch_sizes = [int(b) for b in sizes]
  if a.quick:
    a.rounds, a.data_dir = 1, ""
  return a


def main(argv=None) -> int:
  args = parse_args(argv)
  C.set_cpu_devices(args.cpu_devices)
  for record in bench(args):
    print(json.dumps(record), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())

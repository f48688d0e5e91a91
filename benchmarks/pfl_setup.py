r"""The pfl-research CIFAR-10 benchmark set-up: time per round and projected wall-clock.

  python -m benchmarks.pfl_setup --json
  python -m benchmarks.pfl_setup --json --quick

pfl-research (Granqvist et al. 2024, ``benchmarks/image_classification/configs/
baseline.yaml``) trains on CIFAR-10 split IID over users with a constant 50 images per
user (50,000 images -> 1,000 users), cohort 50, 1 local epoch, local batch 10, local
lr 0.1, FedAvg with central lr 1.0, 1,500 central iterations. We use random
CIFAR-10-shaped data (32x32x3, 10 classes; speed does not depend on pixel values) with
the same sizes, run full rounds of ``Simulation.run_rounds`` (uniform selection, idl
availability, fedavg) and report seconds per round and the projection to 1,500 rounds.

Models: ``cnn_cifar`` (ours, lax convolutions), the same with im2col convolutions
(``fedjax_sel.models.im2col.im2col_conv``; identical params and outputs) under the engine's
auto rule and under ``map``, and pfl-research's ``simple_cnn`` (3x3 conv 32, 3x3 conv 64,
2x2 max-pool, dense 128, dense 10; their dropout layers are left out) with im2col convs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import _common as C
from fedjax_sel import aggregation, availability, client, models, selection
from fedjax_sel.core import engine as engine_lib
from fedjax_sel.core import simulation as sim_lib
from fedjax_sel.data.federated import ClientSplit, FederatedData
from fedjax_sel.models.im2col import im2col_conv

VARIANTS = ("cnn_cifar", "cnn_cifar_im2col", "cnn_cifar_im2col_map", "pfl_simple_cnn_im2col")
PFL_ROUNDS = 1500


class PflSimpleCNN(nn.Module):
  """pfl-research's ``simple_cnn`` for 32x32x3 inputs (dropout omitted), im2col convs."""

  num_classes: int = 10

  @nn.compact
  def __call__(self, x):
    conv = lambda f: nn.Conv(f, (3, 3), padding="VALID", conv_general_dilated=im2col_conv)
    x = nn.relu(conv(32)(x))
    x = nn.relu(conv(64)(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(128)(x))
    return nn.Dense(self.num_classes)(x)


def make_dataset(num_clients: int, per_client: int, seed: int) -> FederatedData:
  data = C.make_data("cnn_cifar", num_clients, seed=seed, examples_per_client=per_client)
  train = ClientSplit(data.x, data.y, data.offsets, data.counts)
  test_n = min(1000, len(data.y))
  # no local test sets (zero counts must cover zero examples); a global test set of 1000
  zeros = np.zeros(num_clients, np.int32)
  test = ClientSplit(data.x[:0], data.y[:0], zeros, zeros)
  return FederatedData(
    train, test, data.x[:test_n], data.y[:test_n], 10, name="cifar10-shaped random"
  )


def make_variant_model(variant: str, dataset: FederatedData) -> models.Model:
  cd = C.CohortData(None, None, None, None, dataset.input_shape, dataset.num_classes)
  if variant == "cnn_cifar":
    return models.make("cnn_cifar", dataset.input_shape, dataset.num_classes, conv_impl="xla")
  if variant.startswith("cnn_cifar_im2col"):
    return C.make_model("cnn_cifar", cd, "im2col")
  module = PflSimpleCNN(dataset.num_classes)
  dummy = jnp.zeros((1, *dataset.input_shape), jnp.float32)
  return models.Model(
    lambda key: module.init(key, dummy)["params"],
    lambda params, x: module.apply({"params": params}, x),
    "pfl_simple_cnn",
    dataset.input_shape,
    dataset.num_classes,
    conv=True,
  )


def bench_variant(variant: str, dataset: FederatedData, args) -> dict:
  model = make_variant_model(variant, dataset)
  parallelism = "map" if variant.endswith("_map") else "auto"
  config = sim_lib.SimulationConfig(
    client_lr=0.1,
    lr_decay=1.0,
    server_lr=1.0,
    engine=engine_lib.EngineConfig(batch_size=10, local_epochs=1, parallelism=parallelism),
  )
  sim = sim_lib.Simulation(
    dataset,
    model,
    availability.make("idl"),
    selection.make("uniform", num_selected=args.clients_per_round),
    aggregation.make("fedavg"),
    client.make("sgd"),
    config,
  )
  state = sim.init(args.seed)
  t0 = time.perf_counter()
  state, _ = sim.run_rounds(state, 1)
  C.block(state)
  first_s = time.perf_counter() - t0
  samples = []
  for _ in range(args.rounds):
    t0 = time.perf_counter()
    state, _ = sim.run_rounds(state, 1)
    C.block(state)
    samples.append(time.perf_counter() - t0)
  per_round = float(np.median(samples))
  steps = args.clients_per_round * int(np.ceil(args.examples_per_client / 10))
  step_flops = C.flops_per_step(model, 10)
  return {
    "kind": "pfl_setup",
    "variant": variant,
    "parallelism": parallelism,
    "chunk_size": int(sim.trainer.chunk_size),
    "num_clients": args.num_clients,
    "clients_per_round": args.clients_per_round,
    "examples_per_client": args.examples_per_client,
    "local_epochs": 1,
    "batch_size": 10,
    "num_params": int(sum(x.size for x in jax.tree_util.tree_leaves(state.params))),
    "round_s": per_round,
    "round_samples_s": [round(s, 4) for s in samples],
    "first_round_s_with_compile": round(first_s, 3),
    "projected_1500_rounds_s": per_round * PFL_ROUNDS,
    "projected_1500_rounds_h": per_round * PFL_ROUNDS / 3600.0,
    "useful_gflops": steps * step_flops / per_round / 1e9,
    "machine": C.machine_info(),
  }


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--variants", default=",".join(VARIANTS))
  p.add_argument("--num_clients", type=int, default=1000)
  p.add_argument("--clients_per_round", type=int, default=50)
  p.add_argument("--examples_per_client", type=int, default=50)
  p.add_argument("--rounds", type=int, default=3, help="timed rounds per variant")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--quick", action="store_true")
  p.add_argument("--json", action="store_true")
  args = p.parse_args(argv)
  args.variants = [v for v in args.variants.split(",") if v]
  for v in args.variants:
    if v not in VARIANTS:
      raise SystemExit(f"unknown variant {v!r}; allowed: {', '.join(VARIANTS)}")
  if args.quick:
    args.num_clients, args.clients_per_round, args.examples_per_client, args.rounds = 8, 2, 10, 1
  return args


def main(argv=None) -> int:
  args = parse_args(argv)
  dataset = make_dataset(args.num_clients, args.examples_per_client, args.seed)
  for variant in args.variants:
    record = bench_variant(variant, dataset, args)
    if args.json:
      print(json.dumps(record), flush=True)
    else:
      print(
        f"{variant}: {record['round_s']:.3f} s/round, 1500 rounds ~ "
        f"{record['projected_1500_rounds_h']:.2f} h",
        flush=True,
      )
  return 0


if __name__ == "__main__":
  sys.exit(main())

r"""Per-device memory of a per-client-memory aggregator over 1, 2, 4 devices (issue 18).

  JAX_PLATFORMS=cpu python -m benchmarks.sharded_memory --json \
    --output_dir=runs/bench/sharded_memory

MIFA keeps one update per client: an [N, P] memory. For each device count D (a fresh
process with D CPU devices: one process with D devices compiles the same SPMD program as
D processes of one device), it builds the N-client simulation, places the state
(``Simulation.state_shardings``: the memory split over the devices along the client axis)
and reports XLA's memory analysis of one compiled round (per device: arguments, outputs,
temporaries) and the bytes of the MIFA memory that device 0 holds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys
import jax, numpy as np
from fedjax_sel import experiment
c = experiment.default_config()
c.num_clients, c.clients_per_round, c.examples_per_client = {n}, {m}, {examples}
c.aggregator, c.model = {aggregator!r}, "logreg"
sim, _ = experiment.build(c)
state = sim.init(0)
mem = jax.tree_util.tree_leaves(state.aggregation_state)
dev0 = jax.devices()[0]
held = sum(s.data.nbytes for a in mem for s in a.addressable_shards if s.device == dev0)
total = sum(a.nbytes for a in mem)
ma = sim.round_step.lower(state).compile().memory_analysis()
state, _ = sim.round_step(state)  # it runs, and the memory stays split
still = [
  str(getattr(a.sharding, "spec", "one device"))
  for a in jax.tree_util.tree_leaves(state.aggregation_state)
]
print(json.dumps(dict(
  devices=jax.device_count(), memory_total=total, memory_device0=held, specs=still,
  argument=ma.argument_size_in_bytes, output=ma.output_size_in_bytes,
  temp=ma.temp_size_in_bytes, alias=ma.alias_size_in_bytes,
)))
"""


def measure(devices: int, n: int, m: int, examples: int, aggregator: str) -> dict:
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES=str(devices))
  env.pop("XLA_FLAGS", None)
  code = CHILD.format(n=n, m=m, examples=examples, aggregator=aggregator)
  out = subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1800
  )
  if out.returncode:
    raise SystemExit(f"{devices} devices failed: {out.stderr[-2000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--num_clients", type=int, default=100_000)
  p.add_argument("--clients_per_round", type=int, default=1000)
  p.add_argument("--examples_per_client", type=int, default=10)
  p.add_argument("--aggregator", default="mifa")
  p.add_argument("--devices", default="1,2,4")
  p.add_argument("--json", action="store_true")
  p.add_argument("--output_dir", default="")
  args = p.parse_args(argv)
  rows = []
  for d in [int(x) for x in args.devices.split(",")]:
    r = measure(
      d, args.num_clients, args.clients_per_round, args.examples_per_client, args.aggregator
    )
    rows.append(r)
    mb = lambda b: f"{b / 2**20:,.1f}"
    row = (
      f"| {r['devices']} | {mb(r['memory_total'])} | {mb(r['memory_device0'])} | "
      f"{mb(r['argument'])} | {mb(r['output'])} | {mb(r['temp'])} | {r['specs'][0]} |"
    )
    # --json: stdout is the JSON alone (a script parses it); the rows go to stderr
    print(row, file=sys.stderr if args.json else sys.stdout, flush=True)
  if args.json:
    print(json.dumps(rows))
  if args.output_dir:
    os.makedirs(args.output_dir, exist_ok=True)
    with open(os.path.join(args.output_dir, "sharded_memory.json"), "w") as f:
      json.dump({"args": vars(args), "rows": rows}, f, indent=2)


if __name__ == "__main__":
  main()

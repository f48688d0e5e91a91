r"""K experiments as one vectorized program vs K sequential runs, side by side (issue 17).

  python -m benchmarks.batched_experiments --json                 # logreg and mlp, K = 1, 8, 64
  python -m benchmarks.batched_experiments --json --quick         # tiny settings (smoke test)
  python -m benchmarks.batched_experiments --json --models=mlp --ks=1,8,64,256 --rounds=200

Set-up: FedGS Table 2's Synthetic protocol (the paper's instance, 30 clients, 6 per round,
10 local steps of B = 10, lr 0.1 decayed 0.998, LN0.5 availability, uniform selection,
FedAvg), ``--rounds`` rounds evaluated every ``--eval_every``; K experiments = K seeds.

For each (model, K), in one process:

* ``sequential_s``: K runs one after another, each ``Simulation.run_rounds`` +
  ``evaluate`` per evaluation block, as ``experiment.run`` does, on one Simulation whose
  programs were compiled before (``sequential_compile_s``, paid once): the best case for
  sequential runs (the study binaries used to compile again for every run);
* ``batched_<loop>_s``: the K experiments as one ``BatchedSimulation.run_evals`` program,
  for each ``--loops`` (``map``: one after another inside the program, bit for bit;
  ``vmap``: vectorized), its compile in ``batched_<loop>_compile_s``;
* ``speedup_<loop>`` = sequential_s / batched_<loop>_s, and ``speedup_<loop>_with_compile``
  = (sequential_s + sequential_compile_s) / (batched_<loop>_s + batched_<loop>_compile_s);
* every experiment's sampling counts must be equal and its final test loss within 1e-5
  (``map``: in fact bit for bit) or ``--vmap_atol`` (``vmap``), or nothing is reported
  (``max_abs_diff_<loop>``). Why vmap needs a looser bound: XLA's batched kernels round
  differently (~1e-7 per op) and this protocol's step (lr 0.1 on Synthetic's unnormalised
  features) is not a contraction, so the difference grows over the rounds: with K = 8
  logreg, 100 rounds, the largest gap to ``map`` per evaluation goes 4e-7, 2e-7, 3e-5,
  7e-6, 1e-4, 3e-3, 6e-3, ... (1.0e-2 at K = 64); at lr 0.01 it stays below 5e-7 for all
  100 rounds.

Memory: ``memory_bytes`` is XLA's estimate for the batched program (arguments + outputs +
temporaries, ``Compiled.memory_analysis``); ``bytes_per_experiment`` its slope between the
two largest K, and ``largest_k_fits`` = (MemAvailable - the K-independent part) / slope.
With ``--check_k=N`` the batched program is also compiled and run for one block at K = N.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import _common as C
from fedjax_sel import experiment
from fedjax_sel.core import batch as batch_lib


def config(model: str, rounds: int, eval_every: int):
  c = experiment.default_config()
  c.synthetic_recipe = "fedgs"
  c.model = model
  c.num_clients, c.clients_per_round = 30, 6
  c.local_steps, c.batch_size = 10, 10
  c.client_lr, c.lr_decay = 0.1, 0.998
  c.availability, c.availability_hparams.beta = "ln", 0.5
  c.rounds, c.eval_every = rounds, eval_every
  return c


def _sequential(sim, seeds, num_evals, every):
  out = []
  for s in seeds:
    state = sim.init(s)
    losses = []
    for _ in range(num_evals):
      state, _ = sim.run_rounds(state, every)
      losses.append(sim.evaluate(state)["test_loss"])
    out.append((np.asarray(state.sampling_counts), float(losses[-1])))
  return out


def _mem_available() -> int | None:
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None


def _memory(compiled) -> int | None:
  try:
    m = compiled.memory_analysis()
    return int(
      m.argument_size_in_bytes
      + m.output_size_in_bytes
      + m.temp_size_in_bytes
      - m.alias_size_in_bytes
    )
  except Exception:  # noqa: BLE001 - not every backend reports it
    return None


def measure(
  model: str,
  ks: list[int],
  rounds: int,
  every: int,
  check_k: int = 0,
  loops=("map", "vmap"),
  vmap_atol: float = 5e-2,
) -> list[dict]:
  c = config(model, rounds, every)
  sim, _ = experiment.build(c)
  batched = {loop: batch_lib.BatchedSimulation(sim, loop=loop) for loop in loops}
  num_evals = rounds // every
  t = time.time()
  state0 = sim.init(0)
  # the jitted wrappers compile on their first call; warm them on one experiment
  s, _ = sim.run_rounds(sim.init(0), every)
  jax.block_until_ready(sim.evaluate(s))
  seq_compile = time.time() - t
  records = []
  mems = {}
  for k in ks:
    seeds = list(range(k))
    t = time.time()
    seq = _sequential(sim, seeds, num_evals, every)
    sequential_s = time.time() - t
    r = {
      "model": model,
      "k": k,
      "rounds": rounds,
      "eval_every": every,
      "num_params": int(sum(x.size for x in jax.tree_util.tree_leaves(state0.params))),
      "sequential_s": sequential_s,
      "sequential_compile_s": seq_compile,
      "ms_per_experiment_round_sequential": 1e3 * sequential_s / (k * rounds),
    }
    for loop, b in batched.items():
      t = time.time()
      states = b.init(seeds)
      program = b._run_evals.lower(sim.device_data, states, {}, num_evals, every).compile()
      compile_s = time.time() - t
      if loop == loops[0]:
        mems[k] = _memory(program)
      t = time.time()
      out_states, (_, ev) = program(sim.device_data, states, {})
      jax.block_until_ready(out_states)
      batched_s = time.time() - t
      counts = np.asarray(out_states.sampling_counts)
      # checked after timing, before reporting: the batched experiments are the sequential ones
      diff = max(abs(seq[i][1] - float(ev["test_loss"][i, -1])) for i in range(k))
      same_counts = all(np.array_equal(seq[i][0], counts[i]) for i in range(k))
      if not same_counts or diff > (1e-5 if loop == "map" else vmap_atol):
        raise SystemExit(f"{model} K={k} {loop}: batched != sequential ({same_counts}, {diff})")
      r.update(
        {
          f"batched_{loop}_s": batched_s,
          f"batched_{loop}_compile_s": compile_s,
          f"speedup_{loop}": sequential_s / batched_s,
          f"speedup_{loop}_with_compile": (sequential_s + seq_compile) / (batched_s + compile_s),
          f"ms_per_experiment_round_{loop}": 1e3 * batched_s / (k * rounds),
          f"max_abs_diff_{loop}": diff,
        }
      )
    r["memory_bytes"] = mems[k]
    r.update(C.machine_info())
    records.append(r)
  known = sorted(k for k, m in mems.items() if m is not None)
  avail = _mem_available()
  if len(known) >= 2 and avail:
    k1, k2 = known[-2], known[-1]
    slope = (mems[k2] - mems[k1]) / (k2 - k1)
    fixed = mems[k2] - slope * k2
    fits = int((avail - fixed) / slope) if slope > 0 else None
    for r in records:
      r.update(bytes_per_experiment=slope, mem_available_bytes=avail, largest_k_fits=fits)
  if check_k:
    b = batched[loops[0]]
    t = time.time()
    states = b.init(list(range(check_k)))
    out_states, _, _ = b.run_evals(states, {}, 1, every)
    jax.block_until_ready(out_states)
    records.append(
      {
        "model": model,
        "k": check_k,
        "loop": loops[0],
        "check_only": True,
        "seconds_one_block_with_compile": time.time() - t,
        "finite": bool(
          all(
            np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(out_states.params)
          )
        ),
        **C.machine_info(),
      }
    )
  return records


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--models", default="logreg,mlp")
  p.add_argument("--ks", default="1,8,64")
  p.add_argument("--rounds", type=int, default=100)
  p.add_argument("--eval_every", type=int, default=10)
  p.add_argument("--check_k", type=int, default=0)
  p.add_argument(
    "--vmap_atol", type=float, default=5e-2, help="largest final-loss gap allowed for vmap"
  )
  p.add_argument("--loops", default="map,vmap", help="batched loops to time (map, vmap)")
  p.add_argument("--quick", action="store_true", help="K = 1, 2; 4 rounds")
  p.add_argument("--json", action="store_true", help="one JSON object per line")
  a = p.parse_args(argv)
  ks = [int(k) for k in a.ks.split(",") if k.strip()]
  rounds, every = a.rounds, a.eval_every
  if a.quick:
    ks, rounds, every = [1, 2], 4, 2
  if rounds % every or any(k < 1 for k in ks):
    raise SystemExit(f"--rounds={rounds} must be a multiple of --eval_every={every}; K >= 1")
  for model in [m for m in a.models.split(",") if m]:
    loops = tuple(x for x in a.loops.split(",") if x)
    if not loops or any(x not in batch_lib.LOOPS for x in loops):
      raise SystemExit(f"--loops={a.loops!r}; allowed: {', '.join(batch_lib.LOOPS)}")
    for r in measure(model, ks, rounds, every, a.check_k, loops, a.vmap_atol):
      if a.json:
        print(json.dumps(r), flush=True)
      else:
        print(
          f"{r['model']:7s} K={r['k']:5d} "
          + (
            f"sequential {r['sequential_s']:.2f} s, "
            + ", ".join(
              f"{x} {r[f'batched_{x}_s']:.2f} s (x{r[f'speedup_{x}']:.1f}, compile "
              f"{r[f'batched_{x}_compile_s']:.1f} s)"
              for x in loops
            )
            if not r.get("check_only")
            else f"one block with compile {r['seconds_one_block_with_compile']:.1f} s"
          ),
          flush=True,
        )
  return 0


if __name__ == "__main__":
  jnp.zeros(())  # start the backend before argparse errors are printed
  sys.exit(main())

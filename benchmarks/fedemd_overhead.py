r"""FedEMD Table 2: the federator's computation per round of each method, relative to Random.

  python -m benchmarks.fedemd_overhead --json --data_dir=/usr/share/datasets/fashion-mnist \
    --cpu_devices=2 --rounds=6                      # Table 1's set-up (one exclusive Maverick)
  python -m benchmarks.fedemd_overhead --json --quick   # digits + MLP, 2 rounds (smoke test)
  python -m benchmarks.fedemd_overhead --json --data_dir=/usr/share/datasets/fashion-mnist \
    --cpu_devices=2 --rounds=5 --select_repeats=5 --methods=random,tifl,fedfast \
    --baselines=papers,authors    # TiFL, FedFast as the papers and as the authors' code read them

The methods run side by side in one process on the FedEMD study's Table 1 cell (50 clients,
5 a round, FedAvg, one exclusive Maverick owning 'Trouser'), each with its own
``Simulation`` and state (seed 0), compiled by one warm-up round, then ``--rounds`` rounds
interleaved (the order rotated each round, ``_common.interleaved_medians``), so machine load
falls on all alike. Two measures per method, both as ratios to Random's (``uniform``):

* ``round_s``: the median seconds of a whole round (selection, the cohort's local training,
  aggregation, the strategy's ``observe``, FedFast's update sketches). This is what the
  paper's emulator times ("the computation time at the federator" includes the training of
  the clients it picks: FedFast's overhead is explained by "always choose Maverick whose
  training takes long", FedProx's can only come from its local proximal term). It depends
  on which cohorts the few timed rounds drew, so ``steps`` gives each method's local steps
  over the timed rounds and ``step_s`` the seconds per local step (cohort-independent).
* ``select_s``: the median seconds of the selection step alone (``selection.select`` jitted
  on the state after the warm-up round), the federator's own decision; ``observe`` (SVB)
  runs inside the round and is not in it.

TiFL and FedFast have two readings (``experiments/fedemd.py --config.baselines``): the
papers' (default) and the authors' released code's (issue 69). ``--baselines=papers,authors``
runs each of them under both, as variants ``tifl`` / ``tifl/authors`` (a ``--methods`` entry
may also name ``tifl/authors`` itself). With ``tifl/authors`` the record also holds
``tifl_authors_measurement_s``: its per-round measurement alone (``common.local_model_values``,
the cohort's M local models on the global test set) against one global evaluation.

Prints one JSON object (``--json``) with the machine, the per-method seconds and the ratios.

References:
  Huang et al., FedEMD, App. A.7, Table 2 (TiFL 2.4, FedFast 1.76, FedProx 1.56, FedEMD
  1.04 relative to Random).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import numpy as np

from benchmarks import _common as C

METHODS = ("random", "tifl", "fedfast", "fedprox", "fedemd", "shapley")
PAPER = {"random": 1.0, "tifl": 2.4, "fedfast": 1.76, "fedprox": 1.56, "fedemd": 1.04}
BASELINES = ("papers", "authors")
TWO_READINGS = ("tifl", "fedfast")  # the methods whose reading --baselines picks


def split_variant(variant: str) -> tuple[str, str]:
  """``"tifl/authors"`` -> ``("tifl", "authors")``; a plain name is the papers' reading."""
  method, _, baselines = variant.partition("/")
  return method, baselines or "papers"


def build(method: str, config, dataset):
  """(Simulation, state after one round, its compile + round seconds) of one method."""
  from experiments import fedemd
  from fedjax_sel import experiment

  method, baselines = split_variant(method)
  config = config.copy_and_resolve_references()
  config.baselines = baselines
  cfg = fedemd.cell_config(config, method)
  cfg.seed = 0
  sim, _ = experiment.build(cfg, dataset)
  state = sim.init(0)
  t0 = time.perf_counter()
  state, _ = C.block(sim.run_rounds(state, 1))
  return sim, state, time.perf_counter() - t0


def select_fn(sim, state):
  """The selection step of round ``state.round`` alone, jitted (all clients available)."""
  avail = jax.numpy.ones((sim.num_clients,), bool)
  probs = avail.astype(jax.numpy.float32)
  key = jax.random.PRNGKey(1)

  @jax.jit
  def select(st):
    ctx = sim.context(st, probs)
    return sim.selection.select(st.selection_state, key, avail, st.round, ctx)[0].cohort

  return lambda: select(state)


def tifl_authors_measurement(sim, state, repeats: int) -> dict:
  """The authors' TiFL's per-round measurement alone (the cohort's M local models on the
  global test set, ``common.local_model_values``) against one global evaluation (seconds)."""
  from fedjax_sel.selection import common

  jnp = jax.numpy
  probs = jnp.ones((sim.num_clients,), jnp.float32)
  m = sim.selection.num_selected
  deltas = jax.tree_util.tree_map(lambda p: jnp.zeros((m,) + p.shape, p.dtype), state.params)
  local = jax.jit(lambda s, d: common.local_model_values(sim.context(s, probs), d))
  one = jax.jit(lambda s: sim.global_eval(s.params)[1])
  times = C.interleaved_medians(
    {"local_model_values(M)": lambda: local(state, deltas), "one global eval": lambda: one(state)},
    repeats,
  )
  return {k: v["median_s"] for k, v in times.items()}


def bench(args) -> dict:
  from experiments import fedemd
  from experiments.configs import fedemd as fedemd_config

  config = fedemd.prepare_config(
    fedemd_config.get_config(), quick=args.quick, data_dir=args.data_dir
  )
  config.maverick_classes = (1, 0, 2)
  dataset = fedemd.maverick_data(config, "1_excl")
  sims, states, compile_s = {}, {}, {}
  for m in args.methods:
    sims[m], states[m], compile_s[m] = build(m, config, dataset)

  samples = {m: [] for m in args.methods}
  steps = {m: 0.0 for m in args.methods}
  for r in range(args.rounds):
    order = args.methods[r % len(args.methods) :] + args.methods[: r % len(args.methods)]
    for m in order:
      before = float(states[m].useful_steps)
      t0 = time.perf_counter()
      states[m], _ = C.block(sims[m].run_rounds(states[m], 1))
      samples[m].append(time.perf_counter() - t0)
      steps[m] += float(states[m].useful_steps) - before
  select_times = C.interleaved_medians(
    {m: select_fn(sims[m], states[m]) for m in args.methods}, args.select_repeats
  )
  out = {}
  for m in args.methods:
    out[m] = {
      "round_s": float(np.median(samples[m])),
      "round_samples_s": [round(s, 4) for s in samples[m]],
      "steps": steps[m],
      "step_s": float(np.sum(samples[m]) / max(steps[m], 1.0)),
      "select_s": select_times[m]["median_s"],
      "compile_and_first_round_s": round(compile_s[m], 2),
    }
  base = out.get("random")
  ratios = {}
  if base is not None:
    for m in args.methods:
      ratios[m] = {
        k: round(out[m][k] / base[k], 3) for k in ("round_s", "step_s", "select_s") if base[k]
      }
  record = {
    "benchmark": "fedemd_overhead",
    "dataset": config.base.dataset,
    "model": config.base.model,
    "rounds_timed": args.rounds,
    "methods": out,
    "ratio_to_random": ratios,
    "paper_ratio": {
      m: PAPER[split_variant(m)[0]] for m in args.methods if split_variant(m)[0] in PAPER
    },
    "machine": C.machine_info(),
  }
  if "tifl/authors" in sims:
    record["tifl_authors_measurement_s"] = tifl_authors_measurement(
      sims["tifl/authors"], states["tifl/authors"], args.select_repeats
    )
  return record


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--data_dir", default="", help="Fashion-MNIST's IDX folder (default: digits)")
  p.add_argument("--methods", default="random,tifl,fedfast,fedprox,fedemd")
  p.add_argument(
    "--baselines",
    default="papers",
    help="TiFL's and FedFast's readings, any of papers, authors (variants tifl, tifl/authors)",
  )
  p.add_argument("--rounds", type=int, default=6, help="timed rounds per method")
  p.add_argument("--select_repeats", type=int, default=20)
  p.add_argument("--cpu_devices", type=int, default=0, help="expose this many CPU cores")
  p.add_argument("--quick", action="store_true", help="digits + MLP, 2 rounds (smoke test)")
  p.add_argument("--json", action="store_true")
  a = p.parse_args(argv)
  a.methods = [s for s in a.methods.split(",") if s]
  allowed = set(METHODS) | {f"{m}/{b}" for m in TWO_READINGS for b in BASELINES}
  if not a.methods or set(a.methods) - allowed:
    p.error(
      f"--methods={','.join(a.methods)!r}; allowed: any of {', '.join(METHODS)},"
      f" {', '.join(f'{m}/authors' for m in TWO_READINGS)}"
    )
  if "random" not in a.methods:
    p.error(f"--methods={','.join(a.methods)!r}; allowed: a list that includes random")
  baselines = [s for s in a.baselines.split(",") if s]
  if not baselines or set(baselines) - set(BASELINES):
    p.error(f"--baselines={a.baselines!r}; allowed: any of {', '.join(BASELINES)}")
  variants = []
  for m in a.methods:
    readings = baselines if m in TWO_READINGS else [None]
    for b in readings:
      v = m if b in (None, "papers") else f"{m}/{b}"
      v = v.removesuffix("/papers")
      if v not in variants:
        variants.append(v)
  a.methods = variants
  if a.rounds < 1 or a.select_repeats < 1:
    p.error(f"--rounds={a.rounds}, --select_repeats={a.select_repeats}; allowed: integers >= 1")
  if a.quick:
    a.rounds, a.select_repeats, a.data_dir = 2, 3, ""
  return a


def main(argv=None) -> int:
  args = parse_args(argv)
  if args.cpu_devices:
    C.set_cpu_devices(args.cpu_devices)
  record = bench(args)
  if args.json:
    print(json.dumps(record), flush=True)
  else:
    for m, r in record["ratio_to_random"].items():
      paper = record["paper_ratio"].get(m, "")
      print(
        f"{m}: round {r['round_s']}x, per step {r['step_s']}x, select {r['select_s']}x"
        f" (paper {paper})"
      )
  return 0


if __name__ == "__main__":
  sys.exit(main())

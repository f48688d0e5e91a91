"""Many experiments of one shape as one vectorized program (issue 17).

A paper's table is dozens of small runs that share a program's shape: the same data,
model, components and static settings, differing only in their seeds and in numeric
hyper-parameters (the client lr, FedGS's alpha, an availability model's beta, ...).
``BatchedSimulation`` runs K of them as one program: the per-experiment ``RoundState``s are
stacked along a leading experiment axis and the round (and the evaluation) runs over that
axis inside one compiled program (``lax.map`` or ``jax.vmap``, ``LOOPS``), with the data
unbatched (``in_axes=None``). With ``loop="map"`` each experiment's results are its own
sequential run's bit for bit; with ``"vmap"`` up to float rounding of the batched ops
(tests/core/test_batch.py).

Swept hyper-parameters enter the program as traced values ``hparams: {name: f32[K]}``; a
``make_parts(hp) -> {availability|selection|aggregator|client_lr: ...}`` callback builds each
experiment's components from its scalars inside the program (``Simulation.replace_parts``).
A component whose constructor cannot take a traced value fails while tracing
(``trace_error``); the caller then runs the distinct values as separate programs
(``fedjax_sel.experiment.run_batch`` does).

``run_evals(states, hparams, num_evals, eval_every)`` fuses ``num_evals`` blocks of
``eval_every`` rounds, each followed by the evaluation, into one dispatch, so a protocol that
evaluates every round (FedGS's) does not pay a host round trip per round.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.core.finite import tree_all_finite
from fedjax_sel.core.registry import check_count
from fedjax_sel.core.simulation import RoundState, Simulation, SimulationData

MakeParts = Callable[[dict], dict]
# "map" (the default): the experiments one after another inside the one program
# (lax.map): each computes exactly its sequential run's kernels, bit for bit, with one
# compile and one dispatch per chunk for all of them. On this CPU it is as fast as "vmap"
# for the papers' small models (benchmarks/batched_experiments.py). "vmap": one vectorized
# computation over the experiment axis (the choice for accelerators and large K); XLA's
# batched kernels round differently from the unbatched ones (~1e-7 per op), which training
# can grow to ~1e-2 over hundreds of rounds and a method that ranks clients by their
# losses (Power-of-Choice) into another trajectory.
LOOPS = ("vmap", "map")


def stack(trees: Sequence[Any]) -> Any:
  """Stacks pytrees of equal structure along a new leading (experiment) axis."""

  # on the host, then one transfer per leaf: jnp.stack of K device arrays dispatches per
  # operand and took 7.9 s for K = 1000 experiments (0.05 s this way)
  def leaf(*xs):
    if all(
      isinstance(x, jax.Array)
      and x.is_fully_addressable
      and not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
      for x in xs
    ):
      return jnp.asarray(np.stack(jax.device_get(list(xs))))
    return jnp.stack([jnp.asarray(x) for x in xs])

  return jax.tree_util.tree_map(leaf, *trees)


def unstack(tree: Any, index: int) -> Any:
  """Experiment ``index`` of a stacked pytree."""
  return jax.tree_util.tree_map(lambda x: x[index], tree)


def take(tree: Any, indices: Sequence[int]) -> Any:
  """The experiments ``indices`` of a stacked pytree, stacked."""
  idx = np.asarray(indices, np.int32)
  return jax.tree_util.tree_map(lambda x: x[idx], tree)


def put_back(tree: Any, indices: Sequence[int], part: Any) -> Any:
  """``tree`` with the experiments ``indices`` replaced by the stacked ``part``."""
  idx = np.asarray(indices, np.int32)
  return jax.tree_util.tree_map(lambda x, p: x.at[idx].set(p), tree, part)


class BatchedSimulation:
  """K experiments of one ``Simulation``'s shape as one vmapped program.

  Args:
    sim: the simulation (data, model, components, static config) every experiment shares.
    make_parts: builds an experiment's components from its hyper-parameters (a dict of
      traced f32[] scalars), returning keyword arguments of ``Simulation.replace_parts``;
      None when nothing but the seeds differs.

  Every function takes the stacked states (leading axis K) and ``hparams`` ({name: f32[K]},
  ``{}`` without ``make_parts``); the compiled programs take the data as an argument
  (``sim.device_data``), as ``Simulation``'s do.
  """

  def __init__(self, sim: Simulation, make_parts: MakeParts | None = None, loop: str = "map"):
    if loop not in LOOPS:
      raise ValueError(f"loop={loop!r}; allowed: {', '.join(LOOPS)}")
    self.sim = sim
    self.make_parts = make_parts
    self.loop = loop
    self._run_rounds = jax.jit(self._run_rounds_with, static_argnums=3, donate_argnums=1)
    self._run_evals = jax.jit(self._run_evals_with, static_argnums=(3, 4), donate_argnums=1)
    self._evaluate = jax.jit(self._evaluate_with)

  # ---------------------------------------------------------------- per experiment
  def _sim_for(self, hp: dict) -> Simulation:
    if self.make_parts is None or not hp:
      return self.sim
    return self.sim.replace_parts(**self.make_parts(hp))

  def init(
    self,
    seeds: Sequence[int],
    availability_seeds: Sequence[int | None] | None = None,
    parts: Sequence[dict] | None = None,
  ) -> RoundState:
    """The stacked initial states: experiment k is ``sim.init(seeds[k], availability_seeds[k])``
    with the components ``parts[k]`` (concrete values: an availability model's rates, for
    one, are drawn at init from its hyper-parameters)."""
    k = len(seeds)
    aseeds = list(availability_seeds) if availability_seeds is not None else [None] * k
    parts = list(parts) if parts is not None else [{}] * k
    if len(aseeds) != k or len(parts) != k:
      raise ValueError(
        f"{k} seeds, {len(aseeds)} availability seeds and {len(parts)} parts; allowed: "
        "equal lengths"
      )
    states = [
      (self.sim.replace_parts(**p) if p else self.sim).init(s, a)
      for s, p, a in zip(seeds, parts, aseeds)
    ]
    return stack(states)

  # ---------------------------------------------------------------- programs
  def _run_rounds_with(self, data: SimulationData, states, hparams, num_rounds: int):
    def one(state, hp):
      return self._sim_for(hp)._run_rounds_with(data, state, num_rounds)

    return self._over_experiments(one, states, hparams)

  def _evaluate_with(self, data: SimulationData, states, hparams):
    def one(state, hp):
      return self._sim_for(hp)._evaluate_with(data, state)

    return self._over_experiments(one, states, hparams)

  def _over_experiments(self, one, states, hparams):
    if self.loop == "map":
      return jax.lax.map(lambda args: one(*args), (states, hparams))
    return jax.vmap(one)(states, hparams)

  def _run_evals_with(self, data: SimulationData, states, hparams, num_evals, eval_every):
    def one(state, hp):
      sim = self._sim_for(hp)

      def block(s, _):
        s, round_metrics = sim._run_rounds_with(data, s, eval_every)
        ev = sim._evaluate_with(data, s)
        ev["params_finite"] = tree_all_finite(s.params)
        return s, (round_metrics, ev)

      return jax.lax.scan(block, state, None, length=num_evals)

    return self._over_experiments(one, states, hparams)

  def run_rounds(self, states, hparams: dict, num_rounds: int):
    """``num_rounds`` rounds of every experiment: (states, metrics {name: [K, rounds]})."""
    return self._run_rounds(self.sim.device_data, states, hparams, num_rounds)

  def evaluate(self, states, hparams: dict) -> dict:
    """Every experiment's evaluation (``Simulation.evaluate``), each value with a leading K."""
    return self._evaluate(self.sim.device_data, states, hparams)

  def run_evals(self, states, hparams: dict, num_evals: int, eval_every: int):
    """``num_evals`` x (``eval_every`` rounds, then evaluate), as one dispatch.

    Returns:
      (states, round_metrics {name: [K, num_evals, eval_every]}, evaluations {name:
      [K, num_evals]}; ``params_finite`` says whether the global model was finite).
    """
    num_evals = check_count("num_evals", num_evals, strict=True)
    eval_every = check_count("eval_every", eval_every, strict=True)
    states, (rm, ev) = self._run_evals(self.sim.device_data, states, hparams, num_evals, eval_every)
    return states, rm, ev

  def trace_error(self, states, hparams: dict) -> Exception | None:
    """None when the batched round traces with these hyper-parameters, else the error (a
    component that cannot take a traced value); nothing is compiled or run."""
    try:
      jax.eval_shape(
        lambda d, s, h: self._run_rounds_with(d, s, h, 1), self.sim.device_data, states, hparams
      )
    except Exception as e:  # noqa: BLE001 - any failure means: run these values apart
      return e
    return None

"""One experiment's run: rounds in blocks of ``eval_every``, an evaluation after each, a
checkpoint every ``checkpoint_every`` rounds, SIGINT/SIGTERM turned into a clean stop, resume
from the newest checkpoint, and a stop with results written when the model turns non-finite.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import ml_collections
import numpy as np
from absl import logging

from fedjax_sel import data
from fedjax_sel.core import checkpoint, distributed, peer_failure
from fedjax_sel.core import simulation as sim_lib
from fedjax_sel.experiment import ownership
from fedjax_sel.experiment.build import build, load_data
from fedjax_sel.experiment.config import (
  ConfigError,
  NonFiniteModelError,
  _check_same_config,
  _fingerprint,
  one_line,
  validate_config,
)
from fedjax_sel.experiment.outputs import _summary, _write_outputs, open_board, write_config
from fedjax_sel.metrics import results


class _StopRequested:
  """Turns SIGINT/SIGTERM into a flag checked between chunks of rounds.

  A second signal raises KeyboardInterrupt at once (the escape hatch).

  Python installs signal handlers only from the main thread, so the outermost one entered
  there holds the flag, and every one entered inside it, in any thread, reads that flag:
  a study that runs its programs in worker threads (``run_cells``, the atlas) enters one on
  its main thread around the pool, and each program's run then stops at its next chunk,
  checkpointed (without it, a worker thread's run had no handler and SIGTERM ended the
  process with no checkpoint). Entered in a worker thread with no outer one, it warns once:
  the signal then ends the process as Python's default does.
  """

  _installed: _StopRequested | None = None  # the main thread's one that holds the flag
  _warned = False

  def __init__(self):
    self._signum = None
    self._parent = None
    self._old = {}

  @property
  def signum(self):
    return self._parent.signum if self._parent is not None else self._signum

  def __enter__(self):
    if _StopRequested._installed is not None:
      self._parent = _StopRequested._installed
    elif threading.current_thread() is threading.main_thread():
      for s in (signal.SIGINT, signal.SIGTERM):
        self._old[s] = signal.signal(s, self._handle)
      _StopRequested._installed = self
    elif not _StopRequested._warned:
      _StopRequested._warned = True
      logging.warning(
        "a run started in a worker thread with no signal handler on the main thread: "
        "SIGINT/SIGTERM will end the process without a checkpoint (enter "
        "experiment.stop_on_signals() on the main thread around the threads)"
      )
    return self

  def _handle(self, signum, frame):
    del frame
    if self._signum is not None:  # a second signal: stop now
      raise KeyboardInterrupt
    self._signum = signum

  def __exit__(self, *exc):
    if _StopRequested._installed is self:
      _StopRequested._installed = None
    for s, h in self._old.items():
      signal.signal(s, h)
    return False


def stop_on_signals() -> _StopRequested:
  """A context manager: inside it, SIGINT/SIGTERM stop every run (``run``, ``run_batch``),
  in this thread or any other, at its next chunk of rounds with a checkpoint, raising
  ``Interrupted``; a second signal raises KeyboardInterrupt. Enter it on the main thread
  around a thread pool of runs; a run entered alone installs its own."""
  return _StopRequested()


def run_in_threads(fn: Callable[[Any], Any], items: list, workers: int) -> list:
  """``[fn(item) for item in items]``, ``workers`` at a time in threads, inside
  ``stop_on_signals()``: a SIGINT/SIGTERM stops the running ones at their next checkpointed
  round and starts none of the waiting ones; the first error (``Interrupted`` on a signal)
  is raised once every started call has ended."""
  with stop_on_signals() as stop, concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:

    def unless_stopped(item):  # a thread freed by a stopped run takes no waiting one
      if stop.signum is not None:
        raise Interrupted(stop.signum, 0)
      return fn(item)

    futures = [pool.submit(unless_stopped, item) for item in items]
    try:
      return [f.result() for f in futures]
    except BaseException:
      pool.shutdown(wait=True, cancel_futures=True)
      raise


class Interrupted(Exception):
  """Raised after a SIGINT/SIGTERM once the checkpoint and results are written."""

  def __init__(self, signum, round_index):
    super().__init__(f"interrupted by signal {signum} after round {round_index}")
    self.signum = signum
    self.round_index = round_index


def _params_finite(params) -> bool:
  leaves = jax.tree_util.tree_leaves(jax.device_get(params))
  return all(bool(np.all(np.isfinite(x))) for x in leaves)


class _Setup(NamedTuple):
  sim: sim_lib.Simulation
  dataset: data.FederatedData
  state: Any
  history: list
  seconds_before: float


def _setup(c, output_dir, resume, dataset, simulation) -> _Setup:
  """Builds the simulation and its state (restored when resuming); user errors -> ConfigError."""
  try:
    if not output_dir:
      raise ValueError("output_dir is empty; give a folder for the results (--output_dir)")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
      raise ValueError(f"output_dir={output_dir!r} is a file; allowed: a folder")
    validate_config(c)
    if simulation is not None:
      dataset = simulation.data
    elif dataset is None:
      dataset = load_data(c)
    data.federated.check_has_training_examples(dataset)
    # several processes: each loaded (or generated) the data itself; they must agree
    tr = dataset.train
    distributed.check_same_everywhere("the config", _fingerprint(c))
    distributed.check_same_everywhere(
      "the training data", tr.counts, tr.y, np.asarray(tr.x[:4096]), np.asarray(tr.x[-4096:])
    )
    sim = simulation if simulation is not None else build(c, dataset)[0]
    if distributed.is_primary():
      os.makedirs(output_dir, exist_ok=True)
    state = sim.init(c.seed, None if c.availability_seed < 0 else c.availability_seed)
    history: list[dict] = []
    seconds_before = 0.0
    metrics_path = os.path.join(output_dir, "metrics.jsonl")
    if resume and checkpoint.latest_round(output_dir) is not None:
      state, extra = checkpoint.restore(output_dir, state)
      _check_same_config(extra.get("config"), _fingerprint(c), output_dir)
      done = int(state.round)
      history = [r for r in results.read_jsonl(metrics_path) if r["round"] <= done]
      expected = extra.get("num_records")
      if expected is not None and len(history) != expected:
        logging.warning(
          "%s holds %d of the %d evaluations up to round %d; continuing with those",
          metrics_path,
          len(history),
          expected,
          done,
        )
      seconds_before = float(extra.get("seconds", 0.0))
      logging.info("resuming %s from round %d", output_dir, done)
    else:
      if resume:
        logging.info("--resume: no checkpoint in %s; starting at round 0", output_dir)
      elif checkpoint.all_rounds(output_dir) and distributed.is_primary():
        logging.warning("starting afresh in %s: removing its old checkpoints", output_dir)
        checkpoint.clear(output_dir)
  except (ValueError, TypeError, OSError) as e:
    if isinstance(e, (ConfigError, results.WriteError)) or peer_failure.is_peer_failure(e):
      raise
    raise ConfigError(one_line(e)) from e
  return _Setup(sim, dataset, state, history, seconds_before)


def run(
  c: ml_collections.ConfigDict,
  output_dir: str | None = None,
  *,
  resume: bool | None = None,
  progress: Callable[[int, int, dict], None] | None = None,
  dataset: data.FederatedData | None = None,
  write_plots: bool = True,
  simulation: sim_lib.Simulation | None = None,
) -> dict:
  """Runs one experiment and writes its results; returns the summary dict.

  The run survives interruptions: the whole state is checkpointed every
  ``checkpoint_every`` rounds (default: at every evaluation) and when SIGINT/SIGTERM
  arrives (then ``Interrupted`` is raised once the checkpoint and result files are
  written). With ``resume=True`` it continues from the newest checkpoint in
  ``output_dir`` and ends with exactly the metrics of an uninterrupted run (same device
  and backend). metrics.jsonl gets one complete line per evaluation (fsynced before the
  checkpoint that covers it); every other file is written atomically.

  Args:
    c: the config (see ``default_config``).
    output_dir: results folder (default ``c.output_dir``).
    resume: continue from the newest checkpoint (default ``c.resume``); the config must
      match the checkpoint's except for ``RESUMABLE_CHANGES``.
    progress: called as ``progress(round, rounds, record)`` after each evaluation.
    dataset: a prebuilt dataset (default: loaded from the config).
    write_plots: write curves.png.
    simulation: a prebuilt Simulation for this config (reuses its compiled functions).

  Raises:
    ConfigError: a user error (bad config, unreadable file, mismatching checkpoint).
    Interrupted: after SIGINT/SIGTERM (checkpoint and results written).
    NonFiniteModelError: the global model became non-finite (results written).
    results.WriteError: a results file could not be written (a full disk): its message
      names the file, what it is, the reason and the checkpoint ``--resume`` continues
      from. A checkpoint that cannot be written while an older one is kept is a warning
      and the run goes on (``checkpoint.save_kept``).
  """
  output_dir = output_dir or c.output_dir
  resume = c.resume if resume is None else resume
  try:
    # one writer per folder: another live process's folder ends here, before any write
    owned = [output_dir] if output_dir and not os.path.isfile(output_dir) else []
    with ownership.owned(owned, primary=distributed.is_primary()):
      return _run(c, output_dir, resume, progress, dataset, write_plots, simulation)
  except results.WriteError as e:
    if distributed.multiprocess():
      peer_failure.report(e)
    raise e.with_note(resume_note(output_dir)) from e
  except (ConfigError, Interrupted, NonFiniteModelError, KeyboardInterrupt):
    raise
  except Exception as e:  # several processes: a lost peer, or this process's own failure
    if distributed.multiprocess():
      peer_failure.report(e)  # one error: line in every process, exit code 2
    raise


def resume_note(output_dir: str) -> str:
  """What a run stopped by a write error leaves to continue from (its error line's end)."""
  try:
    kept = checkpoint.latest_round(output_dir)
  except OSError:
    kept = None
  if kept is None:
    return f"no checkpoint in {output_dir}: free space and run again"
  return f"checkpoint of round {kept} kept: free space, then add --resume"


def _run(c, output_dir, resume, progress, dataset, write_plots, simulation) -> dict:
  with _StopRequested() as stop, contextlib.ExitStack() as closing:
    setup = _setup(c, output_dir, resume, dataset, simulation)
    sim, dataset, state, history, seconds_before = setup
    peer_failure.set_run(output_dir)
    metrics_path = os.path.join(output_dir, "metrics.jsonl")
    # several processes (jax.distributed): process 0 writes the files, all run the rounds
    primary = distributed.is_primary()
    if primary:
      results.write_jsonl(metrics_path, history)
      write_config(output_dir, c, dataset.name)
    board = closing.enter_context(open_board(c, output_dir, history))
    fingerprint = _fingerprint(c)
    checkpoint_every = c.checkpoint_every or c.eval_every
    start = time.time()
    last_ckpt = int(state.round)

    def save(t, seconds):  # a failed write with an older checkpoint kept: a warning
      checkpoint.save_kept(
        output_dir,
        state,
        t,
        {"seconds": seconds, "num_records": len(history), "config": fingerprint},
      )

    def finish(**why):
      summary = _summary(history, state, sim, c, **why)
      if primary:
        _write_outputs(output_dir, history, summary, c, dataset.name, write_plots)
      return summary

    def stopping() -> bool:  # a signal in any process stops all of them at the same round
      return distributed.any_process(stop.signum is not None)

    def signum() -> int:  # the signal of another process: reported as SIGTERM
      return stop.signum or int(signal.SIGTERM)

    while int(state.round) < c.rounds:
      t0 = int(state.round)
      if stopping():  # arrived during setup or compilation
        save(t0, seconds_before + time.time() - start)
        finish(stopped=f"signal {signum()}")
        raise Interrupted(signum(), t0)
      n = min(c.eval_every - t0 % c.eval_every, c.rounds - t0)
      state, round_metrics = sim.run_rounds(state, n)
      t = int(state.round)
      ev = sim_lib.to_host(sim.evaluate(state))
      rm = sim_lib.to_host(round_metrics)
      record = {
        "round": t,
        "test_loss": ev["test_loss"],
        "test_accuracy": ev["test_accuracy"],
        "train_loss": float(np.mean(rm["train_loss"])),
        "seconds": seconds_before + time.time() - start,
        "num_available_mean": float(np.mean(rm["num_available"])),
        "num_selected_mean": float(np.mean(rm["num_selected"])),
      }
      record.update({k: v for k, v in ev.items() if k not in record})
      dropped = int(np.sum(rm["num_nonfinite"]))
      if dropped:
        logging.warning(
          "rounds %d-%d: %d non-finite client update(s) dropped from aggregation (%d so far)",
          t0 + 1,
          t,
          dropped,
          int(state.nonfinite_updates),
        )
      history.append(record)
      if primary:
        results.append_jsonl(metrics_path, record)
      board.write(record)
      if not _params_finite(state.params):
        finish(stopped="non-finite model")  # no checkpoint of a broken model
        raise NonFiniteModelError(t, output_dir)
      if progress is not None and primary:
        progress(t, c.rounds, record)
      stop_now = stopping()
      if t - last_ckpt >= checkpoint_every or t >= c.rounds or stop_now:
        save(t, record["seconds"])
        last_ckpt = t
      if stop_now and t < c.rounds:
        finish(stopped=f"signal {signum()}")
        raise Interrupted(signum(), t)
    return finish()

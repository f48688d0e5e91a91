"""Several experiments of one program shape as one compiled computation (``run_batch``)."""

from __future__ import annotations

import collections
import concurrent.futures
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging

from fedjax_sel import data
from fedjax_sel.core import batch as batch_lib
from fedjax_sel.core import checkpoint, distributed
from fedjax_sel.experiment import ownership
from fedjax_sel.experiment.build import build, load_data, make_components
from fedjax_sel.experiment.config import (
  ConfigError,
  NonFiniteModelError,
  _check_same_config,
  _fingerprint,
  one_line,
  validate_config,
)
from fedjax_sel.experiment.grouping import (
  BATCH_FREE,
  SWEEPABLE_FIELDS,
  SWEEPABLE_PARTS,
  _flat,
  _is_sweepable,
  _make_parts_fn,
  _swept,
  availability_round,
  batch_key,
)
from fedjax_sel.experiment.loop import Interrupted, _setup, _StopRequested
from fedjax_sel.experiment.outputs import (
  _append_lines,
  _summary,
  _write_outputs,
  open_board,
  write_config,
)
from fedjax_sel.metrics import results


def run_batch(
  configs: list[ml_collections.ConfigDict],
  output_dirs: list[str],
  *,
  resume: bool | None = None,
  progress: Callable[[int, int, dict], None] | None = None,
  dataset: data.FederatedData | None = None,
  write_plots: bool = True,
  loop: str = "map",
  checkpoint_dir: str | None = None,
) -> list[dict]:
  """Runs K experiments of one program shape as one vectorized computation (issue 17).

  The configs may differ only in ``BATCH_FREE`` fields (seeds, output folders) and in
  float hyper-parameters of the client lr, availability, selection and aggregator
  (``batch_key``); those become traced per-experiment values. Where a component cannot take
  a traced value, the distinct values run as separate programs (a logged note). Each
  experiment writes exactly what ``run`` writes to its own folder (config.json,
  metrics.jsonl, summary.json, curves.png, checkpoints/), with the same numbers up to float
  rounding (discrete outcomes identical), so any one of them can be continued alone by
  ``run(..., resume=True)``, and the batch by ``run_batch(..., resume=True)``. Blocks of
  ``eval_every`` rounds and their evaluations up to the next checkpoint run as one dispatch
  (``BatchedSimulation.run_evals``). ``seconds`` in the records is the batch's wall time.

  Args:
    configs: K configs (see ``default_config``).
    output_dirs: K distinct results folders.
    resume: continue every experiment from its newest checkpoint (default configs[0].resume).
    progress: ``progress(round, rounds, record)`` after each chunk, with experiment 0's
      last record.
    dataset: a prebuilt dataset (default: loaded once from configs[0]).
    write_plots: write each experiment's curves.png.
    loop: ``"map"`` (the experiments one after another inside the one program: bit for bit
      the sequential runs) or ``"vmap"`` (one vectorized computation: equal to float
      rounding, ~1e-7 per op, which training grows and a method that ranks clients by
      their losses, such as Power-of-Choice, can turn into another trajectory); see
      ``fedjax_sel.core.batch.LOOPS``.
    checkpoint_dir: None: each experiment checkpoints in its own folder (each can be
      continued alone by ``run``; K writes per checkpoint); a folder: one checkpoint of the
      whole batch there (one write per checkpoint whatever K; continued as this batch).

  Returns:
    The K summaries, in the order of ``configs``.

  Raises:
    ConfigError, Interrupted, NonFiniteModelError: as ``run`` (the last after every
      experiment has finished or stopped).
  """
  k_all = len(configs)
  try:
    if distributed.multiprocess():  # issue 18 shards one experiment's state, not a batch's
      raise ValueError(
        f"{k_all} batched experiments (--seeds) in a run of {jax.process_count()} processes; "
        "allowed: one process, or one multi-process run per experiment (--seed)"
      )
    if k_all < 1 or len(output_dirs) != k_all:
      raise ValueError(
        f"{k_all} configs and {len(output_dirs)} output_dirs; allowed: K >= 1 of each"
      )
    if loop not in batch_lib.LOOPS:
      raise ValueError(f"loop={loop!r}; allowed: {', '.join(batch_lib.LOOPS)}")
    if len({os.path.abspath(d) for d in output_dirs}) != k_all:
      raise ValueError(f"output_dirs {output_dirs} repeat a folder; allowed: distinct folders")
    keys = [batch_key(c) for c in configs]
    if len(set(keys)) > 1:
      bad = [".".join(p) for p in _swept(configs) if not _is_sweepable(p, _flat(configs[0]).get(p))]
      raise ValueError(
        f"configs differ in {bad}; allowed in one batch: {', '.join(BATCH_FREE)} and float "
        f"values of {', '.join(SWEEPABLE_FIELDS)} and the {', '.join(SWEEPABLE_PARTS)} "
        "hyper-parameters"
      )
    for c in configs:
      validate_config(c)
    concrete = [make_components(c) for c in configs]
  except (ValueError, TypeError) as e:
    raise ConfigError(one_line(e)) from e
  # one writer per folder: a folder another process is writing ends here, before any write
  with ownership.owned(output_dirs, primary=distributed.is_primary()):
    return _launch(
      configs, output_dirs, concrete, resume, progress, dataset, write_plots, loop, checkpoint_dir
    )


def _launch(
  configs, output_dirs, concrete, resume, progress, dataset, write_plots, loop, checkpoint_dir
):
  """``run_batch`` after its checks, with every folder owned by this process."""
  k_all = len(configs)
  c0 = configs[0]
  resume = c0.resume if resume is None else resume
  dataset = dataset if dataset is not None else load_data(c0)
  sim = build(c0, dataset)[0]
  swept = _swept(configs)
  flats = [_flat(c) for c in configs]
  avail_paths = [p for p in swept if p[0] in ("availability", "availability_hparams")]
  rounds_equal = len({results.dumps_line(availability_round(c)) for c in configs}) == 1
  init_only = bool(avail_paths) and rounds_equal
  if avail_paths and not rounds_equal and len({c.availability for c in configs}) > 1:
    # the models' rounds differ in floats and in kind: no traced value can stand for both
    return _run_apart(
      configs,
      output_dirs,
      avail_paths,
      resume,
      progress,
      dataset,
      write_plots,
      loop,
      checkpoint_dir,
    )
  if init_only:  # the round is the same program: each experiment's model serves its init
    swept = [p for p in swept if p not in avail_paths]
  sweep_names = [".".join(p) for p in swept]
  hparams = {".".join(p): np.asarray([f[p] for f in flats], np.float32) for p in swept}
  part_names = sorted({p[0][: -len("_hparams")] for p in swept if len(p) == 2})
  if init_only:
    part_names = sorted(set(part_names) | {"availability"})
  per_parts = [
    {
      **{part: getattr(comps, part) for part in part_names},
      **({"client_lr": c.client_lr} if ("client_lr",) in swept else {}),
    }
    for c, comps in zip(configs, concrete)
  ]
  bsim = batch_lib.BatchedSimulation(sim, _make_parts_fn(c0, swept) if swept else None, loop=loop)
  if swept:
    probe = batch_lib.stack([sim.init(0)] * k_all)
    err = bsim.trace_error(probe, hparams)
    if err is not None:
      logging.warning(
        "run_batch: %s cannot be traced (%s); running each distinct value as its own program",
        ", ".join(sweep_names),
        one_line(err)[:200],
      )
      return _run_apart(
        configs,
        output_dirs,
        swept,
        resume,
        progress,
        dataset,
        write_plots,
        loop,
        checkpoint_dir,
      )
  return _BatchRun(
    configs,
    output_dirs,
    resume,
    progress,
    dataset,
    write_plots,
    bsim,
    hparams,
    per_parts,
    checkpoint_dir,
  ).run()


def _run_apart(
  configs, output_dirs, paths, resume, progress, dataset, write_plots, loop, checkpoint_dir
):
  """``run_batch`` of each group of configs with equal values at ``paths`` (a batch
  checkpoint folder gets a subfolder per group)."""
  flats = [_flat(c) for c in configs]
  groups: dict[tuple, list[int]] = {}
  for i, f in enumerate(flats):
    groups.setdefault(tuple(repr(f.get(p)) for p in paths), []).append(i)
  out: list[dict | None] = [None] * len(configs)
  for g, idx in enumerate(groups.values()):
    summaries = run_batch(
      [configs[i] for i in idx],
      [output_dirs[i] for i in idx],
      resume=resume,
      progress=progress,
      dataset=dataset,
      write_plots=write_plots,
      loop=loop,
      checkpoint_dir=checkpoint_dir and os.path.join(checkpoint_dir, f"group{g}"),
    )
    for i, s in zip(idx, summaries):
      out[i] = s
  return out


class _BatchRun:
  """The loop of ``run_batch`` over one BatchedSimulation (see there)."""

  def __init__(
    self,
    configs,
    output_dirs,
    resume,
    progress,
    dataset,
    write_plots,
    bsim,
    hparams,
    parts,
    batch_dir=None,
  ):
    self.batch_dir = batch_dir
    self.configs, self.dirs = configs, output_dirs
    self.progress, self.dataset, self.write_plots = progress, dataset, write_plots
    self.bsim, self.hparams = bsim, hparams
    self.c0 = configs[0]
    self.k = len(configs)
    self.resume = resume
    self.parts = parts
    self.compiled: dict[tuple, Any] = {}
    self.compile_seconds = 0.0

  # ---------------------------------------------------------------- helpers
  def _hp(self, idx):
    return {n: v[np.asarray(idx)] for n, v in self.hparams.items()}

  def _program(self, idx, states, num_evals, block):
    key = (len(idx), num_evals, block)
    if key not in self.compiled:
      t = time.time()
      self.compiled[key] = self.bsim._run_evals.lower(
        self.bsim.sim.device_data, states, self._hp(idx), num_evals, block
      ).compile()
      self.compile_seconds += time.time() - t
    return self.compiled[key]

  def _io(self, fn, *args):
    """Runs file writes in order on one writer thread, overlapping the next chunk's rounds
    (metrics lines before the checkpoint that covers them, as ``run`` orders them)."""
    pending = self._pending  # FIFO: the writer finishes them in order
    while pending and (pending[0].done() or len(pending) > 4 * self.k + 8):
      pending.popleft().result()  # a writer's error surfaces here; bounded backlog
    pending.append(self._writer.submit(fn, *args))

  def _drain(self):
    while self._pending:
      self._pending.popleft().result()

  def _save(self, k, state_k, t, seconds):
    extra = {"seconds": seconds, "num_records": len(self.history[k]), "config": self.fps[k]}
    self._io(checkpoint.save_kept, self.dirs[k], state_k, t, extra)
    self.last_ckpt[k] = t

  def _save_batch(self, host, rounds, seconds, failed):
    """One checkpoint of the whole batch in ``batch_dir`` (named by its newest round)."""
    extra = {
      "seconds": [float(x) for x in seconds],
      "num_records": [len(h) for h in self.history],
      "configs": self.fps,
      "dirs": [os.path.abspath(d) for d in self.dirs],
      "failed": {str(k): int(t) for k, t in failed.items()},
    }
    live = [r for k, r in enumerate(rounds) if k not in failed] or rounds
    self._io(checkpoint.save_kept, self.batch_dir, host, max(live), extra)
    self.last_ckpt = list(rounds)

  def _restore_batch(self, states, before):
    """(states, seconds so far, failed) from the batch's newest checkpoint when resuming;
    the fresh ones otherwise (removing an old batch checkpoint)."""
    bdir = self.batch_dir
    if not self.resume or checkpoint.latest_round(bdir) is None:
      if self.resume:
        logging.info("--resume: no checkpoint in %s; starting at round 0", bdir)
      elif checkpoint.all_rounds(bdir):
        logging.warning("starting afresh in %s: removing its old checkpoints", bdir)
        checkpoint.clear(bdir)
      return states, before, {}
    try:
      states, extra = checkpoint.restore(bdir, states)
    except ValueError as e:
      raise ConfigError(f"--resume: {one_line(e)}; use a new output_dir") from e
    dirs = [os.path.abspath(d) for d in self.dirs]
    if extra.get("dirs") != dirs:
      raise ConfigError(
        f"--resume: the checkpoint in {bdir} is of the experiments {extra.get('dirs')}; "
        f"allowed: the same experiments ({dirs}), or a new output_dir"
      )
    for saved, now, d in zip(extra["configs"], self.fps, self.dirs):
      _check_same_config(saved, now, d)
    rounds = [int(r) for r in np.asarray(states.round)]
    for k, d in enumerate(self.dirs):
      path = os.path.join(d, "metrics.jsonl")
      self.history[k] = [r for r in results.read_jsonl(path) if r["round"] <= rounds[k]]
    logging.info("resuming the batch in %s from round %d", bdir, max(rounds))
    failed = {int(k): int(t) for k, t in extra.get("failed", {}).items()}
    return states, [float(x) for x in extra["seconds"]], failed

  def _finish(self, k, state_k, **why):
    self._drain()
    summary = _summary(self.history[k], state_k, self.bsim.sim, self.configs[k], **why)
    summary["compile_seconds_batch"] = self.compile_seconds
    summary["experiments_in_program"] = self.k  # K of the one program (not the client batch size)
    _write_outputs(
      self.dirs[k],
      self.history[k],
      summary,
      self.configs[k],
      self.dataset.name,
      self.write_plots,
    )
    self.summaries[k] = summary
    return summary

  # ---------------------------------------------------------------- the loop
  def run(self) -> list[dict]:
    self._writer = concurrent.futures.ThreadPoolExecutor(1)
    self._pending = collections.deque()
    self.boards = []  # TensorBoard writers, one per experiment (written on the writer thread)
    try:
      return self._run()
    finally:
      try:
        self._drain()
      finally:
        self._writer.shutdown()
        for board in self.boards:
          board.close()

  def _run(self) -> list[dict]:
    c0, k_all = self.c0, self.k
    bdir = self.batch_dir
    with _StopRequested() as stop:
      setups = [
        _setup(c, d, self.resume and not bdir, self.dataset, self.bsim.sim.replace_parts(**p))
        for c, d, p in zip(self.configs, self.dirs, self.parts)
      ]
      self.history = [s.history for s in setups]
      self.fps = [_fingerprint(c) for c in self.configs]
      before = [s.seconds_before for s in setups]
      states = batch_lib.stack([s.state for s in setups])
      del setups
      failed: dict[int, int] = {}
      if bdir:
        states, before, failed = self._restore_batch(states, before)
      rounds = [int(r) for r in np.asarray(states.round)]
      self.last_ckpt = list(rounds)
      self.summaries: list[dict | None] = [None] * k_all
      for c, d, h in zip(self.configs, self.dirs, self.history):
        results.write_jsonl(os.path.join(d, "metrics.jsonl"), h)
        write_config(d, c, self.dataset.name)
        self.boards.append(open_board(c, d, h))
      total, every = c0.rounds, c0.eval_every
      checkpoint_every = c0.checkpoint_every or every
      start = time.time()
      seconds = list(before)

      def active():
        return [k for k in range(k_all) if rounds[k] < total and k not in failed]

      while active():
        act = active()
        t0 = min(rounds[k] for k in act)
        idx = [k for k in act if rounds[k] == t0]
        if stop.signum is not None:
          host = jax.device_get(states)
          now = [before[k] + time.time() - start for k in range(k_all)]
          if bdir:
            self._save_batch(host, rounds, now, failed)
          for k in act:
            st = batch_lib.unstack(host, k)
            if not bdir:
              self._save(k, st, rounds[k], now[k])
            self._finish(k, st, stopped=f"signal {stop.signum}")
          raise Interrupted(stop.signum, t0)
        end = min([total] + [rounds[k] for k in act if rounds[k] > t0])
        to_eval = every - t0 % every
        if t0 % every or t0 + every > end:
          num_evals, block = 1, min(to_eval, end - t0)
        else:
          due = min(self.last_ckpt[k] for k in idx) + checkpoint_every
          due = -(-due // every) * every  # the first evaluation at which a checkpoint is due
          num_evals = max(1, (min(end, due) - t0) // every)
          block = every
        sub = batch_lib.take(states, idx) if len(idx) < k_all else states
        program = self._program(idx, sub, num_evals, block)
        chunk_start = time.time()
        sub, (rm, ev) = program(self.bsim.sim.device_data, sub, self._hp(idx))
        rm, ev = jax.device_get((rm, ev))
        chunk_end = time.time()
        states = sub if len(idx) == k_all else batch_lib.put_back(states, idx, sub)
        host = None
        batch_due, done_now = False, []
        for j, k in enumerate(idx):
          lines = []
          for i in range(num_evals):
            t = t0 + (i + 1) * block
            record = {
              "round": t,
              "test_loss": float(ev["test_loss"][j, i]),
              "test_accuracy": float(ev["test_accuracy"][j, i]),
              "train_loss": float(np.mean(np.asarray(rm["train_loss"][j, i], np.float64))),
              "seconds": before[k]
              + (chunk_start - start)
              + (chunk_end - chunk_start) * (i + 1) / num_evals,
              "num_available_mean": float(
                np.mean(np.asarray(rm["num_available"][j, i], np.float64))
              ),
              "num_selected_mean": float(np.mean(np.asarray(rm["num_selected"][j, i], np.float64))),
            }
            for name, v in ev.items():
              if name not in record and name != "params_finite":
                record[name] = np.asarray(v[j, i]).item()
            dropped = int(np.sum(rm["num_nonfinite"][j, i]))
            if dropped:
              logging.warning(
                "%s rounds %d-%d: %d non-finite client update(s) dropped from aggregation",
                self.dirs[k],
                t - block + 1,
                t,
                dropped,
              )
            lines.append(record)
            if not bool(ev["params_finite"][j, i]):
              failed[k] = t
              break
          self.history[k].extend(lines)
          self._io(_append_lines, os.path.join(self.dirs[k], "metrics.jsonl"), lines)
          self._io(_write_board, self.boards[k], lines)
          rounds[k] = t if k in failed else t0 + num_evals * block
          seconds[k] = lines[-1]["seconds"] if lines else seconds[k]
          if (
            k in failed or rounds[k] - self.last_ckpt[k] >= checkpoint_every or (rounds[k] >= total)
          ):
            if host is None:
              host = jax.device_get(states)
            st = batch_lib.unstack(host, k)
            if k in failed:  # no checkpoint of a broken model
              self._finish(k, st, stopped="non-finite model")
              continue
            if bdir:
              batch_due = True
            else:
              self._save(k, st, rounds[k], seconds[k])
            if rounds[k] >= total:
              done_now.append((k, st))
        if batch_due:
          self._save_batch(host, rounds, seconds, failed)
        for k, st in done_now:
          self._finish(k, st)
        if self.progress is not None and 0 in idx and self.history[0]:
          self.progress(rounds[0], total, self.history[0][-1])
        if stop.signum is not None and active():
          continue  # the top of the loop saves and raises
      host = None
      for k in range(k_all):
        if self.summaries[k] is None:  # complete before this call (resumed at its end)
          host = jax.device_get(states) if host is None else host
          self._finish(k, batch_lib.unstack(host, k))
      self._drain()
      if failed:
        k = min(failed)
        raise NonFiniteModelError(failed[k], self.dirs[k])
    return self.summaries


def _write_board(board, records: list[dict]) -> None:
  """Writes ``records`` to a TensorBoard writer, flushed once."""
  for r in records:
    board.write(r, flush=False)
  board.flush()

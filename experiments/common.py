"""Shared pieces of the per-paper binaries: common flags, seed sweeps, tables.

Each paper binary builds a set of named cells (one ml_collections config each), runs every
cell for every seed (each cell/seed has its own metrics.jsonl, summary.json and
checkpoints, and ``--resume`` skips finished ones), and reports mean +- std over seeds in
the paper's table shape. The seeds, and cells that differ only in float hyper-parameters,
run as one vectorized program each (``run_cells``, ``fedjax_sel.experiment.run_batch``).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import NoReturn

import jax
import ml_collections
import numpy as np
from absl import app, flags, logging
from ml_collections import config_flags

from experiments import grid, startup
from fedjax_sel import data, experiment
from fedjax_sel.core import distributed
from fedjax_sel.experiment import ownership
from fedjax_sel.metrics import results


def define_flags(default_seeds: str = "0,1,2") -> None:
  """--output_dir, --quick, --seeds, --rounds, --data_dir, --resume, --tensorboard,
  --half_precision (every paper binary),
  and the multi-process launch flags (``--coordinator_address``, ``--num_processes``,
  ``--process_id``, ...; the processes join before ``main`` runs)."""
  startup.import_from_argv()  # the user's registered methods, before anything reads them
  startup.define_flags()
  distributed.define_flags()
  grid.define_flags()
  app.call_after_init(_join_processes)
  flags.DEFINE_string("output_dir", "", "folder for tables (CSV, Markdown) and figures (PNG)")
  flags.DEFINE_bool("quick", False, "a few rounds on tiny settings (smoke test)")
  flags.DEFINE_string("seeds", default_seeds, "comma-separated seeds; results are mean +- std")
  flags.DEFINE_integer("rounds", 0, "override the paper's number of rounds (0 = paper's)")
  flags.DEFINE_string("data_dir", "", "TFDS data_dir for the real-dataset columns")
  flags.DEFINE_bool("resume", True, "skip finished cells and resume unfinished ones")
  flags.DEFINE_bool(
    "tensorboard",
    False,
    "also write TensorBoard event files into every cell's seed<k>/ folder (tensorboard "
    '--logdir <output_dir>); needs pip install -e ".[tensorboard]"',
  )
  flags.DEFINE_bool(
    "half_precision",
    False,
    "every cell's model computes in bfloat16 over float32 parameters (the config field "
    "half_precision; docs/performance.md, 'Half precision')",
  )


def half_precision_flag() -> bool:
  """``--half_precision`` of a study binary (False where the flag is not defined or parsed)."""
  f = flags.FLAGS
  return "half_precision" in f and f.is_parsed() and bool(f.half_precision)


def tensorboard_flag() -> bool:
  """``--tensorboard`` of a study binary (False where the flag is not defined or parsed)."""
  f = flags.FLAGS
  return "tensorboard" in f and f.is_parsed() and bool(f.tensorboard)


def _join_processes() -> None:
  try:
    distributed.initialize_from_flags()
  except distributed.LaunchError as e:
    distributed.fail(str(e), 2)


# ----------------------------------------------------------------------------- command line
# Every binary (``experiments.run`` and the study binaries) ends a bad flag or config value the
# same way: one line ``error: <the bad value and what is allowed>`` on stderr, exit code 2, no
# traceback. Its flags parse through ``parse_flags``; its own checks of flags and config run in
# ``checked`` before anything heavy; its run sits in ``user_errors``.


class UsageError(ValueError):
  """A bad command line or config; its message is one line (exit code 2)."""


def fail(message: str | BaseException, code: int = 2) -> NoReturn:
  """Prints ``error: <message on one line>`` on stderr and ends the process with ``code``
  (``distributed.fail``: at once in a multi-process run, whose peers would else wait)."""
  distributed.fail(experiment.one_line(message), code)


def parse_or_raise(argv: list[str]) -> list[str]:
  """Parses ``argv`` into ``flags.FLAGS`` (and ``--config.<field>`` overrides); returns the
  positional arguments.

  Raises:
    UsageError: a bad flag value, an unknown flag or config field, a config field given
      twice, a --config file that does not import; one line naming it.
  """
  for field, times in collections.Counter(_config_overrides(argv)).items():
    if times > 1:  # ml_collections joins a tuple field's repeated values (scalars: last wins)
      raise UsageError(
        f"--{field} is given {times} times; allowed: once (a tuple field given twice gets "
        "both values joined, not the last one)"
      )
  try:
    rest = flags.FLAGS(argv)
  except flags.Error as e:
    raise UsageError(experiment.one_line(e)) from None
  except Exception as e:  # a --config file that fails to import (SyntaxError, ...)
    raise _config_error(e, argv) from None
  startup.start()  # the compilation cache, before anything compiles
  return rest


def _config_overrides(argv: list[str]) -> list[str]:
  """The ``config.<field>`` names of the ``--config.<field>=...`` overrides in ``argv``."""
  return [a[2:].split("=", 1)[0] for a in argv if a.startswith("--config.")]


def _config_error(e: Exception, argv: list[str]) -> UsageError:
  """The one-line UsageError of an exception raised while ml_collections loads --config."""
  text = str(e).replace("\\'", "'")
  field = re.match(r"""["']*([\w.]+)["']*""", text)
  named = [
    p
    for p in _config_overrides(argv)
    if field and (p == f"config.{field.group(1)}" or p.endswith(f".{field.group(1)}"))
  ]
  if isinstance(e, (KeyError, AttributeError)) and named:
    # --config.<no such field>=...; ml_collections may add a "Did you mean" line
    hint = "".join(f"; {line.strip()}" for line in text.splitlines()[1:] if line.strip())
    return UsageError(f"--{named[0]}: no such field in the --config file's config{hint}")
  return UsageError(f"--config: {experiment.one_line(e)}")


def define_config_file(default: str, help_text: str):
  """``config_flags.DEFINE_config_file("config", default, help_text)`` of a study binary.

  With a default file, ml_collections loads it, and applies the ``--config.<field>=...``
  overrides of ``sys.argv``, while defining the flag: a bad override (no such field, a value
  of the wrong type) ends in one ``error:`` line, exit code 2, as at ``parse_flags``.
  """
  try:
    return config_flags.DEFINE_config_file("config", default, help_text)
  except flags.Error as e:
    fail(e, 2)
  except Exception as e:  # a config file that fails to import, an unknown field
    fail(_config_error(e, sys.argv), 2)


def parse_flags(argv: list[str]) -> list[str]:
  """The ``flags_parser`` of the binaries (``app.run(main, flags_parser=parse_flags)``): a bad
  flag or ``--config.<field>`` value ends in one ``error:`` line, exit code 2."""
  try:
    return parse_or_raise(argv)
  except UsageError as e:
    fail(e, 2)


def check_arguments(argv: list[str]) -> None:
  """UsageError for positional arguments (the binaries take ``--flag=value`` only)."""
  if len(argv) > 1:
    raise UsageError(f"unexpected arguments {argv[1:]}; allowed: --flag=value only")


def checked(check: Callable[..., object], *args, **kwargs):
  """``check(*args, **kwargs)``: a binary's checks of its flags and config, run before
  anything heavy. A ValueError or TypeError (a bad value: the study's own checks,
  ``experiment.validate_config``, a component's constructor) or an ``app.UsageError`` ends
  the process with one ``error:`` line and exit code 2. Only this up-front path turns
  exceptions into usage errors; one raised later, mid-run, keeps its traceback."""
  try:
    grid.check_flags()
    return check(*args, **kwargs)
  except (ValueError, TypeError, app.UsageError) as e:
    fail(e, 2)


def validate_cells(
  configs: Iterable[ml_collections.ConfigDict],
  seeds: list[int],
  availability_seed_per_seed: bool = False,
) -> None:
  """The checks ``run_cells`` (``experiment.run_batch``) makes of every (cell, seed) config,
  made up front: ``experiment.validate_config`` and the components' constructors.

  Raises:
    ValueError: the first bad value, named with what is allowed.
  """
  for config in configs:
    for seed in seeds:
      experiment.validate_config(seed_config(config, seed, availability_seed_per_seed))
    experiment.make_components(config)


@contextlib.contextmanager
def user_errors(*extra: type[BaseException]) -> Iterator[None]:
  """Around a study's run: the user errors found only once it runs (``experiment.ConfigError``:
  a folder holding another config's checkpoint, an unreadable file ...; a missing dataset,
  ``data.DatasetNotFoundError``; and ``extra``) end in one ``error:`` line, exit code 2.
  A file that could not be written (``results.WriteError``: a full disk) ends in one
  ``error:`` line naming it, exit code 1. Any other exception is a bug and keeps its
  traceback."""
  try:
    yield
  except grid.PlanReady:  # --plan: the runs are listed, nothing trains
    grid.print_plan()
    sys.exit(0)
  except (experiment.ConfigError, data.DatasetNotFoundError, *extra) as e:
    fail(e, 2)
  except results.WriteError as e:
    fail(e, 1)
  except experiment.Interrupted as e:  # SIGINT / SIGTERM: the runs checkpointed, one line
    print(f"{e}; the checkpoints are kept (the same command continues them)", file=sys.stderr)
    sys.exit(128 + e.signum)
  except KeyboardInterrupt:  # a second signal: no wait for the running chunks' checkpoints
    print(
      "stopped at once by a second signal; the newest checkpoints are kept (the same command "
      "continues from them)",
      file=sys.stderr,
    )
    sys.exit(130)
  if grid.planning():  # every run of the command has finished
    grid.print_plan()
    sys.exit(0)
  if grid.lane() is None:  # the lanes' parent (or the one process) keeps the tables
    grid.collect_tables()


def start_lanes(output_dir: str) -> None:
  """``--lanes=N`` (N > 1): runs the command in N lanes (``grid.run_lanes``) and returns
  once they have all ended well, so the caller reads the runs back and writes the tables."""
  if flags.FLAGS.lanes > 1 and grid.lane() is None and not grid.planning():
    grid.run_lanes(output_dir)


TINY_ENV = "FEDJAX_SEL_TINY"  # tests: every study binary at its smallest (--quick and less)


def define_study_flags(default_config: str) -> None:
  """The flags of a study binary with a ``--config`` file: ``define_flags`` and the config."""
  define_flags(default_seeds="0,1,2")
  define_config_file(default_config, "study config (ml_collections)")


def check_study(
  argv: list[str],
  prepare_config: Callable[..., ml_collections.ConfigDict],
  cell_configs: Callable[[ml_collections.ConfigDict], list[ml_collections.ConfigDict]],
) -> tuple[ml_collections.ConfigDict, list[int]]:
  """A study binary's flags and config, checked before anything runs: ``(config, seeds)``.

  ``prepare_config(config, quick=, rounds=, data_dir=)`` applies the study's own checks;
  ``cell_configs(config)`` gives every cell's experiment config, each then checked for every
  seed as ``run_cells`` would check it.

  Raises:
    ValueError: a bad value, named with what is allowed.
  """
  f = flags.FLAGS
  check_arguments(argv)
  quick = f.quick or bool(os.environ.get(TINY_ENV))
  seeds = parse_seeds(f.seeds)
  if quick and not f["seeds"].present:
    seeds = seeds[:1]
  config = prepare_config(f.config, quick=quick, rounds=f.rounds, data_dir=f.data_dir)
  validate_cells(cell_configs(config), seeds)
  return config, seeds


def study_main(argv: list[str], check: Callable, run_study: Callable, default_output: str):
  """The ``main`` of a study binary: checks (one ``error:`` line on bad input), runs
  ``run_study(config, output_dir, seeds, resume=)`` and prints its table and figures."""
  config, seeds = checked(check, argv)
  f = flags.FLAGS
  start_lanes(f.output_dir or default_output)
  with user_errors():
    out = run_study(config, f.output_dir or default_output, seeds, resume=f.resume)
  print(out["markdown"])
  print(f"figures: {', '.join(out['figures'])}")
  logging.info("done")


def parse_seeds(text: str) -> list[int]:
  try:
    seeds = [int(s) for s in text.split(",") if s.strip()]
  except ValueError:
    raise ValueError(f"--seeds={text!r} must be comma-separated integers, e.g. 0,1,2") from None
  if not seeds:
    raise ValueError(f"--seeds={text!r} is empty; give at least one seed")
  return seeds


def seed_config(
  config: ml_collections.ConfigDict, seed: int, availability_seed_per_seed: bool = False
) -> ml_collections.ConfigDict:
  """A copy of ``config`` for one seed (see ``run_cell``)."""
  c = ml_collections.ConfigDict(config.to_dict())
  c.seed = seed
  if half_precision_flag():
    c.half_precision = True
  if availability_seed_per_seed:
    if config.availability_seed < 0:
      raise ValueError(
        f"availability_seed={config.availability_seed} with availability_seed_per_seed; "
        "allowed: availability_seed >= 0"
      )
    c.availability_seed = config.availability_seed + seed
  return c


RESULT_FILES = grid.RESULT_FILES  # a run as results/ keeps it


def run_cell(
  config: ml_collections.ConfigDict,
  output_dir: str,
  seeds: list[int],
  dataset_fn: Callable[[ml_collections.ConfigDict], object] | None = None,
  resume: bool = True,
  availability_seed_per_seed: bool = False,
) -> list[tuple[dict, list[dict]]]:
  """Runs one cell for every seed; returns ``[(summary, metrics history)]`` per seed.

  A finished seed (summary.json with ``complete``) is read back, not rerun. With
  ``availability_seed_per_seed``, seed s draws its availability from the config's
  ``availability_seed + s`` (a stream of its own, the same for every method of a seed);
  otherwise every seed shares the config's availability seed. The seeds run as one
  batched program (``run_cells``).
  """
  return run_cells(
    {"cell": (config, output_dir)}, seeds, dataset_fn, resume, availability_seed_per_seed
  )["cell"]


def run_named_cells(
  cfgs: dict[str, ml_collections.ConfigDict],
  output_dir: str,
  seeds: list[int],
  dataset_fn: Callable[[ml_collections.ConfigDict], object] | None = None,
  resume: bool = True,
) -> dict[str, list[tuple[dict, list[dict]]]]:
  """:func:`run_cells` with each cell ``name`` in ``output_dir/cells/<name>/``."""
  cells = {name: (c, os.path.join(output_dir, "cells", name)) for name, c in cfgs.items()}
  return run_cells(cells, seeds, dataset_fn=dataset_fn, resume=resume)


def run_cells(
  cells: dict[str, tuple[ml_collections.ConfigDict, str]],
  seeds: list[int],
  dataset_fn: Callable[[ml_collections.ConfigDict], object] | None = None,
  resume: bool = True,
  availability_seed_per_seed: bool = False,
  workers: int | None = None,
  loop: str = "map",
  order: str = "cell",
  cell_seeds: dict[str, Iterable[int]] | None = None,
) -> dict[str, list[tuple[dict, list[dict]]]]:
  """Runs every cell ``{name: (config, folder)}`` for every seed, as few programs as can be.

  ``order`` is the study's order of its runs, which ``--plan`` lists and ``--lanes`` takes
  them in: ``"cell"`` (each cell's seeds, cell after cell) or ``"seed"`` (every cell's first
  seed, then every cell's second, ...: a grid stopped early has every cell once).
  ``cell_seeds``: a cell named there runs only those of ``seeds`` (its list in the result
  holds those only).

  Each (cell, seed) writes under ``folder/seed<k>/`` exactly what ``run_cell`` always wrote.
  The unfinished ones are grouped by ``experiment.batch_groups`` (same program shape and the
  same dataset object): seeds, and cells that differ only in float hyper-parameters (e.g.
  FedGS's alpha, an availability model's beta, the client lr), run as one program each
  (``experiment.run_batch``). With ``loop="map"`` (the default) the experiments of a program
  run one after another inside it: bit for bit one run per cell and seed, as the study
  binaries ran before (``"vmap"``: vectorized, equal up to float rounding). ``workers``
  programs run at once in threads (compilation of one overlaps the rounds of another; each
  program's numbers do not depend on it); None picks ``default_workers()``.

  Returns:
    {name: [(summary, metrics history)] in the order of ``seeds``}.
  """
  todo = []  # (name, seed index, config, folder, dataset)
  out: dict[str, list] = {name: [None] * len(seeds) for name in cells}
  noted = []  # grid.Run of every (cell, seed): --plan lists them
  if order not in RUN_ORDERS:
    raise ValueError(f"order={order!r}; allowed: {', '.join(RUN_ORDERS)}")
  pairs = [(name, i) for name in cells for i in range(len(seeds))]
  if order == "seed":
    pairs.sort(key=lambda p: p[1])  # stable: the cells' order within a seed
  skipped = set()
  for name, i in pairs:
    config, output_dir = cells[name]
    seed = seeds[i]
    if cell_seeds is not None and name in cell_seeds and seed not in set(cell_seeds[name]):
      skipped.add((name, i))
      continue
    c = seed_config(config, seed, availability_seed_per_seed)
    if tensorboard_flag():
      c.tensorboard = True
    folder = os.path.join(output_dir, f"seed{seed}")
    grid.start(folder)
    summary = grid.read_finished(folder, c.rounds, c.get("half_precision", False), c.to_dict())
    noted.append(grid.Run(name, seed, folder, int(c.rounds), summary if resume else None))
    if resume and summary is not None:
      out[name][i] = (summary, results.read_jsonl(os.path.join(folder, "metrics.jsonl")))
      if not grid.planning():
        grid.collect_run(folder, f"{name} seed {seed}")  # finished earlier, not yet kept
      continue
    dataset = dataset_fn(c) if dataset_fn is not None else None
    todo.append((name, i, c, folder, dataset))
  if grid.planning():
    grid.note(noted)  # stops the study at the first part with a run to do

  def run_one(members):
    logging.info(
      "%d experiment(s) as one program: %s",
      len(members),
      ", ".join(f"{m[0]} seed {m[2].seed}" for m in members),
    )
    experiment.run_batch(
      [m[2] for m in members],
      [m[3] for m in members],
      resume=resume,
      dataset=members[0][4],
      write_plots=False,
      loop=loop,
      progress=progress_logger(f"{members[0][0]} seed {members[0][2].seed}", len(members)),
    )
    for m in members:
      grid.collect_run(m[3], f"{m[0]} seed {m[2].seed}")

  if grid.lane() is not None:
    _run_in_lane(todo, out, run_one)
    return _without(out, skipped)
  groups: dict[int, list[int]] = {}
  for j, t in enumerate(todo):
    groups.setdefault(id(t[4]), []).append(j)
  batches = []
  for same_data in groups.values():
    configs = [todo[j][2] for j in same_data]
    batches += [[todo[same_data[g]] for g in idx] for idx in experiment.batch_groups(configs)]
  # Largest first, two at a time: one program compiles (one core) while another runs.
  batches.sort(key=len, reverse=True)
  if workers is None:
    workers = default_workers(jax.device_count())
  workers = max(1, min(int(workers), len(batches)))
  if workers == 1:
    for members in batches:
      run_one(members)
  else:
    experiment.run_in_threads(run_one, batches, workers)
  for members in batches:
    for name, i, _, folder, _ in members:
      out[name][i] = _read_run(folder)
  return _without(out, skipped)


RUN_ORDERS = ("cell", "seed")


def _without(out: dict, skipped: set) -> dict:
  """``run_cells``'s result less the (cell, seed index) pairs ``cell_seeds`` left out."""
  return {n: [r for i, r in enumerate(rs) if (n, i) not in skipped] for n, rs in out.items()}


def _read_run(folder: str) -> tuple[dict, list[dict]]:
  with open(os.path.join(folder, "summary.json")) as f:
    summary = json.load(f)
  return summary, results.read_jsonl(os.path.join(folder, "metrics.jsonl"))


def _run_in_lane(todo: list, out: dict, run_one: Callable) -> None:
  """``run_cells`` in a lane of ``--lanes``: each run of ``todo`` in the study's order that
  no other process owns is claimed and run as its own program; then the runs the other
  lanes hold are waited for (the study's tables, and a later part, read them), and one whose
  lane died unfinished is taken over (it resumes from its checkpoint)."""
  left = list(todo)
  while left:
    held = []
    for t in left:
      name, i, c, folder, _ = t
      precision = c.get("half_precision", False)
      if grid.read_finished(folder, c.rounds, precision) is None:
        if not grid.claim(folder):
          held.append(t)
          continue
        try:
          if grid.read_finished(folder, c.rounds, precision) is None:
            logging.info("lane run: %s seed %d", name, c.seed)
            run_one([t])
        finally:
          ownership.release(folder)
      out[name][i] = _read_run(folder)
    left = []
    for t in held:
      name, i, c, folder, _ = t
      run = grid.Run(name, int(c.seed), folder, int(c.rounds))
      if grid.wait_for(run, c.get("half_precision", False)) is None:
        logging.warning("lane: %s seed %d was left unfinished; taking it over", name, c.seed)
        left.append(t)
      else:
        out[name][i] = _read_run(folder)


def default_workers(num_devices: int) -> int:
  """How many programs ``run_cells`` runs at once: 2 on one device, 1 on a mesh.

  On one device two programs overlap well (one compiles while the other runs). On a mesh
  (``--cpu_devices=2``) every program's collectives wait for all devices, and a device busy
  with the other program's chunk (up to a checkpoint's worth of rounds in one dispatch)
  holds them: measured on the FedEMD Fashion-MNIST study, the Random program made no
  progress for over an hour beside the FedEMD program (BUILD_NOTES, issue 15).
  """
  return 2 if int(num_devices) <= 1 else 1


def progress_logger(label: str, size: int = 1) -> Callable[[int, int, dict], None]:
  """A ``progress`` callback for ``experiment.run_batch`` that logs one line per chunk.

  A study binary runs for minutes to hours; each program reports ``label`` (its first
  experiment), how many experiments it runs, the round reached, the wall time since this
  callback was made, an estimate of the time left, and the last test accuracy.
  """
  start = time.monotonic()
  first: list[tuple[int, float]] = []  # (round, time) of the first report: compile excluded

  def log(t: int, total: int, record: dict) -> None:
    now = time.monotonic()
    elapsed = now - start
    if not first:
      first.append((t, now))
    done = t - first[0][0]
    eta = f"{(now - first[0][1]) / done * (total - t):.0f} s" if done > 0 else "?"
    acc = record.get("test_accuracy")
    acc_text = f", test accuracy {100 * acc:.2f} %" if acc is not None else ""
    logging.info(
      "%s (+%d more): round %d/%d after %.0f s, about %s left%s",
      label,
      size - 1,
      t,
      total,
      elapsed,
      eta,
      acc_text,
    )

  return log


def mean_std(values) -> tuple[float, float]:
  a = np.asarray([v for v in values if v is not None], np.float64)
  if a.size == 0:
    return float("nan"), float("nan")
  return float(a.mean()), float(a.std())


def fmt(mean: float, std: float, digits: int = 4) -> str:
  return f"{mean:.{digits}f} ± {std:.{digits}f}"


def mean_curve(histories: list[list[dict]], key: str) -> tuple[list[int], list[float]]:
  """Rounds and the seed-mean of ``key`` over the evaluations all seeds share."""
  n = min(len(h) for h in histories)
  rounds = [r["round"] for r in histories[0][:n]]
  values = np.mean([[r[key] for r in h[:n]] for h in histories], axis=0)
  return rounds, values.tolist()

"""Config-driven experiments: build a Simulation from a config, run it, write results.

This is the importable logic behind ``python -m experiments.run`` (the binary only parses
flags). Outputs in ``output_dir``: ``config.json`` (resolved config + versions + devices),
``metrics.jsonl`` (one JSON object per evaluation), ``summary.json``, ``curves.png`` and
``checkpoints/``.

One module per step, in the order a run takes them:

* ``config``: ``default_config``, ``validate_config`` and the errors;
* ``build``: the data, the four components and the ``Simulation`` of a config;
* ``loop``: ``run``, one experiment with checkpoints, signals and resume;
* ``outputs``: ``summary.json``, ``config.json``, ``metrics.jsonl`` lines and plots;
* ``grouping`` and ``batch``: ``run_batch``, several experiments as one program;
* ``seeds``: ``run_seeds``, a config's seeds as one program with a combined summary.
"""

from fedjax_sel.experiment.batch import run_batch
from fedjax_sel.experiment.build import (
  Components,
  build,
  cpu_info,
  environment,
  load_data,
  make_components,
)
from fedjax_sel.experiment.config import (
  PARTS,
  RESUMABLE_CHANGES,
  ConfigError,
  NonFiniteModelError,
  config_differences,
  default_config,
  one_line,
  validate_config,
)
from fedjax_sel.experiment.grouping import (
  BATCH_FREE,
  SWEEPABLE_FIELDS,
  SWEEPABLE_PARTS,
  availability_round,
  batch_groups,
  batch_key,
)
from fedjax_sel.experiment.loop import Interrupted, run, run_in_threads, stop_on_signals
from fedjax_sel.experiment.outputs import plot_run, plot_seeds, write_config
from fedjax_sel.experiment.seeds import (
  SEED_STATS,
  combine_summaries,
  parse_seeds,
  run_seeds,
  seed_dir,
)

__all__ = [
  "BATCH_FREE",
  "PARTS",
  "RESUMABLE_CHANGES",
  "SEED_STATS",
  "SWEEPABLE_FIELDS",
  "SWEEPABLE_PARTS",
  "Components",
  "ConfigError",
  "config_differences",
  "Interrupted",
  "NonFiniteModelError",
  "availability_round",
  "batch_groups",
  "batch_key",
  "build",
  "combine_summaries",
  "cpu_info",
  "default_config",
  "environment",
  "load_data",
  "make_components",
  "one_line",
  "parse_seeds",
  "plot_run",
  "plot_seeds",
  "run",
  "run_batch",
  "run_in_threads",
  "run_seeds",
  "seed_dir",
  "stop_on_signals",
  "validate_config",
  "write_config",
]

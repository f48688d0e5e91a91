"""Maverick selections per 50-round block, selection only; prints one line a cell.

  PYTHONPATH=. python results/fedemd_fmnist/scripts/maverick_blocks.py [<Fashion-MNIST folder>]

The folder holds the four IDX files; by default where Debian's dataset-fashion-mnist
installs them (/usr/share/datasets/fashion-mnist).

Replays the cohorts of the FedEMD study's cells (``experiments.fedemd.replay_selection``, no
training) on the real Fashion-MNIST partitions, for both readings of D_c. Random's and
FedEMD's cohorts depend neither on the FedAvg weighting nor on the lr schedule.
"""

import sys

from experiments import fedemd
from experiments.configs import fedemd as study_config

SCENARIOS = ("1_excl", "2_excl", "3_excl", "2_shared", "3_shared")
DATA_DIR = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"


def main() -> None:
  for current in ("distribution", "counts"):
    c = study_config.get_config()
    c.fedemd_current = current
    c.maverick_classes = (1, 0, 2)
    c.methods = ("random", "fedemd")
    c.scenarios = SCENARIOS
    c = fedemd.prepare_config(c, data_dir=DATA_DIR)
    pool = fedemd.load_pool(c.base.dataset, c.base.data_dir)
    for scenario in SCENARIOS:
      data = fedemd.maverick_data(c, scenario, pool)
      k = fedemd.parse_scenario(scenario)[0]
      for method in ("random", "fedemd"):
        if method == "random" and current == "counts":
          continue  # Random's cohorts do not depend on the reading
        for seed in (0, 1, 2) if scenario == "1_excl" else (0,):
          cfg = fedemd.cell_config(c, method)
          cfg.seed = seed
          cohorts, valid = fedemd.replay_selection(cfg, data, seed)
          per_round = fedemd.counts_per_round(cohorts, valid, 50)[:, :k].sum(1)
          blocks = per_round.reshape(4, 50).sum(1)
          reading = current if method == "fedemd" else "-"
          print(
            f"{reading} {scenario} {method} {seed} picks per 50-round block "
            f"{blocks.tolist()} total {per_round.sum()}",
            flush=True,
          )


if __name__ == "__main__":
  main()

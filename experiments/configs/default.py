"""Default config of experiments/run.py: FedAvg on Synthetic(0.5, 0.5), 30 clients.

Use: ``python -m experiments.run --config=experiments/configs/default.py --config.rounds=50``.
"""

from fedjax_sel.experiment import default_config


def get_config():
  return default_config()

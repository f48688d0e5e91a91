"""The numerics check of ``half_precision``: FedGS Table 2's Fashion-MNIST cell, 100 rounds.

The FedGS Fashion-MNIST cell as its study builds it (``fedgs_table2.fashion_mnist_base``:
100 clients with two labels each, cnn_mnist with PyTorch's initialisation, standardized
inputs, 10 clients x 10 local steps x batch 32, lr 0.1), IDL availability and uniform
selection, cut to 100 rounds with an evaluation every 5. Run it twice, once per precision::

  python -m experiments.run --config=experiments/configs/half_precision.py \\
    --output_dir=results/half_precision_fmnist/float32
  python -m experiments.run --config=experiments/configs/half_precision.py \\
    --half_precision --output_dir=results/half_precision_fmnist/bfloat16

``docs/performance.md`` ("Half precision") compares the two curves and speeds.
"""

from __future__ import annotations

import ml_collections

from experiments.configs import fedgs_table2


def get_config() -> ml_collections.ConfigDict:
  c = fedgs_table2.fashion_mnist_base()
  c.availability, c.selection = "idl", "uniform"
  c.rounds = 100
  c.eval_every = 5
  c.checkpoint_every = 25
  return c

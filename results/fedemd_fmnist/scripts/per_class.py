"""Per-class test accuracy of a FedEMD study cell's checkpoints (a diagnosis).

PYTHONPATH=. python results/fedemd_fmnist/scripts/per_class.py <cell folder> [<cell folder> ...]

A cell folder is a run's `runs/<study>/cells/<cell>/seed<k>`: it needs the run's checkpoints,
which are never committed, so the cells under results/ cannot be read; rerun the study
(the FedEMD page's commands) to make them.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments import fedemd
from experiments.configs import fedemd as study_config
from fedjax_sel import experiment
from fedjax_sel.core import checkpoint

pool = None
for cell in sys.argv[1:]:
  cfg = ml_collections.ConfigDict(json.load(open(os.path.join(cell, "config.json")))["config"])
  scen = os.path.basename(os.path.dirname(cell)).rsplit("_", 1)[0]
  study = study_config.get_config()
  study.base = cfg
  study.maverick_classes = (1, 0, 2)
  if pool is None:
    pool = fedemd.load_pool(cfg.dataset, cfg.data_dir)
  data = fedemd.maverick_data(study, scen, pool)
  sim, _ = experiment.build(cfg, data)
  state = sim.init(int(cfg.seed))
  tx, ty = jnp.asarray(data.test_x), np.asarray(data.test_y)
  apply = jax.jit(lambda p, x, model=sim.model: jnp.argmax(model.apply(p, x), -1))
  for r in checkpoint.all_rounds(cell):
    st, _ = checkpoint.restore(cell, state, r)
    pred = np.concatenate(
      [np.asarray(apply(st.params, tx[i : i + 2000])) for i in range(0, len(ty), 2000)]
    )
    per = [100 * np.mean(pred[ty == c] == c) for c in range(10)]
    print(
      f"{cell} round {r}: all {100 * np.mean(pred == ty):.2f}, per class "
      + " ".join(f"{p:.1f}" for p in per),
      flush=True,
    )

"""The FedEMD Fashion-MNIST studies whose runs are committed under results/fedemd_fmnist/.

One named study per results folder (``--config=experiments/configs/fedemd_fmnist.py:<study>``),
each the settings of ``experiments/configs/fedemd.py`` with the overrides below; the runs
(cells x seeds, ``--seeds``) and the folder it is committed in are on the FedEMD page, e.g.

  python -m experiments.fedemd --config=experiments/configs/fedemd_fmnist.py:table1 \\
    --data_dir=/usr/share/datasets/fashion-mnist --seeds=0,1,2 --output_dir=runs/fedemd_table1 \\
    --collect=results/fedemd_fmnist/text_reading_lr_per_round_default/table1 --lanes=2

Every study puts the Maverick on 'Trouser' (``maverick_classes=(1, 0, 2)``: one exclusive
Maverick owns class 1, the second and third classes 0 and 2) and does not trace Shapley
values. The default set-up is the text's reading with one StepLR stepped every 100 rounds
(``experiments/configs/fedemd.py``); ``text_pp_*`` step each client's own StepLR after each
of its trainings (the authors' code); ``diagnosis_*`` change one element of ``table1``.
"""

import ml_collections

from experiments.configs import fedemd

ONE = ("1_excl",)
FOUR = ("2_excl", "3_excl", "2_shared", "3_shared")
TABLE1_METHODS = ("random", "tifl", "fedfast", "fedprox", "fedemd")

# study -> (scenarios, methods, extra overrides as (dotted field, value))
STUDIES = {
  # Table 1 (FedAvg), the default set-up: results/.../text_reading_lr_per_round_default/table1
  "table1": (ONE, TABLE1_METHODS, ()),
  # Table 1 under FedSGD (its default reading: one local epoch, the plain mean): .../table1_fedsgd
  "table1_fedsgd": (ONE, TABLE1_METHODS, (("aggregation_setup", "fedsgd"),)),
  # ... McMahan et al.'s FedSGD (one full-batch gradient step): .../table1_fedsgd_gradient
  "table1_fedsgd_gradient": (
    ONE,
    ("random",),
    (("aggregation_setup", "fedsgd"), ("fedsgd_reading", "gradient")),
  ),
  # SVB (Shapley) beside Random's Table 1 cells (--seed_from=.../table1): .../svb
  "svb": (ONE, ("random", "shapley"), ()),
  # Fig. 4, Random and FedEMD (the figure's tables, --seeds=0,1,2): .../fig4
  "fig4": (FOUR, ("random", "fedemd"), ()),
  # Fig. 4's baselines beside Random (--seeds=0; TiFL's spread: fig4_tifl): .../fig4
  "fig4_baselines": (FOUR, ("random", "tifl", "fedfast", "fedprox"), ()),
  # TiFL's spread over seeds with exclusive Mavericks (--seeds=0,1,2): .../fig4
  "fig4_tifl": (("2_excl", "3_excl"), ("random", "tifl"), ()),
  # TiFL and FedFast as the FedEMD authors' released code runs them (baselines="authors": cells
  # <scenario>_<method>_authors) beside Random's committed cells (--seed_from=.../table1, fig4)
  "table1_authors": (ONE, ("random", "tifl", "fedfast"), (("baselines", "authors"),)),
  "fig4_authors": (
    ("2_excl", "3_excl"),
    ("random", "tifl", "fedfast"),
    (("baselines", "authors"),),
  ),
  # the authors' per-participation StepLR: .../text_reading_lr_per_participation/{table1,fig4}
  "text_pp_table1": (
    ONE,
    ("random", "fedemd"),
    (("base.lr_schedule_unit", "participation"), ("base.lr_step_size", 10)),
  ),
  "text_pp_fig4": (
    FOUR,
    ("random", "fedemd"),
    (("base.lr_schedule_unit", "participation"), ("base.lr_step_size", 10)),
  ),
  # one element of table1 changed: no lr step in 200 rounds; the authors' plain mean
  "diagnosis_no_lr_step": (ONE, ("random", "fedemd"), (("base.lr_step_size", 200),)),
  "diagnosis_plain_mean": (
    ONE,
    ("fedemd", "random"),
    (("base.aggregator_hparams.weighting", "uniform"),),
  ),
}

# Studies whose results folder holds another study's tables (fig4's): they collect their runs
# only (run them with --nocollect_tables).
RUNS_ONLY = ("fig4_baselines", "fig4_tifl")


def get_config(study: str = "table1") -> ml_collections.ConfigDict:
  if study not in STUDIES:
    raise ValueError(
      f"fedemd_fmnist study {study!r}; allowed: {', '.join(STUDIES)} "
      "(--config=experiments/configs/fedemd_fmnist.py:<study>)"
    )
  scenarios, methods, overrides = STUDIES[study]
  c = fedemd.get_config()
  c.maverick_classes = (1, 0, 2)
  c.trace_shapley = False
  c.scenarios = scenarios
  c.methods = methods
  for field, value in overrides:
    node = c
    *parents, leaf = field.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = value
  return c

"""The atlas: every selection strategy and every availability-robust aggregator under every
availability model, on the same data with the same budget.

Used by ``python -m experiments.atlas`` (``--config.<field>=`` overrides any field, e.g.
``--config.datasets=fashion_mnist`` or ``--config.datasets.synthetic.base.rounds=500``).

Layout:
  ``datasets``: comma-separated names of the ``data`` entries to run (``synthetic``,
  ``fashion_mnist``).
  ``data.<name>``: ``label``, ``base`` (the experiment config every cell of that dataset
  starts from: its shared client lr, rounds, cohort), ``target_accuracy`` (rounds to target),
  ``trace_file`` (the recorded bool[T, N] trace the ``trace`` availability model replays;
  "" = none, and the ``trace`` cells are shown as not runnable).
  ``panels``: ``selection`` (every selection strategy x every availability model, FedAvg
  aggregation) and ``aggregation`` (every aggregator x every availability model, uniform
  selection among the available clients).
  ``selections`` / ``aggregators`` / ``availabilities``: comma-separated registry names;
  "" = every registered name, read from the registries when the atlas runs, so a strategy
  registered by a user appears without an edit here.
  ``selection_hparams`` / ``aggregator_hparams`` / ``availability_hparams``: per-name
  overrides of the registered defaults (each method runs with its paper's defaults, the
  defaults of its constructor, unless set here), e.g.
  ``--config.availability_hparams='{"ln": {"beta": 0.9}}'``.
"""

import ml_collections

from fedjax_sel.experiment import default_config

AVAILABILITY_SEED = 2023  # seed s draws its availability from 2023 + s, shared by every cell


def synthetic_base() -> ml_collections.ConfigDict:
  """The FedGS paper's Synthetic(0.5, 0.5) instance with its client settings (Sec. 5, App. C:
  30 clients, 6 sampled, E = 10 local steps, B = 10, lr 0.1 decayed 0.998 per round), logistic
  regression, 200 rounds (the paper runs 1000; 200 keeps the whole grid under 15 minutes on
  2 CPU cores, docs/atlas.md)."""
  c = default_config()
  c.dataset = "synthetic"
  c.synthetic_recipe = "fedgs"
  c.synthetic_alpha = 0.5
  c.synthetic_beta = 0.5
  c.model = "logreg"
  c.num_clients = 30
  c.clients_per_round = 6
  c.local_steps = 10
  c.batch_size = 10
  c.client_lr = 0.1  # the shared client lr: FedGS's for this instance
  c.lr_decay = 0.998
  c.rounds = 200
  c.eval_every = 5
  c.checkpoint_every = 200  # at the end only: a finished cell is read back from its files
  c.availability_seed = AVAILABILITY_SEED
  c.data_seed = 0
  return c


def fashion_mnist_base() -> ml_collections.ConfigDict:
  """Fashion-MNIST with the MLP (one hidden layer of 200, non-convex): 100 clients holding
  two classes each (``shards``) in lognormal sizes (sigma 1), 10 sampled per round, 10 local
  steps of batch 32, a local test split of 20 % per client (the per-client accuracy spread),
  60 rounds (the whole grid, 480 runs, took 52 minutes on 2 CPU cores: docs/atlas.md)."""
  c = default_config()
  c.dataset = "fashion_mnist"
  c.partition = "shards"
  c.labels_per_client = 2
  # client sizes ~ lognormal(0, 1) (all 60,000 images, two classes each): availability that
  # follows data size (LDF, MDF) differs from always-available only when sizes differ; the
  # earlier equal-size grid is results/atlas/fashion_mnist/ (--config.data.fashion_mnist.base.
  # partition_sizes='' reads it back)
  c.partition_sizes = "lognormal"
  c.partition_sigma = 1.0
  c.test_fraction = 0.2
  c.model = "mlp"
  c.mlp_hidden = 200
  c.num_clients = 100
  c.clients_per_round = 10
  c.local_steps = 10
  c.batch_size = 32
  c.client_lr = 0.05  # the shared client lr: FL-FDMS's MLP lr (results/fl_fdms_fmnist_mlp)
  c.lr_decay = 1.0
  c.rounds = 60
  c.eval_every = 5
  c.checkpoint_every = 20
  c.availability_seed = AVAILABILITY_SEED
  c.data_seed = 0
  return c


def _dataset(label: str, base: ml_collections.ConfigDict, target: float):
  d = ml_collections.ConfigDict()
  d.label = label
  d.base = base
  d.target_accuracy = target
  d.trace_file = ""
  d.availabilities = ""  # "" = the atlas's ``availabilities``; a dataset's own grid otherwise
  return d


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.datasets = "synthetic"
  c.data = ml_collections.ConfigDict()
  # targets: about 90 % of uniform/FedAvg's final accuracy (BUILD_NOTES section 10)
  c.data.synthetic = _dataset("Synthetic(0.5, 0.5), FedGS instance, logreg", synthetic_base(), 0.8)
  c.data.fashion_mnist = _dataset(
    "Fashion-MNIST, 2 classes/client, lognormal sizes, MLP", fashion_mnist_base(), 0.6
  )
  # The Fashion-MNIST grid, sized to about three hours on 2 CPU cores (docs/atlas.md): the
  # seven models whose rounds share one program (fixed per-client rates drawn at init, and
  # always-on), persistent absences (markov) and label-correlated cycles (yc).
  c.data.fashion_mnist.availabilities = "always,bernoulli,idl,ln,ldf,mdf,ymf,markov,yc"
  c.panels = "selection,aggregation"
  c.selections = ""  # "" = every registered selection strategy
  # "" = every registered aggregator; all nine built in are availability-robust designs or
  # their references (BUILD_NOTES section 10, "The atlas")
  c.aggregators = ""
  c.availabilities = ""  # "" = every registered availability model
  c.selection_hparams = ml_collections.ConfigDict()
  c.aggregator_hparams = ml_collections.ConfigDict()
  c.availability_hparams = ml_collections.ConfigDict()
  c.reference_selection = "uniform"  # the selection panel's aggregator is fedavg
  c.reference_aggregator = "fedavg"  # the aggregation panel's selection is uniform
  c.workers = 2  # programs run at once (one compiles while another runs)
  c.train = True  # False: only read back the finished cells and write the tables
  # --quick: every name still appears, as a cross instead of a grid: every selection and
  # aggregator under ``quick_availability``, and the references under every availability
  c.quick_rounds = 4
  c.quick_eval_every = 2
  c.quick_datasets = "synthetic"
  c.quick_availability = "idl"
  return c

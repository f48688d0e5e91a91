"""Clustered Sampling (Fraboni et al., ICML 2021), Sec. 6 and Appendix D: the settings.

Used by ``python -m experiments.clustered_sampling``.

The paper uses MNIST (one digit per client, Fig. 1) and CIFAR-10 (unbalanced Dirichlet,
Fig. 2, 6, 7). Offline we use scikit-learn's ``digits`` (8x8, 1,437 training images),
resampled with replacement to the paper's client sizes (Fraboni et al.'s own partition
code samples with replacement as well), with an MLP; with ``--data_dir`` holding TFDS
MNIST / CIFAR-10 the ``dataset`` field can name them instead.

Set-ups:
  ``dirichlet``: 100 clients, 10/30/30/20/10 clients with 100/250/500/750/1000 training
  samples and a fifth of that as local test samples, class proportions Dir(alpha),
  alpha in {0.001, 0.01, 0.1, 10}; m = 10 sampled, N = 100 local SGD steps, B = 50,
  lr {0.05, 0.05, 0.05, 0.1} (Fig. 2).
  ``one_class``: 100 clients holding one digit each (10 per digit), 500 training and 100
  test samples each; m = 10, N = 50 local steps, B = 50, lr 0.01 (Fig. 1).
Methods: MD sampling, Algorithm 1 (``clustered_size``), Algorithm 2
(``clustered_similarity``) with arccos, L2 and L1 (Appendix D.2); every method aggregates
with weights 1/m (FedAvg aggregator with the selection's weights). The one-class set-up adds
"target" sampling (one client per class, the paper's ideal, ``target``) and Algorithm 2 on
the exact updates (``updates="exact"``: no random projection) beside the 256-dim sketches,
and runs under both client orders (``one_class.client_orders``): ids as the partition draws
them (``random``) and ids sorted by label (``by_label``, the authors' data: clients
10d..10d+9 hold digit d).
"""

import ml_collections

from fedjax_sel.experiment import default_config

DIRICHLET_ALPHAS = (0.001, 0.01, 0.1, 10.0)
DIRICHLET_LRS = (0.05, 0.05, 0.05, 0.1)
GROUPS = ((10, 100), (30, 250), (30, 500), (20, 750), (10, 1000))


UPDATES = ("sketch", "exact")  # what Algorithm 2 clusters: base.sketch_dim sketches or updates
# the shards partition's client_order: by_label (the authors' data) first, then random
CLIENT_ORDERS = ("by_label", "random")


def _method(label, selection, updates="sketch", **hparams):
  m = ml_collections.ConfigDict()
  m.label = label
  m.selection = selection
  m.updates = updates
  m.selection_hparams = ml_collections.ConfigDict(hparams)
  return m


def base_config() -> ml_collections.ConfigDict:
  c = default_config()
  c.dataset = "digits"
  c.model = "mlp"
  c.num_clients = 100
  c.clients_per_round = 10
  c.batch_size = 50
  c.local_steps = 100
  c.lr_decay = 1.0
  c.aggregator = "fedavg"
  c.availability = "idl"
  c.rounds = 300
  c.eval_every = 5
  c.checkpoint_every = 100
  c.test_fraction = 1.0 / 6.0  # a fifth of the training size as local test samples
  c.availability_seed = 0
  c.data_seed = 0
  c.sketch_dim = 256
  if "global_train_loss" in c:  # the papers' figures plot the global training loss
    c.global_train_loss = True
  return c


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.base = base_config()
  c.methods = ml_collections.ConfigDict()
  c.methods.md = _method("MD sampling", "md")
  c.methods.alg1 = _method("Alg. 1 (sample size)", "clustered_size")
  c.methods.alg2_arccos = _method("Alg. 2 (Arccos)", "clustered_similarity", measure="arccos")
  c.methods.alg2_l2 = _method("Alg. 2 (L2)", "clustered_similarity", measure="L2")
  c.methods.alg2_l1 = _method("Alg. 2 (L1)", "clustered_similarity", measure="L1")
  c.methods.alg2_exact = _method(
    "Alg. 2 (Arccos, exact updates)", "clustered_similarity", updates="exact", measure="arccos"
  )
  c.methods.target = _method("Target (one client per class)", "target")
  c.method_order = "md,alg1,alg2_arccos,alg2_l2,alg2_l1"  # Dirichlet set-up and weights
  # Unbalanced Dirichlet set-up (Fig. 2 / Fig. 6 / Fig. 7).
  c.dirichlet = ml_collections.ConfigDict()
  c.dirichlet.alphas = DIRICHLET_ALPHAS
  c.dirichlet.lrs = DIRICHLET_LRS
  c.dirichlet.groups = GROUPS
  c.dirichlet.local_steps = 100
  # Appendix D.2 compares the similarity measures on Dir(0.01) only: Algorithm 2 with L2 / L1
  # runs for these alphas, the other methods for every alpha.
  c.dirichlet.measure_alphas = (0.01,)
  c.dirichlet.measure_methods = "alg2_l2,alg2_l1"
  # One class per client (Fig. 1).
  c.one_class = ml_collections.ConfigDict()
  c.one_class.examples_per_client = 500
  c.one_class.local_steps = 50
  c.one_class.client_lr = 0.01
  c.one_class.method_order = "target,md,alg1,alg2_arccos,alg2_exact"
  c.one_class.client_orders = CLIENT_ORDERS
  c.one_class.classes_rounds = 2000  # selection-only rounds of table_one_class_classes
  # Aggregation-weight variance: the selection alone, jitted, for many rounds.
  c.weights = ml_collections.ConfigDict()
  c.weights.rounds = 5000
  c.weights.alpha = 0.01  # the Dirichlet set-up whose client updates feed Algorithm 2
  return c

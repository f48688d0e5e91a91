"""Selection strategies: which available clients train each round, with what weights.

Each strategy is a ``SelectionStrategy`` NamedTuple of pure functions built by
``make(name, num_selected=M, **hparams)``; ``names()`` lists the registered ones.
"""

from fedjax_sel.selection import (
  clustered,
  common,
  fedemd,
  fedfast,
  fedgs,
  full,
  md,
  power_of_choice,
  shapley,
  tifl,
  uniform,
)
from fedjax_sel.selection.clustered import (
  cluster_distributions,
  make_clustered_similarity,
  make_clustered_size,
  representative_distances,
  sample_size_distributions,
  similarity_distributions,
  ward_flat_clusters,
)
from fedjax_sel.selection.common import (
  fedavg_weights,
  masked_top_k,
  weighted_sample_without_replacement,
)
from fedjax_sel.selection.fedemd import emd, make_fedemd, selection_logits
from fedjax_sel.selection.fedfast import make_fedfast
from fedjax_sel.selection.full import make_full
from fedjax_sel.selection.md import make_md
from fedjax_sel.selection.power_of_choice import make_power_of_choice
from fedjax_sel.selection.registry import REGISTRY, register
from fedjax_sel.selection.shapley import make_shapley, shapley_values
from fedjax_sel.selection.tifl import make_tifl
from fedjax_sel.selection.uniform import make_uniform

make = REGISTRY.make
names = REGISTRY.names

__all__ = [
  "REGISTRY",
  "cluster_distributions",
  "clustered",
  "common",
  "emd",
  "fedavg_weights",
  "fedemd",
  "fedfast",
  "fedgs",
  "full",
  "make",
  "make_clustered_similarity",
  "make_clustered_size",
  "make_fedemd",
  "make_fedfast",
  "make_full",
  "make_md",
  "make_power_of_choice",
  "make_shapley",
  "make_tifl",
  "make_uniform",
  "masked_top_k",
  "md",
  "names",
  "power_of_choice",
  "register",
  "representative_distances",
  "sample_size_distributions",
  "selection_logits",
  "shapley",
  "shapley_values",
  "similarity_distributions",
  "tifl",
  "uniform",
  "ward_flat_clusters",
  "weighted_sample_without_replacement",
]

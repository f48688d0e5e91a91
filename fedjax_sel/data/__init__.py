"""Federated datasets: flat example arrays plus per-client (offset, count).

``load(dataset, num_clients, partition, ...)`` is the one entry point; Synthetic(alpha,
beta) is the offline default, ``digits`` (scikit-learn) the offline image set, and the TFDS
datasets are read from a local ``data_dir`` without downloading.
"""

from fedjax_sel.data import partitions
from fedjax_sel.data import synthetic as synthetic_lib
from fedjax_sel.data.federated import (
  ClientSplit,
  FederatedData,
  label_counts,
  split_from_indices,
  split_from_lists,
  train_test_per_client,
)
from fedjax_sel.data.loaders import DATASETS, DatasetNotFoundError, load
from fedjax_sel.data.partitions import (
  CLUSTERED_SAMPLING_GROUPS,
  PARTITIONS,
  clustered,
  dirichlet,
  group_sizes,
  iid,
  lognormal_sizes,
  partition_indices,
  shards,
)
from fedjax_sel.data.synthetic import synthetic

__all__ = [
  "CLUSTERED_SAMPLING_GROUPS",
  "ClientSplit",
  "DATASETS",
  "DatasetNotFoundError",
  "FederatedData",
  "PARTITIONS",
  "clustered",
  "dirichlet",
  "group_sizes",
  "iid",
  "label_counts",
  "load",
  "lognormal_sizes",
  "partition_indices",
  "partitions",
  "shards",
  "split_from_indices",
  "split_from_lists",
  "synthetic",
  "synthetic_lib",
  "train_test_per_client",
]

"""Aggregators: turn the cohort's local updates into one global update.

Each aggregator is an ``Aggregator(init, apply)`` NamedTuple of pure functions built by
``make(name, **hparams)``; ``names()`` lists the registered names. ``register(name)``
adds your own (docs/extending.md), built from the masked helpers every aggregator here uses:
``resolve_aux``, ``received_mask``, ``zero_unreceived``, ``weighted_sum``, ``safe_divide``.
"""

from fedjax_sel.aggregation import dropout as dropout
from fedjax_sel.aggregation import fdms as fdms
from fedjax_sel.aggregation import fedar as fedar
from fedjax_sel.aggregation import fedavg as fedavg
from fedjax_sel.aggregation import fedavg_is as fedavg_is
from fedjax_sel.aggregation import fedvarp as fedvarp
from fedjax_sel.aggregation import full as full
from fedjax_sel.aggregation import mifa as mifa
from fedjax_sel.aggregation import stale as stale
from fedjax_sel.aggregation._common import (
  received_mask,
  resolve_aux,
  safe_divide,
  weighted_sum,
  zero_unreceived,
)
from fedjax_sel.aggregation.dropout import DropoutState, make_dropout
from fedjax_sel.aggregation.fdms import FDMSState, hoeffding_threshold, make_fdms
from fedjax_sel.aggregation.fedar import (
  FedARState,
  make_fedar,
  staleness_cutoff,
  staleness_weight,
)
from fedjax_sel.aggregation.fedavg import FedAvgState, make_fedavg
from fedjax_sel.aggregation.fedavg_is import FedAvgISState, make_fedavg_is
from fedjax_sel.aggregation.fedvarp import FedVARPState, make_fedvarp
from fedjax_sel.aggregation.full import FullState, make_full
from fedjax_sel.aggregation.mifa import MIFAState, make_mifa
from fedjax_sel.aggregation.registry import REGISTRY, register
from fedjax_sel.aggregation.stale import StaleState, make_stale

make = REGISTRY.make
names = REGISTRY.names

__all__ = [
  "DropoutState",
  "FDMSState",
  "FedARState",
  "FedAvgISState",
  "FedAvgState",
  "FedVARPState",
  "FullState",
  "MIFAState",
  "REGISTRY",
  "StaleState",
  "dropout",
  "fdms",
  "fedar",
  "fedavg",
  "fedavg_is",
  "fedvarp",
  "full",
  "hoeffding_threshold",
  "make",
  "make_dropout",
  "make_fdms",
  "make_fedar",
  "make_fedavg",
  "make_fedavg_is",
  "make_fedvarp",
  "make_full",
  "make_mifa",
  "make_stale",
  "mifa",
  "names",
  "received_mask",
  "register",
  "resolve_aux",
  "safe_divide",
  "stale",
  "staleness_cutoff",
  "staleness_weight",
  "weighted_sum",
  "zero_unreceived",
]

"""fedjax_sel: a vectorized JAX simulator for client selection under intermittent client
availability in federated learning.

The four pluggable parts are registries of pure functions (the optax pattern)::

  fedjax_sel.availability.make(name, **hparams)
  fedjax_sel.selection.make(name, num_selected=M, **hparams)
  fedjax_sel.client.make(name, **hparams)
  fedjax_sel.aggregation.make(name, **hparams)

``Simulation`` wires them with a dataset and a model into a jitted round loop.
"""

__version__ = "0.1.0"

from fedjax_sel import (
  aggregation,
  availability,
  client,
  data,
  models,
  selection,
  similarity,
  testing,
)
from fedjax_sel.core.engine import CohortResult, EngineConfig, make_cohort_trainer
from fedjax_sel.core.simulation import RoundState, Simulation, SimulationConfig
from fedjax_sel.core.types import (
  AggregationAux,
  Aggregator,
  AvailabilityModel,
  ClientInfo,
  ClientUpdate,
  Selection,
  SelectionContext,
  SelectionStrategy,
)
from fedjax_sel.data.federated import ClientSplit, FederatedData

__all__ = [
  "AggregationAux",
  "Aggregator",
  "AvailabilityModel",
  "ClientInfo",
  "ClientSplit",
  "ClientUpdate",
  "CohortResult",
  "EngineConfig",
  "FederatedData",
  "RoundState",
  "Selection",
  "SelectionContext",
  "SelectionStrategy",
  "Simulation",
  "SimulationConfig",
  "aggregation",
  "availability",
  "client",
  "data",
  "make_cohort_trainer",
  "models",
  "selection",
  "similarity",
  "testing",
]

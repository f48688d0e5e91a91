"""Client availability models: who can answer the server each round.

Build one with ``make(name, **hparams)``; ``names()`` lists them. Each is an
``AvailabilityModel(init, probs, sample)`` of pure, jittable functions.

Seeding: availability has its own key, independent of training and selection (FedGS
App. C). The round loop does ``init_key, round_key = split(availability_key)``,
``state = init(init_key, info)`` and, in round t, ``probs(state, t)`` then
``sample(state, fold_in(round_key, t), t)``; ``sample`` depends only on
``(state, key, t)``, so every selection method sees the same active clients.

References:
  Wang et al., FedGS (AAAI 2023), Table 1 and App. C; Jiang et al., FedAR (2024);
  Wang et al., FL-FDMS (2022).
"""

from fedjax_sel.availability import (  # noqa: F401  (imported so each registers itself)
  always,
  bernoulli,
  cluster_dropout,
  idl,
  ldf,
  ln,
  markov,
  mdf,
  sln,
  trace,
  yc,
  ymf,
)
from fedjax_sel.availability.always import make_always
from fedjax_sel.availability.base import RateState, bernoulli_draw
from fedjax_sel.availability.bernoulli import make_bernoulli
from fedjax_sel.availability.cluster_dropout import ClusterState, make_cluster_dropout
from fedjax_sel.availability.idl import make_idl
from fedjax_sel.availability.ldf import ldf_rates, make_ldf
from fedjax_sel.availability.ln import lognormal_rates, make_ln
from fedjax_sel.availability.markov import (
  MarkovState,
  dropout_transitions,
  make_markov,
  make_markov_dropout,
  stationary_on,
)
from fedjax_sel.availability.mdf import make_mdf, mdf_rates
from fedjax_sel.availability.registry import REGISTRY, register
from fedjax_sel.availability.rollout import rollout, rollout_from_state, split_availability_key
from fedjax_sel.availability.sln import make_sln, sin_factor
from fedjax_sel.availability.trace import TraceState, make_trace
from fedjax_sel.availability.visualize import active_matrix, plot_active_matrix
from fedjax_sel.availability.yc import make_yc, yc_probs
from fedjax_sel.availability.ymf import make_ymf, ymf_rates

make = REGISTRY.make
names = REGISTRY.names

__all__ = [
  "REGISTRY",
  "ClusterState",
  "MarkovState",
  "RateState",
  "TraceState",
  "active_matrix",
  "bernoulli_draw",
  "dropout_transitions",
  "ldf_rates",
  "lognormal_rates",
  "make",
  "make_always",
  "make_bernoulli",
  "make_cluster_dropout",
  "make_idl",
  "make_ldf",
  "make_ln",
  "make_markov",
  "make_markov_dropout",
  "make_mdf",
  "make_sln",
  "make_trace",
  "make_yc",
  "make_ymf",
  "mdf_rates",
  "names",
  "plot_active_matrix",
  "register",
  "rollout",
  "rollout_from_state",
  "sin_factor",
  "split_availability_key",
  "stationary_on",
  "yc_probs",
  "ymf_rates",
]

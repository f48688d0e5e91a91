"""Registry-wide contract: every aggregator is jittable, traced once across rounds,
shape-exact, finite, vmappable, deterministic, works under ``jax.disable_jit()``, accepts
``aux=None``, and ignores invalid and non-finite slots."""

from __future__ import annotations

import aggregation_testlib as lib
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import aggregation, testing

SIZES = np.array([3, 1, 4, 1, 5, 9])  # the sizes of testing.toy_aggregation_round

# Every registered name with default hyper-parameters ...
DEFAULTS = [(name, {}) for name in aggregation.names()]
# ... plus the non-default code paths.
CONFIGS = DEFAULTS + [
  ("fdms", {"complexity_reduction": True, "theta_scale": 0.05}),
  ("fdms", {"min_similarity": 0.6}),
  ("fedar", {"cutoff": "nonconvex", "rho": 0.5}),
  ("fedar", {"weighting": "num_examples", "cutoff": "none"}),
  ("fedavg_is", {"self_normalize": True, "weighting": "uniform"}),
  ("mifa", {"average_over": "seen", "step_scale": 1.05}),
]


def _ids(configs):
  return [name + "".join(f"-{k}={v}" for k, v in hp.items()) for name, hp in configs]


def test_configs_cover_every_registered_name():
  assert {name for name, _ in CONFIGS} == set(aggregation.names())
  assert aggregation.names() == sorted(
    ["dropout", "fdms", "fedar", "fedavg", "fedavg_is", "fedvarp", "full", "mifa", "stale"]
  )


@pytest.mark.parametrize("name,hparams", CONFIGS, ids=_ids(CONFIGS))
def test_contract(name, hparams):
  """``testing.check_aggregator``: rounds through one trace (NaN garbage in the empty slots
  every other round), updates shaped like the params and finite, a stable state,
  determinism; garbage in invalid and non-finite slots changes nothing; vmap over runs;
  the eager path and ``aux=None``."""
  testing.check_aggregator(lib.build(name, hparams))


def test_unknown_name_lists_known_names():
  with pytest.raises(ValueError, match="known aggregator names: dropout, fdms"):
    aggregation.make("no_such_aggregator")


@pytest.mark.parametrize(
  "name,hparams",
  [
    ("fedar", {"rho": 1.5}),
    ("fedar", {"b": 2.0}),
    ("fedar", {"t0": 0.0}),
    ("fedar", {"cutoff": "concave"}),
    ("fedar", {"psi_max": 0.5}),
    ("mifa", {"weighting": "by_size"}),
    ("mifa", {"average_over": "available"}),
    ("mifa", {"step_scale": 0.0}),
    ("mifa", {"step_scale": float("inf")}),
    ("fedavg_is", {"min_prob": 0.0}),
    ("fdms", {"confidence": 1.0}),
    ("fdms", {"beta": 0.0}),
    ("fdms", {"theta_scale": -1.0}),
    ("fdms", {"complexity_reduction": "yes"}),
    ("fedavg", {"unknown_hparam": 1}),
  ],
)
def test_bad_hparams_raise_value_error_naming_them(name, hparams):
  bad_name = next(iter(hparams))
  with pytest.raises(ValueError, match=bad_name):
    aggregation.make(name, **hparams)


@pytest.mark.parametrize("name,hparams", DEFAULTS, ids=_ids(DEFAULTS))
def test_state_counts_the_applies(name, hparams):
  """Every aggregator's ``state.rounds`` is 0 at init and counts the calls of ``apply``."""
  agg = lib.build(name, hparams)
  state = agg.init(lib.make_params(), lib.make_info(SIZES))
  assert int(state.rounds) == 0
  apply = lib.jitted_apply(agg)
  for t in range(3):
    deltas, selection, avail, aux = testing.toy_aggregation_round(jax.random.PRNGKey(5), t)
    _, state = apply(state, deltas, selection, avail, jnp.asarray(t, jnp.int32), aux)
  assert int(state.rounds) == 3

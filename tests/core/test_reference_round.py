"""``Simulation`` against an independent numpy federated round (tests/reference/numpy_fl.py).

The reference shares no code with ``fedjax_sel``: its local SGD, gradients, batching (from
the engine's documented batch-order rule), FedAvg / FedAR aggregation and server optimizer
are written again in float64. Small hand-made problems with client sizes that are not
multiples of the batch, local epochs and local steps, weighted and unweighted aggregation,
server lr 0.5 with and without momentum, an unavailable client in a valid slot, a few rounds.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from reference import numpy_fl as ref

from fedjax_sel import aggregation, client, models
from fedjax_sel.core import engine, simulation
from fedjax_sel.core.types import AvailabilityModel, Selection, SelectionStrategy
from fedjax_sel.data.federated import ClientSplit, FederatedData

SIZES = np.array([7, 3, 12, 5, 9, 4], np.int32)  # none a multiple of the batches used (5, 4)
DIM, CLASSES, ROUNDS = 4, 3, 4


def make_data(seed=0) -> FederatedData:
  rng = np.random.default_rng(seed)
  n = int(SIZES.sum())
  offsets = np.concatenate([[0], np.cumsum(SIZES)[:-1]]).astype(np.int32)
  x = rng.normal(size=(n, DIM)).astype(np.float32)
  y = rng.integers(0, CLASSES, size=n).astype(np.int32)
  train = ClientSplit(x=x, y=y, offsets=offsets, counts=SIZES)
  tcounts = np.full(len(SIZES), 2, np.int32)
  tx = rng.normal(size=(int(tcounts.sum()), DIM)).astype(np.float32)
  ty = rng.integers(0, CLASSES, size=int(tcounts.sum())).astype(np.int32)
  test = ClientSplit(
    x=tx, y=ty, offsets=np.arange(0, tcounts.sum(), 2, dtype=np.int32), counts=tcounts
  )
  return FederatedData(train=train, test=test, test_x=tx, test_y=ty, num_classes=CLASSES)


# Round t's cohort slots (M = 3), their validity and who is available. Round 1 puts the
# unavailable client 5 in a valid slot: it trains but its update must not arrive. Round 3
# has one valid slot (the train loss is that client's own).
COHORTS = np.array([[0, 2, 4], [1, 5, 2], [3, 0, 1], [4, 2, 0]], np.int32)
VALID = np.array([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 0, 0]], bool)
AVAIL = np.array(
  [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 1, 0], [1, 1, 0, 1, 0, 1], [1, 1, 1, 1, 1, 1]],
  bool,
)


def weights_table(weighted: bool) -> np.ndarray:
  w = np.where(VALID, SIZES[COHORTS] if weighted else 1.0, 0.0).astype(np.float64)
  return w / w.sum(axis=1, keepdims=True)


def table_availability() -> AvailabilityModel:
  table = jnp.asarray(AVAIL)
  return AvailabilityModel(
    init=lambda key, info: (),
    probs=lambda state, t: table[t].astype(jnp.float32),
    sample=lambda state, key, t: (table[t], state),
  )


def table_selection(weights: np.ndarray) -> SelectionStrategy:
  cohorts, valid, w = jnp.asarray(COHORTS), jnp.asarray(VALID), jnp.asarray(weights, jnp.float32)

  def select(state, key, avail, t, ctx):
    return Selection(cohorts[t], valid[t], w[t]), state

  return SelectionStrategy(init=lambda key, info: (), select=select, num_selected=3)


def schedule(weights):
  return lambda t: (COHORTS[t].tolist(), VALID[t].tolist(), weights[t], AVAIL[t].tolist())


def make_sim(
  model_name="logreg",
  hidden=(),
  agg="fedavg",
  agg_hp=None,
  weighted=True,
  batch=5,
  epochs=1,
  steps=None,
  parallelism="auto",
  client_momentum=0.0,
  server="sgd",
  server_lr=0.5,
  lr_decay=0.9,
  lr_step=None,
  lr_unit="round",
):
  data = make_data()
  kw = {"hidden": hidden} if model_name == "mlp" else {}
  model = models.make(model_name, data.input_shape, CLASSES, **kw)
  cfg = simulation.SimulationConfig(
    client_lr=0.3,
    lr_decay=lr_decay,
    lr_schedule="step" if lr_step else "exponential",
    lr_step_size=lr_step[0] if lr_step else 0,
    lr_step_gamma=lr_step[1] if lr_step else 0.1,
    lr_schedule_unit=lr_unit,
    client_optimizer="momentum" if client_momentum else "sgd",
    client_momentum=client_momentum,
    server_optimizer=server,
    server_lr=server_lr,
    server_momentum=0.9,
    engine=engine.EngineConfig(
      batch_size=batch, local_epochs=epochs, local_steps=steps, parallelism=parallelism
    ),
  )
  return simulation.Simulation(
    data,
    model,
    table_availability(),
    table_selection(weights_table(weighted)),
    aggregation.make(agg, **(agg_hp or {})),
    client.make("sgd"),
    cfg,
  )


def run_both(**kw):
  """Runs ``make_sim(**kw)`` and the numpy reference with the same settings (read back from
  the simulation's config, so the two cannot drift apart)."""
  sim = make_sim(**kw)
  c = sim.config
  agg, agg_hp = kw.get("agg", "fedavg"), kw.get("agg_hp")
  weighted = kw.get("weighted", True)
  batch, epochs, steps = c.engine.batch_size, c.engine.local_epochs, c.engine.local_steps
  client_momentum, lr_decay, server_lr = c.client_momentum, c.lr_decay, c.server_lr
  server = c.server_optimizer
  data = sim.data
  weights = weights_table(weighted)
  state0 = sim.init(seed=3)
  params0 = ref.to_numpy(jax.device_get(state0.params))
  key = jnp.asarray(np.asarray(state0.key))  # run_rounds donates state0
  state, metrics = sim.run_rounds(state0, ROUNDS)

  if agg == "fedavg":

    def aggregate(deltas, cohort, valid, w, received, t):
      return ref.fedavg(deltas, w, valid, received)

  else:
    hp = agg_hp or {}
    if agg == "mifa":
      rule = ref.MIFA(params0, len(SIZES), seen_only=hp.get("average_over") == "seen")
    else:
      rule = ref.FedAR(params0, len(SIZES), hp["rho"], hp["t0"], hp["b"], hp["psi_max"])

    def aggregate(deltas, cohort, valid, w, received, t, lrs):
      return rule(deltas, cohort, received, t, lrs)

  want, records = ref.run_rounds(
    params0,
    key,
    data.train.x,
    data.train.y,
    data.train.offsets,
    data.train.counts,
    schedule(weights),
    aggregate,
    rounds=ROUNDS,
    batch=batch,
    epochs=epochs,
    steps=steps,
    client_lr=0.3,
    lr_decay=lr_decay,
    lr_step=(c.lr_step_size, c.lr_step_gamma) if c.lr_schedule == "step" else None,
    lr_unit=c.lr_schedule_unit,
    client_momentum=client_momentum if client_momentum else 0.0,
    server_lr=server_lr,
    server_momentum=0.9 if server == "momentum" else 0.0,
    aggregate_lrs=agg != "fedavg",
  )
  return sim, state, metrics, want, records, params0


def assert_tree_close(got, want, tol=1e-5):
  got = jax.device_get(got)
  assert set(got) == set(want)
  for k in want:
    if isinstance(want[k], dict):
      assert_tree_close(got[k], want[k], tol)
    else:
      np.testing.assert_allclose(np.asarray(got[k], np.float64), want[k], rtol=tol, atol=tol)


def assert_metrics(metrics, records):
  for key in ("train_loss", "num_selected", "num_available", "client_lr"):
    np.testing.assert_allclose(
      np.asarray(metrics[key], np.float64), [r[key] for r in records], rtol=1e-5, atol=1e-6
    )


CASES = {
  # logistic regression, 2 epochs of batch 5 over sizes 7, 3, 12, 5, 9, 4 (partial batches)
  "logreg-epochs-weighted-sgd": dict(epochs=2, batch=5, weighted=True, server="sgd"),
  "logreg-steps-unweighted-momentum": dict(
    steps=4, batch=4, weighted=False, server="momentum", parallelism="vmap"
  ),
  "logreg-epochs-lanes": dict(epochs=1, batch=4, parallelism="lanes", server="momentum"),
  "mlp-epochs-map-client-momentum": dict(
    model_name="mlp",
    hidden=(8,),
    epochs=1,
    batch=5,
    parallelism="map",
    server="momentum",
    client_momentum=0.5,
  ),
  "mlp-steps-weighted": dict(model_name="mlp", hidden=(6,), steps=3, batch=5, weighted=True),
  # FedEMD's per-client StepLR: each client's lr halves after each of its local trainings.
  # Round 1 trains client 2 for the second time (lr 0.15) beside two first-timers (0.3);
  # round 2 client 0 for the second time; reported lr = mean over trained slots:
  # 0.3, 0.25, 0.225.
  "logreg-per-client-step-lr-lanes": dict(
    epochs=1, batch=4, parallelism="lanes", lr_step=(1, 0.5), lr_unit="participation"
  ),
  "mlp-per-client-step-lr-map-momentum": dict(
    model_name="mlp",
    hidden=(8,),
    steps=3,
    batch=5,
    parallelism="map",
    client_momentum=0.5,
    lr_step=(1, 0.5),
    lr_unit="participation",
  ),
  # the same StepLR over rounds: 0.3, 0.15, 0.075 for everyone
  "logreg-round-step-lr-vmap": dict(epochs=1, batch=5, parallelism="vmap", lr_step=(1, 0.5)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_simulation_equals_numpy_reference(case):
  _, state, metrics, want, records, params0 = run_both(**CASES[case])
  assert_tree_close(state.params, want)
  assert_metrics(metrics, records)
  # the run moved the model (a reference that trains nothing would also "agree")
  moved = max(
    float(np.max(np.abs(w - p)))
    for w, p in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(params0))
  )
  assert moved > 1e-2


def test_per_client_step_lr_values():
  """The lrs of the per-client StepLR case, worked out by hand from the cohort table."""
  _, _, metrics, _, records, _ = run_both(**CASES["logreg-per-client-step-lr-lanes"])
  # round 3: client 4 alone, in its second participation: 0.3 x 0.5
  np.testing.assert_allclose(np.asarray(metrics["client_lr"]), [0.3, 0.25, 0.225, 0.15], rtol=1e-6)
  assert [r["client_lr"] for r in records] == pytest.approx([0.3, 0.25, 0.225, 0.15])


def test_server_lr_scales_the_step():
  """With plain SGD on the server, lr 0.5 moves the params exactly half as far as lr 1 in
  the first round (same cohort, same batches)."""
  steps = {}
  for lr in (0.5, 1.0):
    sim = make_sim(server_lr=lr)
    s0 = sim.init(seed=3)
    s1, _ = sim.round_step(s0)
    steps[lr] = [
      np.asarray(a, np.float64) - np.asarray(b, np.float64)
      for a, b in zip(jax.tree_util.tree_leaves(s1.params), jax.tree_util.tree_leaves(s0.params))
    ]
  for half, full in zip(steps[0.5], steps[1.0]):
    np.testing.assert_allclose(half, 0.5 * full, rtol=1e-5, atol=1e-7)
    assert np.max(np.abs(full)) > 1e-3


def test_fedar_simulation_equals_numpy_reference():
  """FedAR (Eq. 4-7) with rho 0.5, psi_max 1.3 and a cutoff g(t) = 0.5 + t / 2.5 that drops a
  client at staleness 1 in the paper's round 1 but keeps it in round 2."""
  hp = dict(rho=0.5, t0=0.5, b=2.5, psi_max=1.3)
  _, state, metrics, want, records, _ = run_both(agg="fedar", agg_hp=hp, epochs=1, batch=4)
  assert_tree_close(state.params, want)
  assert_metrics(metrics, records)


@pytest.mark.parametrize(
  "hp,lr",
  [
    ({}, dict(lr_decay=0.9)),
    ({"average_over": "seen"}, dict(lr_decay=0.9)),
    # FedEMD's per-client StepLR: a client's eta_t is its own (halved per participation)
    ({}, dict(lr_step=(1, 0.5), lr_unit="participation")),
  ],
  ids=["decay", "seen-decay", "per-client-step"],
)
def test_mifa_simulation_equals_numpy_reference(hp, lr):
  """MIFA's G_i = delta_i / eta and step eta_t * mean G (Gu et al., Alg. 1) through the
  round loop under lr schedules: client 3 answers in round 2 only and client 5 never, so
  stale rows and never-seen clients both meet a changed lr."""
  _, state, metrics, want, records, _ = run_both(agg="mifa", agg_hp=hp, epochs=1, batch=4, **lr)
  assert_tree_close(state.params, want)
  assert_metrics(metrics, records)

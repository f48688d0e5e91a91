"""The round loop: one jitted ``round_step(state) -> (state, metrics)``, scanned over rounds.

A round, as data flows through it::

  key_t = fold_in(key, t); avail_key_t = fold_in(availability_key, t)
  availability -> avail: bool[N]
  selection    -> Selection(cohort i32[M], valid bool[M], weights f32[M])
  cohort engine-> deltas [M, ...], losses f32[M]        (all M clients at once)
  aggregation  -> update (like params)
  server opt   -> params <- optax update on -update     (FedAvg = SGD lr 1)

The whole experiment state is one pytree (``RoundState``): checkpointing it is
checkpointing the experiment.
"""

from __future__ import annotations

import copy
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from fedjax_sel.availability.rollout import split_availability_key
from fedjax_sel.core import engine as engine_lib
from fedjax_sel.core import evaluation
from fedjax_sel.core.finite import all_finite_per_slot, mask_slots, tree_all_finite
from fedjax_sel.core.optimizers import CLIENT_OPTIMIZERS as CLIENT_OPTIMIZERS
from fedjax_sel.core.optimizers import DEFAULT_CLIENT_MOMENTUM as DEFAULT_CLIENT_MOMENTUM
from fedjax_sel.core.optimizers import (
  LR_SCHEDULE_UNITS,
  make_client_lr_schedule,
  make_client_optimizer,
  make_server_optimizer,
)
from fedjax_sel.core.optimizers import LR_SCHEDULES as LR_SCHEDULES
from fedjax_sel.core.optimizers import SERVER_OPTIMIZERS as SERVER_OPTIMIZERS
from fedjax_sel.core.registry import check_count, check_range, is_integer, is_traced
from fedjax_sel.core.state import DataBound, RoundState, SimulationConfig, SimulationData
from fedjax_sel.core.types import (
  AggregationAux,
  Aggregator,
  AvailabilityModel,
  ClientUpdate,
  Selection,
  SelectionContext,
  SelectionStrategy,
)
from fedjax_sel.data.federated import FederatedData
from fedjax_sel.models import Model, num_params
from fedjax_sel.similarity.sketch import flatten_stacked, make_projection
from fedjax_sel.similarity.sketch import sketch as sketch_updates

# RoundState fields whose [N, ...] leaves are split over the client mesh (state_shardings)
SHARDED_STATE = ("aggregation_state", "client_state", "update_sketch", "embeddings")


class Simulation:
  """Wires the four pluggable parts, the cohort engine and the data into a round loop.

  The object only holds static configuration and closures; every piece of changing
  state lives in the ``RoundState`` pytree that its functions take and return.
  """

  def __init__(
    self,
    data: FederatedData,
    model: Model,
    availability: AvailabilityModel,
    selection: SelectionStrategy,
    aggregator: Aggregator,
    client_update: ClientUpdate,
    config: SimulationConfig = SimulationConfig(),
  ):
    self._client_lr = make_client_lr_schedule(
      config.client_lr,
      config.lr_schedule,
      config.lr_decay,
      config.lr_step_size,
      config.lr_step_gamma,
    )
    if config.lr_schedule_unit not in LR_SCHEDULE_UNITS:
      raise ValueError(
        f"lr_schedule_unit={config.lr_schedule_unit!r}; allowed: {', '.join(LR_SCHEDULE_UNITS)}"
      )
    check_range("sketch_dim", config.sketch_dim, 1)
    check_range("eval_chunk", config.eval_chunk, 0)
    check_range("eval_memory_mb", config.eval_memory_mb, 1)
    check_range("num_noise_inputs", config.num_noise_inputs, 1)
    check_range("loss_examples", config.loss_examples, 1)
    if not isinstance(config.global_train_loss, (bool, np.bool_)):
      raise ValueError(f"global_train_loss={config.global_train_loss!r}; allowed: True or False")
    if not isinstance(config.client_accuracy, (bool, np.bool_)):
      raise ValueError(f"client_accuracy={config.client_accuracy!r}; allowed: True or False")
    num_clients = data.num_clients
    num_selected = int(selection.num_selected)
    if num_selected < 1 or num_selected > num_clients:
      raise ValueError(
        f"clients_per_round={num_selected} is out of range; allowed: [1, {num_clients}] "
        f"(num_clients={num_clients})"
      )
    self.data = data
    self.model = model
    self.availability = availability
    self.selection = selection
    self.aggregator = aggregator
    self.client_update = client_update
    self.config = config
    self.num_clients = num_clients
    self.num_selected = num_selected
    self.info = data.client_info()
    self.server_opt = make_server_optimizer(
      config.server_optimizer, config.server_lr, config.server_momentum
    )
    train = data.train
    p = num_params(model)  # the auto parallelism rule and the sketch size
    self.eval_chunk = int(config.eval_chunk) or evaluation.auto_chunk(
      model.apply,
      jax.eval_shape(model.init, jax.random.PRNGKey(0)),
      model.input_shape,
      int(config.eval_memory_mb) << 20,
    )
    x_divisor = float(getattr(data, "x_divisor", 1.0))
    self.x_divisor = x_divisor
    # The engine puts the training arrays on device in their stored dtype (replicated on
    # the client mesh when its loop uses several devices); the other arrays go where they
    # are. None is closed into a compiled program: see SimulationData.
    self.trainer = engine_lib.make_cohort_trainer(
      model.apply,
      client_update,
      make_client_optimizer(
        config.client_optimizer, config.client_momentum, config.client_weight_decay
      ),
      train.x,
      train.y,
      train.offsets,
      train.counts,
      config.engine,
      num_selected,
      conv=model.conv,
      num_params=p,
      x_divisor=x_divisor,
    )
    self._mesh = self.trainer.mesh  # evaluation deals its chunks over the same devices
    self._n_max = max(int(np.max(train.counts, initial=0)), 1)
    self._local_width = max(int(np.max(data.test.counts, initial=0)), 1)
    # every client has local test data (the usual case): a static fact of the evaluation
    self._all_local = bool(np.all(np.asarray(data.test.counts) > 0))
    # The sketch projection and the noise inputs of functional embeddings are fixed
    # (seed 0 of their own), independent of the run's seed: the same for every method.
    k_proj, k_noise = jax.random.split(jax.random.PRNGKey(config.sketch_seed))
    uses = selection.uses_updates
    d = min(config.sketch_dim, p) if uses else 0
    projection = make_projection(k_proj, p, d) if d else jnp.zeros((p, 0), jnp.float32)
    noise = jax.random.normal(k_noise, (config.num_noise_inputs, *model.input_shape), jnp.float32)
    self._embedding_dim = config.num_noise_inputs * model.num_classes if uses else 0
    put = self.trainer.put
    self.device_data = self._put_eval(data)._replace(
      train=self.trainer.data, projection=put(projection), noise=put(noise)
    )
    self.round_step = DataBound(jax.jit(self._round_step_with), self)
    self.run_rounds = DataBound(
      jax.jit(self._run_rounds_with, static_argnums=2, donate_argnums=1), self
    )
    self.evaluate = DataBound(jax.jit(self._evaluate_with), self)

  def replace_parts(
    self,
    availability: AvailabilityModel | None = None,
    selection: SelectionStrategy | None = None,
    aggregator: Aggregator | None = None,
    client_lr: float | jax.Array | None = None,
  ) -> Simulation:
    """A shallow copy that runs with other components of the same kinds (same registry
    names and static hyper-parameters, so the state's structure is unchanged) and/or
    another initial client lr; data, trainer and model are shared.

    Used by ``fedjax_sel.core.batch`` to give every experiment of a batched program its
    own numeric hyper-parameters, built from traced values inside the program. The
    copy's ``round_step`` / ``run_rounds`` / ``evaluate`` are still this simulation's:
    call its ``_round_step_with`` etc. inside a jitted function instead.
    """
    new = copy.copy(self)
    if availability is not None:
      new.availability = availability
    if selection is not None:
      if int(selection.num_selected) != self.num_selected:
        raise ValueError(
          f"selection num_selected={selection.num_selected}; allowed: {self.num_selected}"
        )
      new.selection = selection
    if aggregator is not None:
      new.aggregator = aggregator
    if client_lr is not None:
      c = self.config
      new._client_lr = make_client_lr_schedule(
        client_lr, c.lr_schedule, c.lr_decay, c.lr_step_size, c.lr_step_gamma
      )
    return new

  # ---------------------------------------------------------------- data
  def _put_eval(self, data: FederatedData) -> SimulationData:
    """The test arrays of ``data`` on device, where the trainer keeps its training arrays."""
    put = self.trainer.put
    x_divisor = float(getattr(data, "x_divisor", 1.0))
    counts = np.asarray(data.test.counts, np.int32)
    return SimulationData(
      train=None,
      test=evaluation.eval_arrays(data.test_x, data.test_y, x_divisor, put),
      local_test=evaluation.eval_arrays(data.test.x, data.test.y, x_divisor, put),
      local_offsets=put(np.asarray(data.test.offsets, np.int32)),
      local_counts=put(counts),
      local_client_of=put(evaluation.client_of_examples(counts)),
      local_inv_counts=put(evaluation.inverse_counts(counts)),
      projection=None,
      noise=None,
    )

  def put_data(self, data: FederatedData) -> SimulationData:
    """Another dataset of the same shapes and dtypes on device, for
    ``round_step.with_data`` / ``run_rounds.with_data`` / ``evaluate.with_data``: the
    compiled programs are reused, not recompiled. Its clients may hold at most as many
    training (local test) examples as the longest client of the data this simulation was
    built for."""
    x_divisor = float(getattr(data, "x_divisor", 1.0))
    if x_divisor != self.x_divisor:
      raise ValueError(f"x_divisor={x_divisor}; allowed: {self.x_divisor} (this simulation's)")
    tr = data.train
    new = self._put_eval(data)._replace(
      train=engine_lib.train_arrays(tr.x, tr.y, tr.offsets, tr.counts, x_divisor, self.trainer.put),
      projection=self.device_data.projection,
      noise=self.device_data.noise,
    )
    engine_lib._check_train_arrays(new.train, self.device_data.train, self._n_max)
    for (path, a), b in zip(
      jax.tree_util.tree_leaves_with_path(new), jax.tree_util.tree_leaves(self.device_data)
    ):
      if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(
          f"data{jax.tree_util.keystr(path)}: {a.dtype}{list(a.shape)}; allowed: "
          f"{b.dtype}{list(b.shape)} (the shapes and dtypes this simulation was built for)"
        )
    if bool(np.all(np.asarray(data.test.counts) > 0)) != self._all_local:
      raise ValueError(
        "local test counts: every client must hold local test examples or not, as in the "
        "data this simulation was built for"
      )
    if int(np.max(data.test.counts, initial=0)) > self._local_width:
      raise ValueError(
        f"local test counts: a client holds {int(np.max(data.test.counts))} examples; "
        f"allowed: at most {self._local_width}"
      )
    return new

  @property
  def train_x(self) -> jax.Array:
    """The training examples on device, in their stored dtype."""
    return self.device_data.train.x

  @property
  def train_y(self) -> jax.Array:
    return self.device_data.train.y

  def global_eval(self, params, data: SimulationData | None = None, split: str = "test"):
    """(loss, accuracy) of ``params`` on the global test set, or with ``split="train"`` on
    every client's training split (the union of the training examples, example-weighted)."""
    data = self.device_data if data is None else data
    tr = data.train
    return evaluation.global_stats(
      self.model.apply,
      params,
      data.test if split == "test" else evaluation.EvalArrays(tr.x, tr.y, tr.table),
      self.eval_chunk,
      divisor=self.x_divisor,
      mesh=self._mesh,
    )

  def client_eval(self, params, data: SimulationData | None = None):
    """(loss f32[N], accuracy f32[N], has_data bool[N]) on the clients' local test sets."""
    data = self.device_data if data is None else data
    return evaluation.per_client_stats(
      self.model.apply,
      params,
      data.local_test,
      data.local_counts,
      self.eval_chunk,
      divisor=self.x_divisor,
      mesh=self._mesh,
      client_of=data.local_client_of,
      inv_counts=data.local_inv_counts,
    )

  # ---------------------------------------------------------------- state
  def init(self, seed: int = 0, availability_seed: int | None = None) -> RoundState:
    """The state before round 0: fresh model, optimizer and component states.

    Args:
      seed: model/training seed (init, selection and local batch order).
      availability_seed: the separate seed of availability draws (defaults to ``seed``),
        so every method in a comparison sees the same active clients each round.
    """
    for name, value in (("seed", seed), ("availability_seed", availability_seed)):
      if (name == "availability_seed" and value is None) or is_traced(value):
        continue
      if (
        isinstance(value, jax.Array)
        and value.ndim == 0
        and jnp.issubdtype(value.dtype, jnp.integer)
      ):
        value = int(value)
      if not is_integer(value, strict=True) or value < 0:
        raise ValueError(f"{name}={value!r} is out of range; allowed: integers >= 0")
    # Raw uint32[2] keys keep the state a plain array pytree (easy to checkpoint).
    key = jax.random.PRNGKey(seed)
    akey = jax.random.PRNGKey(seed if availability_seed is None else availability_seed)
    k_model, k_sel = jax.random.split(key)
    # Same derivation as fedjax_sel.availability.rollout, so plots of the active-state
    # matrix show exactly the clients a run sees.
    a_init, a_round = split_availability_key(akey)
    params = jax.jit(self.model.init)(k_model)
    n = self.num_clients
    d = self.device_data.projection.shape[1]
    e = self._embedding_dim
    state = RoundState(
      params=params,
      server_opt_state=self.server_opt.init(params),
      availability_state=self.availability.init(a_init, self.info),
      selection_state=self.selection.init(k_sel, self.info),
      aggregation_state=self.aggregator.init(params, self.info),
      client_state=self.client_update.init(params, n),
      key=jax.random.fold_in(key, 1),
      availability_key=a_round,
      round=jnp.zeros((), jnp.int32),
      sampling_counts=jnp.zeros((n,), jnp.int32),
      update_sketch=jnp.zeros((n, d), jnp.float32),
      embeddings=jnp.zeros((n, e), jnp.float32),
      seen=jnp.zeros((n,), bool),
      useful_steps=jnp.zeros((), jnp.float32),
      executed_steps=jnp.zeros((), jnp.float32),
      nonfinite_updates=jnp.zeros((), jnp.int32),
      empty_rounds=jnp.zeros((), jnp.int32),
      skipped_updates=jnp.zeros((), jnp.int32),
    )
    return self.place_state(state)

  def state_shardings(self, state: RoundState) -> RoundState | None:
    """Where each leaf of the state lives on the client mesh (None without one).

    The per-client parts that grow with N (``SHARDED_STATE``: aggregation memories such as
    MIFA's / FedVARP's [N, ...] updates, client states such as SCAFFOLD's control variates,
    update sketches, embeddings) are split over the devices along their leading axis when
    N is a multiple of the device count; everything else is replicated. Over several
    processes this is what keeps an [N, P] memory from having to fit one accelerator.
    """
    mesh = self._mesh
    if mesh is None:
      return None
    num_devices = mesh.devices.size
    replicated = NamedSharding(mesh, P())
    split = NamedSharding(mesh, P("clients"))

    def where(path, leaf):
      shape = np.shape(leaf)
      per_client = getattr(path[0], "name", None) in SHARDED_STATE
      if per_client and len(shape) >= 2 and shape[0] == self.num_clients:
        return split if shape[0] % num_devices == 0 else replicated
      return replicated

    return jax.tree_util.tree_map_with_path(where, state)

  def place_state(self, state: RoundState) -> RoundState:
    """``state`` placed as :meth:`state_shardings` says (unchanged without a mesh)."""
    shardings = self.state_shardings(state)
    if shardings is None:
      return state
    return jax.jit(lambda s: s, out_shardings=shardings)(state)

  def _constrain(self, state: RoundState) -> RoundState:
    shardings = self.state_shardings(state)
    return state if shardings is None else jax.lax.with_sharding_constraint(state, shardings)

  # ---------------------------------------------------------------- pieces
  def _client_losses(self, data: SimulationData, params, ids):
    """Global model's mean loss on up to ``loss_examples`` of each listed client."""
    tr = data.train
    return evaluation.mean_client_losses(
      self.model.apply,
      params,
      ids,
      tr.x,
      tr.y,
      tr.offsets,
      tr.counts,
      self.config.loss_examples,
      tr.table,
      self.x_divisor,
    )

  def _client_test_losses(self, data: SimulationData, params, ids):
    """Global model's mean loss on each listed client's whole local test split."""
    te = data.local_test
    return evaluation.mean_client_losses(
      self.model.apply,
      params,
      ids,
      te.x,
      te.y,
      data.local_offsets,
      data.local_counts,
      self._local_width,
      te.table,
      self.x_divisor,
    )

  def _eval_value(self, data: SimulationData, params):
    return self.global_eval(params, data)[1]

  def _eval_values(self, data: SimulationData, stacked_params):
    """``_eval_value`` of K stacked models, ``trainer.chunk_size`` at a time (the engine's
    width: one at a time for CNNs on CPU, where 5 vmapped cnn_mnist models took 19x one
    evaluation, not 5x; notes of issue 69)."""
    width = max(1, int(self.trainer.chunk_size))
    return jax.lax.map(lambda p: self._eval_value(data, p), stacked_params, batch_size=width)

  def context(
    self, state: RoundState, probs, data: SimulationData | None = None
  ) -> SelectionContext:
    data = self.device_data if data is None else data
    return SelectionContext(
      params=state.params,
      client_losses=functools.partial(self._client_losses, data, state.params),
      update_sketch=state.update_sketch,
      embeddings=state.embeddings,
      seen=state.seen,
      avail_probs=probs,
      num_examples=data.train.counts,
      eval_value=functools.partial(self._eval_value, data),
      round=state.round,
      client_test_losses=functools.partial(self._client_test_losses, data, state.params),
      eval_values=functools.partial(self._eval_values, data),
    )

  def client_lr(self, t):
    """The client lr schedule at ``t`` (rounds, or participations: ``lr_schedule_unit``)."""
    return self._client_lr(t)

  def slot_lr(self, state: RoundState, cohort) -> jax.Array:
    """The lr the cohort trains with in ``state``'s round: f32[] with
    ``lr_schedule_unit="round"`` (the schedule at the round index), f32[M] with
    ``"participation"`` (the schedule at each slot's client's count of earlier local
    trainings, ``state.sampling_counts``: a per-client PyTorch scheduler stepped after each
    of the client's local trainings)."""
    if self.config.lr_schedule_unit == "participation":
      counts = jnp.take(state.sampling_counts, jnp.asarray(cohort, jnp.int32), mode="clip")
      return self._client_lr(counts)
    return self._client_lr(state.round)

  def client_lrs(self, state: RoundState) -> jax.Array:
    """f32[N]: the lr every client trains with if selected in ``state``'s round (the
    aggregators' eta_t, ``AggregationAux.lr``); ``slot_lr`` is its value at the cohort."""
    if self.config.lr_schedule_unit == "participation":
      return self._client_lr(state.sampling_counts)
    return jnp.broadcast_to(self._client_lr(state.round), (self.num_clients,))

  # ---------------------------------------------------------------- one round
  def _round_step(self, state: RoundState) -> tuple[RoundState, dict]:
    """One round on this simulation's data, closed over (for callers that jit it
    themselves; ``round_step`` passes the data as an argument)."""
    return self._round_step_with(self.device_data, state)

  def _round_step_with(self, data: SimulationData, state: RoundState) -> tuple[RoundState, dict]:
    t = state.round
    key_t = jax.random.fold_in(state.key, t)
    k_sel, k_train = jax.random.split(key_t)
    avail_key_t = jax.random.fold_in(state.availability_key, t)
    probs = self.availability.probs(state.availability_state, t)
    avail, availability_state = self.availability.sample(state.availability_state, avail_key_t, t)
    ctx = self.context(state, probs, data)
    selection, selection_state = self.selection.select(state.selection_state, k_sel, avail, t, ctx)
    valid = selection.valid
    lr = self.slot_lr(state, selection.cohort)
    aux = self.client_update.prepare(state.client_state, selection.cohort)
    result = self.trainer.with_data(
      data.train, state.params, selection.cohort, valid, k_train, lr, aux
    )

    # Non-finite client updates are masked out of everything downstream and counted.
    finite = valid & all_finite_per_slot(result.deltas) & jnp.isfinite(result.loss)
    deltas = mask_slots(result.deltas, finite)
    used = Selection(selection.cohort, finite, jnp.where(finite, selection.weights, 0.0))
    num_examples_f = data.train.counts.astype(jnp.float32)
    agg_aux = AggregationAux(probs, num_examples_f, finite, lr=self.client_lrs(state))
    update, aggregation_state = self.aggregator.apply(
      state.aggregation_state, deltas, used, avail, t, aux=agg_aux
    )
    update_ok = tree_all_finite(update)
    neg = jax.tree_util.tree_map(lambda u: -jnp.where(update_ok, u, 0.0), update)
    server_updates, server_opt_state = self.server_opt.update(
      neg, state.server_opt_state, state.params
    )
    new_params = optax.apply_updates(state.params, server_updates)
    params = jax.tree_util.tree_map(
      lambda new, old: jnp.where(update_ok, new, old), new_params, state.params
    )
    server_opt_state = jax.tree_util.tree_map(
      lambda new, old: jnp.where(update_ok, new, old), server_opt_state, state.server_opt_state
    )
    client_state = self.client_update.finish(
      state.client_state, selection.cohort, finite, deltas, aux, result.num_steps, lr
    )
    if self.selection.observe is not None:
      selection_state = self.selection.observe(selection_state, used, deltas, result.loss, ctx)
    update_sketch, embeddings, seen = self._remember(data, state, used, deltas)

    n = self.num_clients
    target = jnp.where(valid, selection.cohort, n)
    counts = state.sampling_counts.at[target].add(1, mode="drop")
    num_trained = jnp.sum(finite)
    train_loss = jnp.sum(jnp.where(finite, result.loss, 0.0)) / jnp.maximum(num_trained, 1)
    useful = jnp.sum(result.num_steps).astype(jnp.float32)
    new_state = state.replace(
      params=params,
      server_opt_state=server_opt_state,
      availability_state=availability_state,
      selection_state=selection_state,
      aggregation_state=aggregation_state,
      client_state=client_state,
      round=t + 1,
      sampling_counts=counts,
      update_sketch=update_sketch,
      embeddings=embeddings,
      seen=seen,
      useful_steps=state.useful_steps + useful,
      executed_steps=state.executed_steps + result.padded_steps,
      nonfinite_updates=state.nonfinite_updates + jnp.sum(valid & ~finite),
      empty_rounds=state.empty_rounds + (num_trained == 0),
      skipped_updates=state.skipped_updates + (~update_ok),
    )
    new_state = self._constrain(new_state)
    metrics = {
      "train_loss": train_loss,
      "num_available": jnp.sum(avail),
      "num_selected": jnp.sum(valid),
      "num_nonfinite": jnp.sum(valid & ~finite),
      # per-slot lrs: their mean over the clients that trained
      "client_lr": lr
      if jnp.ndim(lr) == 0
      else jnp.sum(jnp.where(valid, lr, 0.0)) / jnp.maximum(jnp.sum(valid), 1),
    }
    return new_state, metrics

  def _remember(self, data: SimulationData, state, used: Selection, deltas):
    if not self.selection.uses_updates:
      return state.update_sketch, state.embeddings, state.seen
    n = self.num_clients
    target = jnp.where(used.valid, used.cohort, n)
    flat = flatten_stacked(deltas)
    sk = sketch_updates(flat, data.projection)
    local_params = jax.tree_util.tree_map(lambda g, d: g[None] + d, state.params, deltas)
    emb = jax.vmap(lambda p: jax.nn.softmax(self.model.apply(p, data.noise), -1).reshape(-1))(
      local_params
    )
    return (
      state.update_sketch.at[target].set(sk, mode="drop"),
      state.embeddings.at[target].set(emb, mode="drop"),
      state.seen.at[target].set(True, mode="drop"),
    )

  def _run_rounds_with(self, data: SimulationData, state: RoundState, num_rounds: int):
    check_count("num_rounds", num_rounds, strict=True)

    def body(s, _):
      return self._round_step_with(data, s)

    return jax.lax.scan(body, state, None, length=num_rounds)

  # ---------------------------------------------------------------- evaluation
  def _evaluate_with(self, data: SimulationData, state: RoundState) -> dict:
    """What an evaluation writes: the global test set's loss and accuracy, each optional
    pass only where its config field asks for it (``global_train_loss``: every client's
    training split; ``client_accuracy``: the clients' local test splits, the per-client
    accuracy statistics), and the counters of the state (no model call)."""
    test_loss, test_acc = self.global_eval(state.params, data)
    out = {"test_loss": test_loss, "test_accuracy": test_acc}
    if self.config.global_train_loss:
      out["global_train_loss"], out["global_train_accuracy"] = self.global_eval(
        state.params, data, "train"
      )
    if self.config.client_accuracy:
      _, acc_k, has = self.client_eval(state.params, data)
      out.update(evaluation.accuracy_distribution(acc_k, None if self._all_local else has))
    counts = state.sampling_counts.astype(jnp.float32)
    out["sampling_count_mean"] = jnp.mean(counts)
    out["sampling_count_var"] = jnp.var(counts)
    out["useful_step_fraction"] = state.useful_steps / jnp.maximum(state.executed_steps, 1.0)
    out["nonfinite_updates"] = state.nonfinite_updates
    out["empty_rounds"] = state.empty_rounds
    return out


def to_host(metrics: dict) -> dict:
  """Converts a dict of device scalars/arrays to Python floats/lists."""
  out = {}
  for k, v in metrics.items():
    if isinstance(v, jax.Array) and not (v.is_fully_addressable or v.is_fully_replicated):
      from jax.experimental import multihost_utils  # several processes: gather the shards

      v = multihost_utils.process_allgather(v, tiled=True)
    a = np.asarray(v)
    out[k] = a.item() if a.ndim == 0 else a.tolist()
  return out

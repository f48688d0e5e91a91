"""The round loop's data types: the experiment's whole state (``RoundState``), the arrays
the compiled programs read (``SimulationData``, passed by ``DataBound``) and the static
settings (``SimulationConfig``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.struct
import jax

from fedjax_sel.core import evaluation
from fedjax_sel.core.engine import EngineConfig, TrainArrays


@flax.struct.dataclass
class RoundState:
  """Everything a run needs to continue: the experiment's whole state."""

  params: Any
  server_opt_state: Any
  availability_state: Any
  selection_state: Any
  aggregation_state: Any
  client_state: Any
  key: jax.Array
  availability_key: jax.Array
  round: jax.Array  # i32[], the next round to run
  sampling_counts: jax.Array  # i32[N]
  update_sketch: jax.Array  # f32[N, d] (d = 0 unless the selection uses updates)
  embeddings: jax.Array  # f32[N, E] (E = 0 unless the selection uses updates)
  seen: jax.Array  # bool[N]
  useful_steps: jax.Array  # f32[], real local steps so far
  executed_steps: jax.Array  # f32[], steps executed including padding
  nonfinite_updates: jax.Array  # i32[], client updates dropped as non-finite
  empty_rounds: jax.Array  # i32[], rounds in which nobody trained
  skipped_updates: jax.Array  # i32[], rounds whose global update was non-finite


class SimulationData(NamedTuple):
  """Every array the compiled round and evaluation read besides the state.

  They enter ``round_step``, ``run_rounds`` and ``evaluate`` (and the selection context's
  ``client_losses`` / ``client_test_losses`` / ``eval_value``) as an argument, never as
  constants, so a program is compiled once per shape whatever the data's values, and
  compile time and memory do not grow with the dataset (issue 23).

  Attributes:
    train: the flat training arrays (``engine.TrainArrays``).
    test: the global test set (``evaluation.EvalArrays``).
    local_test: the clients' local test sets, client after client.
    local_offsets, local_counts: i32[N] each client's slice of ``local_test``.
    local_client_of: i32[n_local] the client of each local test example.
    local_inv_counts: f32[N] ``1 / max(local_counts, 1)`` (computed on the host).
    projection: f32[P, d] the update-sketch projection (d = 0 unless sketches are kept).
    noise: f32[E, ...] the shared noise inputs of functional embeddings.
  """

  train: TrainArrays
  test: evaluation.EvalArrays
  local_test: evaluation.EvalArrays
  local_offsets: jax.Array
  local_counts: jax.Array
  local_client_of: jax.Array
  local_inv_counts: jax.Array
  projection: jax.Array
  noise: jax.Array


class DataBound:
  """A jitted ``f(data, *args)`` called as ``f(*args)`` with a simulation's ``device_data``,
  so the data are an argument of the compiled program. ``_cache_size``, ``lower`` and
  ``with_data(data, *args)`` (the same program on other data of equal shapes) pass through."""

  def __init__(self, jitted, sim):
    self.jitted = jitted
    self._sim = sim

  def __call__(self, *args, **kwargs):
    return self.jitted(self._sim.device_data, *args, **kwargs)

  def with_data(self, data: SimulationData, *args, **kwargs):
    return self.jitted(data, *args, **kwargs)

  def lower(self, *args, **kwargs):
    return self.jitted.lower(self._sim.device_data, *args, **kwargs)

  def _cache_size(self) -> int:
    return self.jitted._cache_size()


class SimulationConfig(NamedTuple):
  """Static settings of the round loop."""

  client_lr: float = 0.1
  lr_decay: float = 1.0  # client lr at round t = client_lr * lr_decay ** t
  client_optimizer: str = "sgd"
  client_momentum: float = 0.0
  client_weight_decay: float = 0.0  # coupled L2 (PyTorch SGD's weight_decay)
  lr_schedule: str = "exponential"  # or "step": client_lr * lr_step_gamma ** (t // lr_step_size)
  lr_step_size: int = 0  # rounds per step (>= 1 with lr_schedule="step")
  lr_step_gamma: float = 0.1
  # t of the schedule: "round" (the round index) or "participation" (the client's own
  # count of earlier local trainings; FedEMD's per-client StepLR)
  lr_schedule_unit: str = "round"
  server_optimizer: str = "sgd"
  server_lr: float = 1.0
  server_momentum: float = 0.9
  sketch_dim: int = 256
  sketch_seed: int = 0
  num_noise_inputs: int = 16
  loss_examples: int = 64  # examples per client for ctx.client_losses
  engine: EngineConfig = EngineConfig()
  # test examples per model call in evaluation; 0: automatic, the largest of 1024 and the
  # powers of two below whose forward temporaries fit in eval_memory_mb (estimated from
  # the forward's jaxpr: evaluation.auto_chunk). Dense models keep 1024 (results bit for
  # bit as before issue 23); cnn_mnist gets 128 (its temporaries at 1024: 1.3 GB; other
  # chunk sizes change per-example values by float rounding, <= 5e-7)
  eval_chunk: int = 0
  eval_memory_mb: int = 512
  # also evaluate the global model on every client's training split (``evaluate`` adds
  # global_train_loss / global_train_accuracy: example-weighted over the union of the
  # training examples, chunked as the test set; the loss the papers plot)
  global_train_loss: bool = False
  # evaluate the global model on every client's local test split (``evaluate`` adds
  # client_acc_mean / _var / _worst10 / _best10); False skips that pass (selection's
  # ctx.client_test_losses does not depend on it)
  client_accuracy: bool = True

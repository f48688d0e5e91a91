"""The optimizers of a run, as optax: the server optimizer, the clients' local optimizer
(PyTorch ``SGD`` semantics: momentum and coupled weight decay) and the client lr schedule."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax

from fedjax_sel.core.registry import check_range, is_integer, is_traced

SERVER_OPTIMIZERS = ("sgd", "momentum", "adam", "yogi", "adagrad")


CLIENT_OPTIMIZERS = ("sgd", "momentum")


LR_SCHEDULES = ("exponential", "step")


# what the schedule's t counts: rounds (one lr for the cohort) or each client's own
# completed local trainings (one lr per slot, as a per-client PyTorch scheduler)
LR_SCHEDULE_UNITS = ("round", "participation")


DEFAULT_CLIENT_MOMENTUM = 0.9  # what client_optimizer="momentum" means with client_momentum=0


def client_momentum(name: str, momentum: float = 0.0) -> float:
  """The heavy-ball momentum a client optimizer runs with: ``momentum``, or 0.9 for
  ``"momentum"`` given 0 (its meaning before ``momentum`` was a value), else 0."""
  return float(momentum) or (DEFAULT_CLIENT_MOMENTUM if name == "momentum" else 0.0)


def make_server_optimizer(name: str, lr: float, momentum: float = 0.9):
  check_range("server_lr", lr, 0.0, low_inclusive=False)
  if not np.isfinite(float(lr)):
    raise ValueError(f"server_lr={lr!r} is out of range; allowed: finite numbers > 0")
  check_range("server_momentum", momentum, 0.0, 1.0, high_inclusive=False)
  if name == "sgd":
    return optax.sgd(lr)
  if name == "momentum":
    return optax.sgd(lr, momentum=momentum)
  if name == "adam":
    return optax.adam(lr, eps=1e-3)  # FedAdam (Reddi et al. 2021) uses tau = 1e-3
  if name == "yogi":
    return optax.yogi(lr, eps=1e-3)
  if name == "adagrad":
    return optax.adagrad(lr, eps=1e-3)
  raise ValueError(f"server_optimizer={name!r}; allowed: {', '.join(SERVER_OPTIMIZERS)}")


def make_client_optimizer(name: str, momentum: float = 0.0, weight_decay: float = 0.0):
  """``lr -> optax.GradientTransformation``: a client's local SGD, as PyTorch's ``SGD``.

  Args:
    name: ``"sgd"`` or ``"momentum"`` (``"momentum"`` with ``momentum=0`` means 0.9, the
      meaning it had before ``momentum`` was a value).
    momentum: heavy-ball momentum mu in [0, 1) (``torch.optim.SGD(momentum=mu)``,
      dampening 0, not Nesterov: ``b <- mu b + g``, ``p <- p - lr b``); 0 = none.
    weight_decay: coupled L2 lambda >= 0 (``torch.optim.SGD(weight_decay=lambda)``):
      ``g <- g + lambda p`` before momentum, i.e. ``optax.add_decayed_weights`` chained
      before ``optax.sgd``; not AdamW-style decoupled decay.

  The optimizer state (momentum buffer) starts from zero for every client every round.
  """
  if name not in CLIENT_OPTIMIZERS:
    raise ValueError(f"client_optimizer={name!r}; allowed: {', '.join(CLIENT_OPTIMIZERS)}")
  check_range("client_momentum", momentum, 0.0, 1.0, high_inclusive=False)
  check_range("client_weight_decay", weight_decay, 0.0)
  if not np.isfinite(float(weight_decay)):
    raise ValueError(f"client_weight_decay={weight_decay!r} is out of range; allowed: [0, inf)")
  mu = client_momentum(name, momentum)
  wd = float(weight_decay)

  def make(lr):
    sgd = optax.sgd(lr, momentum=mu) if mu else optax.sgd(lr)
    return optax.chain(optax.add_decayed_weights(wd), sgd) if wd else sgd

  return make


def make_client_lr_schedule(
  client_lr: float,
  schedule: str = "exponential",
  lr_decay: float = 1.0,
  step_size: int = 0,
  step_gamma: float = 0.1,
):
  """The client learning rate as a function of the round index t (an optax-style schedule).

  ``exponential``: ``client_lr * lr_decay ** t`` (FedGS, FedProx). ``step``:
  ``client_lr * step_gamma ** floor(t / step_size)`` (PyTorch ``StepLR``, FedEMD), i.e.
  ``optax.exponential_decay(client_lr, step_size, step_gamma, staircase=True)``. t counts
  rounds (0 = the first); every client of a round trains with the same lr.
  """
  check_range("client_lr", client_lr, 0.0, low_inclusive=False)
  if not is_traced(client_lr) and not np.isfinite(float(client_lr)):
    raise ValueError(f"client_lr={client_lr!r} is out of range; allowed: finite numbers > 0")
  if schedule not in LR_SCHEDULES:
    raise ValueError(f"lr_schedule={schedule!r}; allowed: {', '.join(LR_SCHEDULES)}")
  if schedule == "exponential":
    check_range("lr_decay", lr_decay, 0.0, 1.0, low_inclusive=False)
    return lambda t: client_lr * jnp.power(lr_decay, jnp.asarray(t).astype(jnp.float32))
  if not is_integer(step_size, strict=True) or step_size < 1:
    raise ValueError(
      f"lr_step_size={step_size!r} is out of range; allowed: integers >= 1 (rounds per step "
      "of lr_schedule='step')"
    )
  check_range("lr_step_gamma", step_gamma, 0.0, 1.0, low_inclusive=False)
  step_size = int(step_size)
  return lambda t: (
    client_lr * jnp.power(step_gamma, (jnp.asarray(t) // step_size).astype(jnp.float32))
  )

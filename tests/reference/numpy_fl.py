"""An independent federated-learning round in plain numpy (float64), for checking ``Simulation``.

Nothing here imports ``fedjax_sel``: models, gradients, local SGD, batching, aggregation
(FedAvg, MIFA, FedAR) and the server optimizer are written again from their definitions.
``jax.random`` is used only for the raw random bits that the engine's documented batch-order
rule consumes, so both sides see the same example order:

* Keys. Round t of a run with state key ``k`` uses ``key_t = fold_in(k, t)``,
  ``(k_sel, k_train) = split(key_t)``; cohort slot i trains with ``fold_in(k_train, i)``.
* Orders. A client with n of the population's n_max examples (n_max = the largest client)
  draws ``num_perms`` permutations of its examples from ``bits(slot_key, (num_perms, n_max))``
  (uint32): with ``b = bit_length(n_max - 1)`` (at least 1), example i < n gets the sort key
  ``(bits >> b, i)`` and the permutation lists the examples by increasing key (examples
  i >= n sort last and are never used).
* Local epochs E (``local_steps`` None): ``num_perms = E``; epoch e walks permutation e in
  ``ceil(n / B)`` batches of B examples, the last one partial (n mod B examples).
* Local steps K: ``num_perms = min(8, max(1, ceil(K B / max(1, n_max // 4))))``; the K
  batches of B read one stream of positions p = j B + b (batch j, entry b < min(B, n)),
  position p being example ``perm[(p // n) % num_perms][p % n]``.
* A step's loss is the mean softmax cross-entropy of its batch; the client's reported loss
  is the mean of its steps' losses (taken before each step's update).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

# ---------------------------------------------------------------- batching


def permutations(key, n: int, n_max: int, num_perms: int) -> np.ndarray:
  """int[num_perms, n]: the client's example orders under the documented rule."""
  shift = max(1, (max(n_max, 1) - 1).bit_length())
  high = np.asarray(jax.random.bits(key, (num_perms, n_max), jnp.uint32)) >> np.uint32(shift)
  rows = []
  for r in high:
    order = sorted(range(n), key=lambda i, r=r: (int(r[i]), i))
    rows.append(order)
  return np.asarray(rows, np.int64).reshape(num_perms, n)


def client_batches(key, n: int, n_max: int, batch: int, epochs: int, steps: int | None):
  """The list of local batches (arrays of the client's example indices)."""
  if n == 0:
    return []
  if steps is None:
    perms = permutations(key, n, n_max, epochs)
    out = []
    for e in range(epochs):
      for s in range(math.ceil(n / batch)):
        out.append(perms[e][s * batch : min((s + 1) * batch, n)])
    return out
  num_perms = min(8, max(1, math.ceil(steps * batch / max(1, n_max // 4))))
  perms = permutations(key, n, n_max, num_perms)
  out = []
  for j in range(steps):
    pos = [j * batch + b for b in range(min(batch, n))]
    out.append(np.asarray([perms[(p // n) % num_perms][p % n] for p in pos], np.int64))
  return out


# ---------------------------------------------------------------- models


def _softmax_ce(logits, y):
  z = logits - logits.max(axis=1, keepdims=True)
  p = np.exp(z)
  p /= p.sum(axis=1, keepdims=True)
  loss = -np.log(p[np.arange(len(y)), y]).mean()
  grad = p.copy()
  grad[np.arange(len(y)), y] -= 1.0
  return loss, grad / len(y)


def dense_layers(params: dict) -> list[str]:
  """Flax's Dense_0, Dense_1, ... in order."""
  return sorted(params, key=lambda name: int(name.split("_")[1]))


def loss_and_grad(params: dict, x: np.ndarray, y: np.ndarray):
  """Mean cross-entropy of a ReLU MLP (no hidden layer: logistic regression) and its gradient."""
  names = dense_layers(params)
  acts = [x.reshape(len(x), -1)]
  for name in names[:-1]:
    h = acts[-1] @ params[name]["kernel"] + params[name]["bias"]
    acts.append(np.maximum(h, 0.0))
  last = names[-1]
  logits = acts[-1] @ params[last]["kernel"] + params[last]["bias"]
  loss, g = _softmax_ce(logits, y)
  grads = {}
  for li in range(len(names) - 1, -1, -1):
    name = names[li]
    grads[name] = {"kernel": acts[li].T @ g, "bias": g.sum(0)}
    if li > 0:
      g = (g @ params[name]["kernel"].T) * (acts[li] > 0)
  return loss, grads


def predict(params: dict, x: np.ndarray) -> np.ndarray:
  names = dense_layers(params)
  h = x.reshape(len(x), -1)
  for name in names[:-1]:
    h = np.maximum(h @ params[name]["kernel"] + params[name]["bias"], 0.0)
  return h @ params[names[-1]]["kernel"] + params[names[-1]]["bias"]


# ---------------------------------------------------------------- pytrees of dicts


def tmap(f, *trees):
  if isinstance(trees[0], dict):
    return {k: tmap(f, *(t[k] for t in trees)) for k in trees[0]}
  return f(*trees)


def to_numpy(tree):
  return tmap(lambda a: np.asarray(a, np.float64), tree)


def zeros_like(tree):
  return tmap(np.zeros_like, tree)


# ---------------------------------------------------------------- local training


def local_train(params, x, y, batches, lr: float, momentum: float = 0.0):
  """SGD (heavy-ball momentum ``v <- g + mu v; w <- w - lr v`` when momentum > 0) over the
  batches; returns (delta = local - global, mean step loss)."""
  w = tmap(np.copy, params)
  v = zeros_like(params)
  losses = []
  for idx in batches:
    loss, g = loss_and_grad(w, x[idx], y[idx])
    losses.append(loss)
    if momentum:
      v = tmap(lambda v_, g_: g_ + momentum * v_, v, g)
      w = tmap(lambda w_, v_: w_ - lr * v_, w, v)
    else:
      w = tmap(lambda w_, g_: w_ - lr * g_, w, g)
  return tmap(np.subtract, w, params), (float(np.mean(losses)) if losses else 0.0)


# ---------------------------------------------------------------- aggregation


def fedavg(deltas, weights, valid, received):
  """sum of w_m delta_m over received slots, the weights rescaled to the valid slots' total."""
  w = np.where(valid, weights, 0.0)
  got = np.where(received, w, 0.0)
  scale = w.sum() / got.sum() if got.sum() > 0 else 0.0
  out = zeros_like(deltas[0])
  for m, d in enumerate(deltas):
    if received[m]:
      out = tmap(lambda o, d_, c=got[m] * scale: o + c * d_, out, d)
  return out


class MIFA:
  """MIFA (Gu et al. 2021, Alg. 1): G_i <- delta_i / eta_t from the client i that answered
  (delta = local minus global params, so G here is minus the paper's), kept otherwise;
  update = eta_t (1/N) sum_i G_i, or eta_t sum_i q_i G_i / sum_i q_i with client weights q
  (``sizes``). ``lrs``: every client's lr eta_t this round (None: 1). ``seen_only``: the
  average over the clients that ever answered; ``step_scale``: a factor on the update."""

  def __init__(self, params, num_clients, sizes=None, seen_only=False, step_scale=1.0):
    self.memory = [zeros_like(params) for _ in range(num_clients)]
    self.q = [1.0] * num_clients if sizes is None else [float(v) for v in sizes]
    self.seen = [False] * num_clients
    self.seen_only, self.step_scale = seen_only, step_scale

  def __call__(self, deltas, cohort, received, t, lrs=None):
    del t
    lrs = [1.0] * len(self.q) if lrs is None else lrs
    for m, d in enumerate(deltas):
      if received[m]:
        self.memory[cohort[m]] = tmap(lambda d_, e=lrs[cohort[m]]: d_ / e, d)
        self.seen[cohort[m]] = True
    q = [qi if self.seen[i] or not self.seen_only else 0.0 for i, qi in enumerate(self.q)]
    total = sum(q)
    out = zeros_like(self.memory[0])
    for i, g in enumerate(self.memory):
      if q[i]:
        c = self.step_scale * lrs[i] * q[i] / total
        out = tmap(lambda o, g_, c=c: o + c * g_, out, g)
    return out


class FedAR:
  """FedAR (Jiang et al.), Eq. (4)-(7), convex cutoff g(t) = t0 + t / b, the paper's t being
  1-based (our round index + 1): tau_i = 0 if i's update arrived, tau_i + 1 otherwise;
  psi_i = 0 if tau_i >= g(t) else min((tau_i + 1)^rho, psi_max); N_t = the clients ever seen
  with psi > 0; update = (1 / N_t) sum_i psi_i G_i. With client weights q (``sizes``):
  N_t = sum of q_i over those clients and every term is weighted by q_i. G_i = delta_i / eta
  of the round it arrived, and the update is eta_t times the weighted sum (Eq. 4 and 7;
  ``lrs``: every client's eta_t this round, None: 1)."""

  def __init__(self, params, num_clients, rho, t0, b, psi_max, sizes=None):
    self.memory = [zeros_like(params) for _ in range(num_clients)]
    self.q = [1.0] * num_clients if sizes is None else [float(v) for v in sizes]
    self.tau = [0] * num_clients
    self.seen = [False] * num_clients
    self.rho, self.t0, self.b, self.psi_max = rho, t0, b, psi_max
    self.last_psi = None

  def psi(self, tau: int, t_paper: int) -> float:
    if tau >= self.t0 + t_paper / self.b:
      return 0.0
    return min((tau + 1.0) ** self.rho, self.psi_max)

  def __call__(self, deltas, cohort, received, t, lrs=None):
    lrs = [1.0] * len(self.q) if lrs is None else lrs
    arrived = set()
    for m, d in enumerate(deltas):
      if received[m]:
        self.memory[cohort[m]] = tmap(lambda d_, e=lrs[cohort[m]]: d_ / e, d)
        arrived.add(int(cohort[m]))
    for i in range(len(self.tau)):
      self.tau[i] = 0 if i in arrived else self.tau[i] + 1
      self.seen[i] = self.seen[i] or i in arrived
    psi = [self.psi(self.tau[i], t + 1) for i in range(len(self.tau))]
    self.last_psi = psi
    contributing = [i for i in range(len(psi)) if self.seen[i] and psi[i] > 0]
    self.num_contributing = sum(self.q[i] for i in contributing)
    out = zeros_like(self.memory[0])
    for i in contributing:
      c = lrs[i] * psi[i] * self.q[i] / self.num_contributing
      out = tmap(lambda o, g, c=c: o + c * g, out, self.memory[i])
    return out


# ---------------------------------------------------------------- server


class Server:
  """params <- params + lr * v, v = update (+ mu v_prev with momentum): optax's SGD on -update."""

  def __init__(self, params, lr: float, momentum: float = 0.0):
    self.params = to_numpy(params)
    self.lr, self.momentum = lr, momentum
    self.trace = zeros_like(self.params)

  def step(self, update):
    if self.momentum:
      self.trace = tmap(lambda v, u: u + self.momentum * v, self.trace, update)
      step = self.trace
    else:
      step = update
    self.params = tmap(lambda p, s: p + self.lr * s, self.params, step)


def run_rounds(
  params,
  state_key,
  x,
  y,
  offsets,
  counts,
  schedule,
  aggregate,
  *,
  rounds,
  batch,
  epochs=1,
  steps=None,
  client_lr,
  lr_decay=1.0,
  lr_step=None,
  lr_unit="round",
  client_momentum=0.0,
  server_lr=1.0,
  server_momentum=0.0,
  aggregate_lrs=False,
):
  """Runs ``rounds`` rounds; returns (final params, per-round records).

  ``schedule(t) -> (cohort, valid, weights, avail)`` gives each round's cohort slots and who
  is available; ``aggregate(deltas, cohort, valid, weights, received, t) -> update``.
  A slot is trained when valid and its update received when also available.
  The client lr is ``client_lr * lr_decay**u``, or with ``lr_step = (size, gamma)``
  ``client_lr * gamma**(u // size)`` (PyTorch StepLR), where u is the round t
  (``lr_unit="round"``) or the number of rounds in which the slot's client trained before
  (``"participation"``: a scheduler per client, stepped after each of its local trainings);
  the record's ``client_lr`` is then the mean over the trained slots. With
  ``aggregate_lrs`` the aggregate gets a seventh argument: every client's lr this round.
  """
  x = np.asarray(x, np.float64)
  y = np.asarray(y)
  n_max = max(int(max(counts)), 1)
  server = Server(params, server_lr, server_momentum)
  records = []
  trainings = [0] * len(counts)

  def lr_at(u):
    if lr_step is None:
      return client_lr * lr_decay**u
    size, gamma = lr_step
    return client_lr * gamma ** (u // size)

  for t in range(rounds):
    cohort, valid, weights, avail = schedule(t)
    key_t = jax.random.fold_in(state_key, t)
    _, k_train = jax.random.split(key_t)
    lr = lr_at(t)
    client_lrs = [lr_at(k) if lr_unit == "participation" else lr for k in trainings]
    deltas, losses, used_lrs = [], [], []
    for i, c in enumerate(cohort):
      if not valid[i]:
        deltas.append(zeros_like(server.params))
        losses.append(0.0)
        continue
      lr_c = lr_at(trainings[c]) if lr_unit == "participation" else lr
      used_lrs.append(lr_c)
      n, o = int(counts[c]), int(offsets[c])
      bs = client_batches(jax.random.fold_in(k_train, i), n, n_max, batch, epochs, steps)
      d, loss = local_train(server.params, x[o : o + n], y[o : o + n], bs, lr_c, client_momentum)
      deltas.append(d)
      losses.append(loss)
    for i, c in enumerate(cohort):
      trainings[c] += bool(valid[i])
    if lr_unit == "participation":
      lr = float(np.mean(used_lrs)) if used_lrs else 0.0
    received = [bool(valid[i]) and bool(avail[cohort[i]]) for i in range(len(cohort))]
    extra = (client_lrs,) if aggregate_lrs else ()
    update = aggregate(deltas, cohort, valid, weights, received, t, *extra)
    server.step(update)
    trained = [losses[i] for i in range(len(cohort)) if valid[i]]
    records.append(
      {
        "train_loss": float(np.mean(trained)) if trained else 0.0,
        "num_selected": int(np.sum(valid)),
        "num_available": int(np.sum(avail)),
        "client_lr": lr,
      }
    )
  return server.params, records

"""Shared pieces of the benchmarks: data, timing, reference loops, FLOP counts, machine facts.

The reference loops (a per-step jitted loop fed host batches, the way FedJAX trains a
client, and a PyTorch per-client loop) reproduce the engine's batch order exactly, so
every benchmark can assert that all implementations return the same deltas before it
times them.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_sel import experiment, models
from fedjax_sel.core import engine as engine_lib
from fedjax_sel.data.synthetic import synthetic

IMAGE_SHAPES = {"cnn_mnist": (28, 28, 1), "cnn_cifar": (32, 32, 3)}


# ----------------------------------------------------------------------------- machine
def machine_info(with_torch: bool = False) -> dict:
  """nproc, CPU model, load and library versions (torch only if asked: importing it costs
  ~200 MB of resident memory, which would pollute memory measurements)."""
  info = {
    "nproc": os.cpu_count(),
    "cpu": experiment.cpu_info()["model"],  # what config.json records for a run
    "jax": jax.__version__,
    "backend": jax.default_backend(),
    "devices": len(jax.devices()),
  }
  try:
    info["loadavg_1m"] = round(os.getloadavg()[0], 2)
  except OSError:
    pass
  if not with_torch:
    return info
  try:
    import torch

    info["torch"] = torch.__version__
    info["torch_threads"] = torch.get_num_threads()
  except ImportError:
    info["torch"] = None
  return info


def set_cpu_devices(n: int) -> None:
  """Exposes ``n`` CPU cores as JAX devices; must run before JAX starts its backend."""
  if n < 1:
    raise SystemExit(f"--cpu_devices={n}; allowed: an integer >= 1")
  try:
    jax.config.update("jax_num_cpu_devices", n)
  except RuntimeError as e:  # the backend is already up in this process
    if jax.device_count("cpu") != n:
      raise SystemExit(f"--cpu_devices={n}: JAX's CPU backend already started ({e})") from e


# ----------------------------------------------------------------------------- data
class CohortData(NamedTuple):
  """Flat training arrays of N clients (numpy), as the engine takes them."""

  x: np.ndarray
  y: np.ndarray
  offsets: np.ndarray
  counts: np.ndarray
  input_shape: tuple
  num_classes: int


def image_sizes(num_clients: int, rng: np.random.Generator, mean: int = 50) -> np.ndarray:
  """Unequal client sizes for image benchmarks: lognormal around ``mean``, in [10, 4 mean]."""
  sizes = rng.lognormal(math.log(mean), 0.5, num_clients)
  return np.clip(np.round(sizes), 10, 4 * mean).astype(np.int32)


def make_data(
  model_name: str,
  num_clients: int,
  seed: int = 0,
  examples_per_client: int | None = None,
) -> CohortData:
  """Synthetic(0.5, 0.5) for logreg/mlp; random images for the CNNs.

  Args:
    model_name: logreg, mlp, cnn_mnist, cnn_cifar (or pfl_cnn: 32x32x3 images).
    num_clients: N.
    seed: numpy seed.
    examples_per_client: equal sizes; None = Synthetic's own lognormal(4, 2) + 50 sizes,
      or lognormal around 50 for images.
  """
  if model_name in ("logreg", "mlp"):
    tr = synthetic(
      0.5, 0.5, num_clients=num_clients, examples_per_client=examples_per_client, seed=seed
    ).train
    return CohortData(tr.x, tr.y, tr.offsets, tr.counts, tuple(tr.x.shape[1:]), 10)
  shape = IMAGE_SHAPES.get(model_name, (32, 32, 3))
  rng = np.random.default_rng(seed)
  if examples_per_client:
    counts = np.full(num_clients, examples_per_client, np.int32)
  else:
    counts = image_sizes(num_clients, rng)
  total = int(counts.sum())
  x = rng.normal(size=(total, *shape)).astype(np.float32)
  y = rng.integers(0, 10, total).astype(np.int32)
  offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
  return CohortData(x, y, offsets, counts, shape, 10)


def make_model(
  model_name: str, data: CohortData, conv_impl: str = "auto", half_precision: bool = False
) -> models.Model:
  """The model as ``models.make`` builds it; CNNs with convolutions ``conv_impl`` (``auto``:
  what a user gets on this backend; ``xla``, ``canonical``, ``im2col``: the same params);
  ``half_precision``: bfloat16 compute over the same float32 params."""
  extra = {"conv_impl": conv_impl} if model_name.startswith("cnn") else {}
  return models.make(
    model_name, data.input_shape, data.num_classes, half_precision=half_precision, **extra
  )


BF16_UNITS = ("amx_bf16", "avx512_bf16")  # x86 flags of bfloat16 matrix / dot-product units


def host_simd() -> dict:
  """The host's SIMD flags (as config.json records them) and whether it has bfloat16 units."""
  simd = experiment.cpu_info()["simd"]
  return {"simd": simd, "bf16_units": [f for f in BF16_UNITS if f in simd]}


# ----------------------------------------------------------------------------- timing
def block(out: Any) -> Any:
  return jax.block_until_ready(out)


def interleaved_medians(
  fns: dict[str, Callable[[], Any]], repeats: int, warmup: int = 1
) -> dict[str, dict]:
  """Times each function ``repeats`` times, interleaving them so load affects all alike.

  Returns:
    {name: {"median_s", "min_s", "samples_s"}}; each call's output is blocked on.
  """
  for _ in range(warmup):
    for fn in fns.values():
      block(fn())
  samples: dict[str, list[float]] = {k: [] for k in fns}
  names = list(fns)
  for r in range(repeats):
    # rotate the order so no method always runs first/last after another
    order = names[r % len(names) :] + names[: r % len(names)]
    for name in order:
      t0 = time.perf_counter()
      block(fns[name]())
      samples[name].append(time.perf_counter() - t0)
  return {
    k: {
      "median_s": statistics.median(v),
      "min_s": min(v),
      "samples_s": [round(s, 6) for s in v],
    }
    for k, v in samples.items()
  }


def compile_timed(fn: Callable, *args) -> tuple[Callable, float]:
  """AOT-compiles ``jax.jit(fn)`` for ``args``; returns (compiled, seconds to compile)."""
  t0 = time.perf_counter()
  compiled = jax.jit(fn).lower(*args).compile()
  return compiled, time.perf_counter() - t0


# ----------------------------------------------------------------------------- engine
def build_trainer(
  model: models.Model,
  data: CohortData,
  num_selected: int,
  parallelism: str,
  chunk_size: int = 0,
  batch_size: int = 10,
  local_epochs: int = 1,
  train_x: jax.Array | None = None,
  train_y: jax.Array | None = None,
):
  """The engine's cohort trainer for plain SGD (``fedjax_sel.client`` ``sgd``)."""
  from fedjax_sel import client as client_lib

  cfg = engine_lib.EngineConfig(
    batch_size=batch_size,
    local_epochs=local_epochs,
    parallelism=parallelism,
    chunk_size=chunk_size,
  )
  return engine_lib.make_cohort_trainer(
    model.apply,
    client_lib.make("sgd"),
    lambda lr: optax.sgd(lr),
    jnp.asarray(data.x) if train_x is None else train_x,
    jnp.asarray(data.y) if train_y is None else train_y,
    data.offsets,
    data.counts,
    cfg,
    num_selected,
    conv=model.conv,
    num_params=models.num_params(model),
  )


def engine_batches(
  data: CohortData, cohort: np.ndarray, key: jax.Array, batch_size: int, local_epochs: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The engine's batch order for each cohort slot: (idx i32[M, S, B], mask, steps i32[M]).

  Reproduces ``batch_indices`` of ``fedjax_sel.core.engine`` (local-epochs mode) with the
  slot keys ``fold_in(key, slot)``; indices are relative to the client's offset.
  """
  cfg = engine_lib.EngineConfig(batch_size=batch_size, local_epochs=local_epochs)
  n_max = max(int(data.counts.max()), 1)
  s_max = engine_lib.max_steps(n_max, cfg)
  num_perms = int(local_epochs)
  b = batch_size

  def one(key_i, n, steps):
    perm = engine_lib.client_permutations(key_i, n, n_max, num_perms)
    j = jnp.arange(s_max)[:, None]
    bb = jnp.arange(b)[None, :]
    steps_per_epoch = jnp.maximum((n + b - 1) // b, 1)
    epoch = jnp.minimum(j // steps_per_epoch, num_perms - 1)
    within = (j % steps_per_epoch) * b + bb
    mask = (within < n) & (j < steps)
    within = jnp.minimum(within, n_max - 1)
    return perm[epoch, within], mask

  counts = jnp.asarray(data.counts)[cohort]
  steps = engine_lib.steps_per_client(counts, cfg)
  keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(len(cohort)))
  idx, mask = jax.jit(jax.vmap(one))(keys, counts, steps)
  return np.asarray(idx), np.asarray(mask), np.asarray(steps)


# ----------------------------------------------------------------------------- per-step loop
def make_per_step_loop(model: models.Model, data: CohortData, batches, lr: float):
  """A FedJAX-style loop: one jitted SGD step per dispatch on host-gathered numpy batches.

  Returns ``run(global_params, cohort) -> deltas`` (pytree of [M, ...]).
  """
  loss_fn = engine_lib.cross_entropy_loss(model.apply)
  idx, mask, steps = batches
  x, y, offsets = data.x, data.y, data.offsets

  @jax.jit
  def sgd_step(params, xb, yb, mb):
    _, grads = jax.value_and_grad(loss_fn)(params, (xb, yb, mb))
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)

  sub = jax.jit(lambda p, g: jax.tree_util.tree_map(jnp.subtract, p, g))

  def run(global_params, cohort):
    deltas = []
    for i, k in enumerate(cohort):
      params = global_params
      base = int(offsets[k])
      for j in range(int(steps[i])):
        flat = np.minimum(base + idx[i, j], len(x) - 1)  # masked slots may point past
        params = sgd_step(params, x[flat], y[flat], mask[i, j])
      deltas.append(sub(params, global_params))
    return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *deltas)

  return run


# ----------------------------------------------------------------------------- FLOPs
def flops_per_step(model: models.Model, batch_size: int) -> float:
  """XLA's FLOP count of one local SGD step (loss + gradient) on a batch of B examples."""
  loss_fn = engine_lib.cross_entropy_loss(model.apply)
  params = model.init(jax.random.PRNGKey(0))
  xb = jnp.zeros((batch_size, *model.input_shape), jnp.float32)
  yb = jnp.zeros((batch_size,), jnp.int32)
  mb = jnp.ones((batch_size,), bool)
  compiled = jax.jit(jax.value_and_grad(loss_fn)).lower(params, (xb, yb, mb)).compile()
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):
    cost = cost[0]
  return float(cost.get("flops", float("nan")))


def matmul_fn(target_flops: float) -> tuple[Callable[[], Any], int]:
  """A dense f32 [n, n] @ [n, n] matmul with about ``target_flops`` FLOPs, to be timed beside
  the measured code (``interleaved_medians``): (call, n); its rate is ``2 n^3 / seconds``.

  n = cbrt(target / 2) clipped to [256, 2048] (tiny matmuls measure dispatch, not the FPU).
  """
  n = int(np.clip(round((target_flops / 2.0) ** (1.0 / 3.0)), 256, 2048))
  k1, k2 = jax.random.split(jax.random.PRNGKey(0))
  a = jax.random.normal(k1, (n, n), jnp.float32)
  b = jax.random.normal(k2, (n, n), jnp.float32)
  mm = jax.jit(jnp.matmul)
  return (lambda: mm(a, b)), n


def matmul_gflops(target_flops: float, repeats: int = 5) -> tuple[float, int]:
  """GFLOP/s of :func:`matmul_fn`'s matmul timed alone. Returns (GFLOP/s, n)."""
  fn, n = matmul_fn(target_flops)
  t = interleaved_medians({"mm": fn}, repeats, warmup=2)["mm"]["median_s"]
  return 2.0 * n**3 / t / 1e9, n


def tree_max_abs_diff(a, b) -> float:
  leaves = jax.tree_util.tree_leaves(
    jax.tree_util.tree_map(lambda u, v: jnp.max(jnp.abs(jnp.asarray(u) - jnp.asarray(v))), a, b)
  )
  return float(max(leaves))


def assert_close(name: str, a, b, atol: float = 1e-4) -> float:
  """Asserts two delta pytrees agree to ``atol`` (max abs difference); returns it."""
  diff = tree_max_abs_diff(a, b)
  if not diff <= atol:
    raise AssertionError(f"{name}: deltas differ by {diff:.3g} > {atol:g}")
  return diff


# ----------------------------------------------------------------------------- PyTorch
def torch_available() -> bool:
  try:
    import torch  # noqa: F401

    return True
  except ImportError:
    return False


def _torch_layers(params: dict) -> list[tuple[str, np.ndarray, np.ndarray]]:
  """The flax layers in forward order: [(kind, kernel, bias)] (Conv_* before Dense_*)."""
  names = sorted(params, key=lambda s: (0 if s.startswith("Conv") else 1, int(s.split("_")[1])))
  return [
    (
      "conv" if n.startswith("Conv") else "dense",
      np.asarray(params[n]["kernel"]),
      np.asarray(params[n]["bias"]),
      n,
    )
    for n in names
  ]


def make_torch_loop(model_name: str, data: CohortData, batches, lr: float, threads: int = 0):
  """A PyTorch per-client loop of the same model, init, batch order and SGD.

  Returns ``(run(global_params, cohort) -> deltas in flax layout, num_threads)``; ``run``
  sets torch's intra-op threads to ``threads`` (0: as they are) at each call.
  Flax layouts are converted: Dense kernel [in, out] -> weight [out, in]; Conv kernel
  HWIO -> OIHW; features are flattened in NHWC order as flax does.
  """
  import torch
  import torch.nn.functional as F

  idx, mask, steps = batches
  x_t = torch.from_numpy(np.ascontiguousarray(data.x))
  y_t = torch.from_numpy(data.y.astype(np.int64))
  mask_t = torch.from_numpy(mask.astype(np.float32))
  idx_t = torch.from_numpy(idx.astype(np.int64))
  padding = {"cnn_mnist": 2, "cnn_cifar": 0, "pfl_cnn": 0}.get(model_name, 0)
  pool = model_name in ("cnn_mnist", "cnn_cifar")

  def forward(ws, xb):
    h = xb
    convs = [w for w in ws if w[0] == "conv"]
    dense = [w for w in ws if w[0] == "dense"]
    if convs:
      h = h.permute(0, 3, 1, 2)
      for i, (_, w, b) in enumerate(convs):
        h = F.relu(F.conv2d(h, w, b, padding=padding))
        if pool:
          h = F.max_pool2d(h, 2)
        elif i == len(convs) - 1:
          h = F.max_pool2d(h, 2)
      h = h.permute(0, 2, 3, 1)
    h = h.reshape(h.shape[0], -1)
    for i, (_, w, b) in enumerate(dense):
      h = F.linear(h, w, b)
      if i < len(dense) - 1:
        h = F.relu(h)
    return h

  def to_torch(params):
    out = []
    for kind, k, b, _ in _torch_layers(params):
      if kind == "conv":
        w = torch.from_numpy(np.ascontiguousarray(k.transpose(3, 2, 0, 1)))
      else:
        w = torch.from_numpy(np.ascontiguousarray(k.T))
      out.append((kind, w, torch.from_numpy(b.copy())))
    return out

  def run(global_params, cohort):
    if threads:
      torch.set_num_threads(threads)
    layers = _torch_layers(global_params)
    init = to_torch(global_params)
    deltas = []
    for i, k in enumerate(cohort):
      ws = [
        (kind, w.clone().requires_grad_(True), b.clone().requires_grad_(True))
        for kind, w, b in init
      ]
      tensors = [t for _, w, b in ws for t in (w, b)]
      opt = torch.optim.SGD(tensors, lr=lr)
      base = int(data.offsets[k])
      for j in range(int(steps[i])):
        flat = (base + idx_t[i, j]).clamp(max=len(x_t) - 1)
        xb, yb, mb = x_t[flat], y_t[flat], mask_t[i, j]
        opt.zero_grad(set_to_none=True)
        per_example = F.cross_entropy(forward(ws, xb), yb, reduction="none")
        loss = (per_example * mb).sum() / mb.sum().clamp(min=1.0)
        loss.backward()
        opt.step()
      delta = {}
      for (kind, w, b), (_, k0, b0), (_, _, _, name) in zip(ws, init, layers):
        dw = (w.detach() - k0).numpy()
        dw = dw.transpose(2, 3, 1, 0) if kind == "conv" else dw.T
        delta[name] = {"kernel": dw, "bias": (b.detach() - b0).numpy()}
      deltas.append(delta)
    return jax.tree_util.tree_map(lambda *a: np.stack(a), *deltas)

  return run, threads or torch.get_num_threads()

"""Checkpoints of the whole experiment state (one pytree) plus the metrics so far.

The state's leaves are written with ``numpy.savez`` into a temporary file and renamed into
place, so a crash never leaves a half-written checkpoint; the tree structure comes from a
template state (``Simulation.init``) at restore time, and every leaf's shape and dtype is
checked against it. Only the newest ``keep`` checkpoints are kept.
"""

from __future__ import annotations

import io
import json
import os
import re

import jax
import numpy as np

from fedjax_sel.metrics.results import atomic_write_bytes

_NAME = re.compile(r"^ckpt_(\d+)\.npz$")


def checkpoint_dir(output_dir: str) -> str:
  return os.path.join(output_dir, "checkpoints")


def save(output_dir: str, state, round_index: int, extra: dict | None = None, keep: int = 2):
  """Saves ``state`` as ``checkpoints/ckpt_<round>.npz`` (atomically)."""
  folder = checkpoint_dir(output_dir)
  os.makedirs(folder, exist_ok=True)
  leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.device_get(state))]
  buf = io.BytesIO()
  arrays = {f"leaf_{i}": leaf for i, leaf in enumerate(leaves)}
  arrays["__extra__"] = np.frombuffer(json.dumps(extra or {}).encode(), np.uint8)
  np.savez(buf, **arrays)
  atomic_write_bytes(os.path.join(folder, f"ckpt_{round_index:08d}.npz"), buf.getvalue())
  for r in all_rounds(output_dir)[:-keep]:
    try:
      os.remove(os.path.join(folder, f"ckpt_{r:08d}.npz"))
    except FileNotFoundError:
      pass


def all_rounds(output_dir: str) -> list[int]:
  folder = checkpoint_dir(output_dir)
  if not os.path.isdir(folder):
    return []
  return sorted(int(m.group(1)) for f in os.listdir(folder) if (m := _NAME.match(f)))


def latest_round(output_dir: str) -> int | None:
  rounds = all_rounds(output_dir)
  return rounds[-1] if rounds else None


def restore(output_dir: str, template, round_index: int | None = None):
  """Returns ``(state, extra)`` from the newest (or the given) checkpoint.

  Raises:
    FileNotFoundError: no checkpoint in ``output_dir``.
    ValueError: the checkpoint does not match the template (another config).
  """
  if round_index is None:
    round_index = latest_round(output_dir)
  if round_index is None:
    raise FileNotFoundError(f"no checkpoint under {checkpoint_dir(output_dir)}")
  path = os.path.join(checkpoint_dir(output_dir), f"ckpt_{round_index:08d}.npz")
  with np.load(path) as f:
    extra = json.loads(bytes(f["__extra__"]).decode() or "{}")
    leaves, treedef = jax.tree_util.tree_flatten(template)
    if len(f.files) - 1 != len(leaves):
      raise ValueError(
        f"checkpoint {path} has {len(f.files) - 1} arrays but this experiment's state has "
        f"{len(leaves)}: it was written by a different configuration"
      )
    restored = []
    for i, ref in enumerate(leaves):
      arr = f[f"leaf_{i}"]
      ref = np.asarray(ref)
      if arr.shape != ref.shape or arr.dtype != ref.dtype:
        raise ValueError(
          f"checkpoint {path} leaf {i} is {arr.dtype}{list(arr.shape)} but the state "
          f"expects {ref.dtype}{list(ref.shape)}: it was written by a different configuration"
        )
      restored.append(arr)
  return jax.tree_util.tree_unflatten(treedef, restored), extra

"""Checkpoints of the whole experiment state (one pytree), crash-safe and exact.

The state's leaves are written with ``numpy.savez`` into a temporary file in the same
folder, fsynced, renamed into place and the folder fsynced, so a crash (even SIGKILL or a
power cut mid-write) leaves either the previous checkpoint or the new one, never a torn
one under a checkpoint name. The tree structure comes from a template state
(``Simulation.init``) at restore time; every leaf's shape and dtype is checked against it
and the restored leaves are placed like the template's (device, sharding, weak type), so a
resumed run computes bit for bit what the uninterrupted run computes. Only the newest
``keep`` checkpoints are kept; if the newest cannot be read (e.g. a disk that lied about
fsync), ``restore`` falls back to the one before it.

Why not orbax for one process: orbax-checkpoint (the ``[checkpoint]`` extra) gives the
same atomicity (temporary folder + rename) plus async and multi-host writes; a
one-process state is written between chunks of rounds, so a plain npz keeps the core
install free of the dependency with the same guarantees. See BUILD_NOTES.md
("Checkpoints"). Several processes (``jax.distributed``): the state is sharded over
devices no process sees whole, so each process writes its own shards with orbax
(``checkpoints/orbax/<round>/``, every process must call ``save`` and ``restore``); the
output folder must then be one folder every process sees (a shared file system).
``restore`` reads either format, so a run checkpointed by several processes can be resumed
by one (and back), with the same devices in all.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import zipfile
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from fedjax_sel.metrics.results import WriteError, atomic_write_bytes

_NAME = re.compile(r"^ckpt_(\d+)\.npz$")
_TMP_PREFIX = ".tmp-"
ORBAX_FOLDER = "orbax"  # checkpoints/orbax/<round>/: several processes' sharded state

# What a truncated or corrupt npz raises when opened or read.
_UNREADABLE = (zipfile.BadZipFile, EOFError, OSError, KeyError, ValueError)


def checkpoint_dir(output_dir: str) -> str:
  return os.path.join(output_dir, "checkpoints")


def _path(output_dir: str, round_index: int) -> str:
  return os.path.join(checkpoint_dir(output_dir), f"ckpt_{round_index:08d}.npz")


def _fsync_dir(folder: str) -> None:
  try:
    fd = os.open(folder, os.O_RDONLY)
  except OSError:  # pragma: no cover (platforms without directory fds)
    return
  try:
    os.fsync(fd)
  except OSError:  # pragma: no cover
    pass
  finally:
    os.close(fd)


def _orbax_root(output_dir: str) -> str:
  return os.path.join(os.path.abspath(checkpoint_dir(output_dir)), ORBAX_FOLDER)


def use_orbax(fmt: str | None = None) -> bool:
  """Whether a checkpoint is written with orbax: ``fmt`` "orbax" / "npz", or (None) when
  several processes run (``jax.process_count() > 1``)."""
  if fmt not in (None, "orbax", "npz"):
    raise ValueError(f"checkpoint format {fmt!r}; allowed: orbax, npz (or None: automatic)")
  return fmt == "orbax" or (fmt is None and jax.process_count() > 1)


def _orbax_manager(output_dir: str, keep: int = 2):
  try:
    import orbax.checkpoint as ocp
  except ImportError as e:  # pragma: no cover (the [checkpoint] extra is not installed)
    raise ImportError(
      "checkpoints of a multi-process run need orbax-checkpoint: pip install "
      "'fedjax_sel[checkpoint]'"
    ) from e
  options = ocp.CheckpointManagerOptions(
    max_to_keep=max(keep, 1), enable_async_checkpointing=False, create=True
  )
  handlers = {"state": ocp.StandardCheckpointHandler(), "extra": ocp.JsonCheckpointHandler()}
  return ocp, ocp.CheckpointManager(
    _orbax_root(output_dir), options=options, item_handlers=handlers
  )


def _orbax_leaves(state: Any) -> dict:
  """The state as orbax stores it: ``{"leaf_<i>": leaf}`` in flattening order (as the npz
  files), zero-size leaves left out (orbax refuses them; the template gives them back)."""
  leaves = jax.tree_util.tree_leaves(state)
  return {f"leaf_{i:05d}": x for i, x in enumerate(leaves) if np.size(x)}


def _orbax_save(output_dir, state, round_index, extra, keep) -> str:
  ocp, manager = _orbax_manager(output_dir, keep)
  extra = dict(extra or {}, __num_leaves__=len(jax.tree_util.tree_leaves(state)))
  try:
    if round_index in manager.all_steps():
      # Written already (a stop right after a resume saves the round it resumed from):
      # a round's state is the same for one configuration, and orbax refuses to overwrite.
      return os.path.join(_orbax_root(output_dir), str(round_index))
    args = ocp.args.Composite(
      state=ocp.args.StandardSave(_orbax_leaves(state)), extra=ocp.args.JsonSave(extra)
    )
    # force: also a round below the newest (orbax would skip it without a word)
    manager.save(round_index, args=args, force=True)
    manager.wait_until_finished()
  finally:
    manager.close()
  return os.path.join(_orbax_root(output_dir), str(round_index))


def _orbax_rounds(output_dir: str) -> list[int]:
  """Finished orbax checkpoints (orbax writes ``<round>.orbax-checkpoint-tmp`` and renames it
  to ``<round>`` once every process is done)."""
  root = _orbax_root(output_dir)
  if not os.path.isdir(root):
    return []
  return sorted(int(f) for f in os.listdir(root) if f.isdigit())


def _orbax_read(output_dir: str, round_index: int, template: Any) -> tuple[Any, dict]:
  ocp, manager = _orbax_manager(output_dir)
  path = os.path.join(_orbax_root(output_dir), str(round_index))
  leaves, treedef = jax.tree_util.tree_flatten(template)
  wanted = _orbax_leaves(template)
  try:
    saved = dict(manager.item_metadata(round_index)["state"].tree)
    if sorted(saved) != sorted(wanted):
      raise CheckpointMismatchError(
        f"checkpoint {path} has {len(saved)} arrays of non-zero size but this experiment's "
        f"state has {len(wanted)}: it was written by a different configuration"
      )
    for name, ref in wanted.items():
      shape, dtype = tuple(saved[name].shape), np.dtype(saved[name].dtype)
      if shape != tuple(np.shape(ref)) or dtype != np.dtype(ref.dtype):
        raise CheckpointMismatchError(
          f"checkpoint {path} leaf {int(name[5:])} is {dtype}{list(shape)} but the state "
          f"expects {np.dtype(ref.dtype)}{list(np.shape(ref))}: it was written by a different "
          "configuration"
        )
    abstract = {
      k: jax.ShapeDtypeStruct(np.shape(r), r.dtype, sharding=getattr(r, "sharding", None))
      for k, r in wanted.items()
    }
    out = manager.restore(
      round_index,
      args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), extra=ocp.args.JsonRestore()
      ),
    )
  finally:
    manager.close()
  extra = dict(out["extra"] or {})
  if extra.pop("__num_leaves__", len(leaves)) != len(leaves):
    raise CheckpointMismatchError(
      f"checkpoint {path} was written from a state of another structure: it was written by a "
      "different configuration"
    )
  restored = []
  for i, ref in enumerate(leaves):
    arr = out["state"].get(f"leaf_{i:05d}", ref)  # a zero-size leaf: the template's own
    # orbax drops weak types; a weak leaf of the template gets its own back
    restored.append(_weak_like(ref, arr) if getattr(ref, "weak_type", False) else arr)
  return jax.tree_util.tree_unflatten(treedef, restored), extra


@jax.jit
def _weak_like(ref, value):
  """``value`` as a weakly typed array of ``ref``'s dtype and shape (any shape: ``full_like``
  takes scalars only, so it is mapped over the elements; a weak type survives the map)."""
  flat = jax.vmap(jax.lax.full_like)(ref.reshape(-1), jnp.reshape(value, -1))
  return flat.reshape(ref.shape)


def save(
  output_dir: str,
  state: Any,
  round_index: int,
  extra: dict | None = None,
  keep: int = 2,
  fmt: str | None = None,
) -> str:
  """Saves ``state`` as ``checkpoints/ckpt_<round>.npz`` atomically; returns the path.

  Args:
    output_dir: the run's folder.
    state: any pytree of arrays (the experiment's ``RoundState``).
    round_index: the number of rounds done (names the file).
    extra: JSON-able facts stored alongside (seconds so far, config fingerprint, ...).
    keep: how many of the newest checkpoints to keep (>= 1).
    fmt: "npz", "orbax" (``checkpoints/orbax/<round>/``), or None: orbax when several
      processes run (then every process must call ``save``), npz otherwise.

  Raises:
    WriteError: the file could not be written (a full disk, ...), even after the older
      checkpoints but the newest were removed to make room; nothing of it is left.
  """
  if use_orbax(fmt):
    return _orbax_save(output_dir, state, round_index, extra, keep)
  folder = checkpoint_dir(output_dir)
  path = _path(output_dir, round_index)
  what = f"checkpoint of round {round_index}"
  try:
    os.makedirs(folder, exist_ok=True)
  except OSError as e:
    raise WriteError(folder, what, e) from e
  for name in os.listdir(folder):  # temp files left by a killed writer
    if name.startswith(_TMP_PREFIX):
      try:
        os.remove(os.path.join(folder, name))
      except FileNotFoundError:
        pass
  leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.device_get(state))]
  buf = io.BytesIO()
  arrays = {f"leaf_{i}": leaf for i, leaf in enumerate(leaves)}
  arrays["__extra__"] = np.frombuffer(json.dumps(extra or {}).encode(), np.uint8)
  np.savez(buf, **arrays)
  try:
    atomic_write_bytes(path, buf.getvalue(), what)
  except WriteError:
    # room for the new one: the older checkpoints but the newest go first, then one retry
    older = [r for r in all_rounds(output_dir)[:-1] if r != round_index]
    if not older:
      raise
    for r in older:
      _remove(output_dir, r)
    atomic_write_bytes(path, buf.getvalue(), what)
  _fsync_dir(folder)
  for r in all_rounds(output_dir)[: -max(keep, 1)]:
    _remove(output_dir, r)
  return path


def _remove(output_dir: str, round_index: int) -> None:
  try:
    os.remove(_path(output_dir, round_index))
  except FileNotFoundError:
    pass


def save_kept(
  output_dir: str,
  state: Any,
  round_index: int,
  extra: dict | None = None,
  keep: int = 2,
  fmt: str | None = None,
) -> str | None:
  """``save``, for a run that can go on without this checkpoint: when it cannot be written
  but an older one is kept, a warning says so and None is returned (the run goes on;
  ``--resume`` would continue from the older one). Without any checkpoint kept the run
  must stop: ``WriteError``, noting it."""
  try:
    return save(output_dir, state, round_index, extra, keep, fmt)
  except WriteError as e:
    kept = latest_round(output_dir)
    if kept is None:
      raise e.with_note(f"no checkpoint of this run is kept in {output_dir}") from e
    logging.warning("%s; the run goes on, and --resume would continue from round %d", e, kept)
    return None


def _npz_rounds(output_dir: str) -> list[int]:
  folder = checkpoint_dir(output_dir)
  if not os.path.isdir(folder):
    return []
  return sorted(int(m.group(1)) for f in os.listdir(folder) if (m := _NAME.match(f)))


def all_rounds(output_dir: str) -> list[int]:
  """Rounds of the checkpoints in ``output_dir`` (npz and orbax), oldest first."""
  return sorted(set(_npz_rounds(output_dir)) | set(_orbax_rounds(output_dir)))


def latest_round(output_dir: str) -> int | None:
  rounds = all_rounds(output_dir)
  return rounds[-1] if rounds else None


def clear(output_dir: str) -> None:
  """Removes every checkpoint of ``output_dir`` (a fresh run must not resume an old one)."""
  for r in _npz_rounds(output_dir):
    os.remove(_path(output_dir, r))
  shutil.rmtree(_orbax_root(output_dir), ignore_errors=True)


def _like(ref: Any, arr: np.ndarray) -> Any:
  """``arr`` placed like the template leaf ``ref`` (sharding, weak type)."""
  if not isinstance(ref, jax.Array):
    return arr
  if not ref.is_fully_addressable:  # several processes, each holding the whole file
    out = jax.jit(lambda a: a, out_shardings=ref.sharding)(np.asarray(arr, ref.dtype))
    return _weak_like(ref, out) if ref.weak_type else out
  if ref.weak_type:  # a weakly typed leaf (scalar or not) comes back weakly typed
    out = _weak_like(ref, jnp.asarray(arr))
  else:
    out = jnp.asarray(arr, ref.dtype)
  try:
    return jax.device_put(out, ref.sharding)
  except (ValueError, RuntimeError):  # pragma: no cover (a deleted/donated template)
    return out


def _read(path: str, template: Any) -> tuple[Any, dict]:
  """Reads one checkpoint; CheckpointMismatchError when it does not fit ``template``."""
  with np.load(path) as f:
    extra = json.loads(bytes(f["__extra__"]).decode() or "{}")
    leaves, treedef = jax.tree_util.tree_flatten(template)
    if len(f.files) - 1 != len(leaves):
      raise CheckpointMismatchError(
        f"checkpoint {path} has {len(f.files) - 1} arrays but this experiment's state has "
        f"{len(leaves)}: it was written by a different configuration"
      )
    restored = []
    for i, ref in enumerate(leaves):
      arr = f[f"leaf_{i}"]
      shape, dtype = tuple(np.shape(ref)), np.dtype(ref.dtype)
      if arr.dtype.kind == "V" and arr.dtype.itemsize == dtype.itemsize:
        arr = arr.view(dtype)  # npz stores ml_dtypes (bfloat16, fp8) as raw bytes
      if arr.shape != shape or arr.dtype != dtype:
        raise CheckpointMismatchError(
          f"checkpoint {path} leaf {i} is {arr.dtype}{list(arr.shape)} but the state "
          f"expects {dtype}{list(shape)}: it was written by a different configuration"
        )
      restored.append(arr)
  state = jax.tree_util.tree_unflatten(treedef, [_like(r, a) for r, a in zip(leaves, restored)])
  return state, extra


def _read_round(output_dir: str, round_index: int, template: Any) -> tuple[Any, dict]:
  """The checkpoint of ``round_index`` in whichever format holds it (orbax first)."""
  if round_index in _orbax_rounds(output_dir):
    return _orbax_read(output_dir, round_index, template)
  return _read(_path(output_dir, round_index), template)


class CheckpointMismatchError(ValueError):
  """The checkpoint's arrays do not fit the experiment's state (another configuration)."""


def restore(output_dir: str, template: Any, round_index: int | None = None) -> tuple[Any, dict]:
  """Returns ``(state, extra)`` from the newest readable (or the given) checkpoint.

  Args:
    output_dir: the run's folder.
    template: a state of the same experiment (e.g. ``Simulation.init(...)``): gives the
      tree structure, shapes, dtypes and placement.
    round_index: restore exactly this round (no fallback); default the newest readable.

  Raises:
    FileNotFoundError: no (readable) checkpoint in ``output_dir``.
    CheckpointMismatchError: the checkpoint does not match the template (another config).
  """
  if round_index is not None:
    return _read_round(output_dir, round_index, template)
  rounds = all_rounds(output_dir)
  if not rounds:
    raise FileNotFoundError(f"no checkpoint under {checkpoint_dir(output_dir)}")
  errors = []
  for r in reversed(rounds):
    path = _path(output_dir, r)
    try:
      return _read_round(output_dir, r, template)
    except CheckpointMismatchError:
      raise
    except _UNREADABLE as e:
      logging.warning("checkpoint %s is unreadable (%s); trying an older one", path, e)
      errors.append(f"{os.path.basename(path)}: {e}")
  raise FileNotFoundError(
    f"no readable checkpoint under {checkpoint_dir(output_dir)} ({'; '.join(errors)})"
  )

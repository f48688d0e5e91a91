"""Trace-driven availability: a recorded bool[T, N] matrix replayed (cycled) over rounds."""

from __future__ import annotations

import os
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from fedjax_sel.availability.base import round_index
from fedjax_sel.availability.registry import register
from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey


class TraceState(NamedTuple):
  """State of the trace model.

  Attributes:
    trace: bool[T, N], row t is who is active at round t (cycled: row t % T).
  """

  trace: Array


def _read(path: str) -> np.ndarray:
  """Reads a .npy or .csv (comma-separated, one row per round) file; ValueError naming path."""
  ext = os.path.splitext(path)[1].lower()
  if ext not in (".npy", ".csv"):
    raise ValueError(f"availability trace {path!r}: unsupported extension; allowed: .npy, .csv")
  try:
    if ext == ".npy":
      return np.load(path, allow_pickle=False)
    return np.loadtxt(path, delimiter=",", ndmin=2)
  except (OSError, ValueError, EOFError) as e:
    raise ValueError(f"cannot read availability trace {path!r}: {e}") from None


def as_bool_trace(value: np.ndarray, source: str) -> np.ndarray:
  """Checks a trace is 2-D, non-empty and boolean (or numbers that are all 0 or 1).

  Args:
    value: the array read or given.
    source: how to name it in errors (the path, or "the given array").

  Returns:
    bool[T, N].
  """
  arr = np.asarray(value)
  if arr.dtype.kind not in "biuf":
    raise ValueError(
      f"availability trace {source}: dtype {arr.dtype} is not allowed; allowed: bool, "
      "or integers/floats equal to 0 or 1"
    )
  if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
    raise ValueError(
      f"availability trace {source}: shape {arr.shape} is not allowed; allowed: [T, N] "
      "with T, N >= 1"
    )
  if arr.dtype.kind != "b":
    bad = arr[(arr != 0) & (arr != 1)]
    if bad.size:
      raise ValueError(
        f"availability trace {source}: dtype {arr.dtype} with value(s) "
        f"{bad.ravel()[:5].tolist()} that are not 0 or 1"
      )
  return arr.astype(bool)


@register("trace")
def make_trace(trace: object = None) -> AvailabilityModel:
  """Replays a recorded availability matrix: client i is active at round t iff
  trace[t % T, i].

  ``probs`` is the trace row as 0/1 (availability is deterministic); ``sample`` ignores
  its key. The file is read when the model is made; its width is checked against N at
  ``init`` (N is static). Needs from ClientInfo: only N.

  Args:
    trace: bool[T, N] (or a 0/1 numeric array), or a path to a .npy file or a .csv file
      (comma-separated, one row per round, one column per client).

  References:
    Trace-driven availability as in device-availability studies used by FL simulators
    (e.g. FLASH / FedScale behaviour traces); no formula.
  """
  if trace is None:
    raise ValueError("trace=None: give a bool [T, N] array or a path to a .npy/.csv file")
  if isinstance(trace, (str, os.PathLike)):
    path = os.fspath(trace)
    source = repr(path)
    matrix = as_bool_trace(_read(path), source)
  else:
    source = "(the given array)"
    matrix = as_bool_trace(trace, source)

  def init(key: PRNGKey, info: ClientInfo) -> TraceState:
    del key
    if matrix.shape[1] != info.num_clients:
      raise ValueError(
        f"availability trace {source} has shape {matrix.shape} ([T, N]) but ClientInfo has "
        f"{info.num_clients} clients"
      )
    return TraceState(trace=jnp.asarray(matrix))

  def sample(state: TraceState, key: PRNGKey, t: Array) -> tuple[Array, TraceState]:
    del key
    return state.trace[round_index(t) % state.trace.shape[0]], state

  def probs(state: TraceState, t: Array) -> Array:
    return sample(state, None, t)[0].astype(jnp.float32)

  return AvailabilityModel(init=init, probs=probs, sample=sample)

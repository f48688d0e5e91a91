"""A tiny name -> constructor registry used by every pluggable part."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import numpy as np

T = TypeVar("T")


class Registry(Generic[T]):
  """Maps names to constructors; ``make`` validates the name and hyper-parameters."""

  def __init__(self, kind: str):
    self.kind = kind
    self._constructors: dict[str, Callable[..., T]] = {}

  def register(self, name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    def decorator(constructor: Callable[..., T]) -> Callable[..., T]:
      if name in self._constructors:
        raise ValueError(f"{self.kind} {name!r} is already registered")
      self._constructors[name] = constructor
      return constructor

    return decorator

  def names(self) -> list[str]:
    return sorted(self._constructors)

  def constructor(self, name: str) -> Callable[..., T]:
    if not isinstance(name, str) or name not in self._constructors:
      raise ValueError(
        f"unknown {self.kind} {name!r}; known {self.kind} names: " + ", ".join(self.names())
      )
    return self._constructors[name]

  def hparams(self, name: str) -> list[str]:
    """Names of the keyword hyper-parameters the constructor accepts."""
    sig = inspect.signature(self.constructor(name))
    return [p for p in sig.parameters]

  def make(self, name: str, **hparams: Any) -> T:
    constructor = self.constructor(name)
    sig = inspect.signature(constructor)
    accepts_any = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
    if not accepts_any:
      unknown = sorted(set(hparams) - set(sig.parameters))
      if unknown:
        raise ValueError(
          f"unknown hyper-parameter(s) {unknown} for {self.kind} {name!r}; "
          f"allowed: {sorted(sig.parameters)}"
        )
    return constructor(**hparams)


def is_traced(value: Any) -> bool:
  """Whether ``value`` is a jax tracer (a hyper-parameter traced inside a batched program)."""
  import jax

  return isinstance(value, jax.core.Tracer)


def is_integer(value: Any, *, strict: bool = False) -> bool:
  """Whether ``value`` is an integer and not a bool.

  ``strict``: only values of an integer type (3, np.int64(3)); otherwise any integer-valued
  number (3.0 too, e.g. from a config file). Never raises: ``"x"`` and ``inf`` are not
  integers.
  """
  if isinstance(value, (bool, np.bool_)):
    return False
  if strict:
    return isinstance(value, (int, np.integer))
  try:
    return bool(int(value) == value)
  except (TypeError, ValueError, OverflowError):  # int("x") fails, int(inf) overflows
    return False


def check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
  """``value`` if it is one of the strings ``allowed``, else a ValueError naming both."""
  if not isinstance(value, str) or value not in allowed:
    raise ValueError(f"{name}={value!r}; allowed: {', '.join(allowed)}")
  return value


def check_count(name: str, value: Any, *, strict: bool = False) -> int:
  """``value`` as an int >= 1 (a count: rounds, blocks, clusters, a period); a ValueError
  naming ``name`` otherwise. ``strict`` as in ``is_integer``."""
  if not is_integer(value, strict=strict) or value < 1:
    raise ValueError(f"{name}={value!r} is out of range; allowed: integers >= 1")
  return int(value)


def check_range(
  name: str,
  value: Any,
  low: float | None = None,
  high: float | None = None,
  *,
  low_inclusive: bool = True,
  high_inclusive: bool = True,
) -> None:
  """Raises ValueError naming ``name`` when ``value`` lies outside [low, high].

  A traced value (a hyper-parameter swept along the experiment axis of a batched program,
  ``fedjax_sel.core.batch``) passes: its concrete values were checked before tracing.
  """
  if is_traced(value):
    return
  try:
    v = float(value)
  except (TypeError, ValueError):
    raise ValueError(f"{name}={value!r} is not a number") from None
  bad = False
  if low is not None:
    bad |= v < low if low_inclusive else v <= low
  if high is not None:
    bad |= v > high if high_inclusive else v >= high
  if bad or v != v:
    lo = ("[" if low_inclusive else "(") + (str(low) if low is not None else "-inf")
    hi = (str(high) if high is not None else "inf") + ("]" if high_inclusive else ")")
    raise ValueError(f"{name}={value!r} is out of range; allowed: {lo}, {hi}")

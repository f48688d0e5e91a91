"""The name -> constructor registry, the range and integer checks, and the core types."""

import math

import jax
import jax.numpy as jnp
import pytest

from fedjax_sel.core.registry import Registry, check_range, is_traced


def _registry():
  reg = Registry("widget")

  @reg.register("b")
  def make_b(size: int = 1, color: str = "red"):
    return ("b", size, color)

  @reg.register("a")
  def make_a(**anything):
    return ("a", anything)

  return reg


def test_names_are_sorted_and_make_passes_hparams():
  reg = _registry()
  assert reg.names() == ["a", "b"]
  assert reg.make("b", size=3) == ("b", 3, "red")
  assert reg.make("a", x=1, y=2) == ("a", {"x": 1, "y": 2})  # **kwargs accepts any name
  assert reg.hparams("b") == ["size", "color"]
  assert reg.constructor("b")() == ("b", 1, "red")


def test_unknown_names_and_hparams_are_named():
  reg = _registry()
  with pytest.raises(ValueError, match=r"^unknown widget 'c'; known widget names: a, b$"):
    reg.make("c")
  with pytest.raises(ValueError, match=r"^unknown widget 3; known widget names: a, b$"):
    reg.constructor(3)
  with pytest.raises(
    ValueError,
    match=r"^unknown hyper-parameter\(s\) \['shape', 'zize'\] for widget 'b'; "
    r"allowed: \['color', 'size'\]$",
  ):
    reg.make("b", zize=2, shape=1, size=1)


def test_a_name_registers_once():
  reg = _registry()
  with pytest.raises(ValueError, match=r"^widget 'a' is already registered$"):
    reg.register("a")(lambda: None)
  assert reg.make("a") == ("a", {})


@pytest.mark.parametrize(
  "value, low, high, low_inc, high_inc, ok",
  [
    (0.0, 0.0, 1.0, True, True, True),
    (1.0, 0.0, 1.0, True, True, True),
    (0.0, 0.0, 1.0, False, True, False),
    (1.0, 0.0, 1.0, True, False, False),
    (-1e-9, 0.0, 1.0, True, True, False),
    (1 + 1e-9, 0.0, 1.0, True, True, False),
    (1e-9, 0.0, 1.0, False, False, True),
    (1e9, 0.0, None, True, True, True),
    (-1e9, None, 0.0, True, True, True),
    (-1e9, None, None, True, True, True),
    (math.nan, None, None, True, True, False),
    (math.nan, 0.0, 1.0, True, True, False),
    (math.inf, 0.0, None, True, True, True),
    (math.inf, 0.0, 1.0, True, True, False),
  ],
)
def test_check_range_boundaries(value, low, high, low_inc, high_inc, ok):
  call = lambda: check_range("x", value, low, high, low_inclusive=low_inc, high_inclusive=high_inc)
  if ok:
    assert call() is None
  else:
    with pytest.raises(ValueError, match=r"^x=.* is out of range; allowed: "):
      call()


def test_check_range_message_shows_the_interval():
  with pytest.raises(ValueError, match=r"^lr=0 is out of range; allowed: \(0\.0, inf\]$"):
    check_range("lr", 0, 0.0, None, low_inclusive=False)
  with pytest.raises(ValueError, match=r"^p=2 is out of range; allowed: \[0, 1\)$"):
    check_range("p", 2, 0, 1, high_inclusive=False)
  with pytest.raises(ValueError, match=r"^q=5 is out of range; allowed: \[-inf, 0\]$"):
    check_range("q", 5, None, 0)
  with pytest.raises(ValueError, match=r"^lr='a' is not a number$"):
    check_range("lr", "a", 0.0)
  with pytest.raises(ValueError, match=r"^lr=None is not a number$"):
    check_range("lr", None, 0.0)


def test_traced_values_pass():
  assert not is_traced(1.0) and not is_traced(jnp.ones(()))
  seen = []

  def f(x):
    seen.append(is_traced(x))
    check_range("x", x, 0.0, 1.0)  # would fail for the concrete 5.0
    return x

  jax.jit(f)(5.0)
  assert seen == [True]


def test_flags_are_keyword_only():
  from fedjax_sel.core.registry import is_integer

  with pytest.raises(TypeError):
    is_integer(3.0, True)  # strict must be named
  with pytest.raises(TypeError):
    check_range("x", 0.5, 0.0, 1.0, False)  # low_inclusive must be named
  check_range("x", 0.5, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)


def test_types_defaults_and_sizes():
  from fedjax_sel.core.types import ClientInfo, SelectionStrategy, empty_aux

  info = ClientInfo(num_examples=jnp.ones((3,), jnp.int32), label_counts=jnp.ones((3, 4)))
  assert (info.num_clients, info.num_classes) == (3, 4)
  strategy = SelectionStrategy(init=None, select=None, num_selected=2)
  assert strategy.uses_updates is False and strategy.with_replacement is False
  assert strategy.observe is None
  aux = empty_aux(5, 2)
  assert aux.avail_probs.shape == (5,) and aux.num_examples.shape == (5,)
  assert bool(jnp.all(aux.avail_probs == 1)) and bool(jnp.all(aux.num_examples == 1))
  assert aux.finite.shape == (2,) and aux.finite.dtype == jnp.bool_ and bool(aux.finite.all())

"""FedGS Table 1: each mode's active rate on small hand-computed cases."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import availability
from fedjax_sel.core.types import ClientInfo

# Four clients with sizes 1, 4, 16, 64 and label sets {0,1}, {2,3}, {1,3}, {3} (C = 4).
INFO4 = ClientInfo(
  num_examples=jnp.array([1, 4, 16, 64], jnp.int32),
  label_counts=jnp.array([[3, 1, 0, 0], [0, 0, 2, 2], [0, 5, 0, 11], [0, 0, 0, 64]], jnp.int32),
)
KEY = jax.random.key(0)


def rates(name, t=0, info=INFO4, **hparams):
  model = availability.make(name, **hparams)
  return np.asarray(model.probs(model.init(KEY, info), jnp.int32(t)))


def test_idl_and_always_are_one():
  np.testing.assert_array_equal(rates("idl"), [1.0, 1.0, 1.0, 1.0])
  np.testing.assert_array_equal(rates("always"), [1.0, 1.0, 1.0, 1.0])


def test_mdf():
  # n^0.5 = 1, 2, 4, 8; divided by max 8.
  np.testing.assert_allclose(rates("mdf", beta=0.5), [0.125, 0.25, 0.5, 1.0], rtol=1e-6)
  # beta = 0: everybody always active.
  np.testing.assert_allclose(rates("mdf", beta=0.0), [1.0, 1.0, 1.0, 1.0])


def test_ldf():
  # n^-0.5 = 1, 1/2, 1/4, 1/8; divided by max 1.
  np.testing.assert_allclose(rates("ldf", beta=0.5), [1.0, 0.5, 0.25, 0.125], rtol=1e-6)
  # beta = 0.25: n^-0.25 = 1, 1/sqrt(2), 1/2, 1/(2 sqrt 2).
  s = 1 / math.sqrt(2)
  np.testing.assert_allclose(rates("ldf", beta=0.25), [1.0, s, 0.5, s / 2], rtol=1e-6)


def test_ymf():
  # min labels 0, 2, 1, 3; max label over all clients 3; beta = 0.9:
  # 0.9 * (0, 2/3, 1/3, 1) + 0.1.
  np.testing.assert_allclose(rates("ymf", beta=0.9), [0.1, 0.7, 0.4, 1.0], rtol=1e-6)


def test_ymf_denominator_is_largest_label_held():
  # Label 3 held by nobody: max label 2. Sets {0}, {1,2}, {2}; beta = 0.5.
  info = ClientInfo(
    num_examples=jnp.array([2, 2, 2], jnp.int32),
    label_counts=jnp.array([[2, 0, 0, 0], [0, 1, 1, 0], [0, 0, 2, 0]], jnp.int32),
  )
  np.testing.assert_allclose(rates("ymf", info=info, beta=0.5), [0.5, 0.75, 1.0], rtol=1e-6)


@pytest.mark.parametrize(
  "t,expected",
  [
    (0, [1.0, 0.4, 0.4, 0.4]),  # r = 1/8 in [0, 1/4): label 0
    (1, [1.0, 0.4, 1.0, 0.4]),  # r = 2/8 = 1/4 in [1/4, 1/2): label 1 (left edge)
    (2, [1.0, 0.4, 1.0, 0.4]),  # r = 3/8: label 1
    (3, [0.4, 1.0, 0.4, 0.4]),  # r = 4/8 = 1/2: label 2
    (5, [0.4, 1.0, 1.0, 1.0]),  # r = 6/8 = 3/4: label 3
    (7, [0.4, 0.4, 0.4, 0.4]),  # r = 1: in no bin [y/4, (y+1)/4)
    (9, [1.0, 0.4, 1.0, 0.4]),  # 9 % 8 = 1: as t = 1
  ],
)
def test_yc(t, expected):
  # beta = 0.6, T_p = 8, C = 4: 0.6 * I(phase on a held label) + 0.4.
  np.testing.assert_allclose(rates("yc", t=t, beta=0.6, period=8), expected, rtol=1e-6)


def test_ln_is_normalized_lognormal_with_sigma_ln_one_over_one_minus_beta():
  num_clients = 20000
  info = ClientInfo(
    num_examples=jnp.ones((num_clients,), jnp.int32),
    label_counts=jnp.ones((num_clients, 2), jnp.int32),
  )
  p = rates("ln", info=info, beta=0.5)
  # c / max c: the largest rate is exactly 1, all in (0, 1].
  assert p.max() == 1.0 and p.min() > 0.0
  # log p = log c - max log c, so std(log p) = sigma = ln(1 / (1 - 0.5)) = ln 2 = 0.6931;
  # the sample std has standard error sigma / sqrt(2 N) = 0.0035, tolerance 5x that.
  assert abs(np.log(p).std() - math.log(2.0)) < 5 * math.log(2.0) / math.sqrt(2 * num_clients)
  # beta = 0: sigma = 0, every rate is 1.
  np.testing.assert_allclose(rates("ln", info=info, beta=0.0), np.ones(num_clients))


def test_ln_rates_come_from_the_init_key():
  model = availability.make("ln", beta=0.5)
  a = model.init(jax.random.key(1), INFO4).rate
  b = model.init(jax.random.key(2), INFO4).rate
  np.testing.assert_array_equal(a, model.init(jax.random.key(1), INFO4).rate)
  assert not np.allclose(a, b)


@pytest.mark.parametrize("t,factor", [(0, 0.9), (1, 0.5), (2, 0.1), (3, 0.5), (6, 0.1)])
def test_sln_is_ln_times_sine(t, factor):
  # T_p = 4: 0.4 sin(2 pi (1 + t % 4) / 4) + 0.5 = 0.9, 0.5, 0.1, 0.5 for t % 4 = 0..3.
  ln = rates("ln", beta=0.5)
  sln = rates("sln", t=t, beta=0.5, period=4)
  np.testing.assert_allclose(sln, ln * factor, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["mdf", "ldf", "ymf", "yc", "ln", "sln"])
@pytest.mark.parametrize("beta", [1.0, -0.1, 1.5, float("nan")])
def test_beta_out_of_range_raises_naming_value(name, beta):
  with pytest.raises(ValueError, match=rf"beta={beta!r}.*\[0\.0, 1\.0\)"):
    availability.make(name, beta=beta)


@pytest.mark.parametrize("name", ["yc", "sln"])
@pytest.mark.parametrize("period", [0, -3, 2.5])
def test_bad_period_raises_naming_value(name, period):
  with pytest.raises(ValueError, match=rf"period={period!r}"):
    availability.make(name, period=period)


def test_fedgs_default_betas_are_table2_settings():
  # Table 2 / App. C: LN0.5, SLN0.5, LDF0.7, MDF0.7, YMF0.9, YC0.9.
  np.testing.assert_allclose(rates("mdf"), rates("mdf", beta=0.7))
  np.testing.assert_allclose(rates("ldf"), rates("ldf", beta=0.7))
  np.testing.assert_allclose(rates("ymf"), [0.1, 0.7, 0.4, 1.0], rtol=1e-6)
  np.testing.assert_allclose(rates("yc", t=0), [1.0, 0.1, 0.1, 0.1], rtol=1e-6)

"""``input_normalization="standardize"``: (x / 255 - mean) / std, as the FedGS code's
``transforms.Normalize((0.1307,), (0.3081,))`` (WwZzz/FedGS,
``benchmark/fashion_classification/core.py``: MNIST's statistics on Fashion-MNIST)."""

import os

import numpy as np
import pytest

from fedjax_sel import data, experiment
from fedjax_sel.core.engine import decode_table
from fedjax_sel.data import loaders
from fedjax_sel.data.federated import decode
from tests.data.test_idx import write_dataset

MEAN, STD = 0.1307, 0.3081


def test_decode_table_and_host_decode_standardize_bitwise():
  pixels = np.arange(256, dtype=np.uint8)
  table = decode_table(np.uint8, 255.0, MEAN, STD)
  # the numbers, in float64 numpy
  np.testing.assert_allclose(table, (np.arange(256) / 255.0 - MEAN) / STD, rtol=0, atol=2e-6)
  assert table[0] == pytest.approx(-MEAN / STD) and table[255] == pytest.approx((1 - MEAN) / STD)
  # the host's decode and a lookup are the same bits
  np.testing.assert_array_equal(decode(pixels, 255.0, MEAN, STD), table)
  unit = decode(pixels, 255.0)
  np.testing.assert_array_equal(decode(unit, 1.0, MEAN, STD), table)
  # defaults unchanged: x / 255, bitwise
  np.testing.assert_array_equal(decode_table(np.uint8, 255.0), unit)
  np.testing.assert_array_equal(unit, pixels.astype(np.float32) / np.float32(255))


def test_fashion_mnist_inputs_standardized_everywhere(tmp_path):
  folder = os.path.join(tmp_path, "fmnist")
  arrays = write_dataset(folder, 200, 40, size=4)
  kw = dict(data_dir=folder, test_fraction=0.25)
  unit = data.load("fashion_mnist", 5, "shards", **kw)
  std = data.load("fashion_mnist", 5, "shards", input_normalization="standardize", **kw)
  default = data.load("fashion_mnist", 5, "shards", input_normalization="unit", **kw)
  # the default is today's [0, 1] scaling, bit for bit
  for a, b in ((unit.train.x, default.train.x), (unit.test_x, default.test_x)):
    np.testing.assert_array_equal(a, b)
  # the global test set: (pixels / 255 - mean) / std of the raw test pixels, in numpy
  raw_test = arrays["test"][0].astype(np.float64)[..., None]
  np.testing.assert_allclose(std.test_x, (raw_test / 255 - MEAN) / STD, rtol=0, atol=2e-6)
  # clients' train and local test examples: the same map of the same examples
  for split_u, split_s in ((unit.train, std.train), (unit.test, std.test)):
    np.testing.assert_array_equal(split_u.y, split_s.y)
    np.testing.assert_allclose(split_s.x, (split_u.x - MEAN) / STD, rtol=0, atol=2e-6)
  assert std.x_divisor == 1.0 and std.train.x.dtype == np.float32


def test_own_statistics_and_digits():
  unit = data.load("digits", 10, "iid")
  std = data.load(
    "digits", 10, "iid", input_normalization="standardize", input_mean=0.3, input_std=2
  )
  np.testing.assert_allclose(std.train.x, (unit.train.x - 0.3) / 2, rtol=0, atol=1e-6)


def test_refused_values():
  with pytest.raises(ValueError, match="input_normalization='z'; allowed: unit, standardize"):
    data.load("digits", 10, input_normalization="z")
  with pytest.raises(ValueError, match="input_std=0 is out of range; allowed: numbers > 0"):
    data.load("digits", 10, input_normalization="standardize", input_std=0)
  with pytest.raises(ValueError, match="input_mean=nan is out of range"):
    data.load("digits", 10, input_normalization="standardize", input_mean=float("nan"))
  with pytest.raises(ValueError, match="not available for synthetic; allowed: 'unit'"):
    data.load("synthetic", 5, input_normalization="standardize")
  with pytest.raises(ValueError, match="needs float32 images"):
    loaders.normalize_inputs(np.zeros((2, 2), np.uint8), MEAN, STD)


def test_config_field_reaches_the_data_and_is_validated():
  c = experiment.default_config()
  assert c.input_normalization == "unit"  # default unchanged
  c.dataset, c.num_clients, c.partition = "digits", 10, "iid"
  unit = experiment.load_data(c)
  c.input_normalization = "standardize"
  experiment.validate_config(c)
  std = experiment.load_data(c)
  np.testing.assert_allclose(std.test_x, (unit.test_x - MEAN) / STD, rtol=0, atol=2e-6)
  for field, value, match in (
    ("input_normalization", "zscore", "input_normalization='zscore'"),
    ("input_std", -1.0, "input_std=-1.0 is out of range"),
  ):
    bad = experiment.default_config()
    bad[field] = value
    with pytest.raises(ValueError, match=match):
      experiment.validate_config(bad)

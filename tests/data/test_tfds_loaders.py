"""TFDS loaders on ``tfds.testing.mock_data`` (no real data, no network) and their errors."""

import importlib.util
import sys

import numpy as np
import pytest

from fedjax_sel.data import loaders
from fedjax_sel.data.loaders import DatasetNotFoundError

tfds = pytest.importorskip("tensorflow_datasets")  # guard for installs without [tfds]
tfds_loaders = pytest.importorskip("fedjax_sel.data.tfds_loaders")

HAS_TF = importlib.util.find_spec("tensorflow") is not None
BACKENDS = ["data_source"] + (["tf"] if HAS_TF else [])
SHAPES = {"mnist": (28, 28, 1), "fashion_mnist": (28, 28, 1), "cifar10": (32, 32, 3)}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_mock_shapes_dtypes_range(name, tmp_path):
  with tfds.testing.mock_data(num_examples=12):
    x, y = tfds_loaders.load_tfds(name, str(tmp_path), "train", backend="data_source")
  assert x.shape == (12,) + SHAPES[name] and x.dtype == np.float32
  assert y.shape == (12,) and y.dtype == np.int32
  assert 0.0 <= x.min() and x.max() <= 1.0 and x.max() > 0.5  # scaled from uint8
  assert 0 <= y.min() and y.max() < 10


@pytest.mark.skipif(not HAS_TF, reason="tensorflow not installed (the [tfds] extra has it)")
def test_tf_backend_matches_data_source_shapes(tmp_path):
  # tfds.load (TensorFlow) is the default reader when TensorFlow is installed.
  with tfds.testing.mock_data(num_examples=25):
    x, y = tfds_loaders.load_tfds("cifar10", str(tmp_path), "test", backend="tf")
    x_auto, _ = tfds_loaders.load_tfds("mnist", str(tmp_path), "train")
  assert x.shape == (25, 32, 32, 3) and x.dtype == np.float32 and y.dtype == np.int32
  assert 0.0 <= x.min() and x.max() <= 1.0 and 0 <= y.min() and y.max() < 10
  assert x_auto.shape == (25, 28, 28, 1)


def test_emnist_is_balanced_and_transposed_upright(tmp_path):
  assert tfds_loaders.num_classes("emnist") == 47
  with tfds.testing.mock_data(num_examples=6):
    x, y = tfds_loaders.load_tfds("emnist", str(tmp_path), "train", backend="data_source")
    raw = tfds.data_source("emnist/balanced", split="train", data_dir=str(tmp_path))
    raw_images = np.stack([raw[i]["image"] for i in range(6)])
  assert x.shape == (6, 28, 28, 1) and y.max() < 47
  np.testing.assert_allclose(x, np.swapaxes(raw_images, 1, 2) / 255.0, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_missing_data_is_one_clear_error(backend, tmp_path):
  with pytest.raises(DatasetNotFoundError) as err:
    tfds_loaders.load_tfds("mnist", str(tmp_path), "train", backend=backend)
  msg = str(err.value)
  assert f"{tmp_path}/mnist/3.0.1" in msg  # where to put it: <data_dir>/<name>/<version>
  assert f"tfds build mnist --data_dir={tmp_path}" in msg  # how to get it
  assert "pip install fedjax_sel[tfds]" in msg
  assert err.value.__suppress_context__  # no chained deep traceback
  assert isinstance(err.value, ValueError)


def test_missing_data_dir(tmp_path):
  missing = str(tmp_path / "nope")
  with pytest.raises(DatasetNotFoundError, match="does not exist"):
    tfds_loaders.load_tfds("cifar10", missing, "train")
  with pytest.raises(DatasetNotFoundError, match=r"data_dir=.*nope.*does not exist"):
    loaders.load("cifar10", 10, data_dir=missing)


def test_missing_tfds_package(monkeypatch, tmp_path):
  monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
  with pytest.raises(DatasetNotFoundError, match=r"pip install fedjax_sel\[tfds\]"):
    tfds_loaders.load_tfds("mnist", str(tmp_path), "train")


def test_bad_names():
  with pytest.raises(ValueError, match="'svhn'.*mnist"):
    tfds_loaders.load_tfds("svhn", None, "train")
  with pytest.raises(ValueError, match="'torch'"):
    tfds_loaders.load_tfds("mnist", None, "train", backend="torch")


def test_load_mock_mnist_federated(tmp_path):
  with tfds.testing.mock_data(num_examples=60):
    fd = loaders.load("mnist", 4, "iid", data_dir=str(tmp_path), seed=1, test_fraction=0.25)
  assert fd.num_classes == 10 and fd.input_shape == (28, 28, 1)
  # 60 pool examples -> 4 clients x 15 -> local test round(15 * 0.25) = 4, train 11.
  assert fd.train.counts.tolist() == [11] * 4 and fd.test.counts.tolist() == [4] * 4
  assert fd.test_x.shape == (60, 28, 28, 1)  # the dataset's test split
  assert fd.train.x.dtype == np.float32 and fd.train.y.dtype == np.int32

"""SVHN (``svhn_cropped``) and STL-10 (``stl10``) from ``tfds.testing.mock_data``: shapes,
classes, splits, the federated load, the config's dataset names and the missing-data error."""

import numpy as np
import pytest

from fedjax_sel import experiment
from fedjax_sel.data import loaders
from fedjax_sel.data.loaders import DatasetNotFoundError

tfds = pytest.importorskip("tensorflow_datasets")  # guard for installs without [tfds]
tfds_loaders = pytest.importorskip("fedjax_sel.data.tfds_loaders")

# name -> (image shape, TFDS version), from the TFDS catalog (svhn_cropped 3.1.0: train
# 73,257 / test 26,032 / extra 531,131; stl10 1.0.0: train 5,000 / test 8,000 / unlabelled
# 100,000; both 10 classes)
SPECS = {"svhn_cropped": ((32, 32, 3), "3.1.0"), "stl10": ((96, 96, 3), "1.0.0")}


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("split", ["train", "test"])
def test_mock_shapes_classes_and_range(name, split, tmp_path):
  assert tfds_loaders.num_classes(name) == 10
  assert tfds_loaders.TFDS_DATASETS[name].tfds_name == name
  with tfds.testing.mock_data(num_examples=7):
    x, y = tfds_loaders.load_tfds(name, str(tmp_path), split, backend="data_source")
    raw = tfds.data_source(name, split=split, data_dir=str(tmp_path))
    raw_images = np.stack([raw[i]["image"] for i in range(7)])
    raw_labels = np.array([raw[i]["label"] for i in range(7)])
  shape, _ = SPECS[name]
  assert x.shape == (7, *shape) and x.dtype == np.float32
  assert y.shape == (7,) and y.dtype == np.int32
  np.testing.assert_array_equal(x, raw_images.astype(np.float32) / np.float32(255))  # upright
  np.testing.assert_array_equal(y, raw_labels)  # labels 0..9 as stored, no offset
  assert 0 <= y.min() and y.max() < 10


@pytest.mark.parametrize("name", sorted(SPECS))
def test_federated_load_takes_train_as_pool_and_test_as_global_test(name, tmp_path):
  with tfds.testing.mock_data(num_examples=40):
    fd = loaders.load(name, 4, "iid", data_dir=str(tmp_path), seed=0, image_dtype="uint8")
  shape, _ = SPECS[name]
  assert fd.num_classes == 10 and fd.input_shape == shape
  # 40 pool examples -> 4 clients x 10 -> local test round(10 * 0.2) = 2, train 8
  assert fd.train.counts.tolist() == [8] * 4 and fd.test.counts.tolist() == [2] * 4
  assert fd.test_x.shape == (40, *shape) and fd.test_x.dtype == np.uint8
  assert fd.x_divisor == 255.0


@pytest.mark.parametrize("name", sorted(SPECS))
def test_missing_data_is_the_same_clear_error(name, tmp_path):
  _, version = SPECS[name]
  with pytest.raises(DatasetNotFoundError) as err:
    loaders.load(name, 4, data_dir=str(tmp_path))
  msg = str(err.value)
  assert f"{tmp_path}/{name}/{version}" in msg  # where: <data_dir>/<name>/<version>
  assert f"tfds build {name} --data_dir={tmp_path}" in msg  # how to get it
  assert "pip install fedjax_sel[tfds]" in msg and "\n" not in msg
  assert err.value.__suppress_context__


def test_names_are_accepted_by_configs_and_listed_in_errors():
  assert {"svhn_cropped", "stl10"} <= set(loaders.DATASETS) & set(loaders.REAL_DATASETS)
  for name, model in (("svhn_cropped", "resnet18"), ("stl10", "cnn_stl10")):
    cfg = experiment.default_config()
    cfg.dataset, cfg.model, cfg.partition = name, model, "iid"
    experiment.validate_config(cfg)  # no error
  with pytest.raises(ValueError, match=r"unknown dataset 'svhn'.*svhn_cropped, stl10"):
    loaders.load("svhn", 4)

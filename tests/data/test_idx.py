"""IDX reader (MNIST / Fashion-MNIST official files): parsing, errors, search, ``load``.

Every file here is written by the test itself, byte by byte with ``struct`` (independent
of the reader under test); the slow test reads the real Debian files when installed.
"""

import gzip
import os
import struct

import numpy as np
import pytest

from fedjax_sel.data import idx, loaders
from fedjax_sel.data.federated import label_counts
from fedjax_sel.data.loaders import DatasetNotFoundError

DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"


def idx_bytes(array: np.ndarray, code: int = 0x08) -> bytes:
  """The IDX encoding of ``array``: magic 0x0000 <code> <ndim>, big-endian sizes, data."""
  dtype = {0x08: ">u1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4"}[code]
  head = struct.pack(">HBB", 0, code, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
  return head + np.asarray(array).astype(dtype).tobytes()


def write(path, payload: bytes, gz: bool = False) -> str:
  path = str(path) + (".gz" if gz else "")
  with open(path, "wb") as f:
    f.write(gzip.compress(payload) if gz else payload)
  return path


def write_dataset(folder, n_train, n_test, size=6, gz=False, seed=0):
  """Four IDX files of random uint8 images and balanced labels 0..9; returns the arrays."""
  os.makedirs(folder, exist_ok=True)
  rng = np.random.default_rng(seed)
  out = {}
  for split, n in (("train", n_train), ("test", n_test)):
    images = rng.integers(0, 256, (n, size, size), dtype=np.uint8)
    labels = (np.arange(n) % 10).astype(np.uint8)
    rng.shuffle(labels)
    img_name, lab_name = idx.SPLIT_FILES[split]
    write(os.path.join(folder, img_name), idx_bytes(images), gz)
    write(os.path.join(folder, lab_name), idx_bytes(labels), gz)
    out[split] = (images, labels)
  return out


# ----------------------------------------------------------------------------- parser


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_plain_and_gzip(tmp_path, gz):
  images = np.arange(3 * 4 * 5, dtype=np.uint8).reshape(3, 4, 5)
  labels = np.array([7, 0, 9], np.uint8)
  ip = write(tmp_path / "i", idx_bytes(images), gz)
  lp = write(tmp_path / "l", idx_bytes(labels), gz)
  got_i = idx.read_idx(ip, idx.IMAGES_MAGIC)
  got_l = idx.read_idx(lp, idx.LABELS_MAGIC)
  assert got_i.dtype == np.uint8 and got_i.shape == (3, 4, 5)
  np.testing.assert_array_equal(got_i, images)
  np.testing.assert_array_equal(got_l, labels)
  # the official magic numbers are these header bytes
  assert idx.IMAGES_MAGIC == 0x00000803 and idx.LABELS_MAGIC == 0x00000801


def test_read_idx_big_endian_types(tmp_path):
  values = np.array([[1, -2, 300], [70000, -5, 0]], np.int32)
  got = idx.read_idx(write(tmp_path / "a", idx_bytes(values, 0x0C)))
  assert got.dtype == np.int32 and got.dtype.byteorder in "=|<"
  np.testing.assert_array_equal(got, values)
  f = np.array([0.5, -1.25], np.float32)
  np.testing.assert_array_equal(idx.read_idx(write(tmp_path / "f", idx_bytes(f, 0x0D))), f)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("cut", [2, 9, 4 + 12 + 10])  # in the magic, in the sizes, in the data
def test_truncated_file_names_the_file(tmp_path, gz, cut):
  full = idx_bytes(np.zeros((2, 4, 5), np.uint8))  # 16-byte header + 40 bytes
  path = write(tmp_path / "train-images-idx3-ubyte", full[:cut], gz)
  with pytest.raises(idx.IdxFormatError, match="truncated") as err:
    idx.read_idx(path, idx.IMAGES_MAGIC)
  assert path in str(err.value) and "\n" not in str(err.value)


def test_truncated_gzip_stream(tmp_path):
  payload = gzip.compress(idx_bytes(np.zeros((20, 28, 28), np.uint8)))
  path = write(tmp_path / "x.gz", payload[: len(payload) // 2])
  with pytest.raises(idx.IdxFormatError, match=r"x\.gz: truncated gzip"):
    idx.read_idx(path)


def test_corrupt_gzip(tmp_path):
  payload = bytearray(gzip.compress(idx_bytes(np.arange(200, dtype=np.uint8))))
  payload[12:20] = b"\xff" * 8  # inside the deflate stream
  path = write(tmp_path / "y.gz", bytes(payload))
  with pytest.raises(idx.IdxFormatError, match=r"y\.gz: (corrupt|truncated) gzip"):
    idx.read_idx(path)


def test_wrong_magic(tmp_path):
  labels = write(tmp_path / "labels", idx_bytes(np.zeros(3, np.uint8)))
  # a labels file where images are expected: valid IDX, wrong magic
  with pytest.raises(idx.IdxFormatError, match=r"wrong magic number 2049 .* expected 2051"):
    idx.read_idx(labels, idx.IMAGES_MAGIC)
  # not IDX at all (a PNG header)
  png = write(tmp_path / "img.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
  with pytest.raises(idx.IdxFormatError, match=r"img\.png: not an IDX file"):
    idx.read_idx(png)
  # unknown type code 0x07
  bad = write(tmp_path / "bad", struct.pack(">HBBI", 0, 0x07, 1, 1) + b"\x00")
  with pytest.raises(idx.IdxFormatError, match="not an IDX file"):
    idx.read_idx(bad)


def test_trailing_bytes_are_corrupt(tmp_path):
  path = write(tmp_path / "t", idx_bytes(np.zeros(4, np.uint8)) + b"\x01\x02")
  with pytest.raises(idx.IdxFormatError, match="2 bytes after"):
    idx.read_idx(path)


def test_mismatched_counts(tmp_path):
  write_dataset(tmp_path, 10, 10)
  write(tmp_path / "t10k-labels-idx1-ubyte", idx_bytes(np.zeros(9, np.uint8)))
  with pytest.raises(idx.IdxFormatError, match="10 images but .*t10k-labels-idx1-ubyte holds 9"):
    idx.read_split(str(tmp_path), "test")


def test_labels_out_of_range(tmp_path):
  write_dataset(tmp_path, 10, 10)
  write(tmp_path / "train-labels-idx1-ubyte", idx_bytes(np.full(10, 10, np.uint8)))
  with pytest.raises(idx.IdxFormatError, match=r"labels span \[10, 10\]"):
    idx.load_idx("fashion_mnist", str(tmp_path), "train")


def test_load_idx_scales_like_tfds(tmp_path):
  arrays = write_dataset(tmp_path, 12, 5, size=4, gz=True)
  x, y = idx.load_idx("mnist", str(tmp_path), "train")
  assert x.shape == (12, 4, 4, 1) and x.dtype == np.float32 and y.dtype == np.int32
  images, labels = arrays["train"]
  # exactly x.astype(float32) / 255, the TFDS reader's conversion
  np.testing.assert_array_equal(x[..., 0], images.astype(np.float32) / np.float32(255.0))
  np.testing.assert_array_equal(y, labels)


def test_load_idx_uint8_is_the_stored_pixels(tmp_path):
  arrays = write_dataset(tmp_path, 12, 5, size=4, gz=True)
  x, y = idx.load_idx("mnist", str(tmp_path), "test", dtype="uint8")
  images, labels = arrays["test"]
  assert x.dtype == np.uint8 and x.shape == (5, 4, 4, 1)
  np.testing.assert_array_equal(x[..., 0], images)
  np.testing.assert_array_equal(y, labels)
  with pytest.raises(ValueError, match="dtype='float16'; allowed: float32, uint8"):
    idx.load_idx("mnist", str(tmp_path), "test", dtype="float16")


# ----------------------------------------------------------------------------- search


@pytest.fixture
def no_default_dirs(monkeypatch, tmp_path):
  """Search only under tmp_path: HOME, cwd, the env var and the Debian folder point there."""
  home = tmp_path / "home"
  home.mkdir()
  monkeypatch.setenv("HOME", str(home))
  monkeypatch.chdir(home)
  monkeypatch.delenv(idx.ENV_VAR, raising=False)
  monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "no_tfds"))
  debian = tmp_path / "debian" / "fashion-mnist"
  monkeypatch.setitem(
    idx.IDX_DATASETS, "fashion_mnist", (10, "fashion-mnist", "FashionMNIST", str(debian))
  )
  return home, debian


def test_search_order(no_default_dirs, monkeypatch, tmp_path):
  home, debian = no_default_dirs
  env = tmp_path / "env"
  monkeypatch.setenv(idx.ENV_VAR, str(env))
  dirs = idx.search_dirs("fashion_mnist")
  assert dirs == [
    str(env),
    str(env / "fashion_mnist"),
    str(env / "fashion-mnist"),
    str(env / "FashionMNIST" / "raw"),
    str(debian),
    str(home / ".keras" / "datasets" / "fashion-mnist"),
    str(home / "data" / "FashionMNIST" / "raw"),  # ./data and ~/data (cwd is home here)
  ]
  # the first folder holding all four files wins; a later one is not read
  write_dataset(home / ".keras" / "datasets" / "fashion-mnist", 3, 2)
  assert idx.find_idx_dir("fashion_mnist") == dirs[5]
  write_dataset(debian, 3, 2)
  assert idx.find_idx_dir("fashion_mnist") == str(debian)
  write_dataset(env / "FashionMNIST" / "raw", 3, 2, gz=True)  # torchvision layout
  assert idx.find_idx_dir("fashion_mnist") == dirs[3]
  # with data_dir only data_dir and its sub-layouts are searched
  assert idx.find_idx_dir("fashion_mnist", str(tmp_path / "elsewhere")) is None


def test_missing_data_is_one_line(no_default_dirs, tmp_path):
  home, debian = no_default_dirs
  partial = home / ".keras" / "datasets" / "fashion-mnist"
  partial.mkdir(parents=True)
  write(partial / "train-images-idx3-ubyte", idx_bytes(np.zeros((1, 2, 2), np.uint8)))
  with pytest.raises(DatasetNotFoundError) as err:
    loaders.load("fashion_mnist", 10, "iid")
  msg = str(err.value)
  assert "\n" not in msg
  for name in idx.FILE_NAMES:
    assert name in msg
  assert str(debian) in msg and str(partial) in msg
  assert f"{partial} has only train-images-idx3-ubyte" in msg
  assert "apt-get install dataset-fashion-mnist" in msg and idx.ENV_VAR in msg
  with pytest.raises(DatasetNotFoundError, match=r"^mnist: .*apt-get install dataset-fashion"):
    loaders.load_pool("mnist")


# ----------------------------------------------------------------------------- load


def test_load_shards_from_written_idx(tmp_path, monkeypatch):
  """Tiny IDX files through ``load`` (no TFDS): the pooled train count and the test set."""
  monkeypatch.setitem(__import__("sys").modules, "tensorflow_datasets", None)  # not importable
  folder = tmp_path / "fmnist"
  arrays = write_dataset(folder, 600, 50, size=6, gz=True)
  fd = loaders.load("fashion_mnist", num_clients=100, partition="shards", data_dir=str(folder))
  assert fd.train.counts.sum() + fd.test.counts.sum() == 600  # every pool example, once
  assert fd.num_clients == 100 and fd.num_classes == 10
  lc = label_counts(fd.train, 10) + label_counts(fd.test, 10)
  assert ((lc > 0).sum(axis=1) == 2).all()  # shards: two labels per client
  test_images, test_labels = arrays["test"]
  np.testing.assert_array_equal(fd.test_x[..., 0], test_images / np.float32(255.0))
  np.testing.assert_array_equal(fd.test_y, test_labels)
  # the pool is the train images: every client example is one of them
  pool = {r.tobytes() for r in arrays["train"][0]}
  x = np.concatenate([fd.train.x, fd.test.x])[..., 0]
  assert all((np.rint(r * 255).astype(np.uint8)).tobytes() in pool for r in x)


def test_data_dir_layouts(tmp_path):
  write_dataset(tmp_path / "root" / "FashionMNIST" / "raw", 20, 10)
  pool = loaders.load_pool("fashion_mnist", str(tmp_path / "root"))
  assert pool.x.shape == (20, 6, 6, 1) and pool.test_y.shape == (10,)


def test_data_dir_without_idx_or_tfds(tmp_path, monkeypatch):
  monkeypatch.setitem(__import__("sys").modules, "tensorflow_datasets", None)
  with pytest.raises(DatasetNotFoundError) as err:
    loaders.load_pool("fashion_mnist", str(tmp_path))
  msg = str(err.value)
  assert str(tmp_path) in msg and "train-images-idx3-ubyte" in msg and "TFDS" in msg
  assert "\n" not in msg


def test_corrupt_file_through_load(tmp_path):
  write_dataset(tmp_path, 20, 10)
  raw = open(tmp_path / "train-images-idx3-ubyte", "rb").read()
  write(tmp_path / "train-images-idx3-ubyte", raw[:-7])
  with pytest.raises(idx.IdxFormatError, match="train-images-idx3-ubyte: truncated IDX data"):
    loaders.load("mnist", 4, data_dir=str(tmp_path))


@pytest.mark.slow
@pytest.mark.skipif(not idx.has_idx_files(DEBIAN_DIR), reason="dataset-fashion-mnist not installed")
def test_real_debian_fashion_mnist():
  fd = loaders.load("fashion_mnist", num_clients=100, partition="shards", data_dir=DEBIAN_DIR)
  assert fd.train.counts.sum() + fd.test.counts.sum() == 60_000
  assert fd.test_x.shape == (10_000, 28, 28, 1) and fd.test_y.shape == (10_000,)
  assert fd.test_y.min() == 0 and fd.test_y.max() == 9
  assert np.bincount(fd.test_y).tolist() == [1000] * 10  # Fashion-MNIST's balanced test set
  assert 0.0 <= fd.test_x.min() and fd.test_x.max() == 1.0
  pool = loaders.load_pool("fashion_mnist")  # found by the search, same data
  assert pool.x.shape == (60_000, 28, 28, 1)
  assert np.bincount(pool.y).tolist() == [6000] * 10

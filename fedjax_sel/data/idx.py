"""MNIST and Fashion-MNIST from their four official IDX files (plain or gzip), no TFDS.

The files: ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each optionally ``.gz`` (detected
from the file's first bytes, not its name). The same four files are what the official
downloads, Debian's ``dataset-fashion-mnist`` package, Keras
(``~/.keras/datasets/fashion-mnist``) and torchvision (``<root>/FashionMNIST/raw``) keep.

IDX format (LeCun et al., http://yann.lecun.com/exdb/mnist/): a 4-byte magic number (two
zero bytes, a type code -- 0x08 for unsigned bytes -- and the number of dimensions), one
big-endian uint32 size per dimension, then the values in C order, big-endian. MNIST images
have magic 2051 (0x00000803: uint8, 3 dims ``[n, rows, cols]``), labels 2049 (0x00000801:
uint8, 1 dim ``[n]``).

``read_idx`` parses one file; ``read_split`` reads one split's images and labels (uint8,
counts checked against each other); ``load_idx`` is what ``fedjax_sel.data.load`` calls and
returns float32 images in [0, 1] like the TFDS reader. ``find_idx_dir`` searches the usual
places (``search_dirs``). Any malformed file raises one ``IdxFormatError`` naming the file;
missing files raise ``DatasetNotFoundError`` with ``missing_message``.

References: LeCun, Cortes, Burges, "The MNIST database"; Xiao, Rasul, Vollgraf,
"Fashion-MNIST" (2017), https://github.com/zalandoresearch/fashion-mnist.
"""

from __future__ import annotations

import gzip
import os
import zlib

import numpy as np

ENV_VAR = "FEDJAX_SEL_DATA"
IMAGES_MAGIC = 2051  # 0x00000803: uint8, 3 dims
LABELS_MAGIC = 2049  # 0x00000801: uint8, 1 dim
SPLIT_FILES = {
  "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
  "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
FILE_NAMES = SPLIT_FILES["train"] + SPLIT_FILES["test"]
# name -> (num_classes, Keras cache folder or None, torchvision folder, Debian folder or None)
IDX_DATASETS = {
  "fashion_mnist": (10, "fashion-mnist", "FashionMNIST", "/usr/share/datasets/fashion-mnist"),
  "mnist": (10, None, "MNIST", None),  # Keras keeps MNIST as mnist.npz; Debian ships none
}
APT_HINT = "apt-get install dataset-fashion-mnist"
# IDX type code -> big-endian numpy dtype
_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_GZIP_MAGIC = b"\x1f\x8b"


class IdxFormatError(ValueError):
  """An IDX file is truncated, corrupt or not the file it should be (the message names it)."""


def _read_bytes(path: str) -> bytes:
  with open(path, "rb") as f:
    raw = f.read()
  if raw[:2] != _GZIP_MAGIC:
    return raw
  try:
    return gzip.decompress(raw)
  except EOFError:
    raise IdxFormatError(f"{path}: truncated gzip file (ends before its end marker)") from None
  except (OSError, zlib.error) as err:
    raise IdxFormatError(f"{path}: corrupt gzip file ({err})") from None


def read_idx(path: str, magic: int | None = None) -> np.ndarray:
  """Parses one IDX file (plain or gzip).

  Args:
    path: the file.
    magic: the magic number the file must have (e.g. ``IMAGES_MAGIC``); None accepts any
      valid IDX magic.

  Returns:
    The array, shape = the header's sizes, in the header's type (native byte order).

  Raises:
    IdxFormatError: wrong or unknown magic, truncated header or data, trailing bytes,
      corrupt gzip; the message names the file.
  """
  raw = _read_bytes(path)
  if len(raw) < 4:
    raise IdxFormatError(f"{path}: truncated IDX file ({len(raw)} bytes, no 4-byte magic number)")
  found = int.from_bytes(raw[:4], "big")
  code, ndim = raw[2], raw[3]
  if raw[:2] != b"\x00\x00" or code not in _DTYPES or ndim == 0:
    raise IdxFormatError(
      f"{path}: not an IDX file (magic number {found} = 0x{found:08x}; an IDX magic is "
      "0x0000TTDD with type TT in 08, 09, 0b, 0c, 0d, 0e and DD >= 1 dimensions)"
    )
  if magic is not None and found != magic:
    raise IdxFormatError(
      f"{path}: wrong magic number {found} (0x{found:08x}); expected {magic} (0x{magic:08x})"
    )
  header = 4 + 4 * ndim
  if len(raw) < header:
    raise IdxFormatError(
      f"{path}: truncated IDX header ({len(raw)} bytes; {ndim} dimensions need {header})"
    )
  dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
  dtype = np.dtype(_DTYPES[code])
  expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
  body = len(raw) - header
  if body < expected:
    raise IdxFormatError(
      f"{path}: truncated IDX data: the header says {'x'.join(map(str, dims))} values "
      f"({expected} bytes) but {body} bytes follow it"
    )
  if body > expected:
    raise IdxFormatError(
      f"{path}: corrupt IDX file: {body - expected} bytes after the {expected} bytes of data "
      f"that the header ({'x'.join(map(str, dims))}) announces"
    )
  array = np.frombuffer(raw, dtype, count=expected // dtype.itemsize, offset=header)
  return array.reshape(dims).astype(dtype.newbyteorder("="))


def _find_file(folder: str, stem: str) -> str | None:
  for name in (stem, stem + ".gz"):
    path = os.path.join(folder, name)
    if os.path.isfile(path):
      return path
  return None


def split_paths(folder: str, split: str) -> tuple[str, str]:
  """The (images, labels) files of ``split`` in ``folder`` (plain preferred to .gz)."""
  if split not in SPLIT_FILES:
    raise ValueError(f"split={split!r}; allowed: {', '.join(SPLIT_FILES)}")
  paths = []
  for stem in SPLIT_FILES[split]:
    path = _find_file(folder, stem)
    if path is None:
      raise FileNotFoundError(f"{os.path.join(folder, stem)}[.gz] does not exist")
    paths.append(path)
  return paths[0], paths[1]


def read_split(folder: str, split: str) -> tuple[np.ndarray, np.ndarray]:
  """One split's images u8[n, rows, cols] and labels u8[n], with their counts checked."""
  images_path, labels_path = split_paths(folder, split)
  images = read_idx(images_path, IMAGES_MAGIC)
  labels = read_idx(labels_path, LABELS_MAGIC)
  if images.shape[0] != labels.shape[0]:
    raise IdxFormatError(
      f"{images_path} holds {images.shape[0]} images but {labels_path} holds "
      f"{labels.shape[0]} labels; the two files of a split must have the same count"
    )
  return images, labels


def _layouts(base: str, dataset: str) -> list[str]:
  """``base`` itself and the usual sub-folders of a data root for ``dataset``."""
  _, keras_name, torch_name, _ = IDX_DATASETS[dataset]
  out = [base, os.path.join(base, dataset)]
  if keras_name:
    out.append(os.path.join(base, keras_name))
  out.append(os.path.join(base, torch_name, "raw"))
  return out


def search_dirs(dataset: str, data_dir: str | None = None) -> list[str]:
  """The folders ``find_idx_dir`` looks in, in order.

  With ``data_dir``: that folder and its sub-folders ``<dataset>``, Keras's
  (``fashion-mnist``) and torchvision's (``FashionMNIST/raw``, ``MNIST/raw``). Without:
  the same under ``$FEDJAX_SEL_DATA``, then Debian's ``/usr/share/datasets/fashion-mnist``,
  Keras's ``~/.keras/datasets/fashion-mnist``, and torchvision's layout under ``./data``
  and ``~/data``.
  """
  if dataset not in IDX_DATASETS:
    raise ValueError(f"no IDX files for {dataset!r}; allowed: {', '.join(IDX_DATASETS)}")
  if data_dir is not None:
    return _layouts(os.path.expanduser(str(data_dir)), dataset)
  _, keras_name, torch_name, debian = IDX_DATASETS[dataset]
  dirs = []
  if os.environ.get(ENV_VAR):
    dirs += _layouts(os.path.expanduser(os.environ[ENV_VAR]), dataset)
  if debian:
    dirs.append(debian)
  if keras_name:
    dirs.append(os.path.expanduser(os.path.join("~", ".keras", "datasets", keras_name)))
  for root in ("data", os.path.join("~", "data")):  # torchvision's examples use root="data"
    dirs.append(os.path.join(os.path.abspath(os.path.expanduser(root)), torch_name, "raw"))
  return list(dict.fromkeys(dirs))  # without repeats (./data is ~/data when run from ~)


def has_idx_files(folder: str) -> bool:
  """Whether ``folder`` holds all four files (each plain or .gz)."""
  return all(_find_file(folder, stem) is not None for stem in FILE_NAMES)


def find_idx_dir(dataset: str, data_dir: str | None = None) -> str | None:
  """The first folder of ``search_dirs`` holding all four IDX files, or None."""
  for folder in search_dirs(dataset, data_dir):
    if has_idx_files(folder):
      return folder
  return None


def missing_message(dataset: str, searched: list[str]) -> str:
  """One line: the files needed, the folders searched, how to get them."""
  partial = [
    f"{d} has only {', '.join(s for s in FILE_NAMES if _find_file(d, s))}"
    for d in searched
    if os.path.isdir(d) and any(_find_file(d, s) for s in FILE_NAMES)
  ]
  where = f"pass --data_dir=<folder> (or set {ENV_VAR}=<folder>)"
  how = (
    f"install them with `{APT_HINT}` (Debian/Ubuntu, offline) or put them in a folder and " + where
    if dataset == "fashion_mnist"
    else "put the four official MNIST files in a folder and " + where + " (no Debian package "
    f"ships MNIST; Fashion-MNIST's are `{APT_HINT}`)"
  )
  return (
    f"{dataset}: the IDX files {', '.join(s + '[.gz]' for s in FILE_NAMES)} were not found "
    f"together in any of: {', '.join(searched)}"
    + (f" ({'; '.join(partial)})" if partial else "")
    + f"; {how}"
  )


def load_idx(
  dataset: str, folder: str, split: str = "train", dtype: str = "float32"
) -> tuple[np.ndarray, np.ndarray]:
  """One split of MNIST / Fashion-MNIST from the IDX files in ``folder``.

  Args:
    dataset: ``"mnist"`` or ``"fashion_mnist"``.
    folder: a folder holding the split's two files (see ``find_idx_dir``).
    split: ``"train"`` or ``"test"``.
    dtype: ``"float32"`` (pixels / 255) or ``"uint8"`` (the pixels as stored).

  Returns:
    x: f32[n, rows, cols, 1] pixel values / 255 (exactly the TFDS reader's values), or
      u8[n, rows, cols, 1] as stored;
    y: i32[n] labels in [0, 10).

  Raises:
    IdxFormatError: a malformed file, counts that differ, or labels out of range.
  """
  if dataset not in IDX_DATASETS:
    raise ValueError(f"no IDX files for {dataset!r}; allowed: {', '.join(IDX_DATASETS)}")
  if dtype not in ("float32", "uint8"):
    raise ValueError(f"dtype={dtype!r}; allowed: float32, uint8")
  images, labels = read_split(folder, split)
  num_classes = IDX_DATASETS[dataset][0]
  if labels.size and int(labels.max()) >= num_classes:
    raise IdxFormatError(
      f"{split_paths(folder, split)[1]}: labels span [{labels.min()}, {labels.max()}]; "
      f"{dataset} has labels in [0, {num_classes})"
    )
  if dtype == "uint8":  # kept on device as stored, decoded in the batch gather
    return np.ascontiguousarray(images[..., None]), labels.astype(np.int32)
  x = images[..., None].astype(np.float32) / np.float32(255.0)  # as tfds_loaders.load_tfds
  return np.ascontiguousarray(x), labels.astype(np.int32)

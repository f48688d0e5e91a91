"""Image classification datasets read from a local TFDS ``data_dir`` (never downloaded).

``load_tfds(name, data_dir, split)`` returns ``(x f32[n, H, W, C] in [0, 1], y i32[n])``
(``dtype="uint8"``: the stored pixels, decoded to the same floats on device).
``tensorflow_datasets`` is imported lazily (the ``[tfds]`` extra). Two readers:

- ``"tf"`` (default when TensorFlow is installed): ``tfds.load(..., download=False,
  batch_size=CHUNK)`` + ``tfds.as_numpy``, concatenating the chunks. We do not pass
  ``batch_size=-1``: it batches by the split size recorded in the dataset info, which
  ``tfds.testing.mock_data`` leaves at 0, so TFDS falls back to ``sys.maxsize`` and
  TensorFlow aborts the process (``std::length_error``). Chunks give the same arrays.
- ``"data_source"`` (when TensorFlow is absent): ``tfds.data_source`` (random access, no
  TensorFlow), which reads only data prepared with ``--file_format=array_record``.

Any missing piece (package, folder, prepared data) raises one ``DatasetNotFoundError``
that says where the data must be (``<data_dir>/<name>/<version>``) and how to get it.

SVHN (``"svhn_cropped"``, the FedAR paper's third dataset): the 32x32x3 cropped digits, 10
classes, train 73,257 / test 26,032 (the ``extra`` split, 531,131 images, is not used).
STL-10 (``"stl10"``, FedEMD's fourth): 96x96x3, 10 classes, the labelled train 5,000 / test
8,000 (the ``unlabelled`` split, 100,000 images, is not used).

EMNIST: ``"emnist"`` means ``emnist/balanced`` (47 balanced classes, 112,800 train /
18,800 test); ``"emnist/byclass"`` (62 classes, 697,932 train, 2.2 GB as f32) and
``"emnist/letters"`` (26 classes; TFDS labels 1..26 are shifted to 0..25) are also
accepted. EMNIST images are stored transposed; we transpose them back to upright.

References: TFDS catalog (mnist 3.0.1, fashion_mnist 3.0.1, cifar10 3.0.2, emnist 3.1.0,
svhn_cropped 3.1.0, stl10 1.0.0).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import NamedTuple

import numpy as np

from fedjax_sel.data.errors import DatasetNotFoundError

CHUNK = 10_000
BACKENDS = ("auto", "tf", "data_source")


class TfdsSpec(NamedTuple):
  """How to read one dataset: its TFDS name, classes, label offset, EMNIST transpose."""

  tfds_name: str
  num_classes: int
  label_offset: int = 0
  transpose: bool = False


TFDS_DATASETS = {
  "mnist": TfdsSpec("mnist", 10),
  "fashion_mnist": TfdsSpec("fashion_mnist", 10),
  "cifar10": TfdsSpec("cifar10", 10),
  "svhn_cropped": TfdsSpec("svhn_cropped", 10),
  "stl10": TfdsSpec("stl10", 10),
  "emnist": TfdsSpec("emnist/balanced", 47, transpose=True),
  "emnist/balanced": TfdsSpec("emnist/balanced", 47, transpose=True),
  "emnist/byclass": TfdsSpec("emnist/byclass", 62, transpose=True),
  "emnist/letters": TfdsSpec("emnist/letters", 26, label_offset=1, transpose=True),
}
SPLITS = ("train", "test")


def num_classes(name: str) -> int:
  """Number of classes of a TFDS dataset name accepted by ``load_tfds``."""
  return _spec(name).num_classes


def _spec(name: str) -> TfdsSpec:
  if name not in TFDS_DATASETS:
    raise ValueError(f"unknown TFDS dataset {name!r}; allowed: {', '.join(TFDS_DATASETS)}")
  return TFDS_DATASETS[name]


def _how_to_get(tfds_name: str, data_dir: str | None, where: str, backend: str) -> str:
  dd = data_dir or "~/tensorflow_datasets"
  fmt = " --file_format=array_record" if backend == "data_source" else ""
  return (
    f"Put the prepared TFDS dataset at {where} (i.e. <data_dir>/<name>/<version>). "
    f"To get it, run on a machine with internet `tfds build {tfds_name} "
    f"--data_dir={dd}{fmt}` (after `pip install fedjax_sel[tfds]`), then copy the "
    f"resulting {tfds_name.split('/')[0]}/ folder into the data_dir used here."
  )


def _import_tfds():
  try:
    return importlib.import_module("tensorflow_datasets")
  except ImportError:
    raise DatasetNotFoundError(
      "reading TFDS datasets needs the tensorflow_datasets package: `pip install fedjax_sel[tfds]`"
    ) from None


def _expected_dir(tfds, tfds_name: str, data_dir: str | None) -> str:
  try:
    return str(tfds.builder(tfds_name, data_dir=data_dir).data_dir)
  except Exception:  # only used to word the error message
    return os.path.join(data_dir or "~/tensorflow_datasets", tfds_name, "<version>")


def _read_tf(tfds, tfds_name: str, data_dir: str | None, split: str) -> dict[str, np.ndarray]:
  ds = tfds.load(tfds_name, split=split, data_dir=data_dir, download=False, batch_size=CHUNK)
  chunks = list(tfds.as_numpy(ds))
  if not chunks:
    return {"image": np.zeros((0, 1, 1, 1), np.uint8), "label": np.zeros(0, np.int64)}
  return {k: np.concatenate([c[k] for c in chunks]) for k in ("image", "label")}


def _read_data_source(
  tfds, tfds_name: str, data_dir: str | None, split: str
) -> dict[str, np.ndarray]:
  source = tfds.data_source(tfds_name, split=split, data_dir=data_dir, download=False)
  records = [source[i] for i in range(len(source))]
  return {k: np.stack([np.asarray(r[k]) for r in records]) for k in ("image", "label")}


DTYPES = ("float32", "uint8")


def load_tfds(
  name: str,
  data_dir: str | None,
  split: str = "train",
  *,
  backend: str = "auto",
  dtype: str = "float32",
) -> tuple[np.ndarray, np.ndarray]:
  """Reads one split of a TFDS image dataset from ``data_dir`` as numpy arrays.

  Args:
    name: one of ``TFDS_DATASETS`` (mnist, fashion_mnist, cifar10, svhn_cropped, stl10,
      emnist, ...).
    data_dir: the TFDS data directory (must exist); None means TFDS's default
      (``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``).
    split: ``"train"`` or ``"test"`` (any TFDS split string is passed through).
    backend: ``"auto"`` (TensorFlow if installed, else ``data_source``), ``"tf"`` or
      ``"data_source"``.
    dtype: ``"float32"`` (pixels / 255) or ``"uint8"`` (the stored pixels; a
      ``FederatedData`` with ``x_divisor=255`` decodes them on device, bit for bit the
      float32 values).

  Returns:
    x: f32[n, H, W, C] pixel values scaled to [0, 1] (uint8 [n, H, W, C] with
    ``dtype="uint8"``); y: i32[n] labels in [0, C).

  Raises:
    DatasetNotFoundError: the package, the folder or the prepared data is missing.
    ValueError: unknown name or backend.
  """
  spec = _spec(name)
  if backend not in BACKENDS:
    raise ValueError(f"unknown backend {backend!r}; allowed: {', '.join(BACKENDS)}")
  if dtype not in DTYPES:
    raise ValueError(f"dtype={dtype!r}; allowed: {', '.join(DTYPES)}")
  if not isinstance(split, str) or not split:
    raise ValueError(f"split={split!r} must be a TFDS split name such as 'train' or 'test'")
  if data_dir is not None and not os.path.isdir(os.path.expanduser(str(data_dir))):
    raise DatasetNotFoundError(
      f"data_dir {data_dir!r} does not exist. "
      + _how_to_get(
        spec.tfds_name, str(data_dir), f"{data_dir}/{spec.tfds_name}/<version>", backend
      )
    )
  data_dir = None if data_dir is None else os.path.expanduser(str(data_dir))
  tfds = _import_tfds()
  if backend == "auto":
    backend = "tf" if importlib.util.find_spec("tensorflow") is not None else "data_source"
  reader = _read_tf if backend == "tf" else _read_data_source
  try:
    arrays = reader(tfds, spec.tfds_name, data_dir, split)
  except ImportError:
    raise DatasetNotFoundError(
      f"reading {spec.tfds_name} with backend='tf' needs TensorFlow: "
      "`pip install fedjax_sel[tfds]` (or use backend='data_source' with array_record data)"
    ) from None
  except (AssertionError, OSError, RuntimeError, ValueError, KeyError) as err:
    where = _expected_dir(tfds, spec.tfds_name, data_dir)
    if os.path.isdir(where):
      reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
    else:
      reason = f"no prepared data at {where}"
    raise DatasetNotFoundError(
      f"{name}: could not read split {split!r} from {data_dir or 'the default TFDS dir'} "
      f"({reason}). " + _how_to_get(spec.tfds_name, data_dir, where, backend)
    ) from None
  x = arrays["image"]
  if x.ndim == 3:
    x = x[..., None]
  if spec.transpose:
    x = np.swapaxes(x, 1, 2)
  if dtype == "float32":
    x = x.astype(np.float32) / np.float32(255.0)
  elif x.dtype != np.uint8:
    raise ValueError(f"{name}: images stored as {x.dtype}; dtype='uint8' needs uint8 pixels")
  y = arrays["label"].astype(np.int64) - spec.label_offset
  if y.size and (y.min() < 0 or y.max() >= spec.num_classes):
    raise ValueError(
      f"{name}: labels span [{y.min()}, {y.max()}], expected [0, {spec.num_classes})"
    )
  return np.ascontiguousarray(x), y.astype(np.int32)

"""``load(dataset, num_clients, partition, ...)``: one entry point for every dataset.

- ``synthetic``: FedProx Synthetic(alpha, beta) with its natural per-client split
  (``partition`` must be None or ``"natural"``; hparams ``alpha``, ``beta``, ``iid``).
- ``digits`` (scikit-learn, offline), ``mnist`` and ``fashion_mnist`` (their four official
  IDX files, ``fedjax_sel.data.idx``, or a prepared TFDS dir) and the TFDS datasets
  ``cifar10``, ``svhn_cropped``, ``stl10``, ``emnist`` (read from ``data_dir``): the
  dataset's train split is the pool (``load_pool``), partitioned among the clients by
  ``partition`` (``fedjax_sel.data.partitions``; default ``"iid"``); each client's part is
  split into local train and test parts; the dataset's test split is the global test set.

Where MNIST / Fashion-MNIST come from: with ``data_dir``, its IDX files (in it or in its
``<dataset>``, Keras or torchvision sub-folder), else the prepared TFDS data in it. Without
``data_dir``: the IDX files in ``idx.search_dirs`` (``$FEDJAX_SEL_DATA``, Debian's
``/usr/share/datasets/fashion-mnist``, Keras's and torchvision's caches), else TFDS's
default dir when it holds the dataset, else one ``DatasetNotFoundError`` naming the files,
the folders searched and ``apt-get install dataset-fashion-mnist``.

Local split: a client holding n examples keeps ``n_test = round(n * test_fraction)`` of
them (at least 1 and at most n - 1 when n >= 2 and test_fraction > 0) as its local test
set. ``examples_per_client = E`` caps every client at exactly E training examples and
``round(E * f / (1 - f))`` local test examples (f = test_fraction), so a client with
enough data has train/test in ratio (1 - f) : f; smaller clients keep what they have.
Partition sizes (``sizes=``, ``size_groups``, ``lognormal``) count train + local test:
Fraboni et al.'s "100..1000 training samples and a fifth of that for testing" is
``sizes`` = 1.2 x the groups with ``test_fraction = 1/6``.

References: Fraboni et al. 2021 Sec. 6; FedGS (Wang et al. 2023) Sec. 5; FL-FDMS Sec. 6.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import numpy as np

from fedjax_sel.core.registry import is_integer
from fedjax_sel.data.errors import DatasetNotFoundError
from fedjax_sel.data.federated import FederatedData, decode, split_from_indices, stored_x
from fedjax_sel.data.partitions import PARTITIONS, make_partition

TFDS_NAMES = ("mnist", "fashion_mnist", "cifar10", "svhn_cropped", "stl10", "emnist")
DATASETS = ("synthetic", "digits", *TFDS_NAMES)
IDX_NAMES = ("mnist", "fashion_mnist")  # also read from their official IDX files
REAL_DATASETS = ("digits", *TFDS_NAMES)  # the datasets with a central pool (``load_pool``)
SYNTHETIC_HPARAMS = ("alpha", "beta", "iid", "recipe")
DEFAULT_TEST_FRACTION = 0.2
# Model inputs of the image datasets: "unit" = pixels / 255 in [0, 1]; "standardize" = then
# (x - mean) / std, the FedGS code's transforms.Normalize((0.1307,), (0.3081,)) (MNIST's
# statistics, which its Fashion-MNIST task uses too: benchmark/fashion_classification/core.py).
NORMALIZATIONS = ("unit", "standardize")
MNIST_MEAN_STD = (0.1307, 0.3081)


def _check_int(name: str, value: Any, low: int) -> int:
  if not is_integer(value, strict=True) or value < low:
    raise ValueError(f"{name}={value!r} is out of range; allowed: integers >= {low}")
  return int(value)


def _check_fraction(test_fraction: Any) -> float:
  try:
    f = float(test_fraction)
  except (TypeError, ValueError):
    raise ValueError(f"test_fraction={test_fraction!r} is not a number") from None
  if not 0.0 <= f < 1.0:
    raise ValueError(f"test_fraction={test_fraction!r} is out of range; allowed: [0, 1)")
  return f


def num_local_test(n: int, test_fraction: float) -> int:
  """Local test examples of a client holding n examples (see the module docstring)."""
  if test_fraction <= 0.0 or n < 2:
    return 0
  return min(max(int(round(n * test_fraction)), 1), n - 1)


def federate(
  x: np.ndarray,
  y: np.ndarray,
  test_x: np.ndarray,
  test_y: np.ndarray,
  num_classes: int,
  num_clients: int,
  partition: str = "iid",
  *,
  seed: int = 0,
  examples_per_client: int | None = None,
  test_fraction: float = DEFAULT_TEST_FRACTION,
  name: str = "",
  x_divisor: float = 1.0,
  **hparams: Any,
) -> FederatedData:
  """Partitions a centralized pool into a FederatedData (used by ``load``).

  Args:
    x: f32[n, ...] pool examples (or uint8 images, kept as such, with ``x_divisor``);
      y: i32[n] pool labels.
    test_x: f32[n_test, ...] (or uint8), test_y: i32[n_test]: the global test set.
    num_classes: C.
    num_clients: N, 1 <= N <= n.
    partition: a name in ``PARTITIONS``.
    seed: seed of the partition and of the local train/test split.
    examples_per_client: cap E on training examples per client (>= 1) or None.
    test_fraction: share f in [0, 1) of each client's examples kept as local test set.
    name: description stored in the result.
    x_divisor: model inputs are ``x / x_divisor`` (``FederatedData.x_divisor``): 255 for
      uint8 pixels, 1 for float data.
    **hparams: the partition's hyper-parameters (see ``partitions.make_partition``).

  Returns:
    FederatedData; ``extras`` holds ``partition``, ``hparams`` and, for ``clustered``,
    ``groups`` (i32[N], each client's cluster).
  """
  num_clients = _check_int("num_clients", num_clients, 1)
  test_fraction = _check_fraction(test_fraction)
  if examples_per_client is not None:
    examples_per_client = _check_int("examples_per_client", examples_per_client, 1)
  rng = np.random.default_rng(seed)
  if partition == "easyfl_quantity":  # easyFL's generator: its own seed and local split
    if examples_per_client is not None:
      raise ValueError(
        f"examples_per_client={examples_per_client!r} is not available with partition "
        "'easyfl_quantity' (its generator fixes the sizes); allowed: None"
      )
    hparams = {"seed": seed, "holdout": test_fraction, **hparams}
  part = make_partition(partition, y, num_clients, rng, **hparams)
  cap_test = None
  if examples_per_client is not None:
    f = test_fraction
    cap_test = int(round(examples_per_client * f / (1.0 - f))) if f > 0 else 0
  train_idx, test_idx = [], []
  if part.local_test is not None:
    train_idx, test_idx = list(part.indices), list(part.local_test)
  for idx in part.indices if part.local_test is None else ():
    idx = rng.permutation(idx)
    n = len(idx)
    if cap_test is not None and n >= examples_per_client + cap_test:
      n_test, n_train = cap_test, examples_per_client
    else:
      n_test = num_local_test(n, test_fraction)
      n_train = n - n_test
      if examples_per_client is not None:
        n_train = min(n_train, examples_per_client)
    test_idx.append(idx[:n_test])
    train_idx.append(idx[n_test : n_test + n_train])
  extras: dict[str, Any] = {"partition": partition, "hparams": dict(hparams)}
  if part.groups is not None:
    extras["groups"] = part.groups
  return FederatedData(
    train=split_from_indices(x, y, train_idx),
    test=split_from_indices(x, y, test_idx),
    test_x=stored_x(test_x),
    test_y=np.asarray(test_y, np.int32),
    num_classes=int(num_classes),
    name=name,
    extras=extras,
    x_divisor=float(x_divisor),
  )


class Pool(NamedTuple):
  """A centralized dataset: the train split (the pool clients share) and the test split."""

  x: np.ndarray  # f32[n, ...]
  y: np.ndarray  # i32[n]
  test_x: np.ndarray  # f32[n_test, ...]
  test_y: np.ndarray  # i32[n_test]
  num_classes: int


def _tfds_default_has(dataset: str) -> bool:
  """Whether TFDS's default data dir holds ``dataset`` (checked without importing TFDS)."""
  from fedjax_sel.data import tfds_loaders

  root = os.environ.get("TFDS_DATA_DIR") or os.path.join("~", "tensorflow_datasets")
  name = tfds_loaders.TFDS_DATASETS[dataset].tfds_name.split("/")[0]
  return os.path.isdir(os.path.join(os.path.expanduser(root), name))


def _load_tfds_pool(dataset: str, data_dir: str | None, image_dtype: str = "float32") -> Pool:
  from fedjax_sel.data import tfds_loaders

  x, y = tfds_loaders.load_tfds(dataset, data_dir, "train", dtype=image_dtype)
  tx, ty = tfds_loaders.load_tfds(dataset, data_dir, "test", dtype=image_dtype)
  return Pool(x, y, tx, ty, tfds_loaders.num_classes(dataset))


IMAGE_DTYPES = ("float32", "uint8")
PIXEL_DIVISOR = 255.0  # uint8 pixels / 255 = the float32 images in [0, 1]


def _check_image_dtype(image_dtype: Any) -> str:
  if image_dtype not in IMAGE_DTYPES:
    raise ValueError(f"image_dtype={image_dtype!r}; allowed: {', '.join(IMAGE_DTYPES)}")
  return image_dtype


def load_pool(dataset: str, data_dir: str | None = None, *, image_dtype: str = "float32") -> Pool:
  """The centralized train and test splits of a real dataset, from wherever they are.

  The one place that maps a dataset name to its source: ``load`` partitions this pool, and
  the paper binaries that build their own partitions (Clustered Sampling, FedEMD) read it
  here too, so a new source works everywhere at once.

  Args:
    dataset: one of ``REAL_DATASETS`` (digits, mnist, fashion_mnist, cifar10, svhn_cropped,
      stl10, emnist).
    data_dir: a folder holding MNIST / Fashion-MNIST IDX files or prepared TFDS data (must
      exist); None searches the usual places (see the module docstring). Ignored by digits.
    image_dtype: ``"float32"`` (pixels / 255) or ``"uint8"`` (the stored pixels, a quarter
      of the memory: models see them / ``PIXEL_DIVISOR``, converted on device). Digits is
      always float32.

  Returns:
    Pool(x f32[n, H, W, C] in [0, 1] (or uint8), y i32[n], test_x, test_y, num_classes).

  Raises:
    ValueError: unknown dataset. DatasetNotFoundError: the data or its reader is missing.
    idx.IdxFormatError: an IDX file is malformed.
  """
  if not isinstance(dataset, str) or dataset not in REAL_DATASETS:
    raise ValueError(f"unknown dataset {dataset!r} for a pool; allowed: {', '.join(REAL_DATASETS)}")
  image_dtype = _check_image_dtype(image_dtype)
  if dataset == "digits":
    from fedjax_sel.data.digits import NUM_CLASSES, load_digits

    return Pool(*load_digits("train"), *load_digits("test"), NUM_CLASSES)
  if data_dir is not None and not os.path.isdir(os.path.expanduser(str(data_dir))):
    idx_hint = "the four IDX files or " if dataset in IDX_NAMES else ""
    raise DatasetNotFoundError(
      f"data_dir={data_dir!r} does not exist; it must hold {idx_hint}TFDS data as "
      f"<data_dir>/<name>/<version>, e.g. `tfds build {dataset} --data_dir={data_dir}` "
      "on a machine with internet (`pip install fedjax_sel[tfds]`)"
    )
  if dataset not in IDX_NAMES:
    return _load_tfds_pool(dataset, data_dir, image_dtype)
  from fedjax_sel.data import idx

  folder = idx.find_idx_dir(dataset, data_dir)
  if folder is not None:
    (x, y), (tx, ty) = (idx.load_idx(dataset, folder, s, image_dtype) for s in ("train", "test"))
    return Pool(x, y, tx, ty, idx.IDX_DATASETS[dataset][0])
  searched = idx.search_dirs(dataset, data_dir)
  if data_dir is None and not _tfds_default_has(dataset):
    raise DatasetNotFoundError(idx.missing_message(dataset, searched))
  try:
    return _load_tfds_pool(dataset, data_dir, image_dtype)
  except DatasetNotFoundError as err:
    raise DatasetNotFoundError(
      f"{idx.missing_message(dataset, searched)}; nor could TFDS read it: {err}"
    ) from None


def _describe(dataset: str, partition: str, hparams: dict[str, Any]) -> str:
  shown = {k: v for k, v in hparams.items() if isinstance(v, (int, float, str))}
  args = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items())
  return f"{dataset}/{partition}" + (f"({args})" if args else "")


def check_normalization(normalization: Any, mean: Any, std: Any) -> tuple[str, float, float]:
  """Validates an input normalization (``NORMALIZATIONS``) and its mean / std."""
  if not isinstance(normalization, str) or normalization not in NORMALIZATIONS:
    raise ValueError(f"input_normalization={normalization!r}; allowed: {', '.join(NORMALIZATIONS)}")
  values = []
  for name, v in (("input_mean", mean), ("input_std", std)):
    try:
      f = float(v)
    except (TypeError, ValueError):
      raise ValueError(f"{name}={v!r} is not a number") from None
    if not np.isfinite(f):
      raise ValueError(f"{name}={v!r} is out of range; allowed: finite numbers")
    values.append(f)
  if values[1] <= 0.0:
    raise ValueError(f"input_std={std!r} is out of range; allowed: numbers > 0")
  return normalization, values[0], values[1]


def normalize_inputs(x: np.ndarray, mean: float, std: float) -> np.ndarray:
  """Float32 images in [0, 1] standardized on the host, ``(x - mean) / std`` in float32:
  bitwise what ``core.engine.decode_table(uint8, 255, mean, std)`` gives their pixels."""
  if x.dtype == np.uint8:
    raise ValueError(
      "input_normalization='standardize' needs float32 images (image_dtype='float32'); "
      "allowed for uint8 storage: 'unit'"
    )
  return decode(x, 1.0, mean, std)


def load(
  dataset: str,
  num_clients: int,
  partition: str | None = None,
  *,
  seed: int = 0,
  data_dir: str | None = None,
  examples_per_client: int | None = None,
  test_fraction: float | None = None,
  image_dtype: str = "float32",
  input_normalization: str = "unit",
  input_mean: float = MNIST_MEAN_STD[0],
  input_std: float = MNIST_MEAN_STD[1],
  **hparams: Any,
) -> FederatedData:
  """Loads a federated dataset by name.

  Args:
    dataset: one of ``DATASETS``.
    num_clients: N >= 1 (for real datasets at most the pool size).
    partition: for real datasets a name in ``PARTITIONS`` (None means ``"iid"``); for
      ``synthetic`` None or ``"natural"``.
    seed: seed of the generator / partition / local split.
    data_dir: a folder holding MNIST / Fashion-MNIST's IDX files or prepared TFDS data
      (must exist); None searches the usual places (module docstring). Ignored by
      ``synthetic`` and ``digits``.
    examples_per_client: give every client exactly this many training examples when it has
      enough (see the module docstring); None keeps the partition's sizes.
    test_fraction: each client's local test share in [0, 1); None means 0.2 for real
      datasets and the generator's own 0.1 for ``synthetic``.
    image_dtype: images as ``"float32"`` in [0, 1] or as their stored ``"uint8"`` pixels
      (``x_divisor = 255``: a quarter of the memory, decoded in the batch gather on device,
      bit for bit the float32 inputs). Ignored by ``synthetic`` and ``digits``.
    input_normalization: ``"unit"`` (default: inputs as loaded, images in [0, 1]) or
      ``"standardize"``: every input (train, local test, global test) becomes
      ``(x - input_mean) / input_std`` in float32, on the host (needs float32 images; not
      for ``synthetic``).
    input_mean, input_std: the standardization's statistics (default MNIST's 0.1307 /
      0.3081, as the FedGS code's Fashion-MNIST task).
    **hparams: ``synthetic``: alpha, beta, iid, recipe (``fedprox`` or ``fedgs``); otherwise
      the partition's hyper-parameters (e.g. ``alpha`` for dirichlet, ``labels_per_client``
      for shards).

  Returns:
    FederatedData.

  Raises:
    ValueError: a bad argument (the message names it and the allowed values).
    DatasetNotFoundError: the data (or the package reading it) is missing.
    idx.IdxFormatError: an IDX file is malformed (the message names it).
  """
  if not isinstance(dataset, str) or dataset not in DATASETS:
    raise ValueError(f"unknown dataset {dataset!r}; allowed: {', '.join(DATASETS)}")
  input_normalization, input_mean, input_std = check_normalization(
    input_normalization, input_mean, input_std
  )
  num_clients = _check_int("num_clients", num_clients, 1)
  seed = _check_int("seed", seed, 0)
  if examples_per_client is not None:
    examples_per_client = _check_int("examples_per_client", examples_per_client, 1)
  if test_fraction is not None:
    test_fraction = _check_fraction(test_fraction)
  if dataset == "synthetic":
    if input_normalization != "unit":
      raise ValueError(
        f"input_normalization={input_normalization!r} is not available for synthetic; "
        "allowed: 'unit'"
      )
    if partition not in (None, "natural"):
      raise ValueError(
        f"partition={partition!r} is not available for synthetic; allowed: None, 'natural' "
        "(Synthetic has its own per-client split)"
      )
    unknown = sorted(set(hparams) - set(SYNTHETIC_HPARAMS))
    if unknown:
      raise ValueError(
        f"unknown hyper-parameter(s) {unknown} for dataset 'synthetic'; "
        f"allowed: {list(SYNTHETIC_HPARAMS)}"
      )
    from fedjax_sel.data.synthetic import synthetic

    kwargs = dict(hparams)
    if test_fraction is not None:
      kwargs["test_fraction"] = test_fraction
    return synthetic(
      num_clients=num_clients, examples_per_client=examples_per_client, seed=seed, **kwargs
    )
  partition = "iid" if partition is None else partition
  if partition not in PARTITIONS:
    raise ValueError(
      f"unknown partition {partition!r} for dataset {dataset!r}; allowed: {', '.join(PARTITIONS)}"
    )
  image_dtype = _check_image_dtype(image_dtype)
  x, y, tx, ty, num_classes = load_pool(dataset, data_dir, image_dtype=image_dtype)
  name = _describe(dataset, partition, hparams)
  if input_normalization == "standardize":
    x, tx = normalize_inputs(x, input_mean, input_std), normalize_inputs(tx, input_mean, input_std)
    name += f", standardized ({input_mean:g}, {input_std:g})"
  if num_clients > len(y):
    raise ValueError(
      f"num_clients={num_clients} is out of range for {dataset} ({len(y)} pool examples); "
      f"allowed: [1, {len(y)}]"
    )
  return federate(
    x,
    y,
    tx,
    ty,
    num_classes,
    num_clients,
    partition,
    seed=seed,
    examples_per_client=examples_per_client,
    test_fraction=DEFAULT_TEST_FRACTION if test_fraction is None else test_fraction,
    name=name,
    x_divisor=PIXEL_DIVISOR if x.dtype == np.uint8 else 1.0,
    **hparams,
  )

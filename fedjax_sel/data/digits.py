"""scikit-learn's bundled 8x8 handwritten digits: a real dataset that needs no download.

1,797 greyscale 8x8 images (pixel values 0..16) of the digits 0-9 (UCI optdigits test
set), shipped inside scikit-learn. Pixels are scaled to [0, 1]. The train/test split is
fixed (independent of any experiment seed): a permutation drawn with seed 0 puts 360
images (20%) in ``test`` and 1,437 in ``train``.

References: Alpaydin & Kaynak 1998, UCI "Optical Recognition of Handwritten Digits";
``sklearn.datasets.load_digits``.
"""

from __future__ import annotations

import importlib

import numpy as np

from fedjax_sel.data.errors import DatasetNotFoundError

NUM_CLASSES = 10
NUM_TEST = 360
SPLITS = ("train", "test")
_SPLIT_SEED = 0


def load_digits(split: str = "train") -> tuple[np.ndarray, np.ndarray]:
  """One split of the sklearn digits.

  Args:
    split: ``"train"`` (1,437 images) or ``"test"`` (360 images).

  Returns:
    x: f32[n, 8, 8, 1] in [0, 1]; y: i32[n] in [0, 10).

  Raises:
    DatasetNotFoundError: scikit-learn is not installed.
    ValueError: unknown split.
  """
  if split not in SPLITS:
    raise ValueError(f"unknown digits split {split!r}; allowed: {', '.join(SPLITS)}")
  try:
    datasets = importlib.import_module("sklearn.datasets")
  except ImportError:
    raise DatasetNotFoundError(
      "the digits dataset needs scikit-learn: `pip install fedjax_sel[digits]`"
    ) from None
  bunch = datasets.load_digits()
  x = (np.asarray(bunch.images, np.float32) / np.float32(16.0))[..., None]
  y = np.asarray(bunch.target, np.int32)
  perm = np.random.default_rng(_SPLIT_SEED).permutation(len(y))
  idx = np.sort(perm[:NUM_TEST] if split == "test" else perm[NUM_TEST:])
  return x[idx], y[idx]

"""The federated dataset: one flat example array per split plus per-client slices.

A client's examples are ``x[offsets[k] : offsets[k] + counts[k]]``; there is never a
padded ``[N, n_max, ...]`` copy. Batches are gathered by index inside jit.

Stored dtype: examples are float32, or kept as stored (uint8 images) with
``FederatedData.x_divisor`` saying how they become model inputs: ``x / x_divisor`` in
float32 (255 for 8-bit pixels), applied in the batch gather on device, so an image takes 1
byte per pixel in memory instead of 4. ``decode(x, x_divisor)`` is the same on the host.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from fedjax_sel.core.types import ClientInfo


class ClientSplit(NamedTuple):
  """One split (train or test) of a federated dataset.

  Attributes:
    x: f32[n_total, ...] (or uint8, see ``FederatedData.x_divisor``) all clients' examples,
      client after client.
    y: i32[n_total] labels.
    offsets: i32[N] index of each client's first example.
    counts: i32[N] number of examples of each client.
  """

  x: np.ndarray
  y: np.ndarray
  offsets: np.ndarray
  counts: np.ndarray

  @property
  def num_clients(self) -> int:
    return int(self.counts.shape[0])

  def client(self, k: int) -> tuple[np.ndarray, np.ndarray]:
    o, c = int(self.offsets[k]), int(self.counts[k])
    return self.x[o : o + c], self.y[o : o + c]


class FederatedData(NamedTuple):
  """Train and test examples per client, and a global test set.

  Attributes:
    train: the clients' training examples.
    test: the clients' local test examples (for per-client accuracy distributions).
    test_x, test_y: the global test set (the server's validation set).
    num_classes: number of classes C.
    name: a short description, e.g. ``synthetic(0.5,0.5)``.
    extras: optional dataset-specific facts (e.g. the true per-client models of
      Synthetic, the group of each client of a clustered partition).
    x_divisor: model inputs are ``x / x_divisor`` in float32; 1.0 for float data, 255.0
      for uint8 images (train, local test and global test examples alike).
  """

  train: ClientSplit
  test: ClientSplit
  test_x: np.ndarray
  test_y: np.ndarray
  num_classes: int
  name: str = ""
  extras: dict | None = None
  x_divisor: float = 1.0

  @property
  def num_clients(self) -> int:
    return self.train.num_clients

  @property
  def input_shape(self) -> tuple[int, ...]:
    return tuple(self.train.x.shape[1:])

  def client_info(self) -> ClientInfo:
    """ClientInfo(num_examples i32[N], label_counts i32[N, C]) of the training split.

    Checks the data first (:func:`check_federated_data`): a ``Simulation`` built on a
    hand-made FederatedData whose offsets or counts do not cover its arrays fails here with
    a message, not inside JAX."""
    check_federated_data(self)
    return ClientInfo(
      num_examples=jnp.asarray(self.train.counts, jnp.int32),
      label_counts=jnp.asarray(label_counts(self.train, self.num_classes), jnp.int32),
    )


STORED_DTYPES = (np.uint8, np.uint16)


ALIGNMENT = 64  # bytes: XLA:CPU takes a host buffer aligned so without copying it


def aligned(a: np.ndarray, alignment: int = ALIGNMENT) -> np.ndarray:
  """``a`` itself if its buffer starts on an ``alignment``-byte boundary and is C-contiguous,
  else an aligned C-contiguous copy.

  Why: on the CPU backend ``jax.device_put`` of an aligned numpy array aliases the host
  buffer instead of copying it, so a dataset stored aligned occupies memory once, not
  twice (measured: 800k 28x28 uint8 images, 0.63 GB, peak RSS +0.63 GB when copied,
  +0.003 GB when aliased). Numpy's own allocations are only 16-byte aligned.
  """
  a = np.asarray(a)
  if a.flags.c_contiguous and (a.ctypes.data % alignment == 0 or a.nbytes == 0):
    return a
  out = aligned_empty(a.shape, a.dtype, alignment)
  out[...] = a
  return out


def aligned_empty(shape, dtype, alignment: int = ALIGNMENT) -> np.ndarray:
  """An uninitialized C-contiguous array whose buffer is ``alignment``-byte aligned."""
  dtype = np.dtype(dtype)
  nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  buf = np.empty(nbytes + alignment, np.uint8)
  start = (-buf.ctypes.data) % alignment
  return buf[start : start + nbytes].view(dtype).reshape(shape)


def stored_x(x: np.ndarray) -> np.ndarray:
  """Examples as a split keeps them: uint8 / uint16 as they are, anything else float32;
  C-contiguous and 64-byte aligned (:func:`aligned`)."""
  x = np.asarray(x)
  if x.dtype not in STORED_DTYPES:
    x = x.astype(np.float32, copy=False)
  return aligned(x)


def _take_stored(x, order: np.ndarray) -> np.ndarray:
  """``stored_x(x[order])`` gathered straight into an aligned buffer (one copy, not two)."""
  x = np.asarray(x)
  dtype = x.dtype if x.dtype in STORED_DTYPES else np.dtype(np.float32)
  out = aligned_empty((order.shape[0], *x.shape[1:]), dtype)
  if x.dtype == dtype:
    np.take(x, order, axis=0, out=out)
  else:
    out[...] = x[order]
  return out


def decode(
  x: np.ndarray, x_divisor: float = 1.0, mean: float = 0.0, std: float = 1.0
) -> np.ndarray:
  """Model inputs f32 from stored examples, on the host: ``x.astype(float32) / x_divisor``
  (what the device's batch gather computes, bit for bit), then with ``mean`` / ``std``
  other than 0 / 1 standardized, ``(v - float32(mean)) / float32(std)`` in float32 (bitwise
  a lookup in ``core.engine.decode_table(dtype, x_divisor, mean, std)``)."""
  x = np.asarray(x)
  if x.dtype == np.float32 and x_divisor == 1.0 and mean == 0.0 and std == 1.0:
    return x
  x = x.astype(np.float32)
  x = x if x_divisor == 1.0 else x / np.float32(x_divisor)
  if mean != 0.0 or std != 1.0:
    x = (x - np.float32(mean)) / np.float32(std)
  return x


def check_split(split: ClientSplit, name: str, num_classes: int) -> None:
  """Raises ValueError, naming the split and the bad value, unless the split's clients lie
  one after another and cover its arrays (``offsets[k] = counts[0] + ... + counts[k-1]``,
  ``sum(counts) = len(x) = len(y)``, counts >= 0) and its labels are in [0, num_classes)."""
  offsets, counts = np.asarray(split.offsets), np.asarray(split.counts)
  if offsets.ndim != 1 or counts.shape != offsets.shape:
    raise ValueError(
      f"{name}: offsets of shape {offsets.shape} and counts of shape {counts.shape}; "
      "allowed: two 1-D integer arrays of length N"
    )
  if counts.size and (counts.dtype.kind not in "iu" or offsets.dtype.kind not in "iu"):
    raise ValueError(
      f"{name}: offsets/counts of dtype {offsets.dtype}/{counts.dtype}; allowed: integers"
    )
  if counts.size and counts.min() < 0:
    raise ValueError(f"{name}.counts holds {counts.min()}; allowed: counts >= 0")
  n_x, n_y, total = len(split.x), len(split.y), int(counts.sum())
  if not n_x == n_y == total:
    raise ValueError(
      f"{name}: counts sum to {total} but x holds {n_x} and y {n_y} examples; allowed: "
      "counts that cover x and y exactly"
    )
  expected = np.concatenate([[0], np.cumsum(counts)[:-1]]) if counts.size else counts
  bad = np.flatnonzero(offsets != expected)
  if bad.size:
    k = int(bad[0])
    raise ValueError(
      f"{name}.offsets[{k}]={offsets[k]}; allowed: {expected[k]} (clients stored one after "
      "another: offsets = cumulative counts)"
    )
  y = np.asarray(split.y)
  if y.size and (y.min() < 0 or y.max() >= num_classes):
    raise ValueError(
      f"{name}.y holds label {y.min() if y.min() < 0 else y.max()}; allowed: 0 .. "
      f"num_classes - 1 = {num_classes - 1}"
    )


def check_counts_have_examples(counts, what: str) -> None:
  """Raises ValueError, naming ``what``, when no client's count (i[N] training examples per
  client) is positive: there is nothing to train on."""
  counts = np.asarray(counts)
  if not np.any(counts > 0):
    raise ValueError(
      f"{what}: all of its {counts.size} clients have 0 training examples; "
      "allowed: at least one client with examples"
    )


def check_has_training_examples(data: FederatedData) -> None:
  """:func:`check_counts_have_examples` of ``data``'s training split, naming the dataset."""
  check_counts_have_examples(data.train.counts, f"dataset {data.name!r}")


def check_federated_data(data: FederatedData) -> None:
  """Raises ValueError naming the bad value unless ``data`` is consistent: both splits pass
  :func:`check_split` with the same N, some client holds a training example, and the global
  test set's x and y have equal lengths and labels in [0, num_classes)."""
  check_split(data.train, "train", data.num_classes)
  check_has_training_examples(data)
  check_split(data.test, "test", data.num_classes)
  if data.test.num_clients != data.train.num_clients:
    raise ValueError(
      f"test split has {data.test.num_clients} clients, train {data.train.num_clients}; "
      "allowed: the same N"
    )
  test = ClientSplit(data.test_x, data.test_y, np.zeros(1, np.int32), np.array([len(data.test_y)]))
  check_split(test, "test_x/test_y", data.num_classes)


def label_counts(split: ClientSplit, num_classes: int) -> np.ndarray:
  """i32[N, C]: examples of each class held by each client."""
  client_of = np.repeat(np.arange(split.num_clients), split.counts)
  out = np.zeros((split.num_clients, num_classes), np.int64)
  np.add.at(out, (client_of, split.y.astype(np.int64)), 1)
  return out.astype(np.int32)


def split_from_lists(xs: list[np.ndarray], ys: list[np.ndarray]) -> ClientSplit:
  """Builds a ClientSplit from per-client arrays (may be empty)."""
  counts = np.array([len(y) for y in ys], np.int32)
  offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
  x = stored_x(np.concatenate(xs, axis=0))
  y = np.concatenate(ys, axis=0).astype(np.int32)
  return ClientSplit(x=x, y=y, offsets=offsets, counts=counts)


def split_from_indices(
  x: np.ndarray, y: np.ndarray, client_indices: list[np.ndarray]
) -> ClientSplit:
  """Builds a ClientSplit by gathering ``x[idx], y[idx]`` for each client's indices."""
  order = np.concatenate([np.asarray(i, np.int64) for i in client_indices])
  counts = np.array([len(i) for i in client_indices], np.int32)
  offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
  return ClientSplit(
    x=_take_stored(x, order),
    y=np.asarray(y[order], np.int32),
    offsets=offsets,
    counts=counts,
  )


def train_test_per_client(
  split: ClientSplit, test_fraction: float, rng: np.random.Generator
) -> tuple[ClientSplit, ClientSplit]:
  """Splits every client's examples into local train and test parts (shuffled)."""
  tr_x, tr_y, te_x, te_y = [], [], [], []
  for k in range(split.num_clients):
    xk, yk = split.client(k)
    perm = rng.permutation(len(yk))
    n_test = int(round(len(yk) * test_fraction))
    if len(yk) > 1:
      n_test = min(max(n_test, 1), len(yk) - 1)
    else:
      n_test = 0
    te, tr = perm[:n_test], perm[n_test:]
    tr_x.append(xk[tr])
    tr_y.append(yk[tr])
    te_x.append(xk[te])
    te_y.append(yk[te])
  return split_from_lists(tr_x, tr_y), split_from_lists(te_x, te_y)

"""Federated partitions of a centralized pool of labelled examples.

Every partition returns ``list[np.ndarray]``: client k's indices into the pool (int64,
disjoint across clients, shuffled within a client) and is a deterministic function of the
``np.random.Generator`` it is given. Label skew (``dirichlet``, ``shards``, ``clustered``)
and size skew (``lognormal_sizes``, ``group_sizes``) are separate: ``iid`` and
``dirichlet`` take ``sizes=`` so that, e.g., Dirichlet label proportions can be combined
with the unbalanced size groups of Fraboni et al.

``partition_indices(name, labels, num_clients, rng, **hparams)`` dispatches by name over
``PARTITIONS`` and validates the hyper-parameters (a ``ValueError`` naming the bad value
and the allowed range).

References: Hsu, Qi & Brown 2019, "Measuring the effects of non-identical data
distribution" (Dir(alpha) class proportions); Fraboni et al., ICML 2021, "Clustered
Sampling", Sec. 6 and App. D (Dirichlet given client sizes; size groups 10/30/30/20/10 x
100/250/500/750/1000; one class per client on MNIST); McMahan et al. 2017 (label shards);
Wang & Xu, FL-FDMS, Sec. 6 (20 clients in 5 clusters of identical data distributions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from fedjax_sel.core.registry import check_range, is_integer

PARTITIONS = (
  "iid",
  "dirichlet",
  "shards",
  "lognormal",
  "size_groups",
  "clustered",
  "easyfl_quantity",
)

# Fraboni et al. 2021, Sec. 6: 10, 30, 30, 20, 10 clients with 100, 250, 500, 750, 1000
# training samples (100 clients).
CLUSTERED_SAMPLING_GROUPS = ((10, 100), (30, 250), (30, 500), (20, 750), (10, 1000))

SIZE_SCHEMES = ("equal", "lognormal", "size_groups")

# Client id order of ``shards``: as drawn, or sorted by label set (Fraboni et al.'s MNIST
# one-class data give clients 10d..10d+9 the digit d).
CLIENT_ORDERS = ("random", "by_label")

# Hyper-parameters each partition accepts (beyond labels, num_clients, rng).
_SIZE_HPARAMS = ("sizes", "sigma", "min_size", "groups")
PARTITION_HPARAMS = {
  "iid": _SIZE_HPARAMS,
  "dirichlet": ("alpha",) + _SIZE_HPARAMS,
  "shards": ("labels_per_client", "client_order") + _SIZE_HPARAMS,
  "lognormal": ("sigma", "min_size"),
  "size_groups": ("groups",),
  "clustered": ("num_groups",),
  # easyFL's dist_id=1 generator (FedGS's Fashion-MNIST task): ``data/easyfl.py``
  "easyfl_quantity": ("labels_per_client", "rule", "seed", "holdout"),
}


class Partition(NamedTuple):
  """A partition of a pool among clients.

  Attributes:
    indices: N arrays of int64, client k's indices into the pool.
    groups: i32[N], the group (cluster) of each client for ``clustered``; None otherwise.
    local_test: N arrays of int64, client k's local test (validation) indices when the
      partition makes its own local split (``easyfl_quantity``; then ``indices`` are the
      training parts); None otherwise.
  """

  indices: list[np.ndarray]
  groups: np.ndarray | None = None
  local_test: list[np.ndarray] | None = None


# ----------------------------------------------------------------------------- helpers


def _check_labels(labels: Any) -> np.ndarray:
  labels = np.asarray(labels)
  if labels.ndim != 1 or labels.size == 0:
    raise ValueError(f"labels must be a non-empty 1-D array; got shape {labels.shape}")
  if not np.issubdtype(labels.dtype, np.integer):
    raise ValueError(f"labels must be integers; got dtype {labels.dtype}")
  if labels.min() < 0:
    raise ValueError(f"labels must be >= 0; got min label {labels.min()}")
  return labels.astype(np.int64)


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
  if not is_integer(value):  # 2.0 from a config file is allowed
    raise ValueError(f"{name}={value!r} must be an integer in [{low}, {high or 'inf'}]")
  check_range(name, value, low, high)
  return int(value)


def _check_num_clients(num_clients: Any, num_examples: int) -> int:
  return _check_int("num_clients", num_clients, 1, num_examples)


def round_preserving_sum(values: np.ndarray, total: int) -> np.ndarray:
  """Rounds non-negative ``values`` to ints summing to ``total`` (largest remainder).

  Args:
    values: f64[K] non-negative, ``values.sum()`` close to ``total``.
    total: the required integer sum.

  Returns:
    i64[K] with ``out.sum() == total`` and ``|out - values| < 1`` when
    ``values.sum() == total``. Ties go to the lower index (deterministic).
  """
  values = np.asarray(values, np.float64)
  base = np.floor(values).astype(np.int64)
  rest = int(total - base.sum())
  if rest > 0:
    order = np.argsort(-(values - base), kind="stable")
    base[order[:rest]] += 1
  elif rest < 0:
    order = np.argsort(values - base, kind="stable")
    order = [i for i in order if base[i] > 0]
    base[order[:-rest]] -= 1
  return base


def _resolve_sizes(sizes: Any, num_examples: int, num_clients: int) -> np.ndarray:
  """Default: all examples, as equal as possible. Otherwise validates ``sizes``."""
  if sizes is None:
    return np.array([len(a) for a in np.array_split(np.arange(num_examples), num_clients)])
  arr = np.asarray(sizes)
  if arr.shape != (num_clients,) or not np.issubdtype(arr.dtype, np.integer):
    raise ValueError(
      f"sizes must be {num_clients} integers (one per client); got shape {arr.shape}, "
      f"dtype {arr.dtype}"
    )
  if arr.min() < 1:
    raise ValueError(f"sizes must all be >= 1; got min size {arr.min()}")
  if arr.sum() > num_examples:
    raise ValueError(
      f"sizes sum to {arr.sum()} but the pool has only {num_examples} examples; "
      f"allowed: sum(sizes) <= {num_examples}"
    )
  return arr.astype(np.int64)


def _split_by_sizes(order: np.ndarray, sizes: np.ndarray) -> list[np.ndarray]:
  bounds = np.cumsum(sizes)[:-1]
  return [np.asarray(p, np.int64) for p in np.split(order[: int(np.sum(sizes))], bounds)]


# ----------------------------------------------------------------------------- sizes


def lognormal_sizes(
  num_total: int,
  num_clients: int,
  sigma: float,
  rng: np.random.Generator,
  min_size: int = 1,
) -> np.ndarray:
  """Unbalanced client sizes with lognormal weights, summing exactly to ``num_total``.

  Client k gets ``min_size + round(w_k / sum(w) * (num_total - N * min_size))`` with
  ``w_k ~ LogNormal(0, sigma^2)`` (rounded preserving the sum). ``sigma = 0`` is balanced.

  Args:
    num_total: total examples to hand out, >= ``num_clients * min_size``.
    num_clients: N >= 1.
    sigma: std of log-weights, >= 0.
    rng: numpy generator.
    min_size: smallest client size, >= 1.

  Returns:
    i64[N] sizes.

  References: the unbalanced set-up of FedLab / NIID-Bench (lognormal quantity skew).
  """
  num_clients = _check_int("num_clients", num_clients, 1)
  min_size = _check_int("min_size", min_size, 1)
  num_total = _check_int("num_total", num_total, num_clients * min_size)
  check_range("sigma", sigma, 0.0)
  w = rng.lognormal(0.0, float(sigma), num_clients)
  spare = num_total - num_clients * min_size
  return min_size + round_preserving_sum(w / w.sum() * spare, spare)


def group_sizes(groups: Sequence[tuple[int, int]] = CLUSTERED_SAMPLING_GROUPS) -> np.ndarray:
  """Client sizes given as ``((num_clients, size), ...)`` groups, in that order.

  Args:
    groups: pairs (number of clients, examples per client), all >= 1.

  Returns:
    i64[sum of counts]; the default gives Fraboni et al.'s 100 clients
    (10 x 100, 30 x 250, 30 x 500, 20 x 750, 10 x 1000 = 48,500 examples).

  References: Fraboni et al. 2021, Sec. 6 (unbalanced CIFAR-10).
  """
  try:
    pairs = [(int(c), int(s)) for c, s in groups]
  except (TypeError, ValueError, OverflowError):  # int(inf) overflows
    raise ValueError(
      f"groups={groups!r} must be a sequence of (num_clients, size) integer pairs"
    ) from None
  if not pairs:
    raise ValueError("groups=() is empty; allowed: at least one (num_clients, size) pair")
  for c, s in pairs:
    if c < 1 or s < 1:
      raise ValueError(f"group ({c}, {s}) out of range; allowed: num_clients >= 1, size >= 1")
  return np.concatenate([np.full(c, s, np.int64) for c, s in pairs])


# ----------------------------------------------------------------------------- partitions


def iid(
  labels: np.ndarray,
  num_clients: int,
  rng: np.random.Generator,
  sizes: Sequence[int] | np.ndarray | None = None,
) -> list[np.ndarray]:
  """Uniformly random disjoint subsets.

  Args:
    labels: i32[n] pool labels (only their number is used).
    num_clients: N, 1 <= N <= n.
    rng: numpy generator.
    sizes: i64[N] examples per client (sum <= n); default all n examples, equal sizes.

  Returns:
    N index arrays.

  References: McMahan et al. 2017 (IID baseline).
  """
  labels = _check_labels(labels)
  num_clients = _check_num_clients(num_clients, len(labels))
  sizes = _resolve_sizes(sizes, len(labels), num_clients)
  return _split_by_sizes(rng.permutation(len(labels)), sizes)


def dirichlet(
  labels: np.ndarray,
  num_clients: int,
  alpha: float,
  rng: np.random.Generator,
  sizes: Sequence[int] | np.ndarray | None = None,
) -> list[np.ndarray]:
  """Per-client class proportions q_k ~ Dir(alpha * 1_C), then n_k examples drawn by q_k.

  As in Fraboni et al.'s code, each client k draws q_k ~ Dir(alpha) over the C classes
  and asks for ``round(q_k[c] * n_k)`` examples of class c (we round preserving the sum,
  where their code floors C-1 classes and gives the rest to the last class). Their code
  samples with replacement, so clients may share examples; we sample **without
  replacement** (disjoint clients): clients are served in a random order, and when a
  class runs out a client's remaining demand goes to its other classes in proportion to
  q_k (or, if those are exhausted too, to whatever classes still have examples). Sizes are
  therefore always exactly ``n_k``; with tiny alpha and big clients a few late clients may
  get a second class. alpha -> 0 gives one class per client, alpha -> inf the global mix.

  Args:
    labels: i32[n] pool labels.
    num_clients: N, 1 <= N <= n.
    alpha: concentration, > 0.
    rng: numpy generator.
    sizes: i64[N] examples per client (sum <= n); default all n examples, equal sizes.

  Returns:
    N index arrays, client k holding exactly ``sizes[k]`` examples.

  References: Hsu et al. 2019; Fraboni et al. 2021, Sec. 6 and App. D.
  """
  labels = _check_labels(labels)
  num_clients = _check_num_clients(num_clients, len(labels))
  check_range("alpha", alpha, 0.0, low_inclusive=False)
  if not np.isfinite(float(alpha)):
    raise ValueError(f"alpha={alpha!r} is out of range; allowed: finite numbers > 0")
  sizes = _resolve_sizes(sizes, len(labels), num_clients)
  classes, inverse = np.unique(labels, return_inverse=True)
  num_classes = len(classes)
  pools = [rng.permutation(np.flatnonzero(inverse == c)) for c in range(num_classes)]
  avail = np.array([len(p) for p in pools], np.int64)
  used = np.zeros(num_classes, np.int64)
  props = rng.dirichlet(np.full(num_classes, float(alpha)), size=num_clients)
  # Tiny alpha can underflow every Gamma draw: such a row is a point mass on one class.
  bad = ~np.all(np.isfinite(props), axis=1) | (props.sum(axis=1) <= 0)
  if bad.any():
    props[bad] = np.eye(num_classes)[rng.integers(num_classes, size=int(bad.sum()))]
  out: list[np.ndarray] = [np.zeros(0, np.int64)] * num_clients
  for k in rng.permutation(num_clients):
    n_k = int(sizes[k])
    left = avail - used
    take = np.minimum(round_preserving_sum(props[k] * n_k, n_k), left)
    while take.sum() < n_k:
      room = left - take
      weight = props[k] * (room > 0)
      if weight.sum() <= 0:
        weight = room.astype(np.float64)
      deficit = n_k - int(take.sum())
      take += np.minimum(round_preserving_sum(weight / weight.sum() * deficit, deficit), room)
    parts = [pools[c][used[c] : used[c] + take[c]] for c in range(num_classes)]
    used += take
    out[k] = rng.permutation(np.concatenate(parts)).astype(np.int64)
  return out


def shards(
  labels: np.ndarray,
  num_clients: int,
  labels_per_client: int,
  rng: np.random.Generator,
  client_order: str = "random",
  sizes: Sequence[int] | np.ndarray | None = None,
) -> list[np.ndarray]:
  """Exactly ``labels_per_client`` distinct labels per client (k = 1: one class each).

  Label sets are balanced: the N*k (client, label) slots are spread over the C classes as
  evenly as possible (each class held by floor or ceil of N*k/C clients), each client
  taking the k classes with the most free slots (random tie-break), which always succeeds.
  Each class's examples are then split equally among the clients holding it, so all n
  examples are used. Unlike McMahan et al.'s sorted shards, two shards of a client never
  share a label, so "k labels" is exact.

  ``client_order="by_label"`` renumbers the clients of the same draw (same examples per
  client) in increasing order of their sorted label set, ties by the random order's id: with
  k = 1, 10 classes and 100 clients, clients 10d..10d+9 hold class d, as in Fraboni et al.'s
  one-class MNIST data, where Algorithm 1's id-ordered distributions then hold one class each.

  With ``sizes`` (N target sizes, e.g. ``resolve_sizes("lognormal", ...)``), each class's
  examples are split among the clients holding it in proportion to their target sizes
  instead of equally (every holder keeps at least one), so clients hold k labels each and
  differ in size: a quantity skew on top of the label skew, for availability that follows
  data size (FedGS's LDF / MDF). Without it the draw is exactly the equal split's.

  Args:
    labels: i32[n] pool labels with C distinct values.
    num_clients: N >= 1.
    labels_per_client: k in [1, C].
    rng: numpy generator.
    client_order: ``"random"`` (ids as drawn) or ``"by_label"`` (ids sorted by label set).
    sizes: None (equal split of each class) or N positive target sizes (relative weights).

  Returns:
    N index arrays, each with exactly k distinct labels.

  References: McMahan et al. 2017 (2 shards per client); Fraboni et al. 2021, Sec. 6
  (MNIST, one digit per client, 10 clients per digit).
  """
  labels = _check_labels(labels)
  num_clients = _check_num_clients(num_clients, len(labels))
  classes, inverse = np.unique(labels, return_inverse=True)
  num_classes = len(classes)
  k = _check_int("labels_per_client", labels_per_client, 1, num_classes)
  if not isinstance(client_order, str) or client_order not in CLIENT_ORDERS:
    raise ValueError(f"client_order={client_order!r}; allowed: {', '.join(CLIENT_ORDERS)}")
  weights = None
  if sizes is not None:
    weights = np.asarray(sizes, np.float64)
    if weights.shape != (num_clients,) or not np.all(np.isfinite(weights)) or np.any(weights <= 0):
      raise ValueError(
        f"sizes has shape {weights.shape} or non-positive values; allowed: {num_clients} "
        "positive target sizes"
      )
  slots = num_clients * k
  free = np.full(num_classes, slots // num_classes, np.int64)
  free[rng.permutation(num_classes)[: slots % num_classes]] += 1
  holders: list[list[int]] = [[] for _ in range(num_classes)]
  for client in rng.permutation(num_clients):
    tie = rng.random(num_classes)
    chosen = np.lexsort((tie, -free))[:k]
    free[chosen] -= 1
    for c in chosen:
      holders[c].append(int(client))
  parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
  for c in range(num_classes):
    members = np.flatnonzero(inverse == c)
    if len(members) < len(holders[c]):
      raise ValueError(
        f"num_clients={num_clients} too large for labels_per_client={k}: class "
        f"{classes[c]} has {len(members)} examples for {len(holders[c])} clients; "
        "allowed: every class needs at least one example per client holding it"
      )
    shuffled = rng.permutation(members)
    if weights is None:
      chunks = np.array_split(shuffled, len(holders[c]))
    else:  # in proportion to the holders' target sizes, at least one example each
      w = weights[holders[c]]
      extra = round_preserving_sum(w / w.sum() * (len(members) - len(w)), len(members) - len(w))
      chunks = np.split(shuffled, np.cumsum(extra + 1)[:-1])
    for client, chunk in zip(holders[c], chunks, strict=True):
      parts[client].append(chunk)
  out = [rng.permutation(np.concatenate(p)).astype(np.int64) for p in parts]
  if client_order == "by_label":  # after every draw: the same clients, renumbered
    sets: list[list[int]] = [[] for _ in range(num_clients)]
    for c in range(num_classes):  # c ascending, so each set is sorted
      for client in holders[c]:
        sets[client].append(c)
    out = [out[i] for i in sorted(range(num_clients), key=lambda i: (sets[i], i))]
  return out


def clustered(
  labels: np.ndarray,
  num_clients: int,
  num_groups: int,
  rng: np.random.Generator,
) -> tuple[list[np.ndarray], np.ndarray]:
  """Clients in G groups; a group's clients share one label set and distribution.

  FL-FDMS's "clustered setting" groups 20 clients into 5 clusters of equal size whose
  clients have the same data distribution (the details are in their Appendix C, which our
  copy lacks). We realise it as: the C classes are shuffled and split into G disjoint sets
  (as equal as possible); the clients are split into G consecutive groups (as equal as
  possible); every class of group g is split equally among the clients of g. So clients
  of a group hold the same classes in the same proportions (up to rounding), and groups
  share no class. All n examples are used.

  Args:
    labels: i32[n] pool labels with C distinct values.
    num_clients: N >= 1.
    num_groups: G in [1, min(N, C)].
    rng: numpy generator.

  Returns:
    (indices, groups): N index arrays and i32[N] group of each client.

  References: Wang & Xu, "Combating Client Dropout in Federated Learning via Friend Model
  Substitution" (FL-FDMS), Sec. 6 (20 clients, 5 clusters).
  """
  labels = _check_labels(labels)
  num_clients = _check_num_clients(num_clients, len(labels))
  classes, inverse = np.unique(labels, return_inverse=True)
  g = _check_int("num_groups", num_groups, 1, min(num_clients, len(classes)))
  groups = np.repeat(
    np.arange(g), [len(a) for a in np.array_split(np.arange(num_clients), g)]
  ).astype(np.int32)
  class_sets = np.array_split(rng.permutation(len(classes)), g)
  parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
  for group, class_set in enumerate(class_sets):
    members = np.flatnonzero(groups == group)
    for c in class_set:
      pool = rng.permutation(np.flatnonzero(inverse == c))
      if len(pool) < len(members):
        raise ValueError(
          f"num_clients={num_clients} too large for num_groups={g}: class {classes[c]} "
          f"has {len(pool)} examples for {len(members)} clients"
        )
      for client, chunk in zip(members, np.array_split(pool, len(members)), strict=True):
        parts[client].append(chunk)
  indices = [rng.permutation(np.concatenate(p)).astype(np.int64) for p in parts]
  return indices, groups


# ----------------------------------------------------------------------------- dispatch


def resolve_sizes(
  sizes: Any,
  num_examples: int,
  num_clients: int,
  rng: np.random.Generator,
  *,
  sigma: float = 1.0,
  min_size: int = 1,
  groups: Sequence[tuple[int, int]] = CLUSTERED_SAMPLING_GROUPS,
) -> np.ndarray | None:
  """Turns ``sizes`` (None, a name in ``SIZE_SCHEMES`` or N integers) into i64[N] or None.

  ``"lognormal"`` spreads all ``num_examples`` with ``lognormal_sizes(sigma, min_size)``;
  ``"size_groups"`` uses ``group_sizes(groups)`` (``num_clients`` must equal its length);
  ``"equal"`` and None mean all examples, equal sizes (returned as None).
  """
  if sizes is None or (isinstance(sizes, str) and sizes == "equal"):
    return None
  if isinstance(sizes, str):
    if sizes == "lognormal":
      return lognormal_sizes(num_examples, num_clients, sigma, rng, min_size)
    if sizes == "size_groups":
      out = group_sizes(groups)
      if len(out) != num_clients:
        raise ValueError(
          f"num_clients={num_clients} does not match the size groups {tuple(groups)!r}, "
          f"which define {len(out)} clients"
        )
      return out
    raise ValueError(f"unknown sizes {sizes!r}; allowed: {', '.join(SIZE_SCHEMES)} or N ints")
  return _resolve_sizes(sizes, num_examples, num_clients)


def make_partition(
  name: str,
  labels: np.ndarray,
  num_clients: int,
  rng: np.random.Generator,
  **hparams: Any,
) -> Partition:
  """Partitions a pool by name; like ``partition_indices`` but also returns groups.

  Hyper-parameters (defaults in brackets): iid: sizes [all, equal]; dirichlet: alpha
  [0.5], sizes; shards: labels_per_client [2], client_order ["random"]; lognormal: sigma
  [1.0], min_size [1]; size_groups: groups [CLUSTERED_SAMPLING_GROUPS]; clustered:
  num_groups [5]; easyfl_quantity: labels_per_client [2], rule ["least_used"], seed [0],
  holdout [0.2] (``easyfl.label_quantity``; it returns ``local_test`` too). ``sizes`` may be
  N integers or a name in ``SIZE_SCHEMES`` (then ``sigma``, ``min_size``, ``groups``
  configure it).
  """
  if not isinstance(name, str) or name not in PARTITIONS:
    raise ValueError(f"unknown partition {name!r}; known partitions: {', '.join(PARTITIONS)}")
  unknown = sorted(set(hparams) - set(PARTITION_HPARAMS[name]))
  if unknown:
    raise ValueError(
      f"unknown hyper-parameter(s) {unknown} for partition {name!r}; "
      f"allowed: {list(PARTITION_HPARAMS[name])}"
    )
  labels = _check_labels(labels)
  num_clients = _check_num_clients(num_clients, len(labels))
  n = len(labels)
  size_kw = {k: hparams[k] for k in ("sigma", "min_size", "groups") if k in hparams}
  if name == "iid":
    sizes = resolve_sizes(hparams.get("sizes"), n, num_clients, rng, **size_kw)
    return Partition(iid(labels, num_clients, rng, sizes))
  if name == "dirichlet":
    sizes = resolve_sizes(hparams.get("sizes"), n, num_clients, rng, **size_kw)
    return Partition(dirichlet(labels, num_clients, hparams.get("alpha", 0.5), rng, sizes))
  if name == "shards":
    k, order = hparams.get("labels_per_client", 2), hparams.get("client_order", "random")
    sizes = hparams.get("sizes")
    if sizes is not None:  # None (the default) leaves the equal split's draw as it was
      sizes = resolve_sizes(sizes, n, num_clients, rng, **size_kw)
    return Partition(shards(labels, num_clients, k, rng, order, sizes))
  if name == "lognormal":
    sizes = resolve_sizes("lognormal", n, num_clients, rng, **size_kw)
    return Partition(iid(labels, num_clients, rng, sizes))
  if name == "size_groups":
    sizes = resolve_sizes("size_groups", n, num_clients, rng, **size_kw)
    return Partition(iid(labels, num_clients, rng, sizes))
  if name == "easyfl_quantity":  # its own seeded streams and local split
    from fedjax_sel.data import easyfl

    hp = dict(hparams)
    if hp.get("seed") is None:  # no task seed given: one drawn from rng
      hp["seed"] = int(rng.integers(0, 2**31 - 1 - easyfl.NUMPY_SEED_OFFSET))
    train, valid = easyfl.label_quantity(labels, num_clients, **hp)
    return Partition(train, local_test=valid)
  indices, groups = clustered(labels, num_clients, hparams.get("num_groups", 5), rng)
  return Partition(indices, groups)


def partition_indices(
  name: str,
  labels: np.ndarray,
  num_clients: int,
  rng: np.random.Generator,
  **hparams: Any,
) -> list[np.ndarray]:
  """Client index arrays of the named partition (see ``make_partition`` for hparams).

  Args:
    name: one of ``PARTITIONS``.
    labels: i32[n] pool labels.
    num_clients: N, 1 <= N <= n.
    rng: numpy generator (the partition is a deterministic function of it).
    **hparams: the partition's hyper-parameters.

  Returns:
    N disjoint int64 index arrays into the pool.
  """
  return make_partition(name, labels, num_clients, rng, **hparams).indices

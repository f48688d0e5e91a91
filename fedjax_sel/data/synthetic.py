"""The FedProx Synthetic(alpha, beta) federated dataset (the offline default).

Recipe (Li et al., "Federated Optimization in Heterogeneous Networks", 2020, Sec. 5.1, and
their generator): for client k, u_k ~ N(0, alpha^2), B_k ~ N(0, beta^2);
W_k ~ N(u_k, 1) in R^{60x10}, b_k ~ N(u_k, 1) in R^10; v_k ~ N(B_k, 1) in R^60;
x ~ N(v_k, Sigma) with Sigma = diag(j^-1.2); y = argmax softmax(x W_k + b_k).
Client sizes follow the generator's lognormal(4, 2) + 50 unless ``examples_per_client`` is
given. Each client's examples are split 90/10 into local train and test parts (as the
generator does); the global test set is the union of the local test parts.

alpha controls how much local models differ, beta how much local inputs differ;
``iid=True`` gives the generator's IID variant (one shared model, v_k = B_k * 1).

References: Li et al. 2020 (FedProx), Sec. 5.1; FedGS (Wang et al., AAAI 2023) uses
Synthetic(0.5, 0.5) with 30 clients.
"""

from __future__ import annotations

import numpy as np

from fedjax_sel.core.registry import check_range
from fedjax_sel.data.federated import FederatedData, split_from_lists, train_test_per_client

DIMENSION = 60
NUM_CLASSES = 10


def synthetic(
  alpha: float = 0.5,
  beta: float = 0.5,
  num_clients: int = 30,
  examples_per_client: int | None = None,
  iid: bool = False,
  test_fraction: float = 0.1,
  seed: int = 0,
) -> FederatedData:
  """Generates FedProx Synthetic(alpha, beta).

  Args:
    alpha: std of the per-client model mean u_k (>= 0).
    beta: std of the per-client input mean B_k (>= 0).
    num_clients: N >= 1.
    examples_per_client: if given, every client gets exactly this many training
      examples (the total generated is scaled so the 90/10 split leaves this many).
    iid: the generator's IID variant.
    test_fraction: share of each client's examples held out as its local test set.
    seed: numpy seed of the generator.

  Returns:
    FederatedData with ``extras['true_params']`` = f32[N, 60*10 + 10], each client's true
    (W_k, b_k) flattened (the oracle for FedGS's model-parameter similarity).
  """
  check_range("alpha", alpha, 0.0)
  check_range("beta", beta, 0.0)
  check_range("num_clients", num_clients, 1)
  check_range("test_fraction", test_fraction, 0.0, 1.0, high_inclusive=False)
  if examples_per_client is not None:
    check_range("examples_per_client", examples_per_client, 1)
  rng = np.random.default_rng(seed)
  if examples_per_client is None:
    sizes = rng.lognormal(4, 2, num_clients).astype(np.int64) + 50
  else:
    total = int(np.ceil(examples_per_client / (1.0 - test_fraction)))
    sizes = np.full(num_clients, max(total, examples_per_client + 1), np.int64)
  mean_w = rng.normal(0.0, alpha, num_clients)
  mean_b = mean_w
  b_shift = rng.normal(0.0, beta, num_clients)
  cov_diag = np.power(np.arange(1, DIMENSION + 1, dtype=np.float64), -1.2)
  shared_w = rng.normal(0.0, 1.0, (DIMENSION, NUM_CLASSES))
  shared_b = rng.normal(0.0, 1.0, NUM_CLASSES)
  xs, ys, true_params = [], [], []
  for k in range(num_clients):
    if iid:
      w, b = shared_w, shared_b
      mean_x = np.ones(DIMENSION) * b_shift[k]
    else:
      w = rng.normal(mean_w[k], 1.0, (DIMENSION, NUM_CLASSES))
      b = rng.normal(mean_b[k], 1.0, NUM_CLASSES)
      mean_x = rng.normal(b_shift[k], 1.0, DIMENSION)
    x = mean_x + rng.normal(size=(sizes[k], DIMENSION)) * np.sqrt(cov_diag)
    y = np.argmax(x @ w + b, axis=1)
    xs.append(x.astype(np.float32))
    ys.append(y.astype(np.int32))
    true_params.append(np.concatenate([w.ravel(), b]).astype(np.float32))
  full = split_from_lists(xs, ys)
  train, test = train_test_per_client(full, test_fraction, rng)
  if examples_per_client is not None:
    train = _trim(train, examples_per_client)
  return FederatedData(
    train=train,
    test=test,
    test_x=test.x,
    test_y=test.y,
    num_classes=NUM_CLASSES,
    name=f"synthetic({alpha:g},{beta:g})" + ("_iid" if iid else ""),
    extras={"true_params": np.stack(true_params)},
  )


def _trim(split, n):
  xs, ys = [], []
  for k in range(split.num_clients):
    x, y = split.client(k)
    xs.append(x[:n])
    ys.append(y[:n])
  return split_from_lists(xs, ys)

"""Models as (init, apply) pairs over a params pytree (flax linen underneath).

The engine only sees ``init(key) -> params`` and ``apply(params, x) -> logits``.
"""

from fedjax_sel.models.models import (
  MLP,
  MODELS,
  CifarCNN,
  LogisticRegression,
  MnistCNN,
  Model,
  make,
  names,
  num_params,
)

__all__ = [
  "MODELS",
  "CifarCNN",
  "LogisticRegression",
  "MLP",
  "MnistCNN",
  "Model",
  "make",
  "names",
  "num_params",
]

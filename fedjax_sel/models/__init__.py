"""Models as (init, apply) pairs over a params pytree (flax linen underneath).

The engine only sees ``init(key) -> params`` and ``apply(params, x) -> logits``.
"""

from fedjax_sel.models.models import (
  MODELS,
  CifarCNN,
  MLP,
  Model,
  MnistCNN,
  LogisticRegression,
  make,
  names,
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
]

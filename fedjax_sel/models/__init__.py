"""Models as (init, apply) pairs over a params pytree (flax linen underneath).

The engine only sees ``init(key) -> params`` and ``apply(params, x) -> logits``.
"""

from fedjax_sel.models.models import (
  MLP,
  MODELS,
  PARAM_INITS,
  CifarCNN,
  LogisticRegression,
  MnistCNN,
  Model,
  ResNet18,
  Stl10CNN,
  layer_inits,
  make,
  names,
  num_params,
)

__all__ = [
  "MODELS",
  "PARAM_INITS",
  "CifarCNN",
  "LogisticRegression",
  "MLP",
  "MnistCNN",
  "Model",
  "ResNet18",
  "Stl10CNN",
  "make",
  "layer_inits",
  "names",
  "num_params",
]

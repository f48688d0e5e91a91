"""Pictures of who is active when (FedGS App. C, Fig. 8).

Plots use matplotlib's Agg canvas directly (``Figure`` + ``FigureCanvasAgg``), never
pyplot, so they work headless and leave the user's pyplot backend alone; matplotlib is
imported only when plotting.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from fedjax_sel.availability.rollout import rollout
from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey

if TYPE_CHECKING:
  from matplotlib.figure import Figure


def active_matrix(
  model: AvailabilityModel, info: ClientInfo, key: PRNGKey, num_rounds: int
) -> Array:
  """Who is active in each of ``num_rounds`` rounds, as the round loop would see it.

  ``init`` gets ``split(key)[0]``; round t samples with ``fold_in(split(key)[1], t)``
  (see ``rollout.rollout``), under one ``lax.scan``.

  Args:
    model: the availability model.
    info: the clients.
    key: the availability key.
    num_rounds: T.

  Returns:
    bool[T, N].
  """
  return rollout(model, info, key, num_rounds)[0]


def plot_active_matrix(matrix: Array, path: str, title: str = "") -> Figure:
  """Saves a PNG of an active matrix: rounds on x, clients on y, active cells dark.

  Args:
    matrix: bool[T, N], e.g. from ``active_matrix``.
    path: where to write the PNG (parent folders are created).
    title: the figure title, e.g. "MDF0.7 on Synthetic".

  Returns:
    The matplotlib Figure (not registered with pyplot; nothing to close).

  References:
    Wang et al., FedGS (AAAI 2023), App. C, Fig. 8.
  """
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  matrix = np.asarray(matrix, dtype=bool)
  if matrix.ndim != 2:
    raise ValueError(f"matrix must be [T, N]; got shape {matrix.shape}")
  num_rounds, num_clients = matrix.shape
  fig = Figure(figsize=(8, max(2.5, min(8.0, 0.08 * num_clients + 1.5))))
  FigureCanvasAgg(fig)
  ax = fig.add_subplot(1, 1, 1)
  ax.imshow(
    matrix.T.astype(np.float32),
    aspect="auto",
    origin="lower",
    cmap="Greys",
    vmin=0.0,
    vmax=1.0,
    interpolation="nearest",
    extent=(-0.5, num_rounds - 0.5, -0.5, num_clients - 0.5),
  )
  ax.set_xlabel("communication round")
  ax.set_ylabel("client")
  ax.set_title(title or f"active clients (mean rate {matrix.mean():.2f})")
  fig.tight_layout()
  parent = os.path.dirname(os.path.abspath(path))
  os.makedirs(parent, exist_ok=True)
  fig.savefig(path, dpi=100)
  return fig

"""The active matrix and its picture (FedGS Fig. 8)."""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import availability
from fedjax_sel.core.types import ClientInfo

INFO = ClientInfo(
  num_examples=jnp.array([1, 4, 16, 64, 256], jnp.int32),
  label_counts=jnp.ones((5, 3), jnp.int32),
)


def test_active_matrix_follows_the_round_loop_convention():
  model = availability.make("mdf", beta=0.5)
  key = jax.random.key(4)
  matrix = availability.active_matrix(model, INFO, key, 40)
  assert matrix.shape == (40, 5) and matrix.dtype == jnp.bool_
  init_key, round_key = availability.split_availability_key(key)
  state = model.init(init_key, INFO)
  for t in (0, 17, 39):
    active, _ = model.sample(state, jax.random.fold_in(round_key, t), t)
    np.testing.assert_array_equal(matrix[t], active)
  # The largest client has rate 1 and is active in every round.
  assert bool(matrix[:, 4].all())


def test_idl_active_matrix_is_all_true():
  matrix = availability.active_matrix(availability.make("idl"), INFO, jax.random.key(0), 12)
  np.testing.assert_array_equal(matrix, np.ones((12, 5), bool))


def test_plot_active_matrix_writes_png(tmp_path):
  matrix = np.zeros((30, 5), bool)
  matrix[::2, 1] = True
  matrix[:, 3] = True
  path = tmp_path / "plots" / "mdf.png"
  fig = availability.plot_active_matrix(matrix, str(path), title="MDF0.5")
  assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  ax = fig.axes[0]
  # Clients on y, rounds on x: the image is matrix.T ([N, T]).
  np.testing.assert_array_equal(ax.images[0].get_array(), matrix.T.astype(np.float32))
  assert ax.get_xlabel() == "communication round"
  assert ax.get_ylabel() == "client"
  assert ax.get_title() == "MDF0.5"
  assert ax.get_xlim() == (-0.5, 29.5) and ax.get_ylim() == (-0.5, 4.5)


def test_plot_size_scale_and_geometry(tmp_path):
  """8 in wide, 0.08 N + 1.5 in tall within [2.5, 8], one axes, gray scale 0..1, 100 dpi."""
  import struct

  for num_clients, height in ((5, 2.5), (50, 5.5), (100, 8.0)):
    path = tmp_path / f"m{num_clients}.png"
    matrix = np.zeros((10, num_clients), bool)
    matrix[3, 1] = True
    fig = availability.plot_active_matrix(matrix, str(path))
    np.testing.assert_allclose(fig.get_size_inches(), [8.0, height])
    assert len(fig.axes) == 1
    assert fig.axes[0].get_subplotspec().get_geometry() == (1, 1, 0, 0)
    assert fig.axes[0].images[0].get_clim() == (0.0, 1.0)
    width_px, height_px = struct.unpack(">II", path.read_bytes()[16:24])  # the IHDR chunk
    assert (width_px, height_px) == (800, round(100 * height))


def test_importing_the_package_does_not_import_matplotlib():
  import subprocess
  import sys

  code = "import sys, fedjax_sel.availability; print('matplotlib' in sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "False"

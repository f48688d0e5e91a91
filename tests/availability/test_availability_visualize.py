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

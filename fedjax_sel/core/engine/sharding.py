"""Placement of the engine's arrays on the devices: the client mesh, replicated data, and
the constraint that splits a chunk's clients over the devices."""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def replicated_put(mesh: Mesh | None) -> Callable:
  """``device_put`` of a whole array onto every device of ``mesh`` (the default device
  when None): how data that every device reads are placed."""
  if mesh is None:
    return jax.device_put
  sharding = NamedSharding(mesh, P())
  if jax.process_count() == 1:
    return lambda a: jax.device_put(a, sharding)

  def put(a):
    # several processes: from the host copy (a process-local jax.Array put straight onto the
    # global mesh gave arrays whose shards orbax could not read, jax 0.10.2)
    if isinstance(a, jax.Array) and a.is_fully_addressable:
      a = np.asarray(a)
    return jax.device_put(a, sharding)

  return put


def _client_mesh():
  devices = jax.devices()
  if len(devices) <= 1:
    return None
  return Mesh(devices, ("clients",))


def _shard_leading(tree, mesh):
  """Constrains arrays to be split over devices along their leading (client) axis."""
  if mesh is None:
    return tree
  n = mesh.devices.size

  def constrain(a):
    if a.ndim == 0 or a.shape[0] % n:
      return a
    spec = P("clients", *([None] * (a.ndim - 1)))
    return jax.lax.with_sharding_constraint(a, NamedSharding(mesh, spec))

  return jax.tree_util.tree_map(constrain, tree)

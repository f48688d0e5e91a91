"""Issue 23: the data enter the compiled round and evaluation as arguments, in their stored
dtype; evaluation walks the test set in place."""

import json
import os
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_sel import aggregation, availability, client, models, selection
from fedjax_sel.core import engine, evaluation, simulation
from fedjax_sel.data.federated import ClientSplit, FederatedData, decode, split_from_indices


def _split(rng, counts, shape=(8, 8, 1)):
  n = int(np.sum(counts))
  x = rng.integers(0, 256, (n,) + shape, dtype=np.uint8)
  y = rng.integers(0, 10, n).astype(np.int32)
  offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
  return ClientSplit(x, y, offsets, np.asarray(counts, np.int32))


def _images(seed, counts=None, test_counts=None, num_test=300):
  """A random uint8 image dataset (x_divisor 255) of fixed shapes."""
  rng = np.random.default_rng(seed)
  counts = np.array([30, 7, 55, 12, 40, 3, 25, 18] if counts is None else counts)
  test_counts = np.maximum(counts // 4, 1) if test_counts is None else np.asarray(test_counts)
  tr, te = _split(rng, counts), _split(rng, test_counts)
  g = _split(rng, np.array([num_test]))
  return FederatedData(tr, te, g.x, g.y, 10, "images", x_divisor=255.0)


def _as_float(d):
  """The same dataset as float32 inputs (x / 255 on the host), x_divisor 1."""
  f = lambda s: s._replace(x=decode(s.x, d.x_divisor))
  return d._replace(
    train=f(d.train), test=f(d.test), test_x=decode(d.test_x, d.x_divisor), x_divisor=1.0
  )


def _sim(data, sel="uniform", par="lanes", m=4, model="logreg", **sel_hp):
  cfg = simulation.SimulationConfig(
    client_lr=0.1,
    engine=engine.EngineConfig(batch_size=5, local_epochs=2, parallelism=par, chunk_size=2),
  )
  return simulation.Simulation(
    data,
    models.make(model, data.input_shape, data.num_classes),
    availability.make("idl"),
    selection.make(sel, num_selected=m, **sel_hp),
    aggregation.make("fedavg"),
    client.make("sgd"),
    cfg,
  )


def _largest_constant_bytes(hlo_text: str) -> int:
  """Bytes of the largest dense constant written out in a lowered module's text."""
  sizes = [len(h) // 2 for h in re.findall(r'dense<"0x([0-9A-Fa-f]+)">', hlo_text)]
  return max(sizes, default=0)


def test_lowered_programs_hold_no_data_constants():
  data = _images(0, counts=np.full(8, 250), test_counts=np.full(8, 60), num_test=1500)
  sim = _sim(data)
  state = sim.init(0)
  data_bytes = data.train.x.nbytes  # 128 KB of training pixels, 96 KB of test pixels
  for text in (
    sim.run_rounds.lower(state, 2).as_text(),
    sim.round_step.lower(state).as_text(),
    sim.evaluate.lower(state).as_text(),
  ):
    assert _largest_constant_bytes(text) < data_bytes // 20
  # and the closure form (a caller jitting sim._round_step itself) does hold them: the
  # check above can fail
  closed = jax.jit(sim._round_step).lower(state).as_text()
  assert _largest_constant_bytes(closed) >= data_bytes


def test_one_program_for_datasets_of_equal_shapes():
  a, b = _images(1), _images(2)  # same counts and shapes, other pixels and labels
  sim_a = _sim(a, sel="power_of_choice", d=6)  # ctx.client_losses reads the training data
  sim_b = _sim(b, sel="power_of_choice", d=6)
  data_b = sim_a.put_data(b)
  s_a, _ = sim_a.run_rounds(sim_a.init(0), 3)
  s_ab, _ = sim_a.run_rounds.with_data(data_b, sim_a.init(0), 3)
  s_b, _ = sim_b.run_rounds(sim_b.init(0), 3)
  ev_a = sim_a.evaluate(s_a)
  ev_ab = sim_a.evaluate.with_data(data_b, s_ab)
  ev_b = sim_b.evaluate(s_b)
  assert sim_a.run_rounds._cache_size() == 1
  assert sim_a.evaluate._cache_size() == 1
  # the program run on b's data gives exactly what a simulation built on b gives
  for x, y in zip(jax.tree_util.tree_leaves(s_ab.params), jax.tree_util.tree_leaves(s_b.params)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  for k in ev_b:
    np.testing.assert_array_equal(np.asarray(ev_ab[k]), np.asarray(ev_b[k]))
  assert not np.array_equal(np.asarray(ev_a["test_loss"]), np.asarray(ev_b["test_loss"]))


def test_put_data_rejects_other_shapes_and_longer_clients():
  sim = _sim(_images(1))
  # one example more: the trainer's own check (also ``train.with_data``'s) names it first
  with pytest.raises(
    ValueError, match=r"^training data x: uint8\[191, 8, 8, 1\]; allowed: uint8\[190,"
  ):
    sim.put_data(_images(2, counts=[30, 7, 55, 12, 40, 3, 25, 19]))
  with pytest.raises(ValueError, match="a client holds 56 examples; allowed: at most 55"):
    sim.put_data(
      _images(2, counts=[30, 7, 56, 12, 40, 3, 25, 17], test_counts=[7, 1, 13, 3, 10, 1, 6, 4])
    )
  with pytest.raises(ValueError, match="x_divisor"):
    sim.put_data(_images(2)._replace(x_divisor=1.0))
  # every test array is checked, its shape and its dtype alone
  with pytest.raises(
    ValueError, match=r"^data\.test.*: uint8\[301, 8, 8, 1\]; allowed: uint8\[300"
  ):
    sim.put_data(_images(2, num_test=301))
  other = _images(2)
  other = other._replace(test=other.test._replace(x=other.test.x.astype(np.uint16)))
  with pytest.raises(ValueError, match=r"^data\.local_test.*: uint16\[.*\]; allowed: uint8\["):
    sim.put_data(other)
  # built on clients of one training example each: a client of two is refused (the static
  # plan has room for one)
  one = _sim(_images(1, counts=[1] * 8, test_counts=[1] * 8))
  with pytest.raises(ValueError, match="a client holds 2 examples; allowed: at most 1"):
    one.put_data(_images(2, counts=[2, 0, 1, 1, 1, 1, 1, 1], test_counts=[1] * 8))


@pytest.mark.parametrize("par,sel", [("lanes", "uniform"), ("map", "power_of_choice")])
def test_uint8_images_equal_the_float_path(par, sel):
  d8 = _images(3)
  assert d8.train.x.dtype == np.uint8
  hp = {"d": 6} if sel == "power_of_choice" else {}
  s8, sf = _sim(d8, sel=sel, par=par, **hp), _sim(_as_float(d8), sel=sel, par=par, **hp)
  st8, _ = s8.run_rounds(s8.init(0), 4)
  stf, _ = sf.run_rounds(sf.init(0), 4)
  for x, y in zip(jax.tree_util.tree_leaves(st8.params), jax.tree_util.tree_leaves(stf.params)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=1e-6)
  e8, ef = s8.evaluate(st8), sf.evaluate(stf)
  for k in ef:
    np.testing.assert_allclose(np.asarray(e8[k]), np.asarray(ef[k]), rtol=0, atol=1e-6)
  # the device keeps the pixels as bytes
  assert s8.device_data.train.x.dtype == jnp.uint8
  assert s8.device_data.test.x.dtype == jnp.uint8


def test_decode_table_is_the_host_division_bit_for_bit():
  x = np.arange(256, dtype=np.uint8)
  table = jnp.asarray(engine.decode_table(np.uint8, 255.0))
  got = jax.jit(lambda v, t: engine.decode_inputs(v, t, 255.0))(x, table)
  np.testing.assert_array_equal(np.asarray(got), x.astype(np.float32) / np.float32(255.0))
  np.testing.assert_array_equal(np.asarray(got), decode(x, 255.0))
  # float data pass through unchanged, with an empty table
  f = np.linspace(0, 1, 7, dtype=np.float32)
  assert engine.decode_table(np.float32).shape == (0,)
  np.testing.assert_array_equal(np.asarray(engine.decode_inputs(f, jnp.zeros((0,)))), f)
  # a table for every 8- and 16-bit unsigned value; none for other integer types, which are
  # divided (in float32) where they are read, as are float data with a divisor
  assert engine.decode_table(np.uint16, 2.0).shape == (65536,)
  assert engine.decode_table(np.uint16, 2.0)[65535] == np.float32(32767.5)
  for signed in (np.int8, np.int16, np.int32):  # negative values: no table of 0..2**k - 1
    assert engine.decode_table(signed, 2.0).shape == (0,)
  # the defaults: no division
  assert engine.decode_table(np.uint8)[255] == np.float32(255.0)
  v = jnp.array([3, 255], jnp.int32)
  got = engine.decode_inputs(v, jnp.zeros((0,)))
  assert got.dtype == jnp.float32  # integer data become float32 inputs, divisor 1 or not
  np.testing.assert_array_equal(np.asarray(got), [3.0, 255.0])
  arrays = engine.train_arrays(np.array([[7], [255]], np.uint8), [0, 1], [0], [2])
  np.testing.assert_array_equal(np.asarray(arrays.table)[[7, 255]], [7.0, 255.0])
  for v, divisor, want in [
    (np.array([0, 3, 7], np.int32), 2.0, [0.0, 1.5, 3.5]),
    (np.array([0.5, 2.0], np.float32), 4.0, [0.125, 0.5]),
    (np.array([0.5, 2.0], np.float32), 2.0, [0.25, 1.0]),
    (np.array([0.5, 2.0], np.float64), 1.0, [0.5, 2.0]),
  ]:
    got = engine.decode_inputs(jnp.asarray(v), jnp.zeros((0,), jnp.float32), divisor)
    assert got.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(got), np.float32(want))


def test_splits_keep_uint8_and_cast_other_types_to_float32():
  x8 = np.arange(24, dtype=np.uint8).reshape(6, 2, 2)
  s = split_from_indices(x8, np.arange(6), [np.array([4, 0]), np.array([5])])
  assert s.x.dtype == np.uint8 and s.x[:, 0, 0].tolist() == [16, 0, 20]
  s64 = split_from_indices(x8.astype(np.float64) / 3, np.arange(6), [np.array([1])])
  assert s64.x.dtype == np.float32


@pytest.mark.parametrize("n,chunk", [(1000, 300), (1000, 1000), (999, 1024), (5, 2), (7, 1)])
def test_chunked_walk_equals_one_pass(n, chunk):
  rng = np.random.default_rng(n + chunk)
  x = rng.integers(0, 256, (n, 6), dtype=np.uint8)
  y = rng.integers(0, 3, n).astype(np.int32)
  w = jnp.asarray(rng.normal(size=(6, 3)), jnp.float32)
  apply = lambda p, v: v @ p
  data = evaluation.eval_arrays(x, y, 255.0)
  loss, correct = jax.jit(lambda p: evaluation.example_stats(apply, p, data, chunk, 255.0))(w)
  xf = jnp.asarray(decode(x, 255.0))
  logits = xf @ w
  ref_loss = optax.softmax_cross_entropy_with_integer_labels(logits, y)
  ref_correct = (jnp.argmax(logits, -1) == y).astype(jnp.float32)
  assert loss.shape == (n,)
  np.testing.assert_allclose(np.asarray(loss), np.asarray(ref_loss), rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(correct), np.asarray(ref_correct))


def test_per_client_stats_by_hand():
  # 3 clients holding 2, 0 and 3 examples; the model predicts class 0 always
  x = np.zeros((5, 1), np.float32)
  y = np.array([0, 1, 0, 0, 1], np.int32)
  apply = lambda p, v: jnp.broadcast_to(jnp.array([1.0, 0.0]), (v.shape[0], 2))
  data = evaluation.eval_arrays(x, y)
  counts = jnp.array([2, 0, 3], jnp.int32)
  loss_k, acc_k, has = evaluation.per_client_stats(apply, None, data, counts, chunk=2)
  np.testing.assert_allclose(np.asarray(acc_k), [0.5, 0.0, 2 / 3], rtol=1e-6)
  assert np.asarray(has).tolist() == [True, False, True]
  l0, l1 = np.log(1 + np.exp(-1.0)), np.log(1 + np.exp(1.0))  # -log softmax
  np.testing.assert_allclose(np.asarray(loss_k), [(l0 + l1) / 2, 0.0, (2 * l0 + l1) / 3], rtol=1e-6)


def test_evaluation_split_over_devices_equals_one_device():
  # a fresh process with 3 host devices: lanes training and the evaluation chunks are dealt
  # to the devices; results equal one device's (run in this process)
  code = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    sys.path.insert(0, {path!r})
    from test_data_arguments import _images, _sim
    sim = _sim(_images(5, num_test=700))
    assert sim.trainer.uses_mesh and len(sim.device_data.test.x.sharding.device_set) == 3
    s, _ = sim.run_rounds(sim.init(0), 3)
    ev = sim.evaluate(s)
    print(json.dumps({{k: float(v) for k, v in ev.items()}}))
    """
  ).format(path=os.path.dirname(__file__))
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="3")
  out = subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
  )
  assert out.returncode == 0, out.stderr[-3000:]
  many = json.loads(out.stdout.strip().splitlines()[-1])
  sim = _sim(_images(5, num_test=700))
  s, _ = sim.run_rounds(sim.init(0), 3)
  one = {k: float(v) for k, v in sim.evaluate(s).items()}
  for k in one:
    if k == "useful_step_fraction":  # padded lane-steps depend on the device count
      continue
    assert abs(many[k] - one[k]) <= 1e-5, (k, many[k], one[k])


def test_stored_arrays_are_aligned_and_the_cpu_device_aliases_them():
  from fedjax_sel.data.federated import ALIGNMENT, aligned, stored_x

  base = np.arange(4 * 1000 + 1, dtype=np.uint8)[1:].reshape(1000, 4)  # 1 byte off
  assert base.ctypes.data % ALIGNMENT != 0
  a = aligned(base)
  assert a.ctypes.data % ALIGNMENT == 0 and a.flags.c_contiguous
  np.testing.assert_array_equal(a, base)
  assert aligned(a) is a  # already aligned: no copy
  s = split_from_indices(base, np.arange(1000), [np.arange(0, 1000, 2), np.array([7])])
  assert s.x.ctypes.data % ALIGNMENT == 0 and s.x[:, 0].tolist()[:3] == [1, 9, 17]
  f = stored_x(base.astype(np.float64))
  assert f.dtype == np.float32 and f.ctypes.data % ALIGNMENT == 0
  # why: XLA:CPU takes an aligned host buffer as it is, so the data occupy memory once
  if jax.default_backend() == "cpu":
    assert jax.device_put(a).unsafe_buffer_pointer() == a.ctypes.data


def test_auto_chunk_by_hand_and_in_simulation():
  logreg = models.make("logreg", (60,), 10)
  p = jax.eval_shape(logreg.init, jax.random.PRNGKey(0))
  # one example produces the dot's 10 logits and the bias add's 10: 2 x 10 x 4 bytes
  assert evaluation.bytes_per_example(logreg.apply, p, (60,)) == 80
  assert evaluation.auto_chunk(logreg.apply, p, (60,), 80 * 1024) == 1024
  assert evaluation.auto_chunk(logreg.apply, p, (60,), 80 * 1023) == 512
  assert evaluation.auto_chunk(logreg.apply, p, (60,), 80 * 300) == 256
  assert evaluation.auto_chunk(logreg.apply, p, (60,), 79) == 1
  data = _images(3, num_test=300)
  assert _sim(data).eval_chunk == 1024  # dense models: as before issue 23, bit for bit
  cnn = _sim(data, model="cnn_mnist")
  # the simulation's chunk is the largest power of two within 512 MB of its estimate
  shapes = jax.eval_shape(cnn.model.init, jax.random.PRNGKey(0))
  per = evaluation.bytes_per_example(cnn.model.apply, shapes, (8, 8, 1))
  assert cnn.eval_chunk == min(1024, 1 << ((512 << 20) // per).bit_length() - 1)
  m28 = models.make("cnn_mnist", (28, 28, 1), 10, conv_impl="im2col")
  p28 = jax.eval_shape(m28.init, jax.random.PRNGKey(0))
  # cnn_mnist's im2col forward: ~2.3 MB per 28x28 example estimated, so 128 at 512 MB
  assert evaluation.auto_chunk(m28.apply, p28, (28, 28, 1), 512 << 20) == 128
  with pytest.raises(ValueError, match="eval_chunk"):
    simulation.Simulation(
      data,
      cnn.model,
      availability.make("idl"),
      selection.make("uniform", num_selected=2),
      aggregation.make("fedavg"),
      client.make("sgd"),
      simulation.SimulationConfig(eval_chunk=-1),
    )


def test_cnn_evaluation_at_the_auto_chunk_equals_chunk_1024():
  m = models.make("cnn_mnist", (28, 28, 1), 10)
  p = m.init(jax.random.PRNGKey(1))
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (1500, 28, 28, 1), dtype=np.uint8)
  y = rng.integers(0, 10, 1500).astype(np.int32)
  data = evaluation.eval_arrays(x, y, 255.0)
  run = jax.jit(lambda p, c: evaluation.example_stats(m.apply, p, data, c, 255.0), static_argnums=1)
  (l1, c1), (l2, c2) = run(p, 1024), run(p, 128)
  np.testing.assert_allclose(np.asarray(l2), np.asarray(l1), rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(c2), np.asarray(c1))

"""Every metric's value on hand-computed cases: evaluation, ``Simulation.evaluate``,
metrics.jsonl and summary.json (values, not directions)."""

import json
import math

import jax.numpy as jnp
import numpy as np
import pytest
import test_reference_round as rr
from reference import numpy_fl as ref

from fedjax_sel import experiment
from fedjax_sel.core import evaluation

# ---------------------------------------------------------------- the accuracy distribution


@pytest.mark.parametrize(
  "num_with_data,tail",
  [(1, 1), (9, 1), (10, 1), (11, 2), (17, 2), (20, 2), (21, 3)],
)
def test_accuracy_distribution_by_hand(num_with_data, tail):
  """Mean, variance (population), worst / best 10 % = mean of the ceil(0.1 k) lowest /
  highest accuracies among the k clients with data; clients without data are ignored."""
  n = 24
  rng = np.random.default_rng(num_with_data)
  acc = rng.permutation(np.linspace(0.02, 0.98, n) ** 1.5)  # distinct, unsorted
  has = np.zeros(n, bool)
  has[rng.permutation(n)[:num_with_data]] = True
  kept = np.sort(acc[has])
  got = {k: float(v) for k, v in evaluation.accuracy_distribution(acc, has).items()}
  names = ("client_acc_mean", "client_acc_var", "client_acc_worst10", "client_acc_best10")
  assert set(got) == set(names)
  assert tail == math.ceil(0.1 * num_with_data - 1e-9)
  np.testing.assert_allclose(got["client_acc_mean"], kept.mean(), rtol=1e-6)
  np.testing.assert_allclose(got["client_acc_var"], kept.var(), rtol=1e-5, atol=1e-8)
  np.testing.assert_allclose(got["client_acc_worst10"], kept[:tail].mean(), rtol=1e-6)
  np.testing.assert_allclose(got["client_acc_best10"], kept[-tail:].mean(), rtol=1e-6)


def test_accuracy_distribution_small_hand_case():
  # k = 12 clients with data (two without): tail = ceil(1.2) = 2.
  acc = [0.5, 0.9, 0.1, 0.0, 1.0, 0.3, 0.7, 0.2, 0.6, 0.8, 0.4, 0.95, 0.05, 0.99]
  has = [1] * 12 + [0, 0]
  got = evaluation.accuracy_distribution(jnp.asarray(acc), jnp.asarray(has, bool))
  assert float(got["client_acc_worst10"]) == pytest.approx((0.0 + 0.1) / 2)
  assert float(got["client_acc_best10"]) == pytest.approx((1.0 + 0.95) / 2)
  assert float(got["client_acc_mean"]) == pytest.approx(6.45 / 12)
  mean = 6.45 / 12
  var = sum((a - mean) ** 2 for a in acc[:12]) / 12
  assert float(got["client_acc_var"]) == pytest.approx(var, rel=1e-5)


# ---------------------------------------------------------------- evaluation functions


def constant_class_params(bias):
  """Logistic regression that ignores x: logits = bias for every example."""
  return {
    "Dense_0": {"kernel": jnp.zeros((rr.DIM, rr.CLASSES)), "bias": jnp.asarray(bias, jnp.float32)}
  }


def test_global_and_per_client_eval_by_hand():
  """Logits [0, 1, 0] everywhere: the prediction is class 1; an example of class y has loss
  log(2 + e) - [y == 1]."""
  data = rr.make_data()
  params = constant_class_params([0.0, 1.0, 0.0])
  lse = math.log(2 + math.e)
  y = data.test_y
  apply = lambda p, x: x @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]
  # chunks of 5 over 12 examples: the padded tail must not count
  loss, acc = evaluation.make_global_eval(apply, data.test_x, y, chunk=5)(params)
  assert float(acc) == pytest.approx(np.mean(y == 1))
  assert float(loss) == pytest.approx(np.mean(lse - (y == 1)), rel=1e-6)
  split = data.test
  loss_k, acc_k, has = evaluation.make_per_client_eval(apply, split.x, split.y, split.counts, 5)(
    params
  )
  for k in range(split.num_clients):
    _, yk = split.client(k)
    assert float(acc_k[k]) == pytest.approx(np.mean(yk == 1))
    assert float(loss_k[k]) == pytest.approx(np.mean(lse - (yk == 1)), rel=1e-6)
  assert bool(np.all(has))


def test_simulation_evaluate_by_hand():
  sim = rr.make_sim(parallelism="vmap")
  state = sim.init(seed=0)
  counts = np.array([3, 0, 1, 4, 2, 2], np.int32)
  state = state.replace(
    params=constant_class_params([0.0, 1.0, 0.0]),
    sampling_counts=jnp.asarray(counts),
    useful_steps=jnp.float32(30.0),
    executed_steps=jnp.float32(48.0),
    nonfinite_updates=jnp.int32(2),
    empty_rounds=jnp.int32(1),
  )
  got = {k: float(v) for k, v in sim.evaluate(state).items()}
  data = sim.data
  per_client = np.array([np.mean(data.test.client(k)[1] == 1) for k in range(len(counts))])
  lse = math.log(2 + math.e)
  want = {
    "test_loss": np.mean(lse - (data.test_y == 1)),
    "test_accuracy": np.mean(data.test_y == 1),
    "client_acc_mean": per_client.mean(),
    "client_acc_var": per_client.var(),
    "client_acc_worst10": np.sort(per_client)[0],  # 6 clients: ceil(0.6) = 1
    "client_acc_best10": np.sort(per_client)[-1],
    "sampling_count_mean": 2.0,
    "sampling_count_var": np.var(counts),
    "useful_step_fraction": 30 / 48,
    "nonfinite_updates": 2,
    "empty_rounds": 1,
  }
  assert set(got) == set(want)
  for k, v in want.items():
    assert got[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k


# ---------------------------------------------------------------- the result files


@pytest.mark.parametrize("global_train_loss", [False, True])
def test_metrics_jsonl_and_summary_values(tmp_path, global_train_loss):
  """Three rounds evaluated after rounds 2 and 3, against the numpy reference run and hand
  counts of the schedule in test_reference_round; with ``global_train_loss`` every line
  also holds the reference model's mean loss / accuracy over all 40 training examples."""
  from fedjax_sel.core import simulation

  batch, epochs = 5, 1
  sim = rr.make_sim(batch=batch, epochs=epochs, parallelism="vmap")
  if global_train_loss:
    parts = (sim.availability, sim.selection, sim.aggregator, sim.client_update)
    config = sim.config._replace(global_train_loss=True)
    sim = simulation.Simulation(sim.data, sim.model, *parts, config)
  c = experiment.default_config()
  c.rounds, c.eval_every, c.seed = 3, 2, 3
  out = tmp_path / "run"
  summary = experiment.run(c, str(out), simulation=sim, write_plots=False)
  history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
  assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))

  # the reference: params after rounds 2 and 3
  state0 = sim.init(seed=3)
  params0 = ref.to_numpy(state0.params)
  weights = rr.weights_table(True)
  ref_params, records = {}, None
  for rounds in (2, 3):
    ref_params[rounds], records = ref.run_rounds(
      params0,
      state0.key,
      sim.data.train.x,
      sim.data.train.y,
      sim.data.train.offsets,
      sim.data.train.counts,
      rr.schedule(weights),
      lambda d, c_, v, w, r, t: ref.fedavg(d, w, v, r),
      rounds=rounds,
      batch=batch,
      epochs=epochs,
      client_lr=0.3,
      lr_decay=0.9,
      server_lr=0.5,
    )

  data = sim.data
  steps = epochs * np.ceil(rr.SIZES / batch)  # local steps per client
  valid_steps = [steps[rr.COHORTS[t]][rr.VALID[t]] for t in range(3)]
  useful = np.cumsum([s.sum() for s in valid_steps])
  executed = np.cumsum([3 * s.max() for s in valid_steps])  # vmap: M slots x longest
  sampled = np.zeros(len(rr.SIZES), int)
  counts_after = {}
  for t in range(3):
    np.add.at(sampled, rr.COHORTS[t][rr.VALID[t]], 1)
    counts_after[t + 1] = sampled.copy()

  blocks = {2: [0, 1], 3: [2]}
  assert [r["round"] for r in history] == [2, 3]
  for rec in history:
    t = rec["round"]
    p = ref_params[t]
    logits = ref.predict(p, data.test_x.astype(np.float64))
    z = logits - logits.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    correct = logits.argmax(1) == data.test_y
    acc_k = np.array(
      [correct[o : o + n].mean() for o, n in zip(data.test.offsets, data.test.counts)]
    )
    want = {
      "test_loss": -logp[np.arange(len(data.test_y)), data.test_y].mean(),
      "test_accuracy": correct.mean(),
      "train_loss": np.mean([records[i]["train_loss"] for i in blocks[t]]),
      "num_available_mean": np.mean([rr.AVAIL[i].sum() for i in blocks[t]]),
      "num_selected_mean": np.mean([rr.VALID[i].sum() for i in blocks[t]]),
      "client_acc_mean": acc_k.mean(),
      "client_acc_var": acc_k.var(),
      "client_acc_worst10": np.sort(acc_k)[0],
      "client_acc_best10": np.sort(acc_k)[-1],
      "sampling_count_mean": counts_after[t].mean(),
      "sampling_count_var": counts_after[t].var(),
      "useful_step_fraction": useful[t - 1] / executed[t - 1],
      "nonfinite_updates": 0,
      "empty_rounds": 0,
    }
    if global_train_loss:
      loss, correct = _numpy_stats(p, data.train.x, data.train.y)
      want.update(global_train_loss=loss.mean(), global_train_accuracy=correct.mean())
    assert set(rec) == set(want) | {"round", "seconds"}
    for k, v in want.items():
      assert rec[k] == pytest.approx(v, rel=1e-5, abs=1e-6), (t, k)
  s0, s1 = history[0]["seconds"], history[1]["seconds"]
  assert 0 < s0 < s1
  want_summary = {
    "final_test_loss": history[-1]["test_loss"],
    "final_test_accuracy": history[-1]["test_accuracy"],
    "best_test_loss": min(r["test_loss"] for r in history),
    "best_test_accuracy": max(r["test_accuracy"] for r in history),
    "rounds": 3,
    "rounds_planned": 3,
    "complete": True,
    "stopped": None,
    "seconds": s1,
    "seconds_per_round": s1 / 3,
    "useful_step_fraction": history[-1]["useful_step_fraction"],
    "sampling_counts": counts_after[3].tolist(),
    "nonfinite_updates": 0,
    "empty_rounds": 0,
    "skipped_updates": 0,
    "chunk_size": 3,
    "parallelism": "chunked",
    # the first block's time less its 2 rounds at the later blocks' per-round rate
    "compile_seconds": max(0.0, s0 - 2 * (s1 - s0) / 1),
    "half_precision": False,  # the config's default: float32 throughout
    "compute_dtype": "float32",
  }
  assert set(summary) == set(want_summary)
  for k, v in want_summary.items():
    if isinstance(v, float):
      assert summary[k] == pytest.approx(v, rel=1e-9), k
    else:
      assert summary[k] == v, k


def test_accuracy_distribution_with_no_client_holding_test_data():
  """No client with local test data: every statistic is 0, not NaN (k and the tail are at
  least 1)."""
  from fedjax_sel.core.evaluation import accuracy_distribution

  out = accuracy_distribution(jnp.array([0.5, 0.25, 1.0]), jnp.zeros((3,), bool))
  for name, value in out.items():
    assert float(value) == 0.0, name
  # one client with data: it is the mean, the worst and the best 10 %; variance 0
  out = accuracy_distribution(jnp.array([0.5, 0.25, 1.0]), jnp.array([False, True, False]))
  assert {k: float(v) for k, v in out.items()} == {
    "client_acc_mean": 0.25,
    "client_acc_var": 0.0,
    "client_acc_worst10": 0.25,
    "client_acc_best10": 0.25,
  }


def test_jaxpr_bytes_and_bytes_per_example_by_hand():
  import jax

  # x * 2 on f32[3] produces one f32[3]: 12 bytes; sin then a sum: 12 + 4.
  jaxpr = jax.make_jaxpr(lambda x: x * 2.0)(jnp.ones((3,), jnp.float32)).jaxpr
  assert evaluation._jaxpr_bytes(jaxpr) == 12
  jaxpr = jax.make_jaxpr(lambda x: jnp.sum(jnp.sin(x)))(jnp.ones((3,), jnp.float32)).jaxpr
  assert evaluation._jaxpr_bytes(jaxpr) == 16
  # a forward that produces f32[B, 5] then f32[B]: 24 bytes per example
  apply = lambda p, x: jnp.sum(jnp.tanh(x), axis=-1)
  assert evaluation.bytes_per_example(apply, None, (5,)) == 24
  # nothing that grows with the batch: at least 1 byte (a chunk bound, never a division by 0)
  assert evaluation.bytes_per_example(lambda p, x: p, jnp.ones(3), (5,)) == 1


def test_example_stats_of_an_empty_and_a_one_example_test_set():
  import optax

  apply = lambda p, x: x @ p
  params = jnp.array([[1.0, -1.0], [0.5, 0.25]])
  empty = evaluation.eval_arrays(np.zeros((0, 2), np.float32), np.zeros((0,), np.int32))
  loss, correct = evaluation.example_stats(apply, params, empty)
  assert loss.shape == (0,) and correct.shape == (0,)
  x = np.array([[1.0, 2.0]], np.float32)
  one = evaluation.eval_arrays(x, np.array([1], np.int32))
  loss, correct = evaluation.example_stats(apply, params, one, chunk=1024)
  logits = x @ np.asarray(params)  # [[2, -0.5]]: class 0 wins, label 1
  want = optax.softmax_cross_entropy_with_integer_labels(jnp.asarray(logits), jnp.array([1]))
  np.testing.assert_allclose(loss, want, rtol=1e-6)
  np.testing.assert_array_equal(correct, [0.0])


def test_inverse_counts_of_empty_clients_is_one():
  np.testing.assert_array_equal(evaluation.inverse_counts([0, 2, 4]), [1.0, 0.5, 0.25])
  np.testing.assert_array_equal(evaluation.client_of_examples(np.array([2, 0, 1])), [0, 0, 2])


def test_per_client_stats_defaults_and_a_one_example_client():
  """Client 0 holds one local test example, client 1 none, client 2 two; inputs are used
  as they are (default divisor 1)."""
  apply = lambda p, x: x @ p
  params = jnp.eye(2)
  x = np.array([[3.0, 1.0], [0.0, 2.0], [1.0, 0.0]], np.float32)  # argmax: 0, 1, 0
  data = evaluation.eval_arrays(x, np.array([0, 1, 1], np.int32))
  loss, acc, has = evaluation.per_client_stats(apply, params, data, jnp.array([1, 0, 2]))
  np.testing.assert_array_equal(has, [True, False, True])
  np.testing.assert_allclose(acc, [1.0, 0.0, 0.5])
  lse = lambda z: np.log(np.exp(z).sum())
  want = [lse(x[0]) - 3.0, 0.0, ((lse(x[1]) - 2.0) + (lse(x[2]) - 0.0)) / 2]
  np.testing.assert_allclose(loss, want, rtol=1e-6)


def test_per_client_stats_of_an_empty_local_test_set():
  apply = lambda p, x: x @ p
  empty = evaluation.eval_arrays(np.zeros((0, 2), np.float32), np.zeros((0,), np.int32))
  loss, acc, has = evaluation.per_client_stats(apply, jnp.eye(2), empty, jnp.zeros(3, jnp.int32))
  np.testing.assert_array_equal(has, [False, False, False])
  np.testing.assert_array_equal(loss, [0.0, 0.0, 0.0])
  np.testing.assert_array_equal(acc, [0.0, 0.0, 0.0])


def test_auto_chunk_at_the_budget_boundaries():
  """24 bytes per example (f32[B, 5] then f32[B]): a budget of exactly max_chunk examples
  gives max_chunk (also when it is not a power of two); one byte less, the power of two
  below."""
  apply = lambda p, x: jnp.sum(jnp.tanh(x), axis=-1)
  assert evaluation.auto_chunk(apply, None, (5,), 24 * 1000, max_chunk=1000) == 1000
  assert evaluation.auto_chunk(apply, None, (5,), 24 * 1000 - 1, max_chunk=1000) == 512
  assert evaluation.auto_chunk(apply, None, (5,), 24 * 5000, max_chunk=1000) == 1000
  assert evaluation.auto_chunk(apply, None, (5,), 24 * 3, max_chunk=1000) == 2
  assert evaluation.auto_chunk(apply, None, (5,), 10, max_chunk=1000) == 1  # below one example


def test_closed_over_evals_with_their_defaults_and_tiny_sets():
  """make_global_eval / make_per_client_eval use the inputs as given (divisor 1); a chunk of
  0 is read as 1; a local test set of one example is evaluated, not skipped."""
  apply = lambda p, x: x @ p
  params = jnp.eye(2)
  x = np.array([[3.0, 1.0], [0.0, 2.0], [1.0, 0.0]], np.float32)
  y = np.array([0, 1, 1], np.int32)
  lse = lambda z: float(np.log(np.exp(z).sum()))
  losses = [lse(x[i]) - x[i, y[i]] for i in range(3)]
  loss, acc = evaluation.make_global_eval(apply, x, y)(params)
  assert float(loss) == pytest.approx(np.mean(losses), rel=1e-5)
  assert float(acc) == pytest.approx(2 / 3)
  loss_k, acc_k, has = evaluation.make_per_client_eval(apply, x, y, np.array([1, 2]))(params)
  np.testing.assert_allclose(loss_k, [losses[0], (losses[1] + losses[2]) / 2], rtol=1e-5)
  np.testing.assert_allclose(acc_k, [1.0, 0.5])
  data = evaluation.eval_arrays(x, y)
  l0, c0 = evaluation.example_stats(apply, params, data, chunk=0)
  np.testing.assert_allclose(l0, losses, rtol=1e-5)
  np.testing.assert_array_equal(c0, [1.0, 1.0, 0.0])
  one = evaluation.eval_arrays(x[:1], y[:1])
  loss_k, acc_k, has = evaluation.per_client_stats(apply, params, one, jnp.array([0, 1]))
  np.testing.assert_allclose(loss_k, [0.0, losses[0]], rtol=1e-5)
  np.testing.assert_array_equal(acc_k, [0.0, 1.0])
  np.testing.assert_array_equal(has, [False, True])


def test_default_divisors_leave_inputs_as_stored():
  """eval_arrays and global_stats default to divisor 1: uint8 inputs reach the model as
  their integer values, float inputs unchanged."""
  apply = lambda p, x: x.reshape(x.shape[0], -1) @ p
  params = jnp.array([[1.0, 0.0], [0.0, 1.0]])
  x8 = np.array([[3, 1], [0, 2]], np.uint8)
  y = np.array([0, 0], np.int32)
  loss, acc = evaluation.global_stats(apply, params, evaluation.eval_arrays(x8, y))
  lse = lambda z: float(np.log(np.exp(z).sum()))
  want = np.mean([lse(np.array([3.0, 1.0])) - 3.0, lse(np.array([0.0, 2.0])) - 0.0])
  assert float(loss) == pytest.approx(want, rel=1e-5)
  assert float(acc) == pytest.approx(0.5)
  xf = x8.astype(np.float32)
  loss_f, _ = evaluation.global_stats(apply, params, evaluation.eval_arrays(xf, y))
  assert float(loss_f) == pytest.approx(want, rel=1e-5)


def _without_local_test_data(data, empty):
  """``data`` with the local test examples of the clients in ``empty`` removed."""
  from fedjax_sel.data.federated import split_from_lists

  xs, ys = zip(*(data.test.client(k) for k in range(data.test.num_clients)))
  xs = [x[:0] if k in empty else x for k, x in enumerate(xs)]
  ys = [y[:0] if k in empty else y for k, y in enumerate(ys)]
  return data._replace(test=split_from_lists(list(xs), list(ys)))


def test_evaluate_with_clients_without_local_test_data():
  """Clients 1 and 4 hold no local test examples: the accuracy distribution is over the
  other four only; ``put_data`` of a set of the same layout is accepted."""
  from fedjax_sel import aggregation, availability, client, models, selection
  from fedjax_sel.core import simulation

  data = _without_local_test_data(rr.make_data(), {1, 4})
  assert data.test.counts.tolist() == [2, 0, 2, 2, 0, 2]
  sim = simulation.Simulation(
    data,
    models.make("logreg", data.input_shape, rr.CLASSES),
    availability.make("idl"),
    selection.make("uniform", num_selected=2),
    aggregation.make("fedavg"),
    client.make("sgd"),
    simulation.SimulationConfig(),
  )
  state = sim.init(0).replace(params=constant_class_params([0.0, 1.0, 0.0]))
  got = {k: float(v) for k, v in sim.evaluate(state).items()}
  per_client = np.array([np.mean(data.test.client(k)[1] == 1) for k in (0, 2, 3, 5)])
  want = {
    "client_acc_mean": per_client.mean(),
    "client_acc_var": per_client.var(),
    "client_acc_worst10": np.sort(per_client)[0],  # 4 clients: ceil(0.4) = 1
    "client_acc_best10": np.sort(per_client)[-1],
  }
  for k, v in want.items():
    assert got[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k
  # another set of the same layout goes through put_data (and evaluates the same here)
  again = sim.evaluate.with_data(sim.put_data(data), state)
  for k in want:
    assert float(again[k]) == pytest.approx(got[k]), k


# ---------------------------------------------------------------- the global training loss


def _train_loss_sim(data, **config):
  """test_reference_round's components on ``data``, the global training loss on."""
  from fedjax_sel import aggregation, client, models
  from fedjax_sel.core import engine, simulation

  cfg = simulation.SimulationConfig(
    client_lr=0.3, engine=engine.EngineConfig(batch_size=4), global_train_loss=True, **config
  )
  return simulation.Simulation(
    data,
    models.make("logreg", data.input_shape, rr.CLASSES),
    rr.table_availability(),
    rr.table_selection(rr.weights_table(True)),
    aggregation.make("fedavg"),
    client.make("sgd"),
    cfg,
  )


def _uint8_data():
  """rr.make_data's layout (clients of 7, 3, 12, 5, 9, 4 training examples) with uint8
  inputs decoded as x / 255."""
  from fedjax_sel.data.federated import ClientSplit, FederatedData

  base = rr.make_data()
  rng = np.random.default_rng(5)
  tr, te = base.train, base.test
  x = rng.integers(0, 256, size=tr.x.shape).astype(np.uint8)
  tx = rng.integers(0, 256, size=te.x.shape).astype(np.uint8)
  return FederatedData(
    train=ClientSplit(x=x, y=tr.y, offsets=tr.offsets, counts=tr.counts),
    test=ClientSplit(x=tx, y=te.y, offsets=te.offsets, counts=te.counts),
    test_x=tx,
    test_y=te.y,
    num_classes=rr.CLASSES,
    x_divisor=255.0,
  )


def _numpy_stats(params, x, y):
  """Per-example (loss, correct) of logistic regression in float64."""
  logits = ref.predict(ref.to_numpy(params), np.asarray(x, np.float64))
  z = logits - logits.max(1, keepdims=True)
  logp = z - np.log(np.exp(z).sum(1, keepdims=True))
  return -logp[np.arange(len(y)), y], (logits.argmax(1) == y).astype(np.float64)


@pytest.mark.parametrize("stored", ["float32", "uint8"])
@pytest.mark.parametrize("chunk", [7, 0])
def test_global_train_loss_is_the_example_weighted_training_loss(stored, chunk):
  """The global model over the union of the 40 training examples of six clients of sizes
  7, 3, 12, 5, 9, 4, each example once (chunks of 7 overlap in the last one; 0: automatic,
  one chunk): numpy's mean loss and accuracy, which differ from the mean of the per-client
  means (client weighting)."""
  data = rr.make_data() if stored == "float32" else _uint8_data()
  sim = _train_loss_sim(data, eval_chunk=chunk)
  rng = np.random.default_rng(1)
  params = {
    "Dense_0": {
      "kernel": jnp.asarray(rng.normal(size=(rr.DIM, rr.CLASSES)) * 3, jnp.float32),
      "bias": jnp.asarray(rng.normal(size=rr.CLASSES), jnp.float32),
    }
  }
  state = sim.init(seed=0).replace(params=params)
  got = {k: float(v) for k, v in sim.evaluate(state).items()}
  x = data.train.x / (255.0 if stored == "uint8" else 1.0)
  loss, correct = _numpy_stats(params, x, data.train.y)
  assert got["global_train_loss"] == pytest.approx(loss.mean(), rel=1e-5)
  assert got["global_train_accuracy"] == pytest.approx(correct.mean(), abs=1e-7)
  per_client = [loss[o : o + n].mean() for o, n in zip(data.train.offsets, data.train.counts)]
  assert abs(np.mean(per_client) - loss.mean()) > 1e-2  # the two weightings differ here
  # and the test-set values are untouched by the flag
  tl, ta = _numpy_stats(params, data.test_x / (255.0 if stored == "uint8" else 1.0), data.test_y)
  assert got["test_loss"] == pytest.approx(tl.mean(), rel=1e-5)
  assert got["test_accuracy"] == pytest.approx(ta.mean(), abs=1e-7)


def test_global_train_loss_by_hand():
  """Logits [0, 1, 0] everywhere: an example of class y has loss log(2 + e) - [y == 1]."""
  sim = _train_loss_sim(rr.make_data(), eval_chunk=5)
  state = sim.init(seed=0).replace(params=constant_class_params([0.0, 1.0, 0.0]))
  got = sim.evaluate(state)
  y = sim.data.train.y
  assert float(got["global_train_loss"]) == pytest.approx(
    np.mean(math.log(2 + math.e) - (y == 1)), rel=1e-6
  )
  assert float(got["global_train_accuracy"]) == pytest.approx(np.mean(y == 1))


def test_global_train_loss_is_off_by_default_and_checked():
  from fedjax_sel.core import simulation

  sim = rr.make_sim(parallelism="vmap")
  assert sim.config.global_train_loss is False
  got = sim.evaluate(sim.init(seed=0))
  assert "global_train_loss" not in got and "global_train_accuracy" not in got
  with pytest.raises(ValueError, match="global_train_loss='yes'; allowed: True or False"):
    simulation.Simulation(
      sim.data,
      sim.model,
      sim.availability,
      sim.selection,
      sim.aggregator,
      sim.client_update,
      sim.config._replace(global_train_loss="yes"),
    )

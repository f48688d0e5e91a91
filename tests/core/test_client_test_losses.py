"""ctx.client_test_losses: the global model's mean loss on a client's whole local test split."""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import aggregation, availability, client, models, selection
from fedjax_sel.core import engine, simulation
from fedjax_sel.data.synthetic import synthetic


def test_client_test_losses_equal_numpy_cross_entropy_over_the_whole_split():
  data = synthetic(0.5, 0.5, 30, recipe="fedgs")
  model = models.make("logreg", data.input_shape, data.num_classes)
  sim = simulation.Simulation(
    data,
    model,
    availability.make("idl"),
    selection.make("uniform", num_selected=3),
    aggregation.make("fedavg"),
    client.make("sgd"),
    simulation.SimulationConfig(engine=engine.EngineConfig(batch_size=10, local_steps=2)),
  )
  state = sim.init(0)
  # A non-trivial model: perturb the initial parameters.
  params = jax.tree_util.tree_map(
    lambda p: p + 0.1 * jax.random.normal(jax.random.PRNGKey(1), p.shape), state.params
  )
  ctx = sim.context(state.replace(params=params), jnp.ones(30))
  ids = jnp.asarray([18, 1, 15])  # 18 has the largest local test split (321 examples)
  got = np.asarray(jax.jit(ctx.client_test_losses)(ids))
  for i, k in enumerate([18, 1, 15]):
    x, y = data.test.client(k)
    logits = np.asarray(model.apply(params, jnp.asarray(x)), np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True))
    logp -= logits.max(1, keepdims=True)
    want = -np.mean(logp[np.arange(len(y)), y])
    np.testing.assert_allclose(got[i], want, rtol=1e-5)
  assert int(data.test.counts[18]) == int(np.max(data.test.counts)) == 321

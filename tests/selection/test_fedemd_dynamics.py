"""FedEMD's selection dynamics on Table 1's set-up (selection only, no training; issue 41).

The paper (Sec. 5.2, Fig. 3) says FedEMD involves the Maverick "more often during the early
period and less later on" and that it is "rarely selected in the latter phase of training".
Table 1's set-up: 50 clients, 5 selected per round, one Maverick owning all 6,000 'Trouser'
images, the other 49 sharing the other nine classes i.i.d. (54,000 images shuffled and split
in 49 parts, as ``experiments/fedemd.py``'s ``maverick_partition``), alpha 0.15, beta 0.0015,
200 rounds. Uniform selection puts the Maverick in 5 of every 50 rounds on average.

Measured by this file over 12 seeds (mean rounds per 50-round block with the Maverick in the
cohort): ``current="distribution"`` 20.3 / 6.7 / 2.5 / 0.5, ``current="counts"`` 26.8 / 19.3 /
12.3 / 6.2 (docs/reproductions/fedemd_appendix.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_sel.selection as selection
from fedjax_sel.core.types import ClientInfo
from tests.selection.conftest import make_ctx

NUM_CLIENTS, PER_ROUND, ROUNDS, BLOCK, SEEDS = 50, 5, 200, 50, 12
UNIFORM = BLOCK * PER_ROUND / NUM_CLIENTS  # 5 rounds of 50 with the Maverick, on average
TROUSER = 1


def table1_label_counts(seed: int = 0) -> np.ndarray:
  """i64[50, 10]: client 0 owns every 'Trouser' image; 49 clients split the rest i.i.d."""
  labels = np.repeat(np.arange(10), 6000)  # Fashion-MNIST's train split: 6,000 per class
  rng = np.random.default_rng(seed)
  rest = rng.permutation(np.flatnonzero(labels != TROUSER))
  counts = np.zeros((NUM_CLIENTS, 10), np.int64)
  counts[0, TROUSER] = 6000
  for i, part in enumerate(np.array_split(rest, NUM_CLIENTS - 1)):
    counts[1 + i] = np.bincount(labels[part], minlength=10)
  return counts


def maverick_rounds_per_block(current: str) -> np.ndarray:
  """i64[SEEDS, 4]: rounds per 50-round block in which client 0 is selected."""
  counts = table1_label_counts()
  info = ClientInfo(
    num_examples=jnp.asarray(counts.sum(1), jnp.int32), label_counts=jnp.asarray(counts, jnp.int32)
  )
  ctx = make_ctx(info)
  strategy = selection.make(
    "fedemd", num_selected=PER_ROUND, alpha=0.15, beta=0.0015, current=current
  )
  avail = jnp.ones((NUM_CLIENTS,), bool)

  def one_seed(key):
    def step(state, t):
      chosen, state = strategy.select(state, jax.random.fold_in(key, t), avail, t, ctx)
      return state, jnp.any(chosen.valid & (chosen.cohort == 0))

    _, picked = jax.lax.scan(step, strategy.init(key, info), jnp.arange(ROUNDS))
    return picked

  keys = jax.random.split(jax.random.PRNGKey(0), SEEDS)
  picked = np.asarray(jax.jit(jax.vmap(one_seed))(keys))
  return picked.reshape(SEEDS, ROUNDS // BLOCK, BLOCK).sum(-1)


def test_partition_is_table_1s():
  counts = table1_label_counts()
  assert counts[:, TROUSER].sum() == counts[0].sum() == 6000
  assert counts[1:, TROUSER].sum() == 0 and counts.sum() == 60000
  sizes = counts[1:].sum(1)
  assert sizes.max() - sizes.min() <= 1  # 54,000 / 49 = 1,102 or 1,103
  assert 5.4 < 6000 / sizes.mean() < 5.5  # the Maverick holds ~5.4x a non-Maverick


@pytest.fixture(scope="module")
def blocks():
  return {c: maverick_rounds_per_block(c) for c in ("distribution", "counts")}


def test_distribution_reading_favours_the_maverick_early_and_drops_it_late(blocks):
  """The paper's description: >= 2x uniform in rounds 1-50, <= 0.5x uniform in 151-200."""
  mean = blocks["distribution"].mean(0)
  assert mean[0] >= 2 * UNIFORM, mean
  assert mean[-1] <= 0.5 * UNIFORM, mean
  assert np.all(np.diff(mean) < 0), mean  # fewer in every block than in the one before


def test_counts_reading_keeps_the_maverick_late(blocks):
  """With raw counts the 6,000-image Maverick dominates D_c, so its current distance stays
  small: it is still selected more than half as often as uniform in rounds 151-200, and
  more often than with the distribution reading in every block after the first 50 rounds."""
  counts, dist = blocks["counts"].mean(0), blocks["distribution"].mean(0)
  assert counts[0] >= 2 * UNIFORM, counts  # both readings favour it early
  assert counts[-1] > 0.5 * UNIFORM, counts  # not "rarely selected in the latter phase"
  assert np.all(counts[1:] > 2 * dist[1:]), (counts, dist)

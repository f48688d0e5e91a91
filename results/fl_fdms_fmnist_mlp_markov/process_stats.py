"""The two dropout processes of the FL-FDMS study, simulated: writes process_stats.md.

  python results/fl_fdms_fmnist_mlp_markov/process_stats.py

20 clients in 5 contiguous clusters of 4 (the study's set-up), 5,000 rounds from the
availability key 0, at alpha = 0.3 / 0.5 / 0.7: "redrawn" is ``cluster_dropout`` in
``fl_fdms`` mode, "markov" is ``markov_dropout`` with mean_absence = 10, and "markov, one
per cluster kept" the same with ``keep_per_cluster=5`` (Assumption 5).
"""

import os

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import availability
from fedjax_sel.core.types import ClientInfo
from fedjax_sel.metrics import results

N, T, MEAN_ABSENCE = 20, 5000, 10.0
CLUSTER = np.arange(N) // 4
INFO = ClientInfo(num_examples=jnp.ones((N,), jnp.int32), label_counts=jnp.ones((N, 2), jnp.int32))


def absence_lengths(active: np.ndarray) -> np.ndarray:
  """Lengths of the off runs that start and end inside the window."""
  out = []
  for column in active.T:
    off = np.concatenate([[False], ~column, [False]]).astype(np.int8)
    starts, ends = np.flatnonzero(np.diff(off) == 1), np.flatnonzero(np.diff(off) == -1)
    out += [e - s for s, e in zip(starts, ends, strict=True) if s > 0 and e < len(column)]
  return np.asarray(out)


def stale_age(active: np.ndarray) -> float:
  """Mean age (rounds since the client's last active round) of the update Stale reuses."""
  last, ages = np.full(N, -1), []
  for t, row in enumerate(active):
    dropped = ~row & (last >= 0)
    ages += list(t - last[dropped])
    last[row] = t
  return float(np.mean(ages))


def row(name: str, alpha: float, active: np.ndarray) -> list[str]:
  off = ~active
  mates = np.stack([(active[:, CLUSTER == CLUSTER[k]]).sum(1) - active[:, k] for k in range(N)], 1)
  pairs = [(i, j) for i in range(N) for j in range(i + 1, N)]
  same = np.mean(
    [(active[:, i] & active[:, j]).mean() for i, j in pairs if CLUSTER[i] == CLUSTER[j]]
  )
  other = np.mean(
    [(active[:, i] & active[:, j]).mean() for i, j in pairs if CLUSTER[i] != CLUSTER[j]]
  )
  share = off.mean(1)
  return [
    name,
    f"{alpha:g}",
    f"{off.mean():.3f}",
    f"{share.min():.2f} – {share.max():.2f}",
    f"{absence_lengths(active).mean():.2f}",
    f"{stale_age(active):.2f}",
    f"{100 * (off & (mates == 0)).sum() / off.sum():.1f}",
    f"{100 * same:.1f}",
    f"{100 * other:.1f}",
  ]


def main() -> None:
  rows = []
  for alpha in (0.3, 0.5, 0.7):
    models = {
      "redrawn": availability.make(
        "cluster_dropout", mode="fl_fdms", dropout_rate=alpha, num_clusters=5
      ),
      "markov": availability.make("markov_dropout", dropout_rate=alpha, mean_absence=MEAN_ABSENCE),
      "markov, one per cluster kept": availability.make(
        "markov_dropout", dropout_rate=alpha, mean_absence=MEAN_ABSENCE, keep_per_cluster=5
      ),
    }
    for name, model in models.items():
      active, _ = availability.rollout(model, INFO, jax.random.key(0), T)
      rows.append(row(name, alpha, np.asarray(active)))
  header = [
    "process",
    "α",
    "off share",
    "off share per round (min – max)",
    "mean absence (rounds)",
    "age of Stale's update (rounds)",
    "dropped with no active cluster-mate (%)",
    "cluster-mates both active (%)",
    "other pairs both active (%)",
  ]
  results.write_table(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "process_stats"),
    header,
    rows,
    f"The FL-FDMS study's dropout processes, {T} simulated rounds, 20 clients in 5 clusters "
    f"(markov: mean_absence = {MEAN_ABSENCE:g})",
  )


if __name__ == "__main__":
  main()

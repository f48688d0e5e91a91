r"""Who is active when: the active-state matrix (clients x rounds) of every availability mode.

  python -m experiments.availability_plot --output_dir=runs/availability
  python -m experiments.availability_plot --quick --output_dir=/tmp/availability

For every registered availability model (with its default hyper-parameters; FedGS's seven
modes at beta = 0.5 where they take one) runs ``--rounds`` rounds on the clients of
``--dataset`` (default Synthetic(0.5, 0.5) with 30 clients, FedGS's Synthetic set-up) and
writes ``active_<mode>.png`` (one picture per mode, ``availability.plot_active_matrix``),
``active_all.png`` (all modes side by side, like FedGS Fig. 8) and ``rates.{csv,md}``
(measured share of active (client, round) cells against the mean of ``probs``).

The ``trace`` mode replays a recorded matrix; having none offline, we feed it a diurnal
demo trace (client i is on in rounds t with (t + 3 i) mod 24 < 12).

References:
  Wang et al., "FedGS: Federated Graph-based Sampling with Arbitrary Client Availability",
  AAAI 2023, Table 1 and App. C (Fig. 8).
"""

from __future__ import annotations

import os

import jax
import numpy as np
from absl import app, flags, logging

from experiments import common
from fedjax_sel import availability, data
from fedjax_sel.availability import visualize
from fedjax_sel.core.types import ClientInfo
from fedjax_sel.metrics import results

FLAGS = flags.FLAGS
TINY_ENV = "FEDJAX_SEL_TINY"


def demo_trace(num_rounds: int, num_clients: int, period: int = 24) -> np.ndarray:
  """bool[T, N]: client i is on when (t + 3 i) mod period < period / 2 (a diurnal pattern)."""
  t = np.arange(num_rounds)[:, None]
  i = np.arange(num_clients)[None, :]
  return ((t + 3 * i) % period) < period // 2


def modes(num_rounds: int, num_clients: int) -> dict[str, tuple[str, dict]]:
  """Panel label -> (registry name, hyper-parameters), one per registered model.

  ``cluster_dropout`` appears twice (its ``group`` and ``fl_fdms`` modes).
  """
  out = {}
  for name in availability.names():
    if name == "trace":
      out["trace (diurnal demo)"] = (name, {"trace": demo_trace(num_rounds, num_clients)})
    elif name == "cluster_dropout":
      out["cluster_dropout (group, 0.5)"] = (name, {"dropout_rate": 0.5, "mode": "group"})
      out["cluster_dropout (fl_fdms, 0.5)"] = (name, {"dropout_rate": 0.5, "mode": "fl_fdms"})
    elif "beta" in availability.REGISTRY.hparams(name):
      out[f"{name} (beta=0.5)"] = (name, {"beta": 0.5})
    else:
      out[name] = (name, {})
  return out


def active_matrices(info: ClientInfo, num_rounds: int, seed: int) -> dict[str, tuple]:
  """Label -> (active bool[T, N], probs f32[T, N]) for every mode, same availability key."""
  key = jax.random.PRNGKey(seed)
  out = {}
  for label, (name, hp) in modes(num_rounds, info.num_clients).items():
    model = availability.make(name, **hp)
    active, probs = availability.rollout(model, info, key, num_rounds)
    out[label] = (np.asarray(active, bool), np.asarray(probs, np.float32))
  return out


def run(output_dir: str, dataset: str, num_clients: int, num_rounds: int, seed: int) -> dict:
  """Writes every picture and the rates table; returns ``{"rates": (header, rows), ...}``."""
  os.makedirs(output_dir, exist_ok=True)
  fd = data.load(dataset, num_clients)
  info = fd.client_info()
  mats = active_matrices(info, num_rounds, seed)
  header = [
    "mode",
    "active share (measured)",
    "mean probs",
    "least active client",
    "most active client",
  ]
  rows, figures = [], []
  for label, (active, probs) in mats.items():
    per_client = active.mean(0)
    rows.append(
      [
        label,
        float(active.mean()),
        float(probs.mean()),
        float(per_client.min()),
        float(per_client.max()),
      ]
    )
    slug = label.split(" ")[0] + ("_fl_fdms" if "fl_fdms" in label else "")
    path = os.path.join(output_dir, f"active_{slug}.png")
    visualize.plot_active_matrix(
      active,
      path,
      f"{label}: active clients on {fd.name} (N={info.num_clients}), seed {seed}, "
      f"{active.mean():.0%} active",
    )
    figures.append(path)
  md = results.write_table(
    os.path.join(output_dir, "rates"),
    header,
    rows,
    f"Share of active (client, round) cells over {num_rounds} rounds, {fd.name}, "
    f"N={info.num_clients}, availability seed {seed}",
  )
  path = os.path.join(output_dir, "active_all.png")
  plot_grid(
    mats,
    path,
    f"Active clients per availability mode ({fd.name}, "
    f"N={info.num_clients}, {num_rounds} rounds, seed {seed}; dark = active)",
  )
  figures.append(path)
  return {"rates": (header, rows), "markdown": md, "figures": figures, "matrices": mats}


def plot_grid(mats: dict, path: str, title: str) -> None:
  """All active matrices in one figure (FedGS Fig. 8 layout: rounds on x, clients on y)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  labels = list(mats)
  cols = 3
  rows = -(-len(labels) // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.6 * rows), squeeze=False)
  for ax, label in zip(axes.ravel(), labels, strict=False):
    active = mats[label][0]
    t, n = active.shape
    ax.imshow(
      active.T.astype(np.float32),
      aspect="auto",
      origin="lower",
      cmap="Greys",
      vmin=0.0,
      vmax=1.0,
      interpolation="nearest",
      extent=(-0.5, t - 0.5, -0.5, n - 0.5),
    )
    ax.set_title(f"{label} ({active.mean():.0%} active)", fontsize=9)
    ax.set_xlabel("communication round", fontsize=8)
    ax.set_ylabel("client", fontsize=8)
    ax.tick_params(labelsize=7)
  for ax in axes.ravel()[len(labels) :]:
    ax.axis("off")
  fig.suptitle(title, fontsize=11)
  fig.tight_layout()
  results.save_figure(fig, path)
  plt.close(fig)


def define_flags() -> None:
  flags.DEFINE_string("output_dir", "runs/availability", "folder for the PNGs and rates table")
  flags.DEFINE_bool("quick", False, "few rounds, few clients (smoke test)")
  flags.DEFINE_string(
    "dataset", "synthetic", "dataset whose clients are plotted (offline: synthetic or digits)"
  )
  flags.DEFINE_integer("num_clients", 30, "N")
  flags.DEFINE_integer("rounds", 100, "T, rounds to plot")
  flags.DEFINE_integer("seed", 0, "availability seed")


def check_flags(argv) -> tuple[int, int]:
  """The flags, checked before anything runs: ``(num_clients, num_rounds)`` to plot.

  Raises:
    ValueError: a bad flag value, named with what is allowed.
  """
  common.check_arguments(argv)
  if FLAGS.dataset not in data.DATASETS:
    raise common.UsageError(f"--dataset={FLAGS.dataset!r}; allowed: {', '.join(data.DATASETS)}")
  for name, low in (("num_clients", 1), ("rounds", 1), ("seed", 0)):
    if FLAGS[name].value < low:
      raise common.UsageError(f"--{name}={FLAGS[name].value}; allowed: an integer >= {low}")
  out = FLAGS.output_dir
  if os.path.exists(out) and not os.path.isdir(out):
    raise common.UsageError(f"--output_dir={out!r} is a file; allowed: a folder")
  quick = FLAGS.quick or bool(os.environ.get(TINY_ENV))
  num_clients = min(FLAGS.num_clients, 10) if quick else FLAGS.num_clients
  num_rounds = min(FLAGS.rounds, 24) if quick else FLAGS.rounds
  return num_clients, num_rounds


def main(argv):
  num_clients, num_rounds = common.checked(check_flags, argv)
  with common.user_errors():  # a dataset that is not available offline
    out = run(FLAGS.output_dir, FLAGS.dataset, num_clients, num_rounds, FLAGS.seed)
  print(out["markdown"])
  print(f"figures: {', '.join(out['figures'])}")
  logging.info("done")


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=common.parse_flags)

r"""FedGS Fashion-MNIST: does the first stretch of training diverge? (issue 37's diagnosis)

  python -m experiments.fedgs_init_check --input_normalization=standardize --init=flax
  python -m experiments.fedgs_init_check --input_normalization=standardize --init=torch

Builds the Table 2 Fashion-MNIST cell exactly as ``experiments/fedgs_table2.py`` does
(``fashion_mnist_base``: the released protocol; IDL, UniformSample), changes one element,
runs ``--rounds`` rounds and prints the global test loss and accuracy every 5 rounds.
``--init`` is the config's ``param_init``: ``torch`` = PyTorch's defaults for ``Conv2d`` /
``Linear`` (the authors' framework): kernels and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in))
(``kaiming_uniform(a=sqrt(5))``); ``flax`` = flax's (lecun_normal kernels, zero biases).
"""

from __future__ import annotations

import argparse
import time

from benchmarks import _common as C
from experiments import common


class _Parser(argparse.ArgumentParser):
  def error(self, message):  # one ``error:`` line, exit code 2 (argparse adds a usage line)
    common.fail(message, 2)


def check_config(a: argparse.Namespace):
  """The experiment config of the run, checked before anything runs (ValueError if bad)."""
  from experiments.configs import fedgs_table2 as config_lib
  from fedjax_sel import experiment

  c = config_lib.fashion_mnist_base()
  c.availability, c.selection, c.data_dir = "idl", "uniform", a.data_dir
  c.input_normalization, c.partition = a.input_normalization, a.partition
  c.param_init = a.init
  experiment.validate_config(c)
  experiment.make_components(c)
  return c


def main(argv: list[str] | None = None) -> int:
  p = _Parser(description=__doc__.split("\n")[0])
  p.add_argument("--input_normalization", choices=("unit", "standardize"), default="standardize")
  p.add_argument("--partition", choices=("easyfl_quantity", "shards"), default="easyfl_quantity")
  p.add_argument("--init", choices=("flax", "torch"), default="flax")
  p.add_argument("--rounds", type=int, default=10, help="rounds to run (a multiple of 5)")
  p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
  p.add_argument("--cpu_devices", type=int, default=2)
  a = p.parse_args(argv)
  if a.rounds < 5 or a.rounds % 5:
    p.error(f"--rounds={a.rounds}; allowed: multiples of 5")
  if a.cpu_devices < 0:
    p.error(f"--cpu_devices={a.cpu_devices}; allowed: an integer >= 0 (0 = JAX's default)")
  if a.cpu_devices:
    C.set_cpu_devices(a.cpu_devices)
  from fedjax_sel import experiment
  from fedjax_sel.core import simulation as sim_lib

  c = common.checked(check_config, a)
  with common.user_errors():  # the Fashion-MNIST files are not in --data_dir
    sim, _ = experiment.build(c)
  state = sim.init(0)
  t0 = time.perf_counter()
  for r in range(5, a.rounds + 1, 5):
    state, _ = sim.run_rounds(state, 5)
    ev = sim_lib.to_host(sim.evaluate(state))
    print(
      f"init={a.init} inputs={a.input_normalization} partition={a.partition} round {r}: "
      f"test loss {float(ev['test_loss']):.4f}, accuracy {float(ev['test_accuracy']):.4f} "
      f"({time.perf_counter() - t0:.0f} s)",
      flush=True,
    )
  return 0


if __name__ == "__main__":
  raise SystemExit(main())

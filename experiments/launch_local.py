r"""Starts one multi-process run on this machine: N processes, one global device mesh.

  python -m experiments.launch_local --num_processes=2 -- --aggregator=mifa \
      --rounds=50 --output_dir=runs/two_processes

Every process runs ``python -m <--module> <flags after -->`` with
``--coordinator_address=127.0.0.1:<free port> --num_processes=N --process_id=i
--cpu_devices=<--cpu_devices>`` added; the processes talk through JAX's CPU collectives
(gloo). Process 0 writes the results; the others' output goes to
``<--process_logs>/process_<i>.log``. Exit code: the first non-zero exit code, else 0. On a
cluster, start one process per host with the same three flags instead (README,
"Several processes").
"""

from __future__ import annotations

import sys

from absl import app, flags

from fedjax_sel.core import distributed

flags.DEFINE_integer("num_processes", 2, "processes to start (>= 1)")
flags.DEFINE_integer("cpu_devices", 1, "CPU devices per process (>= 1)")
flags.DEFINE_string("module", "experiments.run", "the binary every process runs (python -m)")
flags.DEFINE_string("process_logs", "", "folder for processes 1..N-1's output ('' = this terminal)")
flags.DEFINE_float("timeout", 0, "kill every process after this many seconds (0 = never)")
FLAGS = flags.FLAGS


def main(argv):
  try:
    codes = distributed.launch_local(
      FLAGS.num_processes,
      list(argv[1:]),
      FLAGS.module,
      FLAGS.cpu_devices,
      timeout_s=FLAGS.timeout or None,
      log_dir=FLAGS.process_logs or None,
    )
  except distributed.LaunchError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  bad = [c for c in codes if c != 0]
  if bad:
    print(f"error: process exit codes {codes}", file=sys.stderr)
  sys.exit(bad[0] if bad else 0)


if __name__ == "__main__":
  app.run(main)

r"""Starts one multi-process run on this machine: N processes, one global device mesh.

  python -m experiments.launch_local --num_processes=2 -- --aggregator=mifa \
      --rounds=50 --output_dir=runs/two_processes

Every process runs ``python -m <--module> <flags after -->`` with
``--coordinator_address=127.0.0.1:<free port> --num_processes=N --process_id=i
--cpu_devices=<--cpu_devices>`` added; the processes talk through JAX's CPU collectives
(gloo). Process 0 writes the results; the others' output goes to
``<--process_logs>/process_<i>.log``. When a process fails or is lost, the others end too
(``fedjax_sel.core.peer_failure``) and the launcher prints one ``error:`` line: the process
that failed first and how, the last checkpoint, and this command with ``--resume``; exit
code 2 (0 when every process succeeded). On a
cluster, start one process per host with the same three flags instead (README,
"Several processes").
"""

from __future__ import annotations

import os
import shlex
import sys

from absl import app, flags

from fedjax_sel.core import distributed

flags.DEFINE_integer("num_processes", 2, "processes to start (>= 1)")
flags.DEFINE_integer("cpu_devices", 1, "CPU devices per process (>= 1)")
flags.DEFINE_string("module", "experiments.run", "the binary every process runs (python -m)")
flags.DEFINE_string("process_logs", "", "folder for processes 1..N-1's output ('' = this terminal)")
flags.DEFINE_float("timeout", 0, "kill every process after this many seconds (0 = never)")
FLAGS = flags.FLAGS


def _output_dir(args: list[str]) -> str | None:
  """The run's --output_dir among the processes' flags (``experiments.run``'s default when
  it runs that binary without one)."""
  for a in reversed(args):
    if a.startswith("--output_dir="):
      return a.split("=", 1)[1]
  return "runs/latest" if FLAGS.module == "experiments.run" else None


def resume_command(argv: list[str]) -> str:
  """This launch's command line with --resume added to the processes' flags."""
  args = list(argv[1:])
  if not any(a == "--resume" or a.startswith("--resume=") for a in _run_args(argv)):
    args = args + ["--resume"] if "--" in sys.argv else args + ["--", "--resume"]
  return shlex.join(["python", "-m", "experiments.launch_local", *args])


def _run_args(argv: list[str]) -> list[str]:
  return argv[argv.index("--") + 1 :] if "--" in argv else []


def failure_line(first: tuple[int, int], codes: list[int], run_args: list[str]) -> str:
  """The launcher's one line when a process failed: which, how, the last checkpoint, and
  the command that resumes the run."""
  i, code = first
  line = f"process {i} of {len(codes)} ended with {distributed.describe_exit(code)}"
  others = [j for j in range(len(codes)) if j != i]
  if others:
    line += f"; the others ended with exit codes {[codes[j] for j in others]}"
  folder = _output_dir(run_args)
  if folder:
    from fedjax_sel.core import checkpoint

    last = checkpoint.latest_round(folder) if os.path.isdir(folder) else None
    where = f"round {last} in {folder}" if last is not None else f"none yet in {folder}"
    line += f"; the last checkpoint: {where}"
  return f"{line}; resume with: {resume_command(sys.argv)}"


def main(argv):
  first: list = []
  try:
    codes = distributed.launch_local(
      FLAGS.num_processes,
      list(argv[1:]),
      FLAGS.module,
      FLAGS.cpu_devices,
      timeout_s=FLAGS.timeout or None,
      log_dir=FLAGS.process_logs or None,
      first_failure=first,
    )
  except distributed.LaunchError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  if any(codes):
    print(f"error: {failure_line(first[0], codes, list(argv[1:]))}", file=sys.stderr)
    sys.exit(2)
  sys.exit(0)


if __name__ == "__main__":
  app.run(main)

"""Several processes, one run: JAX's multi-controller runtime (``jax.distributed``).

Every process runs the same program; after :func:`initialize`, ``jax.devices()`` lists the
devices of all processes, the engine's client mesh spans them (``engine._client_mesh``),
the cohort and the large per-client state are split over that global mesh, and XLA's
collectives move what must move (NCCL on GPUs, ICI on TPUs, gloo between CPU processes:
``jax_cpu_collectives_implementation``). Results, logs and plots are written by process
0 only (:func:`is_primary`); checkpoints of the sharded state are written by orbax from
every process (``fedjax_sel.core.checkpoint``).

Launch flags (``experiments.run`` and the study binaries): ``--coordinator_address``,
``--num_processes``, ``--process_id``, ``--distributed_timeout``, ``--cpu_devices``.
Without them, a cluster JAX detects by itself (a SLURM or Open MPI job of several tasks, a
Cloud TPU VM) is joined with ``jax.distributed.initialize()``'s auto-detection; otherwise the
run is one process. ``python -m experiments.launch_local --num_processes=2 -- <run flags>`` starts
N processes on this machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading

import jax
import numpy as np

from fedjax_sel.core import logs, peer_failure
from fedjax_sel.core.registry import is_integer

# seconds a process waits for the others (and the coordinator) before it gives up
DEFAULT_TIMEOUT_S = 300
_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


class LaunchError(ValueError):
  """A bad multi-process launch (one-line message naming the bad value)."""


# seconds a CPU device waits in a collective for the process's other CPU devices before XLA
# aborts the process (XLA's own default is 40 s): a loaded machine (a test suite beside a
# niced study) can hold one device's thread that long, and the abort loses the rounds since
# the last checkpoint (seen on the FedEMD study, BUILD_NOTES)
CPU_COLLECTIVE_TIMEOUT_S = 3600
_CPU_TIMEOUT_FLAGS = (
  "xla_cpu_collective_call_terminate_timeout_seconds",
  "xla_cpu_collective_call_warn_stuck_timeout_seconds",
)


def relax_cpu_collective_timeouts(timeout_s: int = CPU_COLLECTIVE_TIMEOUT_S) -> str:
  """Adds XLA:CPU's collective timeouts to ``XLA_FLAGS``; returns the new value.

  The process aborts after ``timeout_s`` seconds in one collective instead of XLA's 40, and
  warns after ``min(60, timeout_s // 2)`` (at least 1). A flag the user already set in
  ``XLA_FLAGS`` is kept. Takes effect only before JAX starts its backend.
  """
  if not is_integer(timeout_s, strict=True) or timeout_s < 1:
    raise LaunchError(f"collective timeout {timeout_s!r}; allowed: an integer >= 1 (seconds)")
  flags = os.environ.get("XLA_FLAGS", "")
  values = (int(timeout_s), max(1, min(60, int(timeout_s) // 2)))
  added = [
    f"--{name}={value}"
    for name, value in zip(_CPU_TIMEOUT_FLAGS, values)
    if f"--{name}=" not in flags
  ]
  os.environ["XLA_FLAGS"] = " ".join([flags, *added]).strip()
  return os.environ["XLA_FLAGS"]


def check_launch(
  coordinator_address: str | None,
  num_processes: int | None,
  process_id: int | None,
  timeout_s: int = DEFAULT_TIMEOUT_S,
  cpu_devices: int = 0,
) -> bool:
  """Validates launch flags before anything starts; returns whether they ask for several
  processes (``num_processes`` >= 2). ``None`` (or 0 for num_processes, "" for the address)
  means absent."""
  for name, value, low in (
    ("num_processes", num_processes, 0),
    ("process_id", process_id, 0),
    ("distributed_timeout", timeout_s, 1),
    ("cpu_devices", cpu_devices, 0),
  ):
    if value is None:
      continue
    if not is_integer(value, strict=True) or value < low:
      raise LaunchError(f"--{name}={value!r} is out of range; allowed: integers >= {low}")
  n = num_processes or 0
  if coordinator_address and not _ADDRESS.match(coordinator_address):
    raise LaunchError(
      f"--coordinator_address={coordinator_address!r}; allowed: host:port (e.g. 10.0.0.1:1234)"
    )
  if coordinator_address and not 1 <= int(coordinator_address.rsplit(":", 1)[1]) <= 65535:
    raise LaunchError(f"--coordinator_address={coordinator_address!r}: port out of [1, 65535]")
  if n >= 2:
    missing = [
      f"--{k}"
      for k, v in (("coordinator_address", coordinator_address), ("process_id", process_id))
      if v in (None, "")
    ]
    if missing:
      raise LaunchError(f"--num_processes={n} needs {' and '.join(missing)} as well")
    if not process_id < n:
      raise LaunchError(f"--process_id={process_id} is out of range; allowed: [0, {n - 1}]")
    return True
  if n == 1 and process_id not in (None, 0):
    raise LaunchError(f"--process_id={process_id} is out of range; allowed: 0 (--num_processes=1)")
  if n == 0 and (coordinator_address or process_id is not None):
    raise LaunchError(
      "--coordinator_address / --process_id need --num_processes (the number of processes)"
    )
  return False


# cluster environments joined without launch flags, and when: SLURM and Open MPI when they
# started several tasks, Cloud TPU VMs always (a pod slice's workers). Kubernetes and mpi4py
# are left out: a plain pod (a CI runner, a notebook) would otherwise try to join a job.
_AUTO_JOIN = {
  "SlurmCluster": lambda env: int(env.get("SLURM_NTASKS", env.get("SLURM_NPROCS", "1")) or 1) > 1,
  "OmpiCluster": lambda env: int(env.get("OMPI_COMM_WORLD_SIZE", "1") or 1) > 1,
  "GceTpuCluster": lambda env: True,
  "GkeTpuCluster": lambda env: True,
}


def detected_cluster() -> str | None:
  """The cluster environment (JAX's own detection, ``jax._src.clusters``) that a run without
  launch flags joins: a SLURM or Open MPI job of several tasks, or a Cloud TPU VM; None
  otherwise (one process)."""
  try:
    from jax._src import clusters
  except ImportError:  # pragma: no cover (JAX moved its cluster detection)
    return None
  for env in clusters.ClusterEnv._cluster_types:
    join = _AUTO_JOIN.get(env.__name__)
    if join is None:
      continue
    try:
      if env.is_env_present() and join(os.environ):
        return env.__name__
    except Exception:  # pragma: no cover (a detector that needs a network, a bad variable)
      continue
  return None


def initialize(
  coordinator_address: str | None = None,
  num_processes: int | None = None,
  process_id: int | None = None,
  timeout_s: int = DEFAULT_TIMEOUT_S,
  cpu_devices: int = 0,
  auto_detect: bool = True,
) -> int:
  """Sets up the devices of this process and joins the others; returns the process count.

  Must run before JAX starts its backend (before any array is made). ``cpu_devices`` > 0
  exposes that many CPU devices in this process (``jax_num_cpu_devices``). With
  ``num_processes`` >= 2 (or, when every launch flag is absent and ``auto_detect``, on a
  cluster JAX detects), calls ``jax.distributed.initialize`` and gathers every process's
  launch flags under a watchdog: a launch that does not come together within ``timeout_s``
  seconds ends the process with one ``error:`` line (exit code 2).

  Raises:
    LaunchError: a bad flag value, or a launch that did not come together (one line).
  """
  several = check_launch(coordinator_address, num_processes, process_id, timeout_s, cpu_devices)
  if cpu_devices and int(cpu_devices) > 1:
    relax_cpu_collective_timeouts()
  if cpu_devices:
    try:
      jax.config.update("jax_num_cpu_devices", int(cpu_devices))
    except RuntimeError as e:
      if jax.device_count("cpu") != cpu_devices * max(jax.process_count(), 1):
        raise LaunchError(f"--cpu_devices={cpu_devices}: JAX's backend already started") from e
  cluster = None
  if not several and not num_processes and auto_detect:
    cluster = detected_cluster()
  if not several and cluster is None:
    return 1
  if jax.distributed.is_initialized():
    return jax.process_count()
  kwargs = {}
  if several:
    kwargs = dict(
      coordinator_address=coordinator_address,
      num_processes=int(num_processes),
      process_id=int(process_id),
    )
  where = coordinator_address or f"the {cluster} cluster's coordinator"
  message = (
    f"process {process_id if process_id is not None else '?'} of {num_processes or '?'} did "
    f"not come together with the others at {where} within {timeout_s} s; check that every "
    "process got the same --coordinator_address and --num_processes and its own "
    "--process_id, and that process 0 is running (--distributed_timeout)"
  )
  with _watchdog(timeout_s, message):
    try:
      # the runtime's own timeouts come after the watchdog's: when it gives up it aborts the
      # process with a C++ stack trace instead of raising
      with _service_errors_reported():
        jax.distributed.initialize(
          **kwargs,
          initialization_timeout=int(timeout_s) + 30,
          heartbeat_timeout_seconds=heartbeat_timeout(timeout_s),
          shutdown_timeout_seconds=max(10, int(timeout_s)),
        )
    except Exception as e:  # ValueError / RuntimeError from the runtime
      first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
      raise LaunchError(f"{message} ({first})") from e
    # the backend's topology exchange and one collective over every device (a missing
    # process stops here: the watchdog); every process learns what the others were told
    from jax.experimental import multihost_utils

    told = np.asarray([num_processes or 0, -1 if process_id is None else process_id], np.int32)
    everyone = np.asarray(multihost_utils.process_allgather(told)).reshape(-1, 2)
  # from now on a lost or failing process ends every process cleanly
  peer_failure.install(heartbeat_timeout(timeout_s))
  counts = sorted({int(c) for c in everyone[:, 0]})
  if several and (counts != [num_processes] or jax.process_count() != num_processes):
    raise LaunchError(
      f"the processes were launched with different --num_processes ({counts}) and "
      f"{jax.process_count()} of them joined; give every process the same --num_processes"
    )
  return jax.process_count()


def heartbeat_timeout(timeout_s: float) -> int:
  """Seconds without a heartbeat after which JAX's coordination service declares a process
  lost (and every survivor ends: ``peer_failure``)."""
  return min(max(10, int(timeout_s)), 100)


@contextlib.contextmanager
def _service_errors_reported():
  """While JAX joins the processes, runs its coordination service (process 0's) in a child
  process (``coordinator``) rather than inside process 0: when process 0 dies, the others'
  coordination clients would otherwise abort at once (a C++ check failure and a thread
  dump), before they can end with one ``error:`` line (``peer_failure``)."""
  try:
    from jax._src.lib import _jax
  except ImportError:  # pragma: no cover (JAX moved its runtime bindings)
    yield
    return
  original = getattr(_jax, "get_distributed_runtime_service", None)
  if original is None or os.environ.get("FEDJAX_SEL_SERVICE_IN_PROCESS"):  # pragma: no cover
    yield
    return

  def service(address, num_nodes, heartbeat_timeout=None, shutdown_timeout=None, **unused):
    from fedjax_sel.core import coordinator

    heartbeat = heartbeat_timeout or 100
    # orphaned (process 0 lost), it serves on until the others noticed: a stale beat
    linger = peer_failure.stale_after(heartbeat) + 5 * peer_failure.BEAT_S + 2
    return coordinator.start(address, num_nodes, heartbeat, shutdown_timeout or 300, linger)

  _jax.get_distributed_runtime_service = service
  try:
    yield
  finally:
    _jax.get_distributed_runtime_service = original


@contextlib.contextmanager
def _watchdog(timeout_s: float, message: str):
  """Ends the process with ``error: message`` (one line, exit code 2) unless the block
  finishes within ``timeout_s`` seconds. JAX's runtime waits in C++ with the GIL released,
  so this thread runs while it waits."""
  done = threading.Event()

  def watch():
    if not done.wait(timeout_s):
      print(f"error: {message}", file=sys.stderr, flush=True)
      os._exit(2)

  thread = threading.Thread(target=watch, name="fedjax_sel-launch-watchdog", daemon=True)
  thread.start()
  try:
    yield
  finally:
    done.set()


def fail(message: str, code: int = 2):
  """Prints ``error: message`` and ends the process. Once the processes are joined it ends at
  once (``os._exit``): a normal exit would first wait for the others at JAX's shutdown
  barrier, for up to --distributed_timeout seconds."""
  if jax.distributed.is_initialized():
    peer_failure.exit_with(message, code)  # the others name this process and its reason
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(code)


def is_primary() -> bool:
  """Whether this process writes the run's files (results, logs, plots): process 0."""
  return jax.process_index() == 0


def multiprocess() -> bool:
  return jax.process_count() > 1


def any_process(flag: bool) -> bool:
  """Whether ``flag`` is true in any process (a collective: every process must call it;
  the flag itself when there is only one)."""
  if not multiprocess():
    return bool(flag)
  from jax.experimental import multihost_utils

  flags = multihost_utils.process_allgather(np.asarray([int(bool(flag))], np.int32))
  return bool(np.any(np.asarray(flags)))


def check_same_everywhere(what: str, *parts) -> None:
  """Raises ValueError (one line) unless every process passes equal ``parts`` (arrays or
  JSON-able values, compared by a CRC-32 of their bytes): e.g. the config and the data,
  which every process must load or generate identically. A collective; nothing to do in
  one process."""
  if not multiprocess():
    return
  import json
  import zlib

  crc = 0
  for part in parts:
    if isinstance(part, np.ndarray) or hasattr(part, "__array__"):
      data = np.ascontiguousarray(np.asarray(part)).tobytes()
    else:
      data = json.dumps(part, sort_keys=True, default=str).encode()
    crc = zlib.crc32(data, crc)
  from jax.experimental import multihost_utils

  crcs = np.asarray(multihost_utils.process_allgather(np.asarray([crc], np.uint32))).ravel()
  differ = [i for i, c in enumerate(crcs.tolist()) if c != int(crcs[0])]
  if differ:
    raise ValueError(
      f"{what} differs between processes (processes {differ} disagree with process 0); every "
      "process must run the same command on the same files"
    )


# ---------------------------------------------------------------------- absl flags
def define_flags() -> None:
  """The launch flags, for any absl binary (``experiments.run``, the study binaries)."""
  from absl import flags

  flags.DEFINE_string(
    "coordinator_address",
    "",
    "host:port of process 0's coordinator, the same in every process of a multi-process run "
    "('' with --num_processes=0: JAX's cluster auto-detection, or one process)",
  )
  flags.DEFINE_integer(
    "num_processes",
    0,
    "processes of one multi-process run (jax.distributed); 0 = auto-detect a cluster (SLURM, "
    "Open MPI, Cloud TPU) or run as one process; 1 = one process",
  )
  flags.DEFINE_integer("process_id", None, "this process's index in [0, --num_processes)")
  flags.DEFINE_integer(
    "distributed_timeout",
    DEFAULT_TIMEOUT_S,
    "seconds to wait for the other processes (initialization and heartbeat) before failing",
  )
  flags.DEFINE_integer(
    "cpu_devices", 0, "on CPU, expose this many JAX devices in this process (0 = JAX's default)"
  )


def initialize_from_flags() -> int:
  """:func:`initialize` with the values of :func:`define_flags`' flags."""
  from absl import flags

  f = flags.FLAGS
  # every binary starts here: the libraries' INFO chatter off unless --verbosity is given
  logs.quiet_libraries(logs.verbosity_given())
  return initialize(
    f.coordinator_address or None,
    f.num_processes,
    f.process_id,
    f.distributed_timeout,
    f.cpu_devices,
  )


# ---------------------------------------------------------------------- local launcher
def free_port() -> int:
  """A TCP port that is free on this machine now (for a local coordinator)."""
  import socket

  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return int(s.getsockname()[1])


def local_commands(
  num_processes: int,
  args: list[str],
  module: str = "experiments.run",
  cpu_devices: int = 1,
  port: int | None = None,
) -> list[list[str]]:
  """The command lines of N processes of ``python -m module args`` (``python module args``
  when ``module`` is a .py file) on this machine, joined through a coordinator on
  127.0.0.1 (process 0 hosts it)."""
  if not is_integer(num_processes, strict=True) or num_processes < 1:
    raise LaunchError(f"--num_processes={num_processes!r} is out of range; allowed: integers >= 1")
  check_launch("127.0.0.1:1", num_processes, 0, DEFAULT_TIMEOUT_S, cpu_devices)
  address = f"127.0.0.1:{port or free_port()}"
  program = [module] if module.endswith(".py") else ["-m", module]
  return [
    [sys.executable, *program, *args, f"--coordinator_address={address}",
     f"--num_processes={num_processes}", f"--process_id={i}", f"--cpu_devices={cpu_devices}"]
    for i in range(num_processes)
  ]  # fmt: skip


def launch_local(
  num_processes: int,
  args: list[str],
  module: str = "experiments.run",
  cpu_devices: int = 1,
  timeout_s: float | None = None,
  env: dict | None = None,
  log_dir: str | None = None,
  first_failure: list | None = None,
) -> list[int]:
  """Runs N processes of one multi-process run on this machine (CPU devices, gloo) and
  returns their exit codes (process 0 first).

  Processes 1..N-1 write their output to ``log_dir/process_<i>.log`` (or inherit this
  process's streams when ``log_dir`` is None). When one process fails, the others are
  stopped (SIGTERM, then SIGKILL after 10 s); after ``timeout_s`` seconds all of them are
  killed (exit code -9), so a launch never hangs forever. SIGINT/SIGTERM to the launcher
  are passed on to every process (they checkpoint and stop at the same round).
  ``first_failure`` (a list) receives ``(process, exit code)`` of the cause: the first
  process seen to end by a signal or a code other than 2, else the first seen to fail
  (exit code 2 is also a survivor's code for a lost peer; see ``CAUSE_GRACE_S``).
  """
  import signal
  import subprocess
  import time

  env = dict(os.environ if env is None else env)
  env.setdefault("JAX_PLATFORMS", "cpu")
  procs, logs = [], []
  for i, cmd in enumerate(local_commands(num_processes, args, module, cpu_devices)):
    out = None
    if log_dir and i > 0:
      os.makedirs(log_dir, exist_ok=True)
      out = open(os.path.join(log_dir, f"process_{i}.log"), "w")  # noqa: SIM115
      logs.append(out)
    procs.append(
      subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT if out else None)
    )

  sent: dict[int, set] = {}  # process -> the signals this launcher sent it

  def send(i, signum):
    sent.setdefault(i, set()).add(int(signum))
    procs[i].send_signal(signum)

  def forward(signum, frame):
    del frame
    for i, p in enumerate(procs):
      if p.poll() is None:
        send(i, signum)

  old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
  deadline = None if timeout_s is None else time.monotonic() + timeout_s
  stop_at = first_seen_at = None
  seen: list[int] = []  # processes in the order they were seen to fail
  try:
    # poll every process each time (``any(p.poll() is None ...)`` would stop at the first
    # running one and never see a later one fail)
    while any([p.poll() is None for p in procs]):
      now = time.monotonic()
      failed = [i for i, p in enumerate(procs) if p.returncode not in (None, 0)]
      seen += [i for i in failed if i not in seen]
      if failed and first_seen_at is None:
        first_seen_at = now
      if failed and first_failure is not None and not first_failure:
        cause = _failure_cause(seen, [p.returncode for p in procs], sent)
        if cause is not None or now - first_seen_at > CAUSE_GRACE_S:
          i = seen[0] if cause is None else cause
          first_failure.append((i, procs[i].returncode))
      if failed and stop_at is None:
        stop_at = now + 10.0
        forward(signal.SIGTERM, None)
      if (deadline is not None and now > deadline) or (stop_at is not None and now > stop_at):
        for i, p in enumerate(procs):
          if p.poll() is None:
            send(i, signal.SIGKILL)
      time.sleep(0.1)
  finally:
    for s, h in old.items():
      signal.signal(s, h)
    for i, p in enumerate(procs):
      if p.poll() is None:
        send(i, signal.SIGKILL)
      p.wait()
    for f in logs:
      f.close()
  codes = [p.returncode for p in procs]
  if first_failure is not None and not first_failure and any(codes):
    seen += [i for i, c in enumerate(codes) if c and i not in seen]
    i = _failure_cause(seen, codes, sent)
    i = seen[0] if i is None else i
    first_failure.append((i, codes[i]))
  return codes


# Exit code 2 is also how a survivor ends when it notices a lost peer (``peer_failure``), and
# it can end within the launcher's poll interval of the peer's death (or before the killed
# peer's exit status is ready): a process killed by a signal, or ended with a code other than
# 2, is the cause; with only 2s, the first seen; the launcher waits this long for a clearer one.
CAUSE_GRACE_S = 1.0


def _failure_cause(seen: list[int], codes: list, sent: dict) -> int | None:
  """The first of ``seen`` that ended with a code other than 0 and 2, not by a signal the
  launcher sent it (``sent``: process -> signals), else None."""
  return next(
    (i for i in seen if codes[i] not in (None, 0, 2) and -codes[i] not in sent.get(i, ())), None
  )


def describe_exit(code: int) -> str:
  """``exit code 2`` / ``exit code -9 (killed by SIGKILL)``."""
  import signal

  if code < 0:
    try:
      return f"exit code {code} (killed by {signal.Signals(-code).name})"
    except ValueError:  # pragma: no cover
      return f"exit code {code}"
  return f"exit code {code}"

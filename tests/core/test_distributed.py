"""``fedjax_sel.core.distributed`` in one process: the launch checks at their boundaries,
cluster auto-detection, the watchdog, ``fail``, the one-process collectives, the absl flags
and the local launcher (with tiny scripts that start no JAX). The multi-process runs
themselves are in tests/experiments/test_multiprocess.py."""

import os
import signal
import subprocess
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import clusters

from fedjax_sel.core import distributed

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---------------------------------------------------------------------- check_launch
@pytest.mark.parametrize(
  "kwargs,message",
  [
    (dict(num_processes=-1), "--num_processes=-1 is out of range; allowed: integers >= 0"),
    (dict(process_id=-1), "--process_id=-1 is out of range; allowed: integers >= 0"),
    (dict(timeout_s=0), "--distributed_timeout=0 is out of range; allowed: integers >= 1"),
    (dict(cpu_devices=-1), "--cpu_devices=-1 is out of range; allowed: integers >= 0"),
    (dict(num_processes=True), "--num_processes=True is out of range"),  # a bool is no count
    (dict(cpu_devices=2.0), "--cpu_devices=2.0 is out of range"),
    (dict(timeout_s="5"), "--distributed_timeout='5' is out of range"),
  ],
)
def test_each_launch_number_has_its_lower_bound(kwargs, message):
  args = dict(coordinator_address=None, num_processes=None, process_id=None)
  with pytest.raises(distributed.LaunchError) as e:
    distributed.check_launch(**{**args, **kwargs})
  assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_launch_numbers_at_their_lower_bounds_are_allowed():
  assert distributed.check_launch(None, 0, None, timeout_s=1, cpu_devices=0) is False
  assert distributed.check_launch(None, None, None) is False  # None: absent
  assert distributed.check_launch("h:1", 2, 0, timeout_s=1, cpu_devices=0) is True


@pytest.mark.parametrize(
  "address", ["10.0.0.1:1234", "[::1]:8476", "node-07.cluster_a:1", "h:65535"]
)
def test_coordinator_addresses_allowed(address):
  assert distributed.check_launch(address, 2, 1) is True


@pytest.mark.parametrize(
  "address,message",
  [
    ("h:0", "--coordinator_address='h:0': port out of [1, 65535]"),
    ("h:65536", "--coordinator_address='h:65536': port out of [1, 65535]"),
    ("h:123456", "--coordinator_address='h:123456'; allowed: host:port (e.g. 10.0.0.1:1234)"),
    ("h:", "--coordinator_address='h:'; allowed: host:port (e.g. 10.0.0.1:1234)"),
    ("a b:12", "--coordinator_address='a b:12'; allowed: host:port (e.g. 10.0.0.1:1234)"),
    (":12", "--coordinator_address=':12'; allowed: host:port (e.g. 10.0.0.1:1234)"),
  ],
)
def test_bad_coordinator_addresses(address, message):
  with pytest.raises(distributed.LaunchError) as e:
    distributed.check_launch(address, 2, 0)
  assert str(e.value) == message


@pytest.mark.parametrize(
  "address,n,pid,message",
  [
    ("127.0.0.1:1234", 2, None, "--num_processes=2 needs --process_id as well"),
    ("", 2, 0, "--num_processes=2 needs --coordinator_address as well"),
    ("localhost", 2, 0, "--coordinator_address='localhost'; allowed: host:port"),
    ("127.0.0.1:70000", 2, 0, "port out of [1, 65535]"),
    ("127.0.0.1:1234", -1, 0, "--num_processes=-1 is out of range"),
    ("127.0.0.1:1234", 2, -1, "--process_id=-1 is out of range"),
    ("127.0.0.1:1234", 0, 0, "need --num_processes"),
    ("", 1, 1, "--process_id=1 is out of range; allowed: 0"),
  ],
)
def test_launch_flags_are_checked_before_anything_starts(address, n, pid, message):
  with pytest.raises(distributed.LaunchError, match=None) as e:
    distributed.check_launch(address or None, n, pid)
  assert message in str(e.value) and "\n" not in str(e.value)


def test_several_processes_need_the_address_and_an_id_below_their_count():
  with pytest.raises(distributed.LaunchError) as e:
    distributed.check_launch("", 3, None)
  assert str(e.value) == "--num_processes=3 needs --coordinator_address and --process_id as well"
  assert distributed.check_launch("h:1", 3, 2) is True  # the last id
  assert distributed.check_launch("10.0.0.1:1234", 4, 3) is True
  with pytest.raises(distributed.LaunchError) as e:
    distributed.check_launch("h:1", 3, 3)
  assert str(e.value) == "--process_id=3 is out of range; allowed: [0, 2]"


def test_one_process_and_no_processes():
  assert distributed.check_launch(None, 1, None) is False
  assert distributed.check_launch(None, 1, 0) is False
  with pytest.raises(distributed.LaunchError) as e:
    distributed.check_launch(None, 1, 2)
  assert str(e.value) == "--process_id=2 is out of range; allowed: 0 (--num_processes=1)"
  for address, pid in (("h:1", None), (None, 0), ("h:1", 0)):
    with pytest.raises(distributed.LaunchError) as e:
      distributed.check_launch(address, 0, pid)
    assert str(e.value).startswith("--coordinator_address / --process_id need --num_processes")
  with pytest.raises(distributed.LaunchError, match="need --num_processes"):
    distributed.check_launch("h:1", None, None)


# ---------------------------------------------------------------------- cluster detection
OMPI = {"OMPI_MCA_orte_hnp_uri": "1234.0;tcp://10.0.0.1:5000"}
SLURM = dict(SLURM_JOB_ID="7", SLURM_STEP_NODELIST="n1", SLURM_PROCID="0", SLURM_LOCALID="0")
_CLUSTER_VARS = [*OMPI, *SLURM, "SLURM_NTASKS", "SLURM_NPROCS", "OMPI_COMM_WORLD_SIZE"]


@pytest.fixture
def environ(monkeypatch):
  for name in _CLUSTER_VARS:
    monkeypatch.delenv(name, raising=False)
  for env in clusters.ClusterEnv._cluster_types:  # nothing else on this machine looks like one
    if env.__name__ not in ("OmpiCluster", "SlurmCluster"):
      monkeypatch.setattr(env, "is_env_present", classmethod(lambda cls: False))

  def set_env(values):
    for name, value in values.items():
      monkeypatch.setenv(name, value)

  return set_env


@pytest.mark.parametrize(
  "values,expected",
  [
    ({}, None),
    (dict(OMPI, OMPI_COMM_WORLD_SIZE="2"), "OmpiCluster"),
    (dict(OMPI, OMPI_COMM_WORLD_SIZE="1"), None),
    (dict(OMPI, OMPI_COMM_WORLD_SIZE=""), None),  # an empty variable: one task
    (OMPI, None),
    (dict(SLURM, SLURM_NTASKS="2"), "SlurmCluster"),
    (dict(SLURM, SLURM_NTASKS=""), None),
    (dict(SLURM, SLURM_NTASKS="1", SLURM_NPROCS="4"), None),  # SLURM_NTASKS decides
  ],
)
def test_detected_cluster(environ, values, expected):
  environ(values)
  assert distributed.detected_cluster() == expected


@pytest.mark.parametrize(
  "environ,expected",
  [
    ({}, None),
    (dict(SLURM, SLURM_NTASKS="1"), None),  # one task: one process, nothing to join
    (dict(SLURM, SLURM_NTASKS="4"), "SlurmCluster"),
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, None),  # a plain pod joins nothing
  ],
)
def test_cluster_auto_detection_joins_only_jobs_of_several_tasks(monkeypatch, environ, expected):
  """With JAX's own detectors (none replaced): a plain Kubernetes pod is not a job."""
  for name in [*SLURM, "SLURM_NTASKS", "OMPI_MCA_orte_hnp_uri", "KUBERNETES_SERVICE_HOST"]:
    monkeypatch.delenv(name, raising=False)
  for name, value in environ.items():
    monkeypatch.setenv(name, value)
  assert distributed.detected_cluster() == expected


def test_detection_goes_past_environments_it_never_joins_and_broken_detectors(environ, monkeypatch):
  """A Cloud TPU VM is joined always; the detectors before it in JAX's list that we never
  join (mpi4py, the base TPU class) or that raise are skipped, not the end of the search."""
  types = [env.__name__ for env in clusters.ClusterEnv._cluster_types]
  assert types.index("Mpi4pyCluster") < types.index("GceTpuCluster")
  gce = next(e for e in clusters.ClusterEnv._cluster_types if e.__name__ == "GceTpuCluster")
  ompi = next(e for e in clusters.ClusterEnv._cluster_types if e.__name__ == "OmpiCluster")
  monkeypatch.setattr(gce, "is_env_present", classmethod(lambda cls: True))
  for env in clusters.ClusterEnv._cluster_types:
    if env.__name__ in ("Mpi4pyCluster", "BaseTpuCluster"):
      monkeypatch.setattr(env, "is_env_present", classmethod(lambda cls: True))
  assert distributed.detected_cluster() == "GceTpuCluster"

  def broken(cls):
    raise RuntimeError("needs a network")

  monkeypatch.setattr(ompi, "is_env_present", classmethod(broken))
  environ(dict(SLURM, SLURM_NTASKS="3"))
  assert distributed.detected_cluster() == "SlurmCluster"


# ---------------------------------------------------------------------- initialize
def test_initialize_in_one_process(environ):
  jax.devices()  # the backend has started
  n = jax.device_count("cpu")
  assert distributed.initialize() == 1
  assert distributed.initialize(None, 1, 0, auto_detect=False) == 1
  assert distributed.initialize(cpu_devices=n) == 1  # what the backend already has
  with pytest.raises(distributed.LaunchError) as e:
    distributed.initialize(cpu_devices=n + 1)
  assert str(e.value) == f"--cpu_devices={n + 1}: JAX's backend already started"
  with pytest.raises(distributed.LaunchError, match="--process_id=1 is out of range"):
    distributed.initialize(None, 1, 1)
  assert not jax.distributed.is_initialized()


@pytest.mark.parametrize("tpu", ["GceTpuCluster", "GkeTpuCluster"])
def test_cloud_tpu_vms_are_joined_always(environ, monkeypatch, tpu):
  env = next(e for e in clusters.ClusterEnv._cluster_types if e.__name__ == tpu)
  monkeypatch.setattr(env, "is_env_present", classmethod(lambda cls: True))
  assert distributed.detected_cluster() == tpu


def test_initialize_of_processes_already_joined_returns_their_count(environ, monkeypatch):
  """Several processes (or a detected cluster) already joined: nothing to do but count."""
  monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
  monkeypatch.setattr(jax, "process_count", lambda: 3)
  assert distributed.initialize("h:1", 3, 2) == 3
  monkeypatch.setattr(distributed, "detected_cluster", lambda: "SlurmCluster")
  assert distributed.initialize() == 3
  assert distributed.initialize(auto_detect=False) == 1  # no flags, no detection: one process


@pytest.fixture
def fake_runtime(monkeypatch):
  """jax.distributed's runtime replaced: ``initialize`` records its arguments, the
  all-gather returns what each of ``told`` processes was told (set by the test)."""
  from jax.experimental import multihost_utils

  calls, told = [], {}

  def initialize(**kwargs):
    calls.append(kwargs)
    if told.get("raise"):
      raise RuntimeError(told["raise"])

  def allgather(x):  # process i was told [its --num_processes, i]
    return np.asarray([[c, i] for i, c in enumerate(told.get("counts", [2, 2]))], np.int32)

  monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
  monkeypatch.setattr(jax.distributed, "initialize", initialize)
  monkeypatch.setattr(multihost_utils, "process_allgather", allgather)
  monkeypatch.setattr(jax, "process_count", lambda: len(told.get("counts", [2, 2])))
  return calls, told


@pytest.mark.parametrize("timeout,heartbeat,shutdown", [(5, 10, 10), (60, 60, 60), (300, 100, 300)])
def test_initialize_joins_with_the_runtime_timeouts(environ, fake_runtime, timeout, heartbeat,
                                                    shutdown):  # fmt: skip
  """The runtime's own timeouts come after the watchdog's: initialization at timeout + 30 s,
  heartbeat within [10, 100] s, shutdown at least 10 s."""
  calls, _ = fake_runtime
  assert distributed.initialize("10.0.0.1:1234", 2, 1, timeout_s=timeout) == 2
  assert calls == [
    dict(
      coordinator_address="10.0.0.1:1234",
      num_processes=2,
      process_id=1,
      initialization_timeout=timeout + 30,
      heartbeat_timeout_seconds=heartbeat,
      shutdown_timeout_seconds=shutdown,
    )
  ]


def test_initialize_reports_the_runtime_error_and_mismatched_counts(environ, fake_runtime):
  calls, told = fake_runtime
  told["raise"] = "\n  DEADLINE_EXCEEDED: Barrier timed out\nmore detail"
  with pytest.raises(distributed.LaunchError) as e:
    distributed.initialize("h:7", 2, 0, timeout_s=9)
  assert str(e.value) == (
    "process 0 of 2 did not come together with the others at h:7 within 9 s; check that "
    "every process got the same --coordinator_address and --num_processes and its own "
    "--process_id, and that process 0 is running (--distributed_timeout) "
    "(DEADLINE_EXCEEDED: Barrier timed out)"
  )
  told.clear()
  told["counts"] = [2, 3, 2]
  with pytest.raises(distributed.LaunchError) as e:
    distributed.initialize("h:7", 2, 0)
  assert str(e.value) == (
    "the processes were launched with different --num_processes ([2, 3]) and 3 of them "
    "joined; give every process the same --num_processes"
  )
  told["counts"] = [2, 2, 2]  # the same count everywhere, but a third process joined
  with pytest.raises(distributed.LaunchError, match=r"\(\[2\]\) and 3 of them joined"):
    distributed.initialize("h:7", 2, 0)


def test_initialize_joins_a_detected_cluster(environ, fake_runtime, monkeypatch):
  """No flags on a detected cluster: JAX's own initialize with no arguments."""
  calls, told = fake_runtime
  monkeypatch.setattr(distributed, "detected_cluster", lambda: "SlurmCluster")
  told["counts"] = [0, 0, 0]
  assert distributed.initialize(timeout_s=20) == 3
  assert calls == [
    dict(initialization_timeout=50, heartbeat_timeout_seconds=20, shutdown_timeout_seconds=20)
  ]
  told["raise"] = "unreachable"
  with pytest.raises(distributed.LaunchError) as e:
    distributed.initialize(timeout_s=20)
  assert str(e.value).startswith(
    "process ? of ? did not come together with the others at the SlurmCluster cluster's "
    "coordinator within 20 s"
  )
  assert str(e.value).endswith("(unreachable)")


def test_initialize_joins_a_detected_cluster_only_with_auto_detection(environ, monkeypatch):
  calls = []
  monkeypatch.setattr(distributed, "detected_cluster", lambda: calls.append(1) or None)
  assert distributed.initialize() == 1 and calls == [1]
  assert distributed.initialize(auto_detect=False) == 1 and calls == [1]
  assert distributed.initialize(None, 1, 0) == 1 and calls == [1]  # --num_processes given


# ---------------------------------------------------------------------- watchdog and fail
def test_watchdog_ends_the_process_in_one_line_after_its_timeout(monkeypatch, capsys):
  exited = []
  done = threading.Event()

  def fake_exit(code):
    exited.append(code)
    done.set()

  monkeypatch.setattr(distributed.os, "_exit", fake_exit)
  with distributed._watchdog(5.0, "quick"):
    pass  # finished in time: nothing happens
  start = time.monotonic()
  with distributed._watchdog(0.2, "the others did not come"):
    assert done.wait(10.0)
  assert 0.15 < time.monotonic() - start < 5.0
  assert exited == [2]
  assert capsys.readouterr().err == "error: the others did not come\n"
  time.sleep(0.3)  # the first watchdog stays quiet after its block ended
  assert exited == [2]


def test_fail_in_one_process(capsys):
  with pytest.raises(SystemExit) as e:
    distributed.fail("bad value")
  assert e.value.code == 2
  with pytest.raises(SystemExit) as e:
    distributed.fail("other", code=5)
  assert e.value.code == 5
  assert capsys.readouterr().err == "error: bad value\nerror: other\n"


def test_check_same_everywhere_compares_crc32s_of_the_parts(monkeypatch):
  """Several processes (faked): arrays count by their bytes, other parts by their sorted
  JSON, chained into one CRC-32 from 0; any process whose CRC differs from process 0's is
  named."""
  import json
  import zlib

  from jax.experimental import multihost_utils

  sent = []
  others = {"crcs": None}

  def allgather(x):
    sent.append(np.asarray(x))
    own = int(np.asarray(x).ravel()[0])
    return np.asarray([[own], *[[c] for c in others["crcs"] or [own, own]]], np.uint32)

  monkeypatch.setattr(distributed, "multiprocess", lambda: True)
  monkeypatch.setattr(multihost_utils, "process_allgather", allgather)
  a, b, cfg = (
    np.arange(6, dtype=np.int32).reshape(2, 3),
    jnp.ones((4,), jnp.float32),
    {"z": 1, "a": [2]},
  )
  distributed.check_same_everywhere("the data", a, b, cfg)
  want = zlib.crc32(a.tobytes(), 0)
  want = zlib.crc32(np.asarray(b).tobytes(), want)
  want = zlib.crc32(json.dumps(cfg, sort_keys=True).encode(), want)
  assert sent[-1].dtype == np.uint32 and int(sent[-1].ravel()[0]) == want
  others["crcs"] = [want, want + 1, want, want ^ 5]
  with pytest.raises(ValueError) as e:
    distributed.check_same_everywhere("the config", a, b, cfg)
  assert str(e.value) == (
    "the config differs between processes (processes [2, 4] disagree with process 0); every "
    "process must run the same command on the same files"
  )


def test_any_process_gathers_every_flag(monkeypatch):
  from jax.experimental import multihost_utils

  flags = {"all": [0, 0]}
  monkeypatch.setattr(distributed, "multiprocess", lambda: True)
  monkeypatch.setattr(
    multihost_utils,
    "process_allgather",
    lambda x: np.asarray([[int(np.asarray(x).ravel()[0])], *[[f] for f in flags["all"]]], np.int32),
  )
  assert distributed.any_process(False) is False
  assert distributed.any_process(True) is True
  flags["all"] = [0, 1]
  assert distributed.any_process(False) is True


def test_two_processes_are_several_and_only_process_0_writes(monkeypatch):
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  monkeypatch.setattr(jax, "process_index", lambda: 1)
  assert distributed.multiprocess() is True and distributed.is_primary() is False


def test_collectives_in_one_process():
  assert distributed.is_primary() is True
  assert distributed.multiprocess() is False
  assert distributed.any_process(True) is True
  assert distributed.any_process(0) is False
  assert distributed.any_process([1]) is True
  assert distributed.check_same_everywhere("the config", {"a": 1}) is None


_FLAGS_SCRIPT = """
import sys
from absl import flags
from fedjax_sel.core import distributed
distributed.define_flags()
f = flags.FLAGS
f(sys.argv)
print(repr((f.coordinator_address, f.num_processes, f.process_id, f.distributed_timeout,
            f.cpu_devices)))
try:
  print(distributed.initialize_from_flags())
except distributed.LaunchError as e:
  print("LaunchError:", e)
"""


def _flags(*args):
  done = subprocess.run(
    [sys.executable, "-c", _FLAGS_SCRIPT, *args], capture_output=True, text=True, timeout=120,
    env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO), cwd=REPO,
  )  # fmt: skip
  assert done.returncode == 0, done.stderr[-2000:]
  return done.stdout.splitlines()


def test_launch_flags_defaults_and_initialize_from_flags():
  assert _flags() == [repr(("", 0, None, distributed.DEFAULT_TIMEOUT_S, 0)), "1"]
  assert distributed.DEFAULT_TIMEOUT_S == 300
  lines = _flags("--num_processes=1", "--process_id=1", "--distributed_timeout=7")
  assert lines == [
    repr(("", 1, 1, 7, 0)),
    "LaunchError: --process_id=1 is out of range; allowed: 0 (--num_processes=1)",
  ]
  # "" is an absent address; the flags reach check_launch in their order
  lines = _flags("--coordinator_address=h:1", "--cpu_devices=-2")
  assert lines[1] == "LaunchError: --cpu_devices=-2 is out of range; allowed: integers >= 0"
  lines = _flags("--coordinator_address=h:1")
  assert lines[1].startswith("LaunchError: --coordinator_address / --process_id need")
  lines = _flags("--distributed_timeout=0")
  assert lines[1] == "LaunchError: --distributed_timeout=0 is out of range; allowed: integers >= 1"


# ---------------------------------------------------------------------- local launcher
def test_free_port_is_free():
  import socket

  port = distributed.free_port()
  assert 1 <= port <= 65535
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", port))


def test_local_commands():
  commands = distributed.local_commands(3, ["--rounds=2"], cpu_devices=2, port=4321)
  assert commands == [
    [sys.executable, "-m", "experiments.run", "--rounds=2", "--coordinator_address=127.0.0.1:4321",
     "--num_processes=3", f"--process_id={i}", "--cpu_devices=2"]
    for i in range(3)
  ]  # fmt: skip
  [one] = distributed.local_commands(1, [], module="tool.py", port=9)
  assert one == [sys.executable, "tool.py", "--coordinator_address=127.0.0.1:9",
                 "--num_processes=1", "--process_id=0", "--cpu_devices=1"]  # fmt: skip
  [free] = distributed.local_commands(1, [])  # no port given: a free one
  address = [x for x in free if x.startswith("--coordinator_address=127.0.0.1:")]
  assert len(address) == 1 and 1 <= int(address[0].rsplit(":", 1)[1]) <= 65535
  with pytest.raises(distributed.LaunchError) as e:
    distributed.local_commands(0, [])
  assert str(e.value) == "--num_processes=0 is out of range; allowed: integers >= 1"
  for bad in (True, 1.0, -1):
    with pytest.raises(distributed.LaunchError) as e:
      distributed.local_commands(bad, [])
    assert str(e.value) == f"--num_processes={bad!r} is out of range; allowed: integers >= 1"
  with pytest.raises(distributed.LaunchError, match="--cpu_devices=-1 is out of range"):
    distributed.local_commands(2, [], cpu_devices=-1)


# a process of the launcher: prints its arguments and environment, then does what its
# --process_id is told in the environment (STEP_<id> = "exit:<code>", "sleep", "ignore_term",
# "ignore_term_then_die:<seconds>", "term_slowly")
_WORKER = """
import os, signal, sys, time
pid = next(a.split("=")[1] for a in sys.argv if a.startswith("--process_id="))
os.write(1, ("argv " + " ".join(sys.argv[1:]) + " JAX_PLATFORMS="
             + os.environ.get("JAX_PLATFORMS", "-") + "\\n").encode())
os.write(2, f"stderr of {pid}\\n".encode())
step = os.environ.get("STEP_" + pid, "exit:0")
if step.startswith("exit:"):
  sys.exit(int(step[5:]))
if step.startswith("ignore_term"):
  signal.signal(signal.SIGTERM, signal.SIG_IGN)
if step.startswith("ignore_term_then_die:"):  # killed (SIGKILL) from outside after a while
  time.sleep(float(step.split(":")[1]))
  os.kill(os.getpid(), signal.SIGKILL)
if step == "term_slowly":  # SIGTERM: finish within the launcher's 10 s of grace
  signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.5), sys.exit(143)))
# one write(2) of a short line: the two processes share the launcher's stdout, and print()
# may split a line into several writes that interleave with the other process's
signal.signal(signal.SIGINT,
              lambda *_: (os.write(1, f"SIGINT in {pid}\\n".encode()), sys.exit(130)))
if os.environ.get("READY_DIR"):  # the handlers are in place
  open(os.path.join(os.environ["READY_DIR"], pid), "w").close()
time.sleep(60)
"""


@pytest.fixture
def worker(tmp_path):
  path = tmp_path / "worker.py"
  path.write_text(_WORKER)
  return str(path)


def _env(**steps):
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  return dict(env, **{f"STEP_{k[1:]}": v for k, v in steps.items()})


def test_launch_local_runs_every_process_and_logs_the_others(worker, tmp_path, capfd):
  logs = tmp_path / "logs"
  codes = distributed.launch_local(3, ["--x=1"], module=worker, env=_env(), log_dir=str(logs))
  assert codes == [0, 0, 0]
  assert sorted(os.listdir(logs)) == ["process_1.log", "process_2.log"]
  for i in (1, 2):
    text = (logs / f"process_{i}.log").read_text()
    assert text.startswith("argv --x=1 --coordinator_address=127.0.0.1:")
    assert f"--process_id={i} --cpu_devices=1 JAX_PLATFORMS=cpu" in text  # cpu by default
    assert f"stderr of {i}\n" in text  # both streams go to the log
  out = capfd.readouterr().out  # process 0 inherits the launcher's streams
  assert "--process_id=0 " in out and "--process_id=1 " not in out


def test_launch_local_keeps_the_given_platform_and_exit_codes(worker, capfd):
  env = dict(_env(p0="exit:0", p1="exit:0"), JAX_PLATFORMS="tpu")
  assert distributed.launch_local(2, [], module=worker, env=env) == [0, 0]
  out = capfd.readouterr().out  # without log_dir every process inherits the streams
  assert out.count("JAX_PLATFORMS=tpu") == 2


def test_launch_local_stops_the_others_when_one_fails(worker):
  codes = distributed.launch_local(3, [], module=worker, env=_env(p0="sleep", p1="exit:3",
                                                                   p2="sleep"))  # fmt: skip
  assert codes == [-signal.SIGTERM, 3, -signal.SIGTERM]


def test_launch_local_names_the_killed_process_not_the_survivor_that_noticed_it(worker):
  """A survivor ends with code 2 when it notices a lost peer, and may do so before the
  killed peer's exit status is ready: the launcher names the killed process as the cause."""
  first = []
  env = _env(p0="exit:2", p1="ignore_term_then_die:0.3")  # 2 first, the SIGKILL 0.3 s later
  codes = distributed.launch_local(2, [], module=worker, env=env, first_failure=first)
  assert codes == [2, -signal.SIGKILL] and first == [(1, -signal.SIGKILL)]


def test_launch_local_names_the_failing_process_not_the_ones_it_stopped(worker):
  first = []
  env = _env(p0="sleep", p1="exit:2", p2="sleep")
  codes = distributed.launch_local(3, [], module=worker, env=env, first_failure=first)
  assert codes == [-signal.SIGTERM, 2, -signal.SIGTERM] and first == [(1, 2)]
  first = []
  codes = distributed.launch_local(2, [], module=worker, env=_env(p0="sleep", p1="exit:3"),
                                   first_failure=first)  # fmt: skip
  assert codes == [-signal.SIGTERM, 3] and first == [(1, 3)]


def test_launch_local_gives_the_others_time_to_stop(worker):
  """After a failure the others get SIGTERM and 10 s to end on their own (a run writes its
  checkpoint), not an immediate SIGKILL."""
  env = _env(p0="term_slowly", p1="exit:3", p2="term_slowly")
  assert distributed.launch_local(3, [], module=worker, env=env) == [143, 3, 143]


def test_launch_local_kills_everything_after_its_timeout(worker):
  codes = distributed.launch_local(2, [], module=worker, env=_env(p0="sleep", p1="ignore_term"),
                                   timeout_s=1.0)  # fmt: skip
  assert codes == [-signal.SIGKILL, -signal.SIGKILL]


def test_an_error_in_the_launcher_kills_its_processes(worker, monkeypatch, tmp_path):
  procs = []
  real_popen = subprocess.Popen

  def popen(*a, **k):
    procs.append(real_popen(*a, **k))
    return procs[-1]

  def sleep(seconds):
    raise RuntimeError("the launcher failed")

  monkeypatch.setattr(subprocess, "Popen", popen)
  monkeypatch.setattr(time, "sleep", sleep)
  with pytest.raises(RuntimeError, match="the launcher failed"):
    distributed.launch_local(2, [], module=worker, env=_env(p0="sleep", p1="sleep"))
  assert len(procs) == 2
  assert [p.returncode for p in procs] == [-signal.SIGKILL] * 2  # killed and waited for


def test_launch_local_passes_signals_on_and_restores_the_handlers(worker, capfd, tmp_path):
  before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
  ready = tmp_path / "ready"
  ready.mkdir()
  stop = threading.Event()

  def interrupt_when_both_are_ready():  # a loaded machine may take seconds to start them
    while not stop.is_set() and len(os.listdir(ready)) < 2:
      time.sleep(0.05)
    if not stop.is_set():
      os.kill(os.getpid(), signal.SIGINT)

  thread = threading.Thread(target=interrupt_when_both_are_ready, daemon=True)
  thread.start()
  try:
    env = dict(_env(p0="sleep", p1="sleep"), READY_DIR=str(ready))
    codes = distributed.launch_local(2, [], module=worker, env=env, timeout_s=50.0)
  finally:
    stop.set()
    thread.join()
  # SIGINT to the launcher reached both (the first to end makes the launcher SIGTERM the
  # other, which may still be in its handler)
  out = capfd.readouterr().out
  assert "SIGINT in 0\n" in out and "SIGINT in 1\n" in out, out
  assert codes[0] in (130, -signal.SIGTERM) and codes[1] in (130, -signal.SIGTERM)
  assert 130 in codes
  assert {s: signal.getsignal(s) for s in before} == before


def test_a_lost_process_is_noticed_before_jax_heartbeat_timeout_aborts():
  """The watcher's bound (peer_failure.stale_after) from --distributed_timeout, by hand:
  heartbeat = min(max(10, t), 100); stale = max(3, min(15, heartbeat / 2)); always below the
  heartbeat timeout (whose end aborts the survivors) by at least 5 s."""
  from fedjax_sel.core import peer_failure

  by_hand = {1: (10, 5.0), 10: (10, 5.0), 30: (30, 15.0), 300: (100, 15.0), 5000: (100, 15.0)}
  for t, (heartbeat, stale) in by_hand.items():
    assert distributed.heartbeat_timeout(t) == heartbeat
    assert peer_failure.stale_after(heartbeat) == stale
  assert peer_failure.stale_after(4) == 3.0
  for t in range(1, 400):
    h = distributed.heartbeat_timeout(t)
    assert peer_failure.stale_after(h) + peer_failure.BEAT_S <= h - 4.5


# ---------------------------------------------------------------------- CPU collective timeouts
def test_cpu_collective_timeouts_are_added_and_a_users_own_is_kept(monkeypatch):
  monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
  out = distributed.relax_cpu_collective_timeouts(3600)
  assert out == (
    "--xla_dump_to=/tmp/x --xla_cpu_collective_call_terminate_timeout_seconds=3600"
    " --xla_cpu_collective_call_warn_stuck_timeout_seconds=60"
  )
  assert distributed.relax_cpu_collective_timeouts(5) == out  # both set now: nothing added
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_collective_call_terminate_timeout_seconds=7")
  assert distributed.relax_cpu_collective_timeouts(3) == (
    "--xla_cpu_collective_call_terminate_timeout_seconds=7"
    " --xla_cpu_collective_call_warn_stuck_timeout_seconds=1"  # 3 // 2
  )
  monkeypatch.delenv("XLA_FLAGS")
  assert distributed.relax_cpu_collective_timeouts(1).endswith("warn_stuck_timeout_seconds=1")
  for bad in (0, -5, 2.5, True, "60"):
    with pytest.raises(distributed.LaunchError, match=f"collective timeout {bad!r}; allowed"):
      distributed.relax_cpu_collective_timeouts(bad)


# device 1 reaches a psum `delay` s after device 0; the script sets the timeout through the
# package, as initialize(cpu_devices=2) does, before JAX starts its backend
_LATE_DEVICE = """
import sys, time
from fedjax_sel.core import distributed
timeout, delay = int(sys.argv[1]), float(sys.argv[2])
if timeout:
  distributed.relax_cpu_collective_timeouts(timeout)
distributed.initialize(cpu_devices=2, auto_detect=False)
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()), ("d",))
def late(x):
  if float(x[0]) == 1.0:
    time.sleep(delay)
  return x
def f(x):
  y = jax.pure_callback(late, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
  return jax.lax.psum(y, "d")
g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("d"), out_specs=P()))
print("sum", float(g(jnp.arange(2.0))[0]))
"""


@pytest.mark.parametrize("timeout,delay,finishes", [(1, 4.0, False), (30, 4.0, True)])
def test_xla_honours_the_cpu_collective_timeout_set_before_the_backend(timeout, delay, finishes):
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  proc = subprocess.run(
    [sys.executable, "-c", _LATE_DEVICE, str(timeout), str(delay)],
    capture_output=True,
    text=True,
    timeout=120,
    env=dict(env, JAX_PLATFORMS="cpu"),
    cwd=REPO,
  )
  if finishes:
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "sum 1.0" in proc.stdout
  else:  # XLA aborts the process after `timeout` s of waiting (SIGABRT)
    assert proc.returncode != 0 and "sum" not in proc.stdout
    assert "Termination timeout for `all reduce" in proc.stderr
    assert f"of {timeout} seconds exceeded" in proc.stderr


def test_initialize_with_several_cpu_devices_sets_the_long_timeout(monkeypatch):
  calls = []
  monkeypatch.setattr(distributed, "relax_cpu_collective_timeouts", lambda: calls.append(1))
  monkeypatch.setattr(distributed.jax.config, "update", lambda *a: None)
  distributed.initialize(cpu_devices=1, auto_detect=False)
  assert calls == []  # one device: no collective between devices
  distributed.initialize(cpu_devices=2, auto_detect=False)
  assert calls == [1]

"""Several processes, one run (issue 18): ``experiments.run`` over JAX's multi-controller
runtime, two processes with one CPU device each talking through gloo, against one process
with two devices. Every subprocess has a timeout, so a hang fails the test instead of CI."""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from fedjax_sel.core import distributed

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AUDIT_RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_audit_run.py")
TIMEOUT_S = 300  # any one launch; a hang fails the test
# a small MIFA-sized run: 20 clients (MIFA's [20, ...] memory is split 10 + 10 over the two
# devices), 4 per round, an evaluation and a checkpoint every 2 rounds
ARGS = [
  "--num_clients=20",
  "--clients_per_round=4",
  "--rounds=12",
  "--eval_every=2",
  "--noprogress",
  "--distributed_timeout=120",
]
RESULT_FILES = {"config.json", "metrics.jsonl", "summary.json", "curves.png"}


def _env(**extra):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO, **extra)
  env.pop("JAX_NUM_CPU_DEVICES", None)
  env.pop("XLA_FLAGS", None)
  return env


def _read(out):
  with open(os.path.join(out, "summary.json")) as f:
    summary = json.load(f)
  with open(os.path.join(out, "metrics.jsonl")) as f:
    history = [json.loads(line) for line in f]
  return summary, history


def run_one_process(out, args, cpu_devices=2):
  """``experiments.run`` in one process with ``cpu_devices`` CPU devices."""
  cmd = [sys.executable, "-m", "experiments.run", *args, f"--output_dir={out}"]
  cmd.append(f"--cpu_devices={cpu_devices}")
  done = subprocess.run(
    cmd, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S
  )
  assert done.returncode == 0, done.stderr[-3000:]
  return _read(out)


def run_two_processes(out, args, audit):
  """``experiments.run`` as two processes of one CPU device each (through the audit
  wrapper: ``audit`` gets one JSON file per process listing the files it wrote)."""
  os.makedirs(audit, exist_ok=True)
  codes = distributed.launch_local(
    2,
    [*args, f"--output_dir={out}"],
    module=AUDIT_RUN,
    cpu_devices=1,
    timeout_s=TIMEOUT_S,
    env=_env(FEDJAX_SEL_AUDIT=audit),
    log_dir=os.path.join(audit, "logs"),
  )
  assert codes == [0, 0], (codes, _tail(os.path.join(audit, "logs", "process_1.log")))
  written = {}
  for name in os.listdir(audit):
    if name.endswith(".json"):
      with open(os.path.join(audit, name)) as f:
        record = json.load(f)
      written[record["process"]] = record["written"]
  assert sorted(written) == [0, 1]
  return _read(out), written


def _tail(path, n=3000):
  try:
    with open(path) as f:
      return f.read()[-n:]
  except OSError:
    return ""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """Computed once per module, on first use: {(aggregator, "one" | "two"): result}."""
  cache = {}
  root = tmp_path_factory.mktemp("multiprocess")

  def get(aggregator, kind):
    key = (aggregator, kind)
    if key not in cache:
      out = str(root / f"{aggregator}_{kind}")
      args = [*ARGS, f"--aggregator={aggregator}"]
      if kind == "one":
        cache[key] = run_one_process(out, args)
      else:
        cache[key] = (out, *run_two_processes(out, args, str(root / f"{aggregator}_audit")))
    return cache[key]

  return get


def _same_run(a, b):
  """Two runs' results: identical sampling counts, test losses within 1e-5 at every
  evaluation."""
  (sa, ha), (sb, hb) = a, b
  assert sa["complete"] and sb["complete"]
  assert sa["sampling_counts"] == sb["sampling_counts"]
  assert sum(sa["sampling_counts"]) > 0
  assert [r["round"] for r in ha] == [r["round"] for r in hb]
  np.testing.assert_allclose(
    [r["test_loss"] for r in ha], [r["test_loss"] for r in hb], rtol=0, atol=1e-5
  )
  np.testing.assert_allclose(
    [r["train_loss"] for r in ha], [r["train_loss"] for r in hb], rtol=0, atol=1e-5
  )


@pytest.mark.parametrize(
  "aggregator",
  # MIFA (its [N, ...] memory split over the processes' devices) in the default run; FedAvg
  # (everything replicated but the cohort) with -m slow: each case is two launches, ~1 min
  [pytest.param("fedavg", marks=pytest.mark.slow), "mifa"],
)
def test_two_processes_equal_one_process_with_two_devices(runs, aggregator):
  out, two, written = runs(aggregator, "two")
  one = runs(aggregator, "one")
  _same_run(two, one)
  summary, history = two
  assert len(history) == 6  # one line per evaluation: nobody appended twice
  # only process 0 wrote files; process 1 wrote nothing under the output folder but its own
  # checkpoint shards (orbax: each process writes the shards it holds)
  out = os.path.realpath(out)

  def inside(paths):
    real = [os.path.realpath(p) for p in paths]
    return [os.path.relpath(r, out) for r in real if r.startswith(out + os.sep) or r == out]

  by_1 = [p for p in inside(written[1]) if not p.startswith("checkpoints" + os.sep)]
  assert by_1 == [], by_1
  by_0 = {p for p in inside(written[0]) if os.sep not in p}
  assert RESULT_FILES <= by_0, by_0
  assert RESULT_FILES <= set(os.listdir(out))
  assert os.path.isdir(os.path.join(out, "checkpoints", "orbax", "12"))


def _orbax_rounds(out):
  folder = os.path.join(out, "checkpoints", "orbax")
  return sorted(int(f) for f in os.listdir(folder) if f.isdigit()) if os.path.isdir(folder) else []


def test_resume_after_both_processes_are_killed(runs, tmp_path):
  """SIGKILL both processes mid-run, restart both with --resume: the results equal an
  uninterrupted two-process run's; so do those of one process with two devices resuming
  the same checkpoint."""
  out = str(tmp_path / "killed")
  args = [*ARGS, "--aggregator=mifa", f"--output_dir={out}"]
  commands = distributed.local_commands(2, args, cpu_devices=1)
  procs = [
    subprocess.Popen(c, env=_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for c in commands
  ]
  try:
    deadline = time.monotonic() + TIMEOUT_S
    while not _orbax_rounds(out) and time.monotonic() < deadline:
      assert all(p.poll() is None for p in procs), [p.returncode for p in procs]
      time.sleep(0.02)
  finally:
    for p in procs:
      if p.poll() is None:
        p.send_signal(signal.SIGKILL)
      p.wait(timeout=60)
  killed_at = _orbax_rounds(out)
  assert killed_at and killed_at[-1] < 12, killed_at  # killed mid-run
  # the second may have noticed the first's death and ended by itself (exit code 2)
  codes = [p.returncode for p in procs]
  assert codes[0] == -signal.SIGKILL and codes[1] in (-signal.SIGKILL, 2), codes
  summary = os.path.join(out, "summary.json")
  assert not os.path.exists(summary)
  # the same checkpoint resumed by one process with two devices (orbax read in one process)
  alone = str(tmp_path / "resumed_alone")
  shutil.copytree(out, alone)
  resumed_alone = run_one_process(alone, [a for a in args if "output_dir" not in a] + ["--resume"])
  codes = distributed.launch_local(
    2, [*args, "--resume"], cpu_devices=1, timeout_s=TIMEOUT_S, env=_env(),
    log_dir=str(tmp_path / "logs"),
  )  # fmt: skip
  assert codes == [0, 0], _tail(str(tmp_path / "logs" / "process_1.log"))
  _, uninterrupted, _ = runs("mifa", "two")
  resumed = _read(out)
  _same_run(resumed, uninterrupted)
  # resumed from the checkpoint, not rerun: equal bit for bit
  assert [r["test_loss"] for r in resumed[1]] == [r["test_loss"] for r in uninterrupted[1]]
  _same_run(resumed_alone, uninterrupted)


def _launch_fails(commands, timeout_s):
  """Runs the commands side by side; returns [(exit code, stderr)] and the seconds taken."""
  start = time.monotonic()
  procs = [
    subprocess.Popen(c, env=_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                     text=True)
    for c in commands
  ]  # fmt: skip
  results = []
  try:
    for p in procs:
      _, err = p.communicate(timeout=timeout_s)
      results.append((p.returncode, err))
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  return results, time.monotonic() - start


def _one_error_line(code, err):
  """Exit code 2 and one ``error:`` line on stderr, no traceback."""
  assert code == 2, err[-2000:]
  lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
  assert len(lines) == 1, err[-2000:]
  assert "Traceback" not in err and "Check failure" not in err, err[-2000:]
  return lines[0]


def _run_cmd(address, n, pid, timeout=5):
  return [sys.executable, "-m", "experiments.run", "--rounds=2", "--noprogress",
          "--output_dir=/nonexistent/never_written", f"--coordinator_address={address}",
          f"--num_processes={n}", f"--process_id={pid}",
          f"--distributed_timeout={timeout}"]  # fmt: skip


def test_wrong_process_id_fails_at_once():
  [(code, err)], seconds = _launch_fails([_run_cmd("127.0.0.1:1234", 2, 2)], 120)
  line = _one_error_line(code, err)
  assert "--process_id=2 is out of range; allowed: [0, 1]" in line


def test_unreachable_coordinator_fails_within_the_timeout():
  address = f"127.0.0.1:{distributed.free_port()}"  # nobody listens there
  [(code, err)], seconds = _launch_fails([_run_cmd(address, 2, 1, timeout=5)], 120)
  line = _one_error_line(code, err)
  assert f"process 1 of 2 did not come together with the others at {address} within 5 s" in line
  assert seconds < 60


def test_mismatched_process_counts_fail_in_every_process():
  address = f"127.0.0.1:{distributed.free_port()}"
  commands = [_run_cmd(address, 2, 0, timeout=20), _run_cmd(address, 3, 1, timeout=20)]
  results, seconds = _launch_fails(commands, 180)
  for code, err in results:
    line = _one_error_line(code, err)
    assert "different --num_processes ([2, 3])" in line
  assert seconds < 120


def test_processes_given_different_configs_fail_in_one_line():
  """Every process loads its own data: a process given another config (here another
  --data_seed) would train on other data; all of them stop with one line instead."""
  address = f"127.0.0.1:{distributed.free_port()}"
  commands = [_run_cmd(address, 2, 0, timeout=60), _run_cmd(address, 2, 1, timeout=60)]
  commands[1].append("--data_seed=1")
  results, _ = _launch_fails(commands, 180)
  for code, err in results:
    assert "the config differs between processes (processes [1] disagree" in _one_error_line(
      code, err
    )


@pytest.mark.slow
def test_sigterm_to_one_process_stops_both_at_the_same_round(runs, tmp_path):
  """SIGTERM reaches process 0 only: both processes stop after the same block of rounds,
  write one checkpoint together and exit as interrupted; --resume then finishes the run
  with the uninterrupted run's results."""
  out = str(tmp_path / "stopped")
  args = [*ARGS, "--aggregator=mifa", f"--output_dir={out}"]
  procs = [
    subprocess.Popen(c, env=_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                     text=True)
    for c in distributed.local_commands(2, args, cpu_devices=1)
  ]  # fmt: skip
  try:
    deadline = time.monotonic() + TIMEOUT_S
    while not _orbax_rounds(out) and time.monotonic() < deadline:
      time.sleep(0.02)
    procs[0].send_signal(signal.SIGTERM)
    errs = [p.communicate(timeout=TIMEOUT_S)[1] for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  assert [p.returncode for p in procs] == [128 + signal.SIGTERM] * 2, errs[1][-2000:]
  stopped_at = {int(e.split("after round ")[1].split(";")[0]) for e in errs}
  assert len(stopped_at) == 1 and _orbax_rounds(out)[-1] == stopped_at.pop() < 12
  codes = distributed.launch_local(
    2, [*args, "--resume"], cpu_devices=1, timeout_s=TIMEOUT_S, env=_env(),
    log_dir=str(tmp_path / "logs"),
  )  # fmt: skip
  assert codes == [0, 0]
  _, uninterrupted, _ = runs("mifa", "two")
  _same_run(_read(out), uninterrupted)


# ------------------------------------------------------------------ a lost process (issue 42)
# longer than ARGS: a process is killed mid-run, and the survivor must still be running
LOST_ARGS = [
  "--num_clients=20",
  "--clients_per_round=4",
  "--rounds=40",
  "--eval_every=2",
  "--checkpoint_every=4",
  "--noprogress",
  "--aggregator=mifa",
  "--distributed_timeout=30",  # JAX's heartbeat timeout 30 s; a process is lost after 15 s
]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("lost") / "uninterrupted")
  logs = os.path.join(out + "_logs")
  codes = distributed.launch_local(
    2, [*LOST_ARGS, f"--output_dir={out}"], cpu_devices=1, timeout_s=TIMEOUT_S, env=_env(),
    log_dir=logs,
  )  # fmt: skip
  assert codes == [0, 0], _tail(os.path.join(logs, "process_1.log"))
  return _read(out)


def _tmp_checkpoints(out):
  folder = os.path.join(out, "checkpoints", "orbax")
  return [f for f in os.listdir(folder) if "tmp" in f] if os.path.isdir(folder) else []


def _start_two(out, tmp_path, extra=()):
  commands = distributed.local_commands(2, [*LOST_ARGS, f"--output_dir={out}", *extra])
  errs = [open(tmp_path / f"stderr_{i}.txt", "w+") for i in range(2)]  # noqa: SIM115
  procs = [
    subprocess.Popen(c, env=_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=e)
    for c, e in zip(commands, errs)
  ]
  return procs, errs


def _survivor_reports(procs, errs, victim, killed_at):
  """The survivor's exit code, its stderr's last line and the seconds it took to end."""
  survivor = procs[1 - victim]
  try:
    survivor.wait(timeout=120)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  seconds = time.monotonic() - killed_at
  errs[1 - victim].seek(0)
  err = errs[1 - victim].read()
  for e in errs:
    e.close()
  lines = [ln for ln in err.splitlines() if ln.strip()]
  assert survivor.returncode == 2, err[-3000:]
  for bad in ("Traceback", "Fatal Python error", "Check failure", "Aborted"):
    assert bad not in err, err[-3000:]
  assert lines and lines[-1].startswith("error: "), err[-3000:]
  assert sum(ln.startswith("error:") for ln in lines) == 1, err[-3000:]
  return lines[-1], seconds


def _relaunch_from(line, survivor, out, tmp_path):
  """Relaunches both processes with the command the survivor printed (its own, with
  --resume; the other process's differs only in --process_id; a fresh port, as the old one
  may still be held by the lost coordinator's child for a few seconds)."""
  args = _resume_args(line)
  assert args[1:3] == ["-m", "experiments.run"], args
  assert "--resume" in args and f"--process_id={survivor}" in args and f"--output_dir={out}" in args
  launch = ("--coordinator_address", "--process_id", "--num_processes", "--cpu_devices")
  keep = [a for a in args[3:] if not a.startswith(launch)]
  codes = distributed.launch_local(
    2, keep, cpu_devices=1, timeout_s=TIMEOUT_S, env=_env(), log_dir=str(tmp_path / "logs")
  )
  assert codes == [0, 0], _tail(str(tmp_path / "logs" / "process_1.log"))
  return _read(out)


def _resume_args(line):
  """The command in the script the error line names (``resume: sh <script>``): the survivor's
  own, with --resume, run from the folder it ran in."""
  script = shlex.split(line.split("resume: sh ", 1)[1].rsplit(" (details: ", 1)[0])[0]
  with open(script) as f:
    last = f.read().splitlines()[-1]
  cd, command = last.split(" && exec ", 1)
  assert shlex.split(cd) == ["cd", REPO], cd
  return shlex.split(command)


def _bound_s():
  from fedjax_sel.core import peer_failure

  return peer_failure.stale_after(distributed.heartbeat_timeout(30)) + 2 * peer_failure.BEAT_S


@pytest.mark.parametrize(
  "victim",
  # process 0 (it writes the results and hosts the coordinator) in the default run; process
  # 1 with -m slow: killing process 1 and resuming exactly is also
  # test_a_process_killed_while_a_checkpoint_is_written's and the launch_local test's case
  [0, pytest.param(1, marks=pytest.mark.slow)],
)
def test_a_killed_process_ends_the_other_with_one_line_and_the_relaunch_resumes_exactly(
  uninterrupted, tmp_path, victim
):
  """kill -9 one process mid-run (process 1, or process 0: the one that writes the results
  and hosts the coordinator): the other exits with code 2 within the bound, its last stderr
  line names the lost process, the last checkpoint and the command that resumes it; the
  relaunch with --resume ends with the uninterrupted run's metrics, bit for bit."""
  out = str(tmp_path / "run")
  procs, errs = _start_two(out, tmp_path)
  deadline = time.monotonic() + TIMEOUT_S
  while not _orbax_rounds(out) and time.monotonic() < deadline:
    assert all(p.poll() is None for p in procs), [p.returncode for p in procs]
    time.sleep(0.005)
  procs[victim].send_signal(signal.SIGKILL)
  killed_at = time.monotonic()
  line, seconds = _survivor_reports(procs, errs, victim, killed_at)
  assert seconds < _bound_s() + 10, seconds  # + the time to start the survivor's exit
  last = _orbax_rounds(out)[-1]
  assert last < 40
  assert f"process {victim} of 2 was lost" in line, line
  assert f"the last checkpoint is round {last} in {out}" in line, line
  assert f"details: {out}/process_{1 - victim}.log" in line, line
  assert not os.path.exists(os.path.join(out, "summary.json"))
  resumed = _relaunch_from(line, 1 - victim, out, tmp_path)
  _same_run(resumed, uninterrupted)
  assert [r["test_loss"] for r in resumed[1]] == [r["test_loss"] for r in uninterrupted[1]]
  assert [r["train_loss"] for r in resumed[1]] == [r["train_loss"] for r in uninterrupted[1]]


def test_a_process_killed_while_a_checkpoint_is_written(uninterrupted, tmp_path):
  """Process 1 stopped (SIGSTOP) while orbax writes a checkpoint, seen unfinished, then
  killed: process 0, waiting for it inside the checkpoint, ends with code 2 and one line;
  the half-written checkpoint is never used, and the relaunch resumes exactly."""
  out = str(tmp_path / "run")
  procs, errs = _start_two(out, tmp_path)
  deadline = time.monotonic() + TIMEOUT_S
  caught = None
  while caught is None and time.monotonic() < deadline:
    assert all(p.poll() is None for p in procs), [p.returncode for p in procs]
    if _tmp_checkpoints(out):
      procs[1].send_signal(signal.SIGSTOP)
      time.sleep(0.5)  # process 0 cannot finish the checkpoint without process 1
      caught = _tmp_checkpoints(out)
      if not caught:  # it had finished its part already: let it go, catch the next one
        procs[1].send_signal(signal.SIGCONT)
        caught = None
        while _tmp_checkpoints(out) and time.monotonic() < deadline:
          time.sleep(0.001)
    time.sleep(0.001)
  assert caught, "no checkpoint was caught half-written"
  procs[1].send_signal(signal.SIGKILL)
  line, seconds = _survivor_reports(procs, errs, 1, time.monotonic())
  assert seconds < _bound_s() + 10, seconds
  finished = _orbax_rounds(out)
  half = int(caught[0].split(".")[0])
  assert half not in finished and half > (finished[-1] if finished else 0), (caught, finished)
  assert "process 1 of 2 was lost" in line, line
  where = f"the last checkpoint is round {finished[-1]} in {out}" if finished else "no checkpoint"
  assert where in line, line
  assert f"details: {out}/process_0.log" in line, line
  assert not os.path.exists(os.path.join(out, "summary.json"))
  resumed = _relaunch_from(line, 0, out, tmp_path)
  assert [r["test_loss"] for r in resumed[1]] == [r["test_loss"] for r in uninterrupted[1]]
  assert [r["train_loss"] for r in resumed[1]] == [r["train_loss"] for r in uninterrupted[1]]


@pytest.mark.parametrize(
  "rounds,eval_every,checkpoints",
  # the 3,000-round run with 30 checkpoints with -m slow (~40 s on two idle cores); in
  # the default run 10 checkpoints in 20 rounds (orbax's ~50 lines per checkpoint or JAX's
  # start-up lines would still be far above the bound of 10)
  [pytest.param(3000, 50, 30, marks=pytest.mark.slow), (20, 2, 10)],
)
def test_a_long_two_process_run_logs_at_most_a_line_per_checkpoint(
  tmp_path, rounds, eval_every, checkpoints
):
  """The issue's MIFA run (30 checkpoints): besides the progress bar, at most one log line
  per checkpoint on either process's stderr (orbax's ~50 INFO lines per checkpoint and
  JAX's are off), and no Python traceback or C++ trace."""
  out = str(tmp_path / "long")
  args = ["--aggregator=mifa", f"--rounds={rounds}", f"--eval_every={eval_every}",
          f"--checkpoint_every={rounds // checkpoints}", "--progress",
          f"--output_dir={out}"]  # fmt: skip
  procs, errs = [], []
  for i, c in enumerate(distributed.local_commands(2, args)):
    errs.append(open(tmp_path / f"stderr_{i}.txt", "w+"))  # noqa: SIM115
    procs.append(subprocess.Popen(c, env=_env(), cwd=REPO, stdout=subprocess.DEVNULL,
                                  stderr=errs[-1]))  # fmt: skip
  try:
    codes = [p.wait(timeout=TIMEOUT_S) for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  texts = []
  for e in errs:
    e.seek(0)
    texts.append(e.read())
    e.close()
  assert codes == [0, 0], texts[0][-3000:]
  assert _orbax_rounds(out)[-1] == rounds
  for text in texts:
    pieces = [p.strip() for p in re.split(r"[\r\n]", text) if p.strip()]
    lines = [p for p in pieces if not re.search(r"\d+%\|", p)]  # tqdm's bar, redrawn with \r
    assert len(lines) <= checkpoints, lines[:40]
    assert "Traceback" not in text and "Check failure" not in text


def _pid_of(*parts):
  """The pid of the process whose command line holds every one of ``parts`` (Linux)."""
  for name in os.listdir("/proc"):
    if name.isdigit():
      try:
        with open(f"/proc/{name}/cmdline", "rb") as f:
          cmd = f.read().decode(errors="replace").split("\0")
      except OSError:
        continue
      if all(p in cmd for p in parts):
        return int(name)
  return None


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the process through /proc")
def test_launch_local_reports_a_killed_process_and_its_command_resumes(uninterrupted, tmp_path):
  """``python -m experiments.launch_local``: process 1 killed mid-run; the launcher ends
  the others, exits with code 2 and one last ``error:`` line naming process 1, the last
  checkpoint and its own command with --resume, which finishes the run exactly."""
  out = str(tmp_path / "run")
  cmd = [sys.executable, "-m", "experiments.launch_local", "--num_processes=2",
         f"--process_logs={tmp_path / 'logs'}", "--", *LOST_ARGS,
         f"--output_dir={out}"]  # fmt: skip
  launcher = subprocess.Popen(cmd, env=_env(), cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
  try:
    deadline = time.monotonic() + TIMEOUT_S
    while not _orbax_rounds(out) and time.monotonic() < deadline:
      assert launcher.poll() is None, launcher.stderr.read()[-3000:]
      time.sleep(0.005)
    os.kill(_pid_of("--process_id=1", f"--output_dir={out}"), signal.SIGKILL)
    _, err = launcher.communicate(timeout=120)
  finally:
    if launcher.poll() is None:
      launcher.kill()
      launcher.wait()
  assert launcher.returncode == 2, err[-3000:]
  lines = [ln for ln in err.splitlines() if ln.strip()]
  assert lines[-1].startswith("error: process 1 of 2 ended with exit code -9 (killed by SIGKILL)")
  assert "Traceback" not in err and "Check failure" not in err, err[-3000:]
  last = _orbax_rounds(out)[-1]
  assert f"the last checkpoint: round {last} in {out}" in lines[-1], lines[-1]
  command = shlex.split(lines[-1].split("resume with: ", 1)[1])
  assert command[:3] == ["python", "-m", "experiments.launch_local"] and command[-1] == "--resume"
  done = subprocess.run([sys.executable, *command[1:]], env=_env(), cwd=REPO,
                        capture_output=True, text=True, timeout=TIMEOUT_S)  # fmt: skip
  assert done.returncode == 0, done.stderr[-3000:]
  resumed = _read(out)
  assert [r["test_loss"] for r in resumed[1]] == [r["test_loss"] for r in uninterrupted[1]]


def test_a_process_that_fails_by_itself_ends_both_with_one_line_each(tmp_path):
  """Process 1 raises at its 4th stop check (round ~6; process 0 would go on): it ends
  with code 2 and one line naming its error; process 0, whose next collective would wait,
  ends with code 2 and one line naming process 1 and its reason; no traceback, no hang."""
  out = str(tmp_path / "run")
  commands = distributed.local_commands(
    2, [*LOST_ARGS, f"--output_dir={out}"], module=os.path.join(os.path.dirname(AUDIT_RUN),
                                                               "_failing_run.py"))  # fmt: skip
  env = _env(FEDJAX_SEL_FAIL_PROCESS="1", FEDJAX_SEL_FAIL_AT="4")
  results = []  # (a hang would end at communicate's timeout)
  procs = [subprocess.Popen(c, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True) for c in commands]  # fmt: skip
  try:
    for p in procs:
      results.append((p.returncode, p.communicate(timeout=180)[1]))
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  (_, err0), (_, err1) = results
  codes = [p.returncode for p in procs]
  assert codes == [2, 2], (codes, err0[-2000:], err1[-2000:])
  line1 = _one_error_line(2, err1)
  assert line1.startswith("error: process 1 of 2 failed (RuntimeError: injected failure"), line1
  line0 = _one_error_line(2, err0)
  assert line0.startswith("error: process 1 of 2 was lost (it failed with RuntimeError: "
                          "injected failure"), line0  # fmt: skip
  assert "--resume" in _resume_args(line0) and "--process_id=0" in _resume_args(line0)
  assert len(line0) < 200 + 3 * len(out), line0  # the cause is short; the folder named thrice
  assert [ln for ln in err0.splitlines() if ln.strip()][-1] == line0
  assert os.path.exists(os.path.join(out, "process_1.log"))  # the traceback went there
  with open(os.path.join(out, "process_1.log")) as f:
    assert "Traceback" in f.read()

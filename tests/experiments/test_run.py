"""experiments/run.py: output files; bad input gives one line naming it and exit code 2.

Most bad inputs are checked in-process with ``run.config_from_argv`` (the same checks the
binary runs before anything else); a handful of real subprocess runs prove the exit code
and that no traceback is printed. The list is in BUILD_NOTES.md ("Input validation").
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from experiments import run as run_lib
from fedjax_sel import data, experiment
from fedjax_sel.core import checkpoint
from fedjax_sel.metrics import results

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args, timeout=300):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.run(
    [sys.executable, "-m", "experiments.run", "--progress=false", *args],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


def test_run_writes_results(tmp_path):
  out = tmp_path / "run"
  p = run(
    "--rounds=6",
    "--eval_every=3",
    "--num_clients=8",
    "--clients_per_round=3",
    "--selection=fedgs",
    "--selection_alpha=1.0",
    "--availability=ln",
    "--availability_beta=0.5",
    "--local_steps=2",
    f"--output_dir={out}",
  )
  assert p.returncode == 0, p.stderr[-2000:]
  assert "| round | test loss |" in p.stdout
  lines = (out / "metrics.jsonl").read_text().splitlines()
  records = [json.loads(x) for x in lines]
  assert [r["round"] for r in records] == [3, 6]
  for key in ("round", "test_loss", "test_accuracy", "train_loss", "seconds"):
    assert key in records[0]
  summary = json.loads((out / "summary.json").read_text())
  for key in (
    "final_test_loss",
    "final_test_accuracy",
    "best_test_loss",
    "rounds",
    "seconds_per_round",
    "useful_step_fraction",
    "sampling_counts",
  ):
    assert key in summary
  assert summary["rounds"] == 6 and len(summary["sampling_counts"]) == 8
  assert sum(summary["sampling_counts"]) <= 6 * 3
  assert summary["complete"] is True and summary["stopped"] is None
  # compile time: the first block's time minus 3 rounds at the second block's rate
  steady = (records[1]["seconds"] - records[0]["seconds"]) / 3
  assert summary["compile_seconds"] == pytest.approx(max(0.0, records[0]["seconds"] - 3 * steady))
  assert 0.0 <= summary["compile_seconds"] <= records[0]["seconds"]
  assert summary["parallelism"] in ("lanes", "flat", "chunked")
  config = json.loads((out / "config.json").read_text())
  assert config["config"]["selection_hparams"] == {"alpha": 1.0}
  assert config["environment"]["jax"] and config["environment"]["devices"]
  assert (out / "curves.png").stat().st_size > 1000
  assert checkpoint.latest_round(str(out)) == 6


def test_global_train_loss_flag(tmp_path):
  """--global_train_loss puts the global model's mean loss / accuracy over every client's
  training examples on each metrics line (checked with numpy on the final model); the
  config field and the flag are one; it may change on --resume (the rounds are the same)."""
  out = tmp_path / "run"
  args = ["--rounds=4", "--eval_every=2", "--num_clients=8", "--clients_per_round=3"]
  args += ["--local_steps=2", "--progress=false", f"--output_dir={out}"]
  assert run_lib.config_from_argv(["run.py", *args]).global_train_loss is False
  c = run_lib.config_from_argv(["run.py", *args, "--global_train_loss"])
  assert c.global_train_loss is True
  experiment.run(c, write_plots=False)
  records = results.read_jsonl(str(out / "metrics.jsonl"))
  assert [r["round"] for r in records] == [2, 4]
  state, _ = checkpoint.restore(str(out), experiment.build(c)[0].init(0))
  dense = {k: np.asarray(v, np.float64) for k, v in state.params["Dense_0"].items()}
  ds = data.load("synthetic", 8, seed=0, alpha=0.5, beta=0.5)
  logits = ds.train.x.astype(np.float64) @ dense["kernel"] + dense["bias"]
  logp = logits - logits.max(1, keepdims=True)
  logp -= np.log(np.exp(logp).sum(1, keepdims=True))
  y = ds.train.y
  last = records[-1]
  assert last["global_train_loss"] == pytest.approx(-logp[np.arange(len(y)), y].mean(), rel=1e-5)
  assert last["global_train_accuracy"] == pytest.approx(np.mean(logits.argmax(1) == y), abs=1e-6)
  assert "global_train_loss" in records[0]
  # resumed without the flag: the later lines lack the keys, the run continues
  c2 = run_lib.config_from_argv(["run.py", *args, "--rounds=6", "--resume"])
  experiment.run(c2, write_plots=False)
  records = results.read_jsonl(str(out / "metrics.jsonl"))
  assert [("global_train_loss" in r) for r in records] == [True, True, False]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  """Config files and availability traces, good and bad."""
  d = tmp_path_factory.mktemp("inputs")
  paths = {}

  def write(name, text):
    paths[name] = str(d / name)
    with open(paths[name], "w") as f:
      f.write(text)

  write("syntax.py", "def get_config(:\n")
  write("no_get_config.py", "X = 1\n")
  write(
    "unknown_field.py",
    "import ml_collections\ndef get_config():\n  c = ml_collections.ConfigDict()\n"
    "  c.roundz = 5\n  return c\n",
  )
  write(
    "wrong_type.py",
    "import ml_collections\ndef get_config():\n  c = ml_collections.ConfigDict()\n"
    "  c.rounds = 'many'\n  return c\n",
  )
  write(
    "good.py",
    "import ml_collections\ndef get_config():\n  c = ml_collections.ConfigDict()\n"
    "  c.rounds = 7\n  c.num_clients = 9\n  return c\n",
  )
  write(
    "gtl_str.py",
    "import ml_collections\ndef get_config():\n  c = ml_collections.ConfigDict()\n"
    "  c.global_train_loss = 'yes'\n  return c\n",
  )
  write("trace.txt", "1,0\n")
  paths["twos.npy"] = str(d / "twos.npy")
  np.save(paths["twos.npy"], np.full((3, 30), 2))
  paths["flat.npy"] = str(d / "flat.npy")
  np.save(paths["flat.npy"], np.ones(30, bool))
  paths["narrow.npy"] = str(d / "narrow.npy")
  np.save(paths["narrow.npy"], np.ones((3, 5), bool))
  paths["a_file"] = str(d / "a_file")
  write("a_file", "not a folder")
  paths["missing"] = str(d / "does_not_exist")
  return paths


# (arguments, substrings of the one-line message). {name} is a path from ``files``.
BAD_INPUTS = [
  (["--model=resnet"], ["unknown model 'resnet'", "logreg"]),
  (["--dataset=imagenet"], ["unknown dataset 'imagenet'", "synthetic"]),
  (["--partition=random"], ["unknown partition 'random'", "dirichlet"]),
  (["--selection=fedgss"], ["unknown selection 'fedgss'; known selection names", "fedgs"]),
  (["--availability=sometimes"], ["unknown availability 'sometimes'", "bernoulli"]),
  (["--aggregator=median"], ["unknown aggregator 'median'", "fedavg"]),
  (["--client_update=adam"], ["unknown client_update 'adam'", "fedprox"]),
  (["--server_optimizer=lamb"], ["server_optimizer 'lamb'", "yogi"]),
  (["--parallelism=gpu"], ["parallelism 'gpu'", "vmap"]),
  (["--clients_per_round=50"], ["clients_per_round=50 is out of range", "num_clients=30"]),
  (["--num_clients=0"], ["num_clients=0 is out of range", "[1, inf]"]),
  (["--rounds=0"], ["rounds=0 is out of range"]),
  (["--eval_every=0"], ["eval_every=0 is out of range"]),
  (["--client_lr=-0.1"], ["client_lr=-0.1 is out of range", "(0.0, inf]"]),
  (["--client_lr=nan"], ["client_lr=nan is out of range"]),
  (["--server_lr=inf"], ["server_lr=inf is out of range", "finite"]),
  (["--server_lr=0"], ["server_lr=0.0 is out of range"]),
  (["--lr_decay=1.5"], ["lr_decay=1.5 is out of range", "(0.0, 1.0]"]),
  (["--client_momentum=1"], ["client_momentum=1.0 is out of range", "[0.0, 1.0)"]),
  (["--client_momentum=-0.5"], ["client_momentum=-0.5 is out of range"]),
  (["--client_weight_decay=-0.001"], ["client_weight_decay=-0.001 is out of range", "[0.0"]),
  (["--client_weight_decay=inf"], ["client_weight_decay=inf is out of range"]),
  (["--lr_schedule=cosine"], ["lr_schedule 'cosine'", "exponential, step"]),
  (["--lr_schedule_unit=epoch"], ["lr_schedule_unit 'epoch'", "round, participation"]),
  (["--model=mlp", "--mlp_hidden=0"], ["mlp_hidden=0 is out of range"]),
  (["--aggregator_weighting='size'"], ["weighting='size' is not allowed", "'uniform'"]),
  (["--lr_schedule=step"], ["lr_step_size=0 is out of range", "integers >= 1"]),
  (["--lr_schedule=step", "--lr_step_size=10", "--lr_step_gamma=0"], ["lr_step_gamma=0.0"]),
  (["--lr_schedule=step", "--lr_step_size=10", "--lr_step_gamma=2"], ["lr_step_gamma=2.0"]),
  (["--lr_step_size=2.5"], ["flag --lr_step_size=2.5"]),
  (["--lr_step_size=-3"], ["lr_step_size=-3 is out of range"]),
  (["--lr_step_gamma=1.5"], ["lr_step_gamma=1.5 is out of range", "(0.0, 1.0]"]),
  (["--batch_size=0"], ["batch_size=0 is out of range"]),
  (["--local_epochs=0"], ["local_epochs=0 is out of range"]),
  (["--local_steps=-1"], ["local_steps=-1 is out of range"]),
  (["--examples_per_client=-5"], ["examples_per_client=-5 is out of range"]),
  (["--partition_alpha=0"], ["partition_alpha=0.0 is out of range"]),
  (["--test_fraction=1"], ["test_fraction=1.0 is out of range", "[0.0, 1.0)"]),
  (["--seed=-1"], ["seed=-1 is out of range", "[0, inf]"]),
  (["--availability_seed=-2"], ["availability_seed=-2 is out of range", "[-1, inf]"]),
  (["--availability=ln", "--availability_beta=1.5"], ["beta=1.5", "[0.0, 1.0)"]),
  (["--availability=ln", "--availability_beta=-0.1"], ["beta=-0.1"]),
  (["--selection=fedgs", "--selection_alpha='x'"], ["alpha='x' is not a number"]),
  (["--selection=power_of_choice", "--selection_d=0"], ["d=0"]),
  (["--selection_alpha=1"], ["do not belong to selection 'uniform'", "none"]),
  (["--no_such_flag=1"], ["no_such_flag"]),
  (["--rounds=1.5"], ["flag --rounds=1.5"]),
  (["--client_lr=abc"], ["flag --client_lr=abc"]),
  (["positional"], ["unexpected arguments ['positional']"]),
  (["--dataset=mnist", "--data_dir={missing}"], ["data_dir=", "does_not_exist", "not a folder"]),
  (["--output_dir={a_file}"], ["output_dir=", "is a file"]),
  (["--config={missing}"], ["--config:", "does_not_exist"]),
  (["--config={syntax.py}"], ["--config: invalid syntax (syntax.py"]),
  (["--config={no_get_config.py}"], ["--config:", "get_config"]),
  (["--config={unknown_field.py}"], ["unknown config field(s) ['roundz']", "rounds"]),
  (["--config={wrong_type.py}"], ["--config:", "rounds", "many"]),
  (["--config={good.py}", "--config.roundz=3"], ["--config.roundz: no such field"]),
  (
    ["--config={good.py}", "--config.rounds=3", "--config.rounds=4"],
    ["--config.rounds is given 2 times; allowed: once"],
  ),
  (["--config={good.py}", "--config.rounds=many"], ["flag --config.rounds=many"]),
  (["--availability=trace"], ["trace=None", ".npy/.csv"]),
  (["--availability=trace", "--availability_trace={missing}.npy"], ["cannot read", "trace"]),
  (["--availability=trace", "--availability_trace={trace.txt}"], ["allowed: .npy, .csv"]),
  (["--availability=trace", "--availability_trace={twos.npy}"], ["[2, 2, 2, 2, 2]", "0 or 1"]),
  (["--availability=trace", "--availability_trace={flat.npy}"], ["shape (30,)", "[T, N]"]),
  (["--synthetic_recipe=leaf"], ["unknown synthetic_recipe 'leaf'", "fedprox, fedgs"]),
  (["--global_train_loss=maybe"], ["flag --global_train_loss=maybe"]),
  (["--config={gtl_str.py}"], ["--config:", "global_train_loss", "yes"]),
  (
    ["--synthetic_recipe=fedgs", "--synthetic_beta=1.0"],
    ["synthetic_beta=1.0", "synthetic_alpha == synthetic_beta"],
  ),
]


def _fill(args, files):
  out = []
  for a in args:
    for name, path in files.items():
      a = a.replace("{" + name + "}", path)
    out.append(a)
  return out


def test_at_least_twenty_bad_inputs_are_listed():
  assert len(BAD_INPUTS) >= 40
  assert len({tuple(a) for a, _ in BAD_INPUTS}) == len(BAD_INPUTS)


@pytest.mark.parametrize("args,expected", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_gives_one_line_naming_it(files, tmp_path, args, expected):
  argv = ["run.py", *_fill(args, files)]
  if not any(a.startswith("--output_dir") for a in argv):
    argv.append(f"--output_dir={tmp_path / 'out'}")
  with pytest.raises(run_lib.UsageError) as err:
    run_lib.config_from_argv(argv)
  message = str(err.value)
  assert "\n" not in message
  for text in expected:
    assert text in message, message


def test_good_config_file_and_overrides_resolve(files, tmp_path):
  config = run_lib.config_from_argv(
    [
      "run.py",
      f"--config={files['good.py']}",
      "--config.rounds=11",
      "--num_clients=12",
      f"--output_dir={tmp_path}",
    ]
  )
  assert (config.rounds, config.num_clients, config.clients_per_round) == (11, 12, 6)


def test_all_clients_empty_is_a_config_error(tmp_path):
  empty = data.split_from_lists([np.zeros((0, 3), np.float32)] * 4, [np.zeros(0, np.int32)] * 4)
  test = data.split_from_lists([np.zeros((1, 3), np.float32)] * 4, [np.zeros(1, np.int32)] * 4)
  dataset = data.FederatedData(empty, test, test.x, test.y, 2, "empty")
  c = experiment.default_config()
  c.num_clients, c.clients_per_round = 4, 2
  with pytest.raises(experiment.ConfigError, match="all of its 4 clients have 0 training"):
    experiment.run(c, str(tmp_path), dataset=dataset)


@pytest.mark.parametrize(
  "args,message",
  [
    (["--clients_per_round=50"], "clients_per_round=50 is out of range"),
    (["--no_such_flag=1"], "no_such_flag"),
    (["--config=/no/such/config.py"], "No such file or directory"),
    # Found only once the data exist (N = 8 clients vs a 5-column trace): the run phase.
    (
      [
        "--num_clients=8",
        "--clients_per_round=2",
        "--availability=trace",
        "--availability_trace={narrow.npy}",
      ],
      "has shape (3, 5) ([T, N]) but ClientInfo has 8 clients",
    ),
  ],
)
def test_bad_input_exit_code_2_without_traceback(files, tmp_path, args, message):
  p = run(*_fill(args, files), "--rounds=2", f"--output_dir={tmp_path / 'bad'}", timeout=180)
  assert p.returncode == 2, (p.returncode, p.stderr[-1500:])
  assert "Traceback" not in p.stderr
  errors = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1 and message in errors[0], p.stderr[-1500:]


def test_non_finite_model_message_and_exit_code_1(tmp_path, capsys, monkeypatch):
  out = str(tmp_path / "run")
  run_lib.config_from_argv(["run.py", "--progress=false", f"--output_dir={out}"])

  def diverge(config, progress=None):
    raise experiment.NonFiniteModelError(5, config.output_dir)

  monkeypatch.setattr(experiment, "run", diverge)
  with pytest.raises(SystemExit) as exit_info:
    run_lib.main(["run.py"])
  assert exit_info.value.code == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert err == [
    f"error: the global model became non-finite at round 5; results up to round 5 are in "
    f"{out}; lower client_lr or server_lr"
  ]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_overflowing_server_lr_stops_with_exit_1_and_results(tmp_path, capsys):
  """server_lr = 1e39 overflows float32: the model is inf after round 1's update."""
  out = tmp_path / "run"
  run_lib.config_from_argv(
    [
      "run.py",
      "--num_clients=8",
      "--clients_per_round=3",
      "--rounds=10",
      "--eval_every=5",
      "--local_steps=2",
      "--server_lr=1e39",
      "--progress=false",
      f"--output_dir={out}",
    ]
  )
  with pytest.raises(SystemExit) as exit_info:
    run_lib.main(["run.py"])
  assert exit_info.value.code == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1].startswith("error: the global model became non-finite at round 5;")
  summary = json.loads((out / "summary.json").read_text())
  assert summary["stopped"] == "non-finite model" and summary["complete"] is False
  assert summary["rounds"] == 5
  assert [r["round"] for r in results.read_jsonl(str(out / "metrics.jsonl"))] == [5]
  assert checkpoint.latest_round(str(out)) is None  # a broken model is not checkpointed


# The first processor's block of /proc/cpuinfo on two hosts (trimmed): an x86 one and an ARM one.
X86_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse4_1 sse4_2 avx f16c avx2 fma bmi2

processor\t: 1
cpu family\t: 99
model name\t: not the first block
flags\t\t: avx512f
"""
ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes sve
CPU architecture: 8
CPU part\t: 0xd40
"""


def test_environment_records_the_cpu_from_the_first_processor_block():
  """config.json's environment names the CPU (model, family, model number, and the SIMD
  extensions that decide XLA:CPU's kernels), because runs are bit for bit equal only on
  hosts that agree here; the values come from the first processor's block."""
  assert experiment.cpu_info(X86_CPUINFO) == {
    "model": "AMD EPYC",
    "family": "25",
    "model_number": "1",
    "simd": ["sse4_2", "avx", "avx2", "fma"],
  }
  arm = experiment.cpu_info(ARM_CPUINFO)
  assert (arm["family"], arm["model_number"], arm["simd"]) == ("8", "0xd40", ["asimd", "sve"])
  assert arm["model"]  # no "model name" line: platform's name for the machine
  assert experiment.cpu_info("")["simd"] == []
  assert experiment.environment()["cpu"] == experiment.cpu_info()

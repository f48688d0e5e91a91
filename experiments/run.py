r"""Runs one federated experiment: any dataset x model x availability x selection x aggregator.

  python -m experiments.run --rounds=100 --output_dir=runs/quickstart
  python -m experiments.run --selection=fedgs --selection_alpha=1 --availability=ln \
      --availability_beta=0.5 --output_dir=runs/fedgs_ln
  python -m experiments.run --config=experiments/configs/fedgs_synthetic.py \
      --config.rounds=50 --output_dir=runs/cfg

Every config field is a flag; flags given on the command line win over ``--config``.
Component hyper-parameters are ``--<part>_<name>`` (e.g. ``--availability_beta``); only the
chosen component's own hyper-parameters may be set. Writes config.json, metrics.jsonl,
summary.json, curves.png and checkpoints/ to --output_dir. Exit code 2 on bad input.
"""

from __future__ import annotations

import ast
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from experiments import startup
from experiments.common import UsageError, parse_flags, parse_or_raise
from fedjax_sel import experiment
from fedjax_sel.core import distributed
from fedjax_sel.metrics import results

HELP = {
  "dataset": "dataset name: synthetic (built-in, offline), digits, mnist, fashion_mnist, "
  "cifar10, svhn_cropped, stl10, emnist",
  "partition": "how examples are split over clients: natural (Synthetic), iid, dirichlet, "
  "shards, lognormal, size_groups, clustered, easyfl_quantity ('' = natural/iid)",
  "model": "model name: logreg, mlp, cnn_mnist, cnn_cifar, cnn_stl10, resnet18",
  "mlp_hidden": "width of the hidden layer of --model=mlp (one layer; >= 1)",
  "param_init": "initial parameters: flax (lecun_normal kernels, zero biases) or torch "
  "(PyTorch's Conv2d/Linear defaults: kernels and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)), "
  "as the papers' released code)",
  "half_precision": "compute the model's forward and backward pass in bfloat16 over float32 "
  "parameters; optimizer state, aggregation and the server's step stay float32 (fast on hosts "
  "with bfloat16 matrix units: docs/performance.md, 'Half precision')",
  "num_clients": "N, number of clients",
  "clients_per_round": "M, cohort slots per round (1..N)",
  "examples_per_client": "give every client exactly this many training examples (0 = the "
  "dataset's or partition's own sizes)",
  "rounds": "communication rounds to run",
  "eval_every": "evaluate (and write a metrics line) every this many rounds",
  "local_steps": "K local SGD steps per client (wins over --local_epochs; 0 = use epochs)",
  "local_epochs": "E passes over the client's data (when --local_steps is 0)",
  "batch_size": "B, local minibatch size",
  "client_lr": "client learning rate (> 0)",
  "lr_decay": "client lr at round t = client_lr * lr_decay**t, in (0, 1] "
  "(--lr_schedule=exponential)",
  "client_optimizer": "sgd or momentum (momentum alone means --client_momentum=0.9)",
  "client_momentum": "client SGD momentum in [0, 1) (PyTorch SGD's; 0 = none)",
  "client_weight_decay": "client L2 weight decay >= 0, coupled (PyTorch SGD's weight_decay: "
  "g + wd * params before momentum)",
  "lr_schedule": "client lr schedule over rounds: exponential (client_lr * lr_decay**t) or "
  "step (client_lr * lr_step_gamma**(t // lr_step_size), PyTorch StepLR)",
  "lr_step_size": "rounds per lr step of --lr_schedule=step (>= 1; required there)",
  "lr_step_gamma": "lr factor per step of --lr_schedule=step, in (0, 1]",
  "lr_schedule_unit": "what t of the lr schedule counts: round (the round index, one lr for "
  "the cohort) or participation (each client's own count of earlier local trainings, a "
  "per-client PyTorch scheduler as in FedEMD's code)",
  "server_lr": "server learning rate (> 0); FedAvg is sgd with 1.0",
  "server_optimizer": "sgd (FedAvg), momentum, adam (FedAdam), yogi (FedYogi), adagrad",
  "availability": "client availability model (registry name)",
  "selection": "client selection strategy (registry name)",
  "aggregator": "aggregation rule (registry name)",
  "client_update": "local update rule: sgd, fedprox, scaffold, fedsgd",
  "seed": "model/training seed",
  "availability_seed": "separate seed of availability draws (-1 = same as --seed)",
  "data_seed": "seed of the data generator / partition",
  "synthetic_alpha": "Synthetic(alpha, beta): model heterogeneity (>= 0)",
  "synthetic_beta": "Synthetic(alpha, beta): input heterogeneity (>= 0)",
  "synthetic_recipe": "Synthetic generator: fedprox (our draw of FedProx's recipe, 90/10 "
  "local split) or fedgs (the FedGS paper's exact instance: easyFL's generator, seed 97 + "
  "data_seed, 75/15/10 train/local-test/global-test split)",
  "partition_alpha": "Dirichlet concentration of the dirichlet partition (> 0)",
  "labels_per_client": "labels per client of the shards partition",
  "num_groups": "groups of the clustered partition",
  "test_fraction": "share of each client's examples kept as its local test set",
  "label_rule": "labels of --partition=easyfl_quantity (easyFL's generator, FedGS's "
  "Fashion-MNIST task): least_used (each label among the least held so far; equal sizes) or "
  "index_mod (client i holds label i % C plus random ones; sizes vary)",
  "input_normalization": "model inputs of image datasets: unit (pixels / 255, in [0, 1]) or "
  "standardize ((x - input_mean) / input_std on every split, as the FedGS code)",
  "input_mean": "mean of --input_normalization=standardize (MNIST's 0.1307, the FedGS code's)",
  "input_std": "std of --input_normalization=standardize (> 0; MNIST's 0.3081)",
  "data_dir": "folder of MNIST/Fashion-MNIST IDX files or a TFDS data_dir (no download; "
  "'' = search $FEDJAX_SEL_DATA, /usr/share/datasets, Keras/torchvision caches)",
  "parallelism": "how the cohort trains: auto, vmap, map, chunked, lanes",
  "chunk_size": "clients per chunk (chunked) or lanes per device (lanes); 0 = 8",
  "sketch_dim": "dimension of the random projection of client updates for similarity",
  "checkpoint_every": "rounds between checkpoints (0 = at every evaluation)",
  "output_dir": "folder for config.json, metrics.jsonl, summary.json, plots, checkpoints",
  "resume": "continue from the newest checkpoint in --output_dir",
  "tensorboard": "also write TensorBoard event files into --output_dir (every evaluated metric "
  "per round; with --seeds, one run per seed<k>/): tensorboard --logdir runs/ (needs "
  'pip install -e ".[tensorboard]")',
  "global_train_loss": "also evaluate the global model on every client's training split at "
  "each evaluation: global_train_loss / global_train_accuracy in metrics.jsonl (over all "
  "training examples, each counted once; the training loss the papers plot)",
  "client_accuracy": "evaluate the global model on every client's local test split at each "
  "evaluation: client_acc_mean / _var / _worst10 / _best10 in metrics.jsonl (--noclient_accuracy "
  "skips that pass)",
}

startup.import_from_argv()  # --import: the user's methods are registered before the flags
startup.define_flags()  # --import, --compilation_cache
_DEFAULTS = experiment.default_config()
_FLAG_NAMES = []
for _name, _value in _DEFAULTS.items():
  if _name.endswith("_hparams"):
    continue
  _help = HELP.get(_name, _name)
  if isinstance(_value, bool):
    flags.DEFINE_bool(_name, _value, _help)
  elif isinstance(_value, int):
    flags.DEFINE_integer(_name, _value, _help)
  elif isinstance(_value, float):
    flags.DEFINE_float(_name, _value, _help)
  else:
    flags.DEFINE_string(_name, _value, _help)
  _FLAG_NAMES.append(_name)

_HPARAM_FLAGS: dict[str, tuple[str, str]] = {}
for _part, _module in experiment.PARTS.items():
  _owners: dict[str, list[str]] = {}
  for _comp in _module.names():
    for _hp in _module.REGISTRY.hparams(_comp):
      if _hp != "num_selected":
        _owners.setdefault(_hp, []).append(_comp)
  for _hp, _comps in sorted(_owners.items()):
    _flag = f"{_part}_{_hp}"
    if _flag in _FLAG_NAMES or _flag in _HPARAM_FLAGS:
      continue
    flags.DEFINE_string(
      _flag, None, f"hyper-parameter {_hp!r} of {_part} {', '.join(_comps)} (Python literal)"
    )
    _HPARAM_FLAGS[_flag] = (_part, _hp)

distributed.define_flags()  # --coordinator_address, --num_processes, --process_id, ...
flags.DEFINE_bool("quick", False, "a few rounds only (smoke test)")
flags.DEFINE_string(
  "seeds",
  "",
  "comma-separated seeds run as one vectorized program (e.g. 0,1,2,3): seed k writes its "
  "usual files under --output_dir/seed<k>/ (availability seed k unless --availability_seed "
  "is set); --output_dir gets a combined summary.json (mean, std) and curves.png; "
  "'' = one run with --seed",
)
flags.DEFINE_bool("progress", True, "show a progress bar")
flags.DEFINE_enum(
  "batch_loop",
  "map",
  ["map", "vmap"],
  "how --seeds runs its experiments in the one program: map (one after another inside it; "
  "bit for bit the single runs) or vmap (vectorized, for accelerators and large K; equal "
  "up to float rounding)",
)
_CONFIG = config_flags.DEFINE_config_file("config", None, "an ml_collections config file")
FLAGS = flags.FLAGS


def _literal(text: str):
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def resolve_config():
  """Defaults <- --config file <- flags given on the command line."""
  config = experiment.default_config()
  try:
    given = _CONFIG.value
    keys = None if given is None else set(given.keys())
  except KeyError as e:  # --config.<field>=... naming no field of the file's config
    raise ValueError(f"--config.{e.args[0]}: no such field in the --config file") from None
  except Exception as e:  # the file could not be read/imported (OSError, SyntaxError, ...)
    raise ValueError(f"--config: {experiment.one_line(e)}") from None
  if given is not None:
    unknown = sorted(keys - set(config.keys()))
    if unknown:
      raise ValueError(f"unknown config field(s) {unknown}; known: {sorted(config.keys())}")
    try:
      config.update(given)
    except (TypeError, ValueError, KeyError) as e:
      raise ValueError(f"--config: {experiment.one_line(e)}") from None
  for name in _FLAG_NAMES:
    if FLAGS[name].present:
      config[name] = FLAGS[name].value
  for flag, (part, hp) in _HPARAM_FLAGS.items():
    if FLAGS[flag].present:
      config[part + "_hparams"][hp] = _literal(FLAGS[flag].value)
  for part, module in experiment.PARTS.items():
    if config[part] not in module.names():
      continue  # validate_config names it
    allowed = set(module.REGISTRY.hparams(config[part])) - {"num_selected"}
    bad = sorted(set(config[part + "_hparams"].keys()) - allowed)
    if bad:
      raise ValueError(
        f"hyper-parameter(s) {bad} do not belong to {part} {config[part]!r}; "
        f"its hyper-parameters: {sorted(allowed) or 'none'}"
      )
  if FLAGS.quick:
    config.rounds = min(config.rounds, 20)
    config.eval_every = min(config.eval_every, 5)
  if not config.output_dir:
    config.output_dir = "runs/latest"
  return config


def config_from_argv(argv: list[str]):
  """Parses ``argv`` (argv[0] is the program), resolves and validates the config.

  The in-process equivalent of the binary's checks before it runs anything.

  Raises:
    UsageError: a one-line message naming the bad value and what is allowed.
  """
  old_argv = sys.argv
  sys.argv = list(argv)  # ml_collections finds --config.<field> overrides in sys.argv
  try:
    for name in list(FLAGS):  # --config.<field> overrides are defined anew at each parse
      if name.startswith("config."):
        delattr(FLAGS, name)
    sys.modules.pop("config_config", None)  # the module ml_collections imports the file as
    FLAGS.unparse_flags()
    rest = parse_or_raise(argv)
    return check_config(rest)
  finally:
    sys.argv = old_argv


def check_config(rest):
  """Resolves and validates the config of parsed flags; UsageError on bad input."""
  if len(rest) > 1:
    raise UsageError(f"unexpected arguments {rest[1:]}; allowed: --flag=value only")
  try:
    config = resolve_config()
    experiment.validate_config(config)
    experiment.make_components(config)
    if FLAGS.seeds:
      experiment.parse_seeds(FLAGS.seeds)
      if FLAGS["seed"].present:
        raise ValueError("--seed and --seeds are both given; allowed: one of them")
  except (ValueError, TypeError) as e:
    raise UsageError(experiment.one_line(e)) from None
  return config


def _progress_bar(total):
  try:
    from tqdm import tqdm
  except ImportError:  # pragma: no cover
    return None
  bar = tqdm(total=total, unit="round", file=sys.stderr, disable=not FLAGS.progress)

  def update(done, total_, record):
    bar.n = done
    bar.set_postfix(
      loss=f"{record['test_loss']:.4f}", acc=f"{record['test_accuracy']:.3f}", refresh=False
    )
    bar.refresh()

  update.close = bar.close
  return update


def main(argv):
  try:
    distributed.initialize_from_flags()  # before JAX starts its backend
  except distributed.LaunchError as e:
    distributed.fail(str(e), 2)
  try:
    config = check_config(argv)
  except UsageError as e:
    distributed.fail(str(e), 2)
  bar = _progress_bar(config.rounds) if distributed.is_primary() else None
  seeds = experiment.parse_seeds(FLAGS.seeds) if FLAGS.seeds else None
  try:
    if seeds is not None:
      summary = experiment.run_seeds(config, seeds, progress=bar, loop=FLAGS.batch_loop)
    else:
      summary = experiment.run(config, progress=bar)
  except experiment.ConfigError as e:
    distributed.fail(experiment.one_line(e), 2)
  except experiment.Interrupted as e:
    if bar is not None:
      bar.close()
    print(
      f"\n{e}; checkpoint and results are in {config.output_dir} (continue with --resume)",
      file=sys.stderr,
    )
    sys.exit(128 + e.signum)
  except experiment.NonFiniteModelError as e:
    distributed.fail(str(e), 1)
  except results.WriteError as e:  # a full disk: the file, what it is, what is kept
    distributed.fail(str(e), 1)
  except KeyboardInterrupt:
    kept = f"the newest checkpoint in {config.output_dir} is kept (--resume)"
    distributed.fail(f"interrupted; {kept}", 130)
  finally:
    if bar is not None:
      bar.close()
  if not distributed.is_primary():
    return
  if seeds is not None:
    _print_seeds(config, seeds, summary)
    return
  history = results.read_jsonl(f"{config.output_dir}/metrics.jsonl")
  step = max(1, len(history) // 10)
  rows = [
    [r["round"], r["test_loss"], 100 * r["test_accuracy"], r["train_loss"]]
    for r in history[::step] + ([history[-1]] if (len(history) - 1) % step else [])
  ]
  print(
    results.markdown_table(
      ["round", "test loss", "test acc (%)", "train loss"],
      rows,
      f"{config.dataset} / {config.model}: {config.selection} selection, {config.availability} "
      f"availability, {config.aggregator} aggregation",
    )
  )
  print(
    f"final test loss {summary['final_test_loss']:.4f}, best {summary['best_test_loss']:.4f}, "
    f"final accuracy {100 * summary['final_test_accuracy']:.2f} %, "
    f"{1000 * summary['seconds_per_round']:.1f} ms/round, useful-step fraction "
    f"{summary['useful_step_fraction']:.3f}"
    + (
      f", compilation ~{summary['compile_seconds']:.1f} s"
      if summary.get("compile_seconds") is not None
      else ""
    )
  )
  print(f"results: {config.output_dir}/ (metrics.jsonl, summary.json, curves.png)")
  logging.info("done")


def _print_seeds(config, seeds, summary):
  rows = [
    [s, loss, best, 100 * acc]
    for s, loss, best, acc in zip(
      seeds,
      summary["final_test_loss"]["values"],
      summary["best_test_loss"]["values"],
      summary["final_test_accuracy"]["values"],
    )
  ]
  print(
    results.markdown_table(
      ["seed", "final test loss", "best test loss", "final test acc (%)"],
      rows,
      f"{config.dataset} / {config.model}: {config.selection} selection, "
      f"{config.availability} availability, {len(seeds)} seeds in one program",
    )
  )
  m = {k: summary[k]["mean"] for k in ("final_test_loss", "best_test_loss", "final_test_accuracy")}
  sd = {k: summary[k]["std"] for k in m}
  print(
    f"mean over seeds: final test loss {m['final_test_loss']:.4f} ± {sd['final_test_loss']:.4f}, "
    f"best {m['best_test_loss']:.4f} ± {sd['best_test_loss']:.4f}, final accuracy "
    f"{100 * m['final_test_accuracy']:.2f} ± {100 * sd['final_test_accuracy']:.2f} %; "
    f"{summary['seconds']:.1f} s in all"
  )
  print(f"results: {config.output_dir}/ (summary.json, curves.png; seed<k>/ for each seed)")


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)

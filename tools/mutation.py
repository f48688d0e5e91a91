"""Mutation testing of one package with cosmic-ray: each mutant runs only its module's tests.

Usage (from the repository root; needs ``pip install cosmic-ray==8.7.0``, see BUILD_NOTES,
issue 22)::

  python tools/mutation.py availability                 # every file of the package
  python tools/mutation.py availability --files yc.py   # some of its files
  python tools/mutation.py core --files evaluation.py --report-only

What it does, per source file ``fedjax_sel/<package>/<file>.py``:

* works in a git worktree of HEAD (``--workdir``, default /tmp/fedjax_sel-mutation):
  cosmic-ray writes each mutant into the source file, so never point it at a working tree
  others use;
* writes a cosmic-ray config whose ``test-command`` runs, under ``nice -n 19`` and
  ``JAX_PLATFORMS=cpu``, only the tests of that module (``TESTS`` below; by default the
  package's folder ``tests/<package>``) with ``-x``, so a killed mutant stops at its first
  failing test;
* keeps the usual one-token mutations (``+``/``-``, ``*``/``/``, ``<``/``<=``, ``==``/``!=``,
  ``&``/``|``, ``True``/``False``, ``and``/``or``, numbers +-1, ``not`` added or removed,
  ``break``/``continue``, zero-iteration loops) and drops cosmic-ray's exhaustive operator
  cross products, ``RemoveDecorator`` (removing ``jax.jit`` is an equivalent mutant) and the
  variable replacers;
* runs ``cosmic-ray init``, the operator filter, ``exec`` (one fresh process per mutant: JAX's
  compilation caches and threads never carry a mutant over) and writes
  ``<workdir>/mutation/<package>/<file>.{sqlite,txt}`` and a summary table of
  killed / survived / timeouts per file.

Equivalent mutants are listed with a one-line reason each in BUILD_NOTES (issue 22); the
score is killed / (total - equivalent).
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import glob
import json
import os
import queue
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("core", "aggregation", "selection", "availability")

# Tests of each package (paths relative to the repository root): its own folder, and for
# core the library-validation tests (make_server_optimizer, Simulation's checks).
PACKAGE_TESTS = {
  "core": ["tests/core", "tests/test_library_validation.py"],
  "aggregation": ["tests/aggregation"],
  "selection": ["tests/selection"],
  "availability": ["tests/availability"],
}
# Narrower lists for single modules (a file not listed runs its package's tests).
TESTS = {
  "availability/yc.py": [
    "tests/availability/test_round_boundaries.py",
    "tests/availability/test_availability_fedgs.py",
  ],
  "availability/sln.py": [
    "tests/availability/test_round_boundaries.py",
    "tests/availability/test_sln_reference_code.py",
    "tests/availability/test_availability_fedgs.py",
  ],
  "availability/ymf.py": [
    "tests/availability/test_round_boundaries.py",
    "tests/availability/test_availability_fedgs.py",
  ],
  "availability/ldf.py": [
    "tests/availability/test_round_boundaries.py",
    "tests/availability/test_availability_fedgs.py",
  ],
  "availability/mdf.py": [
    "tests/availability/test_round_boundaries.py",
    "tests/availability/test_availability_fedgs.py",
  ],
  "availability/trace.py": [
    "tests/availability/test_round_boundaries.py",
    "tests/availability/test_availability_cluster_trace.py",
  ],
  "availability/cluster_dropout.py": [
    "tests/availability/test_availability_cluster_trace.py",
    "tests/availability/test_availability_contract.py",
    "tests/test_library_validation.py",
  ],
  # base.py serves every model: all the package's files, the ones that pin it first.
  "availability/base.py": [
    "tests/availability/test_sln_reference_code.py",
    "tests/availability/test_availability_sampling.py",
    "tests/availability/test_round_boundaries.py",
    "tests/availability/test_availability_cluster_trace.py",
    "tests/availability/test_availability_fedgs.py",
    "tests/availability/test_availability_contract.py",
    "tests/availability/test_availability_visualize.py",
  ],
  "availability/visualize.py": ["tests/availability/test_availability_visualize.py"],
  # core: fast value tests first (-x stops a killed mutant at its first failure).
  "core/evaluation.py": [
    "tests/core/test_metric_values.py",
    "tests/core/test_data_arguments.py",
  ],
  "core/registry.py": ["tests/core/test_registry.py", "tests/test_library_validation.py"],
  "core/types.py": ["tests/core/test_registry.py", "tests/core/test_reference_round.py"],
  "core/batch.py": ["tests/core/test_batch.py"],
  # the multi-process resume test covers the branch of arrays no process fully holds
  "core/checkpoint.py": [
    "tests/test_robustness.py",
    "tests/experiments/test_multiprocess.py",
  ],
  "core/simulation.py": [
    "tests/test_library_validation.py",
    "tests/core/test_reference_round.py",
    "tests/core/test_metric_values.py",
    "tests/core/test_client_optimizer.py",
    "tests/core/test_simulation.py",
    "tests/core/test_data_arguments.py",
    "tests/core/test_client_test_losses.py",
  ],
  "core/engine/__init__.py": [
    "tests/test_library_validation.py",
    "tests/core/test_reference_round.py",
    "tests/core/test_engine.py",
    "tests/core/test_data_arguments.py",
    "tests/core/test_client_optimizer.py",
    "tests/core/test_client_test_losses.py",
    "tests/core/test_simulation.py",
    # last: the placement branches only a run of two processes takes
    "tests/experiments/test_multiprocess.py",
  ],
  # in-process value tests first; the multi-process runs reach initialize's joining branch
  "core/distributed.py": [
    "tests/core/test_distributed.py",
    "tests/experiments/test_multiprocess.py",
  ],
  "aggregation/fedar.py": [
    "tests/aggregation/test_reference_aggregators.py",
    "tests/aggregation/test_aggregation_fedar.py",
    "tests/aggregation/test_aggregation_contract.py",
  ],
  "aggregation/mifa.py": [
    "tests/aggregation/test_reference_aggregators.py",
    "tests/aggregation/test_mifa.py",
    "tests/aggregation/test_aggregation_contract.py",
  ],
  "selection/uniform.py": ["tests/selection/test_contract.py", "tests/selection/test_common.py"],
  "selection/full.py": ["tests/selection/test_contract.py", "tests/selection/test_common.py"],
  "selection/md.py": ["tests/selection/test_contract.py", "tests/selection/test_common.py"],
  "selection/fedemd.py": [
    "tests/selection/test_selection_fedemd.py",
    "tests/selection/test_contract.py",
  ],
  "selection/common.py": ["tests/selection/test_common.py", "tests/selection/test_contract.py"],
  "selection/power_of_choice.py": [
    "tests/selection/test_power_of_choice.py",
    "tests/selection/test_contract.py",
  ],
  "selection/clustered.py": [
    "tests/selection/test_clustered.py",
    "tests/selection/test_contract.py",
  ],
  "selection/shapley.py": ["tests/selection/test_shapley.py", "tests/selection/test_contract.py"],
  "selection/fedgs.py": [
    "tests/selection/test_fedgs_parts.py",
    "tests/selection/test_fedgs.py",
    "tests/selection/test_fedgs_rebuild.py",
    "tests/selection/test_contract.py",
  ],
}

# ``-k`` expressions: the shared contract tests run every strategy; a strategy's own module
# needs only its own parametrizations of them (the rest cannot see its mutants).
# the engine's package (was core/engine.py): every file with the engine's tests; the round's
# pieces split from core/simulation.py with the round's tests
for _f in ("chunked", "config", "cost", "flat", "lanes", "local", "reference", "sharding"):
  TESTS[f"core/engine/{_f}.py"] = TESTS["core/engine/__init__.py"]
for _f in ("optimizers", "state", "finite"):
  TESTS[f"core/{_f}.py"] = TESTS["core/simulation.py"]

CONTRACT_TESTS = {"selection": "test_contract", "aggregation": "test_aggregation_contract"}
KEYWORDS = {
  f"{package}/{stem}.py": f"not {contract} or {stem}"
  for package, contract in CONTRACT_TESTS.items()
  for stem in sorted(
    f[:-3]
    for f in os.listdir(os.path.join(ROOT, "fedjax_sel", package))
    if f.endswith(".py") and f[:-3] not in ("__init__", "_common", "common", "registry")
  )
}

KEEP_BINARY = (
  "Add_Sub|Sub_Add|Mul_Div|Div_Mul|FloorDiv_Div|Mod_FloorDiv|Pow_Mul|"
  "BitAnd_BitOr|BitOr_BitAnd|BitXor_BitAnd|LShift_RShift|RShift_LShift"
)
KEEP_COMPARISON = (
  "Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt|Eq_NotEq|NotEq_Eq|Is_IsNot|IsNot_Is|In_NotIn|NotIn_In"
)
KEEP_UNARY = "USub_UAdd|Delete_Not|Delete_Invert|Delete_USub"
EXCLUDE_OPERATORS = [
  f"core/ReplaceBinaryOperator_(?!({KEEP_BINARY})$)",
  f"core/ReplaceComparisonOperator_(?!({KEEP_COMPARISON})$)",
  f"core/ReplaceUnaryOperator_(?!({KEEP_UNARY})$)",
  "core/RemoveDecorator",
  "core/VariableReplacer",
  "core/VariableInserter",
  "core/ExceptionReplacer",
]


def run(cmd, cwd, **kw):
  return subprocess.run(cmd, cwd=cwd, check=True, text=True, **kw)


def worktree(workdir: str, fresh: bool) -> str:
  if fresh and os.path.isdir(workdir):
    run(["git", "worktree", "remove", "--force", workdir], ROOT)
  if not os.path.isdir(workdir):
    run(["git", "worktree", "add", "--detach", workdir, "HEAD"], ROOT, stdout=subprocess.DEVNULL)
  return workdir


def git_head(tree: str) -> str:
  return subprocess.run(
    ["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True, check=True
  ).stdout.strip()


def restore_sources(wt: str) -> None:
  """Puts the package sources back as HEAD has them. cosmic-ray writes each mutant into the
  source and restores it afterwards, but a run killed hard (SIGKILL, a session's end)
  leaves its last mutant in the file, and ``git checkout`` to another commit keeps it:
  every later mutant, of that module or of another one tested in the same worktree, would
  then run on top of it."""
  if subprocess.run(["git", "diff", "--quiet", "--", "fedjax_sel"], cwd=wt).returncode:
    print(f"fedjax_sel restored in {wt} (an interrupted run left a mutant there)", flush=True)
    run(["git", "checkout", "-q", "--", "fedjax_sel"], wt)


def compile_cache_env(cache_dir: str | None) -> dict[str, str]:
  """The persistent XLA compilation cache shared by a file's test runs (none: {})."""
  if not cache_dir:
    return {}
  return {
    "JAX_COMPILATION_CACHE_DIR": cache_dir,
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
  }


def measure_coverage(wt, python, module, tests, keyword, data_file, cache_dir) -> None:
  """Runs the module's tests once, unmutated, under coverage with one context per test
  (pytest-cov's ``--cov-context=test``): ``tools/mutation_tests.py`` then runs, for each
  mutant, only the tests that executed its lines."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", COVERAGE_FILE=data_file)
  env.update(compile_cache_env(cache_dir))
  cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--cov-context=test"]
  cmd += [f"--cov={os.path.dirname(module)}", "--cov-report=", *tests]
  cmd += ["-k", keyword] if keyword else []
  start = time.time()
  done = subprocess.run(["nice", "-n", "19", *cmd], cwd=wt, env=env, text=True, capture_output=True)
  if done.returncode != 0:  # the unmutated tests must pass: show what failed
    tail = (done.stdout + done.stderr)[-4000:]
    raise SystemExit(f"{module}: the unmutated tests failed under coverage in {wt}:\n{tail}")
  print(f"{module}: coverage of {len(tests)} test files in {time.time() - start:.0f} s", flush=True)


def config_text(
  module: str,
  tests: list[str],
  python: str,
  timeout: float,
  cache_dir: str | None = None,
  keyword: str | None = None,
  coverage_data: str | None = None,
) -> str:
  # A persistent XLA compilation cache shared by the mutants of a file: its key is the
  # compiled program (HLO), so a mutant that changes what a test traces compiles afresh and
  # one that does not (input checks, Python-side code) reuses the unmutated programs.
  # Measured: test_common.py + test_contract.py 33 s without it, 11 s with a warm cache.
  cache = [f"{k}={v}" for k, v in compile_cache_env(cache_dir).items()]
  command = " ".join(
    [
      "nice",
      "-n",
      "19",
      "env",
      "JAX_PLATFORMS=cpu",
      "XLA_PYTHON_CLIENT_PREALLOCATE=false",
      *cache,
      python,
      *(
        ["tools/mutation_tests.py", "--module", module, "--coverage-data", coverage_data, "--"]
        if coverage_data
        else ["-m", "pytest"]
      ),
      "-x",
      "-q",
      "-p",
      "no:cacheprovider",
      *tests,
    ]
    + (["-k", shlex.quote(keyword)] if keyword else [])
  )
  excludes = ", ".join(json.dumps(e) for e in EXCLUDE_OPERATORS)
  return (
    "[cosmic-ray]\n"
    f'module-path = "{module}"\n'
    f"timeout = {timeout}\n"
    "excluded-modules = []\n"
    f"test-command = {json.dumps(command)}\n\n"
    "[cosmic-ray.distributor]\n"
    'name = "local"\n\n'
    "[cosmic-ray.filters.operators-filter]\n"
    f"exclude-operators = [{excludes}]\n"
  )


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
  """The (start, end) positions (row from 1, column from 0) of every type annotation of a
  module that has ``from __future__ import annotations`` (none otherwise: there an
  annotation is evaluated when its function is defined, and a mutant of it can fail)."""
  tree = ast.parse(source)
  future = any(
    isinstance(n, ast.ImportFrom)
    and n.module == "__future__"
    and any(a.name == "annotations" for a in n.names)
    for n in tree.body
  )
  if not future:
    return []
  nodes = []
  for n in ast.walk(tree):
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
      nodes.append(n.returns)
      a = n.args
      for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
        nodes.append(arg.annotation if arg else None)
    elif isinstance(n, ast.AnnAssign):
      nodes.append(n.annotation)  # not its value: ``x: int = 10`` mutates 10
  return [
    ((n.lineno, n.col_offset), (n.end_lineno, n.end_col_offset)) for n in nodes if n is not None
  ]


def skip_annotation_mutants(session: str, source_path: str) -> int:
  """Marks the session's pending mutants inside type annotations as skipped (equivalent:
  with postponed evaluation an annotation is never evaluated); returns how many."""
  with open(source_path) as fh:
    spans = annotation_spans(fh.read())
  if not spans:
    return 0
  with sqlite3.connect(session) as db:
    pending = db.execute(
      "SELECT job_id, start_pos_row, start_pos_col FROM mutation_specs "
      "WHERE job_id NOT IN (SELECT job_id FROM work_results)"
    ).fetchall()
    skip = [job for job, row, col in pending if any(a <= (row, col) < b for a, b in spans)]
    db.executemany(
      "INSERT INTO work_results (worker_outcome, output, test_outcome, diff, job_id) "
      "VALUES ('SKIPPED', 'In a type annotation (never evaluated)', NULL, NULL, ?)",
      [(job,) for job in skip],
    )
  return len(skip)


# The placeholder result a session holds for a mutant another shard runs (``--shards``).
SHARD_PLACEHOLDER = "Run by another shard (tools/mutation.py --shards)"


def shard_sessions(session: str) -> list[str]:
  """The shard copies of ``session`` an earlier ``--shards`` run left (in its shard trees)."""
  stem = os.path.splitext(session)[0]
  return sorted(glob.glob(f"{stem}.shard*.sqlite"))


def merge_shards(session: str, shards: list[str]) -> int:
  """Copies into ``session`` every result its shard copies hold for the mutants it left to
  them, then deletes the placeholders still there (those mutants are pending again) and the
  copies; returns how many results were copied. Safe after an interrupted run: what a shard
  finished is kept, the rest runs again. A copy without cosmic-ray's results table (e.g. an
  empty file that opening a deleted copy with sqlite3 creates) holds no result."""
  copied = 0
  with sqlite3.connect(session) as db:
    for shard in shards:
      db.execute("ATTACH DATABASE ? AS shard", (shard,))
      if not db.execute(
        "SELECT 1 FROM shard.sqlite_master WHERE type = 'table' AND name = 'work_results'"
      ).fetchone():
        db.execute("DETACH DATABASE shard")
        continue
      rows = db.execute(
        "SELECT s.worker_outcome, s.output, s.test_outcome, s.diff, s.job_id "
        "FROM shard.work_results s JOIN work_results m ON s.job_id = m.job_id "
        "WHERE m.output = ? AND s.output IS NOT ?",
        (SHARD_PLACEHOLDER, SHARD_PLACEHOLDER),
      ).fetchall()
      db.executemany(
        "REPLACE INTO work_results (worker_outcome, output, test_outcome, diff, job_id) "
        "VALUES (?, ?, ?, ?, ?)",
        rows,
      )
      copied += len(rows)
      db.commit()
      db.execute("DETACH DATABASE shard")
    db.execute("DELETE FROM work_results WHERE output = ?", (SHARD_PLACEHOLDER,))
  for shard in shards:
    os.remove(shard)
  return copied


def split_pending(session: str, copies: list[str]) -> None:
  """Deals ``session``'s pending mutants round-robin (in line order, so each shard gets a
  mix of cheap and costly lines) to ``session`` and its ``copies``: each file gets a
  placeholder result for the mutants the others run, so ``cosmic-ray exec`` skips them."""
  with sqlite3.connect(session) as db:
    pending = [
      job
      for (job,) in db.execute(
        "SELECT job_id FROM mutation_specs WHERE job_id NOT IN "
        "(SELECT job_id FROM work_results) ORDER BY start_pos_row, start_pos_col, job_id"
      )
    ]
  for copy in copies:
    shutil.copyfile(session, copy)
  k = len(copies) + 1
  for j, path in enumerate([session, *copies]):
    with sqlite3.connect(path) as db:
      db.executemany(
        "INSERT INTO work_results (worker_outcome, output, test_outcome, diff, job_id) "
        "VALUES ('SKIPPED', ?, NULL, NULL, ?)",
        [(SHARD_PLACEHOLDER, job) for i, job in enumerate(pending) if i % k != j],
      )


def counts(session: str, cr_bin: str) -> dict:
  """killed / survived / incompetent / pending from ``cosmic-ray dump``."""
  out = subprocess.run(
    [os.path.join(cr_bin, "cosmic-ray"), "dump", session],
    capture_output=True,
    text=True,
    check=True,
  ).stdout
  c = {
    "total": 0,
    "killed": 0,
    "survived": 0,
    "timeout": 0,
    "other": 0,
    "pending": 0,
    "skipped": 0,
    "survivors": [],
  }
  for line in out.splitlines():
    item, result = json.loads(line)
    if result is None:
      c["pending"] += 1
      continue
    if result.get("worker_outcome") == "skipped":
      c["skipped"] += 1
      continue
    c["total"] += 1
    outcome = result.get("test_outcome")
    if outcome == "killed":
      c["killed"] += 1
      if result.get("output") == "timeout":
        c["timeout"] += 1
    elif outcome == "survived":
      c["survived"] += 1
      for m in item["mutations"]:
        c["survivors"].append(
          f"{m['module_path']}:{m['start_pos'][0]} {m['operator_name']} #{m['occurrence']}"
        )
    else:
      c["other"] += 1
  return c


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("package", choices=PACKAGES)
  p.add_argument("--files", nargs="*", help="file names in the package (default: all)")
  p.add_argument("--workdir", default="/tmp/fedjax_sel-mutation")
  p.add_argument("--fresh", action="store_true", help="recreate the worktree from HEAD")
  p.add_argument("--python", default=os.path.join(ROOT, ".venv-test", "bin", "python"))
  p.add_argument(
    "--cosmic-ray-bin",
    default=os.path.dirname(shutil.which("cosmic-ray") or ""),
    help="folder of the cosmic-ray executables",
  )
  p.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant")
  p.add_argument("--report-only", action="store_true", help="summarize existing sessions")
  p.add_argument(
    "--rerun-survivors",
    action="store_true",
    help="move the worktrees to HEAD and run again only the survivors of the "
    "existing sessions (after adding tests; refused for a source file that changed)",
  )
  p.add_argument(
    "--lines",
    type=int,
    nargs="+",
    help="with --rerun-survivors: only the survivors on these lines of the (one) file "
    "(the lines new tests target; the other survivors keep their result)",
  )
  p.add_argument(
    "--resume",
    action="store_true",
    help="continue existing sessions at HEAD: run only their mutants without a result "
    "(after an interrupted run; refused where the module changed since the session's commit)",
  )
  p.add_argument(
    "--jobs",
    type=int,
    default=1,
    help="files mutated side by side, each in its own worktree (default 1)",
  )
  p.add_argument(
    "--shards",
    type=int,
    default=1,
    help="one file's pending mutants dealt to this many worktrees run side by side "
    "(<workdir>-shardJ; default 1); an interrupted sharded run is merged on the next run",
  )
  p.add_argument(
    "--coverage",
    action="store_true",
    help="run each mutant's tests only where they executed its lines (needs pytest-cov; "
    "the unmutated tests run once under coverage first; tools/mutation_tests.py)",
  )
  p.add_argument(
    "--no-compile-cache",
    action="store_true",
    help="compile every mutant's programs afresh (no persistent XLA cache)",
  )
  args = p.parse_args(argv)
  if args.jobs < 1:
    p.error(f"--jobs must be >= 1, got {args.jobs}")
  if args.lines and not (args.rerun_survivors and args.files and len(args.files) == 1):
    p.error("--lines needs --rerun-survivors and one file in --files")
  if args.shards < 1:
    p.error(f"--shards must be >= 1, got {args.shards}")
  cr = args.cosmic_ray_bin
  if not os.path.exists(os.path.join(cr, "cosmic-ray")):
    p.error("cosmic-ray not found: pip install cosmic-ray==8.7.0 (or give --cosmic-ray-bin)")
  fresh = args.fresh and not args.report_only
  work = worktree(args.workdir, fresh)
  src = os.path.join("fedjax_sel", args.package)
  files = args.files or sorted(
    os.path.relpath(os.path.join(folder, f), os.path.join(work, src))
    for folder, _, names in os.walk(os.path.join(work, src))
    for f in names
    if f.endswith(".py") and (f != "__init__.py" or folder != os.path.join(work, src))
  )
  out_dir = os.path.join(work, "mutation", args.package)
  os.makedirs(out_dir, exist_ok=True)

  def stem_of(f: str) -> str:  # f may be in a subpackage (engine/lanes.py)
    os.makedirs(os.path.dirname(os.path.join(out_dir, f)), exist_ok=True)
    return os.path.join(out_dir, f[:-3])

  def mutate(f: str, wt: str) -> None:
    """One file's cosmic-ray session, run in worktree ``wt`` (its mutants go there)."""
    module = os.path.join(src, f)
    tests = TESTS.get(f"{args.package}/{f}", PACKAGE_TESTS[args.package])
    cfg, session = stem_of(f) + ".toml", stem_of(f) + ".sqlite"
    cache = None if args.no_compile_cache else os.path.join(wt, ".jax-compile-cache")
    keyword = KEYWORDS.get(f"{args.package}/{f}")
    coverage_data = None
    if args.coverage:
      coverage_data = os.path.abspath(stem_of(f) + ".coverage")
      # measured anew when a session continues at HEAD: the tests may have changed
      if args.rerun_survivors or args.resume or not os.path.exists(coverage_data):
        measure_coverage(wt, args.python, module, tests, keyword, coverage_data, cache)

    def write_config(path: str, cache_dir: str | None) -> None:
      with open(path, "w") as fh:
        fh.write(
          config_text(module, tests, args.python, args.timeout, cache_dir, keyword, coverage_data)
        )

    write_config(cfg, cache)
    start = time.time()
    leftover = shard_sessions(session)
    if os.path.exists(session) and leftover:
      # an interrupted --shards run: keep what its shards finished, the rest is pending
      n = merge_shards(session, leftover)
      print(f"{module}: {n} results of an interrupted sharded run merged", flush=True)
    if args.rerun_survivors:
      # A killed mutant stays killed when tests are only added; the survivors run again.
      with sqlite3.connect(session) as db:
        db.execute(
          "DELETE FROM work_results WHERE test_outcome = 'SURVIVED'"
          + (
            " AND job_id IN (SELECT job_id FROM mutation_specs WHERE start_pos_row IN "
            f"({','.join(str(int(line)) for line in args.lines)}))"
            if args.lines
            else ""
          )
        )
    elif args.resume and os.path.exists(session):
      pass  # `exec` runs only the mutants without a result (checked in main: same module)
    else:
      for old_session in [session, *shard_sessions(session)]:
        if os.path.exists(old_session):
          os.remove(old_session)
      run([os.path.join(cr, "cosmic-ray"), "init", cfg, session], wt)
      run([os.path.join(cr, "cr-filter-operators"), session, cfg], wt)
      with open(stem_of(f) + ".commit", "w") as fh:  # the source the mutants were made from
        fh.write(git_head(wt) + "\n")
    # also on --resume: a session made before this filter skips its pending ones
    skipped = skip_annotation_mutants(session, os.path.join(wt, module))
    if skipped:
      print(f"{module}: {skipped} mutants in type annotations skipped", flush=True)
    # With --shards K, one file's mutants run side by side: shard j runs every K-th pending
    # mutant in its own worktree (same commit) on its own copy of the session; the copies
    # are merged back.
    runs = [(wt, cfg, session)]
    for j in range(1, args.shards):
      tree = worktree(f"{wt}-shard{j}", False)
      restore_sources(tree)
      run(["git", "checkout", "-q", "--detach", git_head(wt)], tree)
      shard_cache = None if cache is None else os.path.join(tree, ".jax-compile-cache")
      if cache and not os.path.exists(shard_cache) and os.path.exists(cache):
        shutil.copytree(cache, shard_cache)  # warm start: same programs, same keys
      write_config(f"{stem_of(f)}.shard{j}.toml", shard_cache)
      runs.append((tree, f"{stem_of(f)}.shard{j}.toml", f"{stem_of(f)}.shard{j}.sqlite"))
    copies = [copy for _, _, copy in runs[1:]]
    if copies:
      split_pending(session, copies)

    def execute(tree: str, config: str, db: str) -> None:
      restore_sources(tree)
      run([os.path.join(cr, "cosmic-ray"), "exec", config, db], tree)
      restore_sources(tree)

    with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
      for fut in [pool.submit(execute, *r) for r in runs]:
        fut.result()
    if copies:
      merge_shards(session, copies)
    print(f"{module}: {time.time() - start:.0f} s", flush=True)

  if not args.report_only:
    # Files side by side: each job owns a worktree (a mutant is written into the source, so
    # two files mutated in one tree would see each other's mutants) and its compile cache.
    trees = queue.Queue()
    for j in range(args.jobs):
      trees.put(work if j == 0 else worktree(f"{args.workdir}-job{j}", fresh))
    if args.rerun_survivors or args.resume:
      # Both continue existing sessions at HEAD (the tests may be newer), which needs the
      # module the mutants were made from: a changed source moves their positions.
      flag = "--rerun-survivors" if args.rerun_survivors else "--resume"
      head = git_head(ROOT)
      for f in files:
        if not os.path.exists(stem_of(f) + ".sqlite"):
          if args.rerun_survivors:
            p.error(f"--rerun-survivors: no session for {f} in {out_dir}")
          continue  # --resume: a file without a session starts one
        if not os.path.exists(stem_of(f) + ".commit"):
          p.error(
            f"{flag}: {f}'s session predates the recorded commit; write the "
            f"commit its mutants were made from into {stem_of(f)}.commit"
          )
        with open(stem_of(f) + ".commit") as fh:
          old = fh.read().strip()
        changed = subprocess.run(
          ["git", "diff", "--quiet", old, head, "--", os.path.join(src, f)], cwd=ROOT
        ).returncode
        if changed:
          p.error(
            f"{flag}: {src}/{f} changed between {old[:8]} and HEAD "
            f"{head[:8]}; its mutants moved, run it without {flag}"
          )
      for wt in list(trees.queue):
        restore_sources(wt)  # a left-behind mutant would follow the checkout
        run(["git", "checkout", "-q", "--detach", head], wt)

    def job(f: str) -> None:
      wt = trees.get()
      try:
        mutate(f, wt)
      finally:
        trees.put(wt)

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
      for fut in [pool.submit(job, f) for f in files]:
        fut.result()
  rows = []
  for f in files:
    module = os.path.join(src, f)
    stem = stem_of(f)
    session = stem + ".sqlite"
    if not os.path.exists(session):
      continue
    c = counts(session, cr)
    with open(stem + ".txt", "w") as fh:
      fh.write("\n".join(c["survivors"]) + "\n")
    rows.append((module, c))
  print("| file | mutants | killed | survived | timeouts | other | score |")
  print("|---|---|---|---|---|---|---|")
  tk = tt = 0
  for module, c in rows:
    score = c["killed"] / c["total"] if c["total"] else float("nan")
    tk, tt = tk + c["killed"], tt + c["total"]
    print(
      f"| {module} | {c['total']} | {c['killed']} | {c['survived']} | {c['timeout']} | "
      f"{c['other']} | {100 * score:.0f} % |"
    )
  if tt:
    print(f"| all | {tt} | {tk} | {tt - tk} | | | {100 * tk / tt:.0f} % |")
  for _, c in rows:
    for s in c["survivors"]:
      print("survived:", s)
  return 0


if __name__ == "__main__":
  sys.exit(main())

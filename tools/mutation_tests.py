"""The test command of one mutant when ``tools/mutation.py --coverage`` is on.

Runs, in the current worktree, only the tests that executed the mutated lines when the
unmutated module's tests ran under coverage (pytest-cov, one context per test). Usage (as
cosmic-ray's ``test-command``; ``tools/mutation.py`` writes it)::

  python tools/mutation_tests.py --module fedjax_sel/core/engine/lanes.py \
      --coverage-data <workdir>/mutation/core/engine.coverage -- <pytest args and test files>

- The mutated lines are read from ``git diff -U0`` of the sources (a cosmic-ray mutant
  changes one token, so line numbers do not move). Any other change there is a mutant an
  interrupted run left behind: the mutant is then reported as a survivor, to be re-run.
- A line that no test context executed (only import-time code, a module constant, a
  default argument, a signature) gets the whole test list: every test may depend on it.
- Otherwise the covering tests run, in the order of the test list, with the given pytest
  arguments (``-x``: the first failure kills the mutant). A mutant survives only if every
  test that executes its line passes.

Limit, by construction: a test that runs the line only in a subprocess (the multi-device and
multi-process tests) is not in the coverage data; where such a test is the only one that
could fail, the mutant survives here and is re-run with the full list
(``tools/mutation.py --rerun-survivors`` without ``--coverage``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys


def changed_hunks(tree: str) -> list[tuple[str, int, int]]:
  """(file, first line, line count) of every change ``git diff -U0`` finds under ``tree``
  (the package's sources) against HEAD."""
  diff = subprocess.run(
    ["git", "diff", "-U0", "--", tree], capture_output=True, text=True, check=True
  ).stdout
  hunks, path = [], None
  for line in diff.splitlines():
    if line.startswith("+++ "):
      path = line[4:].removeprefix("b/")
    elif m := re.match(r"@@ -(\d+)(?:,(\d+))? \+", line):
      hunks.append((path, int(m.group(1)), int(m.group(2) or 1)))
  return hunks


def covering_tests(data_file: str, module: str, lines: list[int]) -> set[str] | None:
  """Node ids of the tests that executed any of ``lines``; None when no test did."""
  import coverage

  data = coverage.CoverageData(basename=data_file)
  data.read()
  # by the path inside the repository: a ``--shards`` worktree (same commit) reads the
  # coverage measured in the first worktree
  suffix = os.sep + os.path.normpath(module)
  files = [f for f in data.measured_files() if os.path.realpath(f).endswith(suffix)]
  if not files:
    return None
  by_line = data.contexts_by_lineno(files[0])
  tests = set()
  for line in lines:
    for context in by_line.get(line, []):
      node = context.rsplit("|", 1)[0]  # "<node id>|setup" / "|run" / "|teardown"
      if node:
        tests.add(node)
  return tests or None


def order(tests: set[str], test_files: list[str]) -> list[str]:
  """The node ids grouped by the test list's file order (cheap, discriminating files first)."""
  rank = {os.path.normpath(f): i for i, f in enumerate(test_files)}

  def key(node: str):
    path = os.path.normpath(node.split("::", 1)[0])
    return (rank.get(path, len(rank)), node)

  return sorted(tests, key=key)


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--module", required=True)
  p.add_argument("--coverage-data", required=True)
  p.add_argument("pytest_args", nargs=argparse.REMAINDER)
  args = p.parse_args(argv)
  rest = [a for a in args.pytest_args if a != "--"]
  options = [a for a in rest if a.startswith("-") or not a.endswith(".py")]
  test_files = [a for a in rest if a.endswith(".py") and not a.startswith("-")]
  module = os.path.normpath(args.module)
  hunks = changed_hunks(module.split(os.sep)[0])
  if len(hunks) > 1 or any(os.path.normpath(path) != module for path, _, _ in hunks):
    # one cosmic-ray mutant changes one token of the module: any other change is a mutant
    # an interrupted run left behind (in this module or another). Counted as a survivor
    # (the conservative outcome: --rerun-survivors runs it again once tools/mutation.py has
    # restored the sources), never as a kill.
    print(f"CONTAMINATED: the sources differ from HEAD elsewhere than one change of {module}")
    return 0
  lines = [line for _, start, count in hunks for line in range(start, start + max(count, 1))]
  tests = covering_tests(args.coverage_data, args.module, lines)
  targets = test_files if tests is None else order(tests, test_files)
  cmd = [sys.executable, "-m", "pytest", *options, *targets]
  return subprocess.run(cmd).returncode


if __name__ == "__main__":
  sys.exit(main())

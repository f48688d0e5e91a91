"""The test command of one mutant when ``tools/mutation.py --coverage`` is on.

Runs, in the current worktree, only the tests that executed the mutated lines when the
unmutated module's tests ran under coverage (pytest-cov, one context per test). Usage (as
cosmic-ray's ``test-command``; ``tools/mutation.py`` writes it)::

  python tools/mutation_tests.py --module fedjax_sel/core/engine.py \
      --coverage-data <workdir>/mutation/core/engine.coverage -- <pytest args and test files>

- The mutated lines are read from ``git diff -U0`` of the module (a cosmic-ray mutant
  changes one token, so line numbers do not move).
- A line that no test context executed (only import-time code, a module constant, a
  default argument, a signature) gets the whole test list: every test may depend on it.
- Otherwise the covering tests run, in the order of the test list, with the given pytest
  arguments (``-x``: the first failure kills the mutant). A mutant survives only if every
  test that executes its line passes.

Limit, by construction: a test that runs the line only in a subprocess (the multi-device and
multi-process tests) is not in the coverage data; where such a test is the only one that
could fail, the mutant survives here and is re-run with the full list
(``tools/mutation.py --rerun-survivors --no-coverage``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys


def mutated_lines(module: str) -> list[int]:
  diff = subprocess.run(
    ["git", "diff", "-U0", "--", module], capture_output=True, text=True, check=True
  ).stdout
  lines = []
  for m in re.finditer(r"^@@ -(\d+)(?:,(\d+))? \+", diff, re.M):
    start, count = int(m.group(1)), int(m.group(2) or 1)
    lines.extend(range(start, start + max(count, 1)))
  return lines


def hunks(module: str) -> int:
  diff = subprocess.run(
    ["git", "diff", "-U0", "--", module], capture_output=True, text=True, check=True
  ).stdout
  return len(re.findall(r"^@@ ", diff, re.M))


def covering_tests(data_file: str, module: str, lines: list[int]) -> set[str] | None:
  """Node ids of the tests that executed any of ``lines``; None when no test did."""
  import coverage

  data = coverage.CoverageData(basename=data_file)
  data.read()
  target = os.path.realpath(module)
  files = [f for f in data.measured_files() if os.path.realpath(f) == target]
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
  if hunks(args.module) > 1:
    # one cosmic-ray mutant changes one token: a second change is a mutant an interrupted
    # run left behind. Counted as a survivor (the conservative outcome: --rerun-survivors
    # runs it again once tools/mutation.py has restored the module), never as a kill.
    print(f"CONTAMINATED: {args.module} differs from HEAD in more than one place")
    return 0
  tests = covering_tests(args.coverage_data, args.module, mutated_lines(args.module))
  targets = test_files if tests is None else order(tests, test_files)
  cmd = [sys.executable, "-m", "pytest", *options, *targets]
  return subprocess.run(cmd).returncode


if __name__ == "__main__":
  sys.exit(main())

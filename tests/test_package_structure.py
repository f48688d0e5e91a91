"""The package's shape (issue 39): no import circle between its modules, and no module so
long that a reader cannot hold it (STYLE.md: alternatives become a folder, one file each)."""

from __future__ import annotations

import ast
import os

import fedjax_sel

PACKAGE_DIR = os.path.dirname(fedjax_sel.__file__)
MAX_LINES = 620  # "~600": the longest module today is core/simulation.py (the round)


def _modules() -> dict[str, str]:
  """Dotted module name -> path, for every module of the package."""
  out = {}
  root = os.path.dirname(PACKAGE_DIR)
  for folder, _, files in os.walk(PACKAGE_DIR):
    for f in files:
      if f.endswith(".py"):
        path = os.path.join(folder, f)
        name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
        out[name.removesuffix(".__init__")] = path
  return out


def import_graph(modules: dict[str, str]) -> dict[str, set[str]]:
  """module -> the package's modules it imports (at any depth of the file, lazy imports
  included; ``from pkg import name`` counts as importing ``pkg.name`` when that is a module)."""
  graph: dict[str, set[str]] = {}
  for name, path in modules.items():
    with open(path) as f:
      tree = ast.parse(f.read())
    deps = set()
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        for alias in node.names:
          full = f"{node.module}.{alias.name}"
          deps.add(full if full in modules else node.module)
      elif isinstance(node, ast.Import):
        deps.update(a.name for a in node.names)
    graph[name] = {d for d in deps if d in modules and d != name}
  return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """One import circle of ``graph`` as [a, b, ..., a], or None. A package importing its own
  submodules (its ``__init__`` re-exports) is not a circle unless a submodule imports the
  package back."""
  state: dict[str, int] = {}
  stack: list[str] = []

  def visit(u):
    state[u] = 1
    stack.append(u)
    for v in sorted(graph[u]):
      if state.get(v) == 1:
        return stack[stack.index(v) :] + [v]
      if not state.get(v):
        found = visit(v)
        if found:
          return found
    stack.pop()
    state[u] = 2
    return None

  for u in sorted(graph):
    if not state.get(u):
      found = visit(u)
      if found:
        return found
  return None


def test_the_cycle_finder_finds_a_circle():
  assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
  assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_a_lazy_import(tmp_path):
  (tmp_path / "p").mkdir()
  (tmp_path / "p" / "a.py").write_text("def f():\n  from p import b\n")
  (tmp_path / "p" / "b.py").write_text("from p.a import f\n")
  mods = {"p.a": str(tmp_path / "p" / "a.py"), "p.b": str(tmp_path / "p" / "b.py")}
  assert find_cycle(import_graph(mods)) in (["p.a", "p.b", "p.a"], ["p.b", "p.a", "p.b"])


def test_no_import_circle_in_the_package():
  graph = import_graph(_modules())
  assert len(graph) > 50  # the walk found the package
  assert find_cycle(graph) is None


def test_no_module_over_the_line_budget():
  lengths = {}
  for name, path in _modules().items():
    with open(path) as f:
      lengths[name] = sum(1 for _ in f)
  too_long = {n: k for n, k in lengths.items() if k > MAX_LINES}
  assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"

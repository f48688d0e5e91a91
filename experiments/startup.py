"""What every binary does before its own flags are read: ``--import`` and
``--compilation_cache``.

``--import=<module or .py file>[,...]`` imports the user's code before the binary defines
its flags and reads the registries, so a method registered there
(``fedjax_sel.selection.register`` ...) is a name like the built-ins everywhere:
``--selection=<name>`` and its ``--selection_<hparam>`` flags in ``experiments.run``, a column
of ``experiments.atlas``, a method of a study config. A dotted name is imported as a module
(from the working folder or the installed packages); a path ending in ``.py`` is loaded as a
file. A path that does not exist, or a module that fails to import, ends the command in one
``error:`` line naming it (exit code 2).

``--compilation_cache=<folder>`` (default: the user's cache folder,
``fedjax_sel.experiment.cache.default_folder()``; ``none`` turns it off) keeps the compiled
programs on disk, so the next command with the same shapes skips compiling them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

from absl import flags

from fedjax_sel import experiment
from fedjax_sel.core import distributed
from fedjax_sel.experiment import cache

_IMPORTED: dict[str, object] = {}


def _values(argv: Sequence[str], name: str) -> list[str]:
  """Every value of ``--name=v`` / ``--name v`` in ``argv`` (comma-separated values split)."""
  out = []
  for i, a in enumerate(argv):
    if a.startswith(f"--{name}="):
      out.append(a.split("=", 1)[1])
    elif a == f"--{name}" and i + 1 < len(argv):
      out.append(argv[i + 1])
  return [v.strip() for text in out for v in text.split(",") if v.strip()]


def import_user_code(target: str) -> object:
  """Imports ``target`` (a dotted module name, or a path to a ``.py`` file) once.

  Raises:
    ImportError: the file is missing or the module fails to import; one line naming it.
  """
  if target in _IMPORTED:
    return _IMPORTED[target]
  is_file = target.endswith(".py") or os.sep in target
  try:
    if is_file:
      path = os.path.abspath(os.path.expanduser(target))
      if not os.path.isfile(path):
        raise ImportError(f"no such file {path}")
      name = "fedjax_sel_user_" + os.path.splitext(os.path.basename(path))[0]
      spec = importlib.util.spec_from_file_location(name, path)
      module = importlib.util.module_from_spec(spec)
      sys.modules[name] = module
      spec.loader.exec_module(module)
    else:
      if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
      module = importlib.import_module(target)
  except Exception as e:  # noqa: BLE001 (any failure of the user's code is one line)
    raise ImportError(
      f"--import={target}: {type(e).__name__}: {experiment.one_line(e)}; allowed: an "
      "importable module name or the path of a .py file"
    ) from None
  _IMPORTED[target] = module
  return module


def import_from_argv(argv: Sequence[str] | None = None) -> None:
  """Imports every ``--import`` of ``argv`` (default ``sys.argv``), before flags are defined
  from the registries; a failure ends the process with one ``error:`` line."""
  for target in _values(sys.argv if argv is None else argv, "import"):
    try:
      import_user_code(target)
    except ImportError as e:
      distributed.fail(str(e), 2)


def define_flags() -> None:
  """``--import`` and ``--compilation_cache`` (every binary)."""
  if "import" in flags.FLAGS:
    return
  flags.DEFINE_string(
    "import",
    "",
    "comma-separated modules or .py files imported before anything else (their registered "
    "selection strategies, aggregators, availability models ... become names like the "
    "built-ins)",
  )
  flags.DEFINE_string(
    "compilation_cache",
    "",
    "folder of the persistent XLA compilation cache ('' = $JAX_COMPILATION_CACHE_DIR or "
    f"{cache.default_folder()}; none = off)",
  )


def start() -> None:
  """After the flags are parsed: the compilation cache (before anything compiles)."""
  f = flags.FLAGS
  if "compilation_cache" in f:
    cache.use_compilation_cache(f.compilation_cache or None)

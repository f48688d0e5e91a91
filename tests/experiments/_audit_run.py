"""Runs ``experiments.run`` as ``__main__`` and records every file this process opens for
writing, renames into place or creates as a folder (Python's audit hooks), so a test can
tell which process wrote which file. The list goes to ``$FEDJAX_SEL_AUDIT/<pid>.json`` with
the process index, written at exit. (Files written by C++ code, e.g. orbax's array shards
through tensorstore, are not seen; the test looks at everything else.)"""

import atexit
import json
import os
import runpy
import sys

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_written: list[str] = []


def _hook(event, args):
  if event == "open":
    path, mode, flags = args
    writes = (mode is not None and any(c in str(mode) for c in "wax+")) or (
      mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS
    )
    if writes and isinstance(path, (str, bytes, os.PathLike)):
      _written.append(os.path.abspath(os.fsdecode(path)))
  elif event == "os.rename":
    _written.append(os.path.abspath(os.fsdecode(args[1])))
  elif event == "os.mkdir":
    _written.append(os.path.abspath(os.fsdecode(args[0])))


def _dump():
  import jax

  folder = os.environ["FEDJAX_SEL_AUDIT"]
  with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as f:
    json.dump({"process": jax.process_index(), "written": sorted(set(_written))}, f)


if __name__ == "__main__":
  sys.addaudithook(_hook)
  atexit.register(_dump)
  sys.argv[0] = "experiments/run.py"
  runpy.run_module("experiments.run", run_name="__main__", alter_sys=True)

"""Runs ``experiments.run`` as ``__main__`` with one process made to fail by itself: the
process ``$FEDJAX_SEL_FAIL_PROCESS`` raises RuntimeError at its ``$FEDJAX_SEL_FAIL_AT``-th
check for a stop (one per evaluation block): a bug or an out-of-memory in one process."""

import os
import runpy

import jax

from fedjax_sel.core import distributed

_any_process = distributed.any_process
_calls = [0]


def _failing_any_process(flag):
  if jax.process_index() == int(os.environ["FEDJAX_SEL_FAIL_PROCESS"]):
    _calls[0] += 1
    if _calls[0] >= int(os.environ["FEDJAX_SEL_FAIL_AT"]):
      raise RuntimeError("injected failure in this process only")
  return _any_process(flag)


if __name__ == "__main__":
  distributed.any_process = _failing_any_process
  runpy.run_module("experiments.run", run_name="__main__", alter_sys=True)

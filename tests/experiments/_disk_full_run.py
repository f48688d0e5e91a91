"""Runs ``experiments.run`` as ``__main__`` on a disk that fills up: after the first
``$FEDJAX_SEL_FULL_AFTER`` fsyncs of regular files, every fsync fails with ENOSPC, as on a
full disk (the data written before it is lost to the file)."""

import errno
import os
import runpy
import stat

_fsync = os.fsync
_calls = [0]


def _full_fsync(fd):
  if stat.S_ISREG(os.fstat(fd).st_mode):
    _calls[0] += 1
    if _calls[0] > int(os.environ["FEDJAX_SEL_FULL_AFTER"]):
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
  return _fsync(fd)


if __name__ == "__main__":
  os.fsync = _full_fsync
  runpy.run_module("experiments.run", run_name="__main__", alter_sys=True)

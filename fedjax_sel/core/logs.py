"""Logs a person reads: the libraries' INFO chatter off unless ``--verbosity`` asks for it.

absl's ``app.run`` raises the verbosity to INFO when ``--verbosity`` is not given, and at
INFO orbax writes about 50 lines per checkpoint (handlers registered, bytes per second,
renames, deletions) and JAX announces its distributed service and, on a machine without
TPUs, ``Unable to initialize backend 'tpu'``. :func:`quiet_libraries` keeps this package's
own INFO lines (resuming, done) and the libraries' warnings and errors, and drops the
libraries' INFO and DEBUG records; an explicit ``--verbosity`` (``-v``) keeps everything.
"""

from __future__ import annotations

import logging
import os

# loggers of Python's logging whose INFO is chatter (JAX's own loggers)
_CHATTY_LOGGERS = ("jax", "jaxlib")
# libraries that log through absl's logger ("absl"): recognised by their file's path
_CHATTY_PATHS = (f"{os.sep}orbax{os.sep}", f"{os.sep}tensorstore{os.sep}")


class _DropLibraryInfo(logging.Filter):
  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno >= logging.WARNING:
      return True
    return not any(p in (record.pathname or "") for p in _CHATTY_PATHS)


_FILTER = _DropLibraryInfo()


def quiet_libraries(explicit_verbosity: bool = False) -> None:
  """Drops the libraries' INFO records (idempotent); nothing when ``explicit_verbosity``."""
  if explicit_verbosity:
    return
  for name in _CHATTY_LOGGERS:
    logger = logging.getLogger(name)
    if logger.level == logging.NOTSET or logger.level < logging.WARNING:
      logger.setLevel(logging.WARNING)
  add_filter(_FILTER)


def add_filter(record_filter: logging.Filter) -> None:
  """Adds ``record_filter`` (once) where every record this program prints passes: absl's
  logger (the libraries that log through absl), the root logger and absl's handler."""
  targets = [logging.getLogger("absl"), logging.getLogger()]
  try:
    from absl import logging as absl_logging

    targets.append(absl_logging.get_absl_handler())
  except ImportError:  # pragma: no cover (absl is a core dependency)
    pass
  for target in targets:
    if record_filter not in target.filters:
      target.addFilter(record_filter)


def verbosity_given() -> bool:
  """Whether ``--verbosity`` / ``-v`` was given on the command line (absl flags parsed)."""
  try:
    from absl import flags

    f = flags.FLAGS
    return bool(f.is_parsed() and "verbosity" in f and f["verbosity"].present)
  except Exception:  # pragma: no cover
    return False

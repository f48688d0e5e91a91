"""A persistent XLA compilation cache for every binary and notebook.

A run compiles its round, evaluation and batch programs from scratch each time it starts
(2.5 s of the quickstart's 7.5 s on 2 cores); JAX can keep the compiled executables on disk
and load them on the next start. ``use_compilation_cache()`` turns that on in the user's
cache folder (``$XDG_CACHE_HOME/fedjax_sel/jax``, default ``~/.cache/fedjax_sel/jax``), for
every program however short its compile (the round programs of the small studies compile in
well under JAX's default threshold of one second). A cache hit returns the executable the
same compilation would build, so no number changes (``tests/experiments/test_startup.py``
runs the quickstart with and without the cache and compares every metric).

The binaries call it at start (``--compilation_cache=<dir>``, ``none`` to turn it off); the
notebooks call it in their first cell. ``JAX_COMPILATION_CACHE_DIR``, when set, is the
default folder (the test suite sets one of its own). A folder that cannot be written gives
one warning and the run goes on uncached.
"""

from __future__ import annotations

import os
import tempfile

from absl import logging

OFF = "none"
ENV = "JAX_COMPILATION_CACHE_DIR"


def default_folder() -> str:
  """``$JAX_COMPILATION_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/fedjax_sel/jax``."""
  if os.environ.get(ENV):
    return os.environ[ENV]
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "fedjax_sel", "jax")


def _writable(folder: str) -> str | None:
  """None if ``folder`` can hold the cache, else why not."""
  try:
    os.makedirs(folder, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
      pass
  except OSError as e:
    return e.strerror or type(e).__name__
  return None


def use_compilation_cache(folder: str | None = None) -> str | None:
  """Turns JAX's persistent compilation cache on in ``folder`` (default ``default_folder()``;
  ``"none"``: off). Call before the first compilation.

  Returns:
    The folder in use, or None when the cache is off (``"none"``, or a folder that cannot be
    written: then one warning says so and the run goes on uncached).
  """
  import jax

  if folder is not None and folder.strip().lower() == OFF:
    jax.config.update("jax_enable_compilation_cache", False)
    return None
  folder = os.path.abspath(os.path.expanduser(folder or default_folder()))
  why = _writable(folder)
  if why is not None:
    logging.warning(
      "compilation cache %s cannot be written (%s): running uncached "
      "(--compilation_cache=<a writable folder>, or none)",
      folder,
      why,
    )
    jax.config.update("jax_enable_compilation_cache", False)
    return None
  jax.config.update("jax_enable_compilation_cache", True)
  jax.config.update("jax_compilation_cache_dir", folder)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  return folder

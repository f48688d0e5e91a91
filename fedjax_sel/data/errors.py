"""The data package's user-facing error, in a module of its own so that every reader
(``loaders``, ``digits``, ``tfds_loaders``, ``idx``) can raise it without importing
``loaders``, which imports them."""


class DatasetNotFoundError(ValueError):
  """A dataset (or the package that reads it) is not available locally."""

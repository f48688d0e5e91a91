"""The registry of availability models: ``make(name, **hparams)`` builds one by name."""

from fedjax_sel.core.registry import Registry

REGISTRY = Registry("availability model")
register = REGISTRY.register

"""The registry of selection strategys: ``make(name, **hparams)`` builds one by name."""

from fedjax_sel.core.registry import Registry

REGISTRY = Registry("selection strategy")
register = REGISTRY.register

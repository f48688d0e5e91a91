"""The registry of client updates: ``make(name, **hparams)`` builds one by name."""

from fedjax_sel.core.registry import Registry

REGISTRY = Registry("client update")
register = REGISTRY.register

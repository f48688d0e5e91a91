"""The registry of aggregators: ``make(name, **hparams)`` builds one by name."""

from fedjax_sel.core.registry import Registry

REGISTRY = Registry("aggregator")
register = REGISTRY.register

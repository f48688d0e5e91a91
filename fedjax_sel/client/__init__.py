"""Local update rules: ``fedjax_sel.client.make(name, **hparams)``."""

from fedjax_sel.client import fedprox, fedsgd, scaffold, sgd
from fedjax_sel.client.registry import REGISTRY
from fedjax_sel.client.scaffold import ScaffoldState

make = REGISTRY.make
names = REGISTRY.names

__all__ = ["ScaffoldState", "fedprox", "fedsgd", "make", "names", "scaffold", "sgd"]

"""Collector hooks that run inside trainers (installed as ``arldiag.collectors``)."""
from arldiag.collectors.collector import Collector
from arldiag.collectors.guard import Guard

__all__ = ["Collector", "Guard"]

"""Collector hooks that run inside trainers (installed as ``arldiag.collectors``)."""
from arldiag.collectors.collector import Collector

__all__ = ["Collector"]

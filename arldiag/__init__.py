"""arldiag: early collapse diagnostics for agentic RL training.

The import is light on purpose (whylogs-style): nothing heavy loads until used. ``Collector`` needs numpy and
pyarrow only; ``open_run``/``detect`` load DuckDB on first use.
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["Collector", "Monitor", "open_run", "detect", "attach", "__version__"]


def __getattr__(name: str):  # PEP 562: lazy public names, no side effects at import
    if name == "Collector":
        from arldiag.collectors.collector import Collector

        return Collector
    if name == "open_run":
        from arldiag.store.reader import open_run

        return open_run
    if name == "detect":
        from arldiag.detectors import detect

        return detect
    if name == "attach":
        from arldiag.wiring import attach

        return attach
    if name == "Monitor":
        from arldiag.monitor import Monitor

        return Monitor
    raise AttributeError(f"module 'arldiag' has no attribute {name!r}")

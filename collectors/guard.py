"""The collector's error boundary: its own failures warn once and never stop the training run (unless strict).

The Collector runs all its own work through one ``Guard``; the trainer adapters (TRL, verl) run their recording
through the same object, ``collector.guard``, so one failing hook warns once per place and training continues.
"""
from __future__ import annotations

import logging
import warnings
from typing import Any, Callable

log = logging.getLogger("arldiag")


class Guard:
    """``run(where, fn, *args)``: ``fn(*args)``, or None after one warning per ``where`` when it raises (re-raised
    when ``strict``). ``warn_once(key, msg)``: a RuntimeWarning and a log line, the first time ``key`` is seen."""

    def __init__(self, strict: bool = False):
        self.strict = bool(strict)
        self.warned: set[str] = set()

    def run(self, where: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - the boundary: nothing of arldiag's own stops training
            if self.strict:
                raise
            self.warn_once(where, f"arldiag: {where} failed ({type(exc).__name__}: {exc}); training continues")
            return None

    def warn_once(self, key: str, msg: str, stacklevel: int = 3) -> None:
        if key in self.warned:
            return
        self.warned.add(key)
        warnings.warn(msg, RuntimeWarning, stacklevel=stacklevel)
        log.warning(msg)


__all__ = ["Guard"]

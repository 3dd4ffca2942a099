"""The alert vocabulary, defined once: the alert states of a run and the severities of findings and alerts.

A detector's rule returns a level 1..3 (``LEVELS[level]``), the risk state machine moves between ``LEVELS``, a
finding or an alert carries one of ``SEVERITIES``; ``info`` (a finding worth showing that is no warning) sits where
``ok`` sits. Every module that orders, validates or offers these names takes them from here.
"""
from __future__ import annotations

LEVELS = ("ok", "watch", "warning", "critical")           # alert state of a run; index = level
SEVERITIES = ("info", "watch", "warning", "critical")     # severity of a finding / alert; "skipped" is a status
ALERTING = LEVELS[1:]                                      # the states (and severities) a detector fires at

_RANK = {**{s: i for i, s in enumerate(SEVERITIES)}, **{s: i for i, s in enumerate(LEVELS)}}


def rank(name: str, default: int = -1) -> int:
    """0 for ok / info, 1 watch, 2 warning, 3 critical; ``default`` for any other name (a quiet or skipped
    finding, an empty cell)."""
    return _RANK.get(name, default)


__all__ = ["ALERTING", "LEVELS", "SEVERITIES", "rank"]

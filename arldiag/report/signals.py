"""The report's timeline signals: now arldiag.views.catalog, the one catalog of metric labels and panels both UIs
read (this name is kept for existing imports)."""
from __future__ import annotations

from arldiag.views.catalog import ALL_SIGNALS, BY_KEY, DETAIL, TIMELINE, Panel, S, Signal, resolve

__all__ = ["Signal", "Panel", "S", "TIMELINE", "DETAIL", "ALL_SIGNALS", "BY_KEY", "resolve"]

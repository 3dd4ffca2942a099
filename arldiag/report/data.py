"""The report's data, read through arldiag.views (the read side the dashboard shares). This module keeps the names
the report's callers used before the views package existed (tests, sample_runs/summarize.py); new code imports
arldiag.views directly.
"""
from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from arldiag.views._sql import has_column, query, table_rows
from arldiag.views.events import action_outcomes, actions, alerts
from arldiag.views.heatmap import LEVELS, Heatmap, log_band
from arldiag.views.heatmap import ratio_heatmap as _ratio_heatmap
from arldiag.views.offenders import Offender, token_labels, top_offenders
from arldiag.views.series import (Comparison, columns_with_data, compare_windows, series, step_frame, turn_summary,
                                  window_mean)

__all__ = ["query", "table_rows", "has_column", "step_frame", "columns_with_data", "series", "window_mean",
           "alerts_frame", "actions_frame", "action_outcomes", "Heatmap", "log_band", "ratio_heatmap", "Comparison",
           "compare_windows", "turn_summary", "Offender", "top_offenders", "token_labels"]

REPORT_ALERT_COLUMNS = ["step", "detector", "severity", "state", "title", "source"]
REPORT_ACTION_COLUMNS = ["step", "action", "params", "detector", "state", "reason", "policy"]


def alerts_frame(run: Any, name: str, limit: int = 50) -> pd.DataFrame | None:
    """The first ``limit`` alerts the run recorded (online monitor / watch), by step; None when there are none."""
    df = alerts(run, limit, name, REPORT_ALERT_COLUMNS)
    return None if df.empty else df


def actions_frame(run: Any, name: str, limit: int = 50) -> pd.DataFrame | None:
    """What --auto-stabilize applied (the actions table), by step; None when nothing was applied."""
    df = actions(run, limit, name, REPORT_ACTION_COLUMNS)
    return None if df.empty else df


def ratio_heatmap(run: Any, name: str, table: str, column: str, band: Sequence[float], max_x: int = 120,
                  n_y: int = 41, where: str = "") -> Heatmap | None:
    """views.heatmap.ratio_heatmap under its former signature (``column`` must be the table's log ratio; token rows
    are always the unbiased sample, so ``where`` is not needed)."""
    if LEVELS.get(table) != column:
        raise ValueError(f"column: the {table} heatmap reads {LEVELS.get(table)!r}, got {column!r}")
    return _ratio_heatmap(run, table, name, band, max_x=max_x, n_y=n_y)

"""Event tables (alerts, auto-stabilize actions) and the alert-state bands both UIs shade over their step charts."""
from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from arldiag.detectors.batch import actions_of
from arldiag.views._sql import columns, q, query

ALERT_COLUMNS = ["step", "detector", "severity", "state", "risk", "title", "message", "source"]
ACTION_COLUMNS = ["step", "action", "params", "detector", "state", "risk", "reason", "policy"]
# alert states drawn as a band: every state above ok (an unknown state is not an alert level and draws nothing)
BAND_STATES = ("watch", "warning", "critical")


def events(run: Any, table: str, want: Sequence[str], limit: int = 500, name: str | None = None) -> pd.DataFrame:
    """Rows of an event table (alerts, actions) by step then time, the first ``limit``; columns an older store lacks
    come back null; an empty frame with ``want`` when the run has no such rows."""
    cols = columns(run, table)
    if "step" not in cols:
        return pd.DataFrame(columns=list(want))
    sel = ", ".join(q(c) if c in cols else f"null as {q(c)}" for c in want)
    order = "step, time" if "time" in cols else "step"
    cond, params = ("run = ?", [name]) if name is not None and "run" in cols else ("true", [])
    return query(run, f"select {sel} from {table} where {cond} order by {order} limit ?", [*params, int(limit)])


def alerts(run: Any, limit: int = 500, name: str | None = None, want: Sequence[str] = ALERT_COLUMNS
           ) -> pd.DataFrame:
    """Alerts the run's monitor (or `arldiag watch`) wrote, by step."""
    return events(run, "alerts", want, limit, name)


def actions(run: Any, limit: int = 500, name: str | None = None, want: Sequence[str] = ACTION_COLUMNS
            ) -> pd.DataFrame:
    """What --auto-stabilize applied (the actions table), by step."""
    return events(run, "actions", want, limit, name)


def action_outcomes(run: Any, name: str) -> list[str]:
    """The ``outcome`` JSON of every auto-stabilize action, in the order applied (empty without actions)."""
    return [outcome for _, outcome in actions_of(run, name)]


def state_segments(timeline: pd.DataFrame | None) -> list[tuple[int, int, str]]:
    """Runs of consecutive timeline rows in one alert state (BAND_STATES) -> [(first step, last step, state)]."""
    if timeline is None or timeline.empty:
        return []
    t = timeline.sort_values("step")
    out: list[tuple[int, int, str]] = []
    prev = None
    for step, state in zip(t["step"].astype(int), t["state"].astype(str)):
        if state in BAND_STATES and state == prev:
            out[-1] = (out[-1][0], step, state)
        elif state in BAND_STATES:
            out.append((step, step, state))
        prev = state
    return out


def band_spans(timeline: pd.DataFrame | None, max_segments: int | None = None
               ) -> list[tuple[float, float, str]]:
    """state_segments as x spans padded by half a step, as drawn: (first - 0.5, last + 0.5, state)."""
    segs = state_segments(timeline)[:max_segments]
    return [(first - 0.5, last + 0.5, state) for first, last, state in segs]

"""Step-series views (overview, clipping, KL and mismatch, advantages and groups, entropy, turns): the render
functions the callbacks call (also called directly by the speed benchmark). The panels of each view are declared in
arldiag.views.catalog."""
from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from arldiag.dashboards import detectors_bridge, figures, queries
from arldiag.dashboards.source import RunSource
from arldiag.views.catalog import DASHBOARD_PANELS, SCORE_PANEL, metrics_of
from arldiag.views.heatmap import ratio_heatmap

MAX_POINTS = 1000  # points per series after bucketing; plenty for a ~1000 px wide chart

PANELS = DASHBOARD_PANELS  # view -> [(panel title, step columns)], the score panel first


def series(source: RunSource, runs: Sequence[str], view: str, max_points: int = MAX_POINTS) -> dict:
    metrics = metrics_of(view)
    return {name: source.cached(name, ("series", view, max_points),
                                lambda run: queries.step_series(run, metrics, max_points)) for name in runs}


def bands(source: RunSource, name: str) -> tuple[list[tuple[int, int, str]], str]:
    """Alert-state bands of the focus run (from the detectors' alert_timeline) and a note if degraded."""
    t, note = source.cached(name, ("timeline",), detectors_bridge.timeline)
    return queries.state_segments(t), note


def collapse_step(source: RunSource, name: str) -> int | None:
    return source.cached(name, ("collapse",), detectors_bridge.collapse)


def decline_step(source: RunSource, name: str) -> int | None:
    return source.cached(name, ("decline",), detectors_bridge.decline)


def render_panels(source: RunSource, runs: Sequence[str], view: str, with_bands: bool = True
                  ) -> tuple[go.Figure, str]:
    """(figure, note) for a step-series view over the selected runs: alert bands of every run (its own colour in
    compare mode), the collapse (or decline) step of each run as a vertical line."""
    if not runs:
        return figures.message_figure("no run selected"), ""
    data = series(source, runs, view)
    segs, notes = {}, []
    for name in runs if with_bands else []:
        segs[name], note = bands(source, name)
        notes.append(note)
    note = next((n for n in notes if n), "")
    if all(df.empty for df in data.values()):
        return figures.message_figure("no steps recorded yet"), note
    if with_bands:  # the alert view's findings are the slowest query: compute them while the user reads this
        source.warm(runs[0], ("findings",), detectors_bridge.findings)
    title = ""
    if any(segs.values()):
        title = (f"shaded: alert state of {runs[0]} (yellow watch, orange warning, red critical)" if len(runs) == 1
                 else "shaded: each run's alert state in the run's colour (darker: more severe)")
    collapse = {name: collapse_step(source, name) for name in runs}
    decline = {name: decline_step(source, name) for name in runs}
    return figures.panel_figure(data, PANELS[view], bands=segs, title=title, collapse=collapse,
                                decline=decline), note


def turns_missing(source: RunSource, runs: Sequence[str]) -> str:
    """A message when none of the selected runs recorded turns (the Turns tab shows it instead of empty panels)."""
    if not runs:
        return "no run selected"
    data = series(source, runs, "turns")
    heat = [source.cached(n, ("turn_heatmap",), queries.turn_heatmap) for n in runs]
    # the turn panels proper: the task score that leads every view says nothing about turns
    turn_panels = [pnl for pnl in PANELS["turns"] if pnl != SCORE_PANEL]
    if any(h is not None and not h.empty for h in heat) or figures.recorded_panels(data, turn_panels)[0]:
        return ""
    return (f"Turns were not recorded for {', '.join(runs)}: the run has no turn rows (single-turn samples, or "
            "turn_ids were not given to record_rollout / record_update).")


def render_ratios(source: RunSource, runs: Sequence[str], level: str) -> go.Figure:
    if not runs:
        return figures.message_figure("no run selected")
    if level not in ("sequences", "tokens"):
        raise ValueError(f"level must be 'sequences' or 'tokens', got {level!r}")
    hm = source.cached(runs[0], ("ratio_heatmap", level), lambda run: ratio_heatmap(run, level, max_x=200))
    return figures.ratio_heatmap_figure(hm, level)


def render_turn_heatmap(source: RunSource, runs: Sequence[str]) -> go.Figure:
    if not runs:
        return figures.message_figure("no run selected")
    return figures.turn_heatmap_figure(source.cached(runs[0], ("turn_heatmap",), queries.turn_heatmap))

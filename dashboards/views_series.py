"""Step-series views (overview, clipping, KL and mismatch, advantages and groups, entropy, turns): the render
functions the callbacks call (also called directly by the speed benchmark). The panels of each view are declared in
arldiag.views.catalog."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from arldiag.dashboards import detectors_bridge, figures, queries
from arldiag.dashboards.source import RunSource
from arldiag.diff.compare import RunDiff, compare, load
from arldiag.views.catalog import DASHBOARD_PANELS, SCORE_PANEL, metrics_of
from arldiag.views.heatmap import ratio_heatmap

MAX_POINTS = 1000  # points per series after bucketing; plenty for a ~1000 px wide chart

PANELS = DASHBOARD_PANELS  # view -> [(panel title, step columns)], the score panel first
# The score panel draws one success line and one evaluation line per run: arldiag's own runs log the batch success
# twice (success_rate from the trainer, success_frac derived from the rollouts: equal up to rounding, drawn on top
# of each other they read as one line with a doubled legend), and a run's task_score copies one of them or stands in
# for them. The evaluation score (greedy eval every few steps, or a logged validation score) is its own line.
SUCCESS_COLUMNS = ("success_rate", "success_frac", "task_score")
EVAL_COLUMNS = ("eval_success", "val_score")


def series(source: RunSource, runs: Sequence[str], view: str, max_points: int = MAX_POINTS) -> dict:
    metrics = list(dict.fromkeys(metrics_of(view) + (list(EVAL_COLUMNS) if SCORE_PANEL in PANELS[view] else [])))
    return {name: source.cached(name, ("series", view, max_points),
                                lambda run: queries.step_series(run, metrics, max_points)) for name in runs}


def _first_with_data(df: pd.DataFrame, candidates: Sequence[str]) -> str | None:
    return next((c for c in candidates if c in df and np.isfinite(df[c].to_numpy(float)).any()), None)


def score_lines(data: Mapping[str, pd.DataFrame]) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """(frames, score panel columns): in each run's frame only its first success column with data and its first
    evaluation column with data keep their values (the other candidates become NaN); the panel lists the columns
    kept in any run, in the candidates' order."""
    out, kept = {}, set()
    for name, df in data.items():
        keep = {c for c in (_first_with_data(df, SUCCESS_COLUMNS), _first_with_data(df, EVAL_COLUMNS)) if c}
        drop = [c for c in SUCCESS_COLUMNS + EVAL_COLUMNS if c in df and c not in keep]
        out[name] = df.assign(**{c: np.nan for c in drop}) if drop else df
        kept |= keep
    return out, [c for c in SUCCESS_COLUMNS + EVAL_COLUMNS if c in kept]


def view_panels(view: str, score_columns: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The panels of ``view`` with the score panel narrowed to ``score_columns`` (score_lines)."""
    return [(title, list(score_columns)) if (title, cols) == SCORE_PANEL else (title, cols)
            for title, cols in PANELS[view]]


def bands(source: RunSource, name: str) -> tuple[list[tuple[int, int, str]], str]:
    """Alert-state bands of the focus run (from the detectors' alert_timeline) and a note if degraded."""
    t, note = source.cached(name, ("timeline",), detectors_bridge.timeline)
    return queries.state_segments(t), note


def collapse_step(source: RunSource, name: str) -> int | None:
    return source.cached(name, ("collapse",), detectors_bridge.collapse)


def decline_step(source: RunSource, name: str) -> int | None:
    return source.cached(name, ("decline",), detectors_bridge.decline)


def parting(source: RunSource, runs: Sequence[str]) -> RunDiff | None:
    """Where the first two selected runs part (arldiag.diff, as `arldiag diff`, without the token window): each
    run's side is cached until its files change, the comparison itself is cheap. None for fewer than two runs."""
    if len(runs) < 2:
        return None
    a, b = (source.cached(n, ("diff-side",), load) for n in runs[:2])
    return compare(a, b)


def parting_note(d: RunDiff | None, limit: int = 8) -> str:
    """The partings listed in one line (the first ``limit`` by step), or that the runs stay within noise."""
    if d is None or d.steps is None:
        return ""
    if not d.partings:
        return f"{d.run_a} vs {d.run_b}: no parting found (every shared metric stays within both runs' noise)"
    head = "; ".join(f"{p.metric} at {p.step}" for p in d.partings[:limit])
    more = f" and {len(d.partings) - limit} more" if len(d.partings) > limit else ""
    out = f" (outcome {d.outcome} at {d.outcome_step})" if d.outcome_step is not None else ""
    return f"{d.run_a} vs {d.run_b} part (dotted lines): {head}{more}{out}"


def render_panels(source: RunSource, runs: Sequence[str], view: str, with_bands: bool = True
                  ) -> tuple[go.Figure, str]:
    """(figure, note) for a step-series view over the selected runs: alert bands of every run (its own colour in
    compare mode), the collapse (or decline) step of each run as a vertical line; comparing runs, where the first two
    part (arldiag diff) as a dotted line on each panel that shows the metric, listed in the note."""
    if not runs:
        return figures.message_figure("no run selected"), ""
    data, score_columns = score_lines(series(source, runs, view))
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
    d = parting(source, runs)
    parted = {p.metric: p.step for p in d.partings} if d is not None else {}
    note = " · ".join(n for n in (note, parting_note(d)) if n)
    return figures.panel_figure(data, view_panels(view, score_columns), bands=segs, title=title, collapse=collapse,
                                decline=decline, partings=parted), note


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

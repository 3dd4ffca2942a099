"""Plotly figures of the report. Each function returns a ``go.Figure`` or None when the run has no data for it.

Series are downsampled with min-max buckets (downsample.py) so a long run stays small; alert bands, the collapse
step and the first precursor are drawn as shapes spanning all timeline panels.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from arldiag.report.downsample import downsample_xy
# the panel layout is plotly-free (panels.py) so the Markdown report reads it on the base install
from arldiag.report.panels import (SCALE_RATIO, _scale, distinct_panels, split_by_scale,  # noqa: F401
                                   timeline_panels)
from arldiag.views import catalog as S
from arldiag.views.events import band_spans
from arldiag.views.heatmap import Heatmap
from arldiag.views.series import series

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")
STATE_COLORS = {"watch": "rgba(255, 200, 0, 0.18)", "warning": "rgba(255, 120, 0, 0.22)",
                "critical": "rgba(220, 0, 0, 0.25)"}
TEMPLATE = "plotly_white"
EVENT_COLORS = {"collapse": "#c00000", "decline": "#a03060"}  # the outcome event's line (Verdict.event)


def alert_segments(timeline: pd.DataFrame | None, max_segments: int = 300) -> list[tuple[float, float, str]]:
    """Contiguous runs of steps in the same alert state -> (x0, x1, state), x in steps (half-step padding)."""
    return band_spans(timeline, max_segments)


def _vline(fig: go.Figure, x: float, color: str, dash: str, text: str, level: int = 0) -> None:
    """A marker line over every panel, its label above the plot area on row ``level`` (marker_levels), clear of the
    first panel's title."""
    fig.add_shape(type="line", xref="x", yref="paper", x0=x, x1=x, y0=0, y1=1, line=dict(color=color, dash=dash,
                                                                                        width=1.5))
    fig.add_annotation(x=x, y=1.0, xref="x", yref="paper", text=text, showarrow=False, yanchor="bottom",
                       yshift=TITLE_PX + LABEL_PX * level, font=dict(color=color, size=11))


TITLE_PX, LABEL_PX = 22, 15  # height of a panel title and of one row of marker labels, in pixels


def marker_levels(xs: Sequence[float], labels: Sequence[str], x_range: tuple[float, float],
                  width_px: float = 1100.0) -> list[int]:
    """Label rows for markers at ``xs``: a label goes on the lowest row where it does not overlap a label already
    placed (about 7 px per character, centred on its x), so "precursor 39" and "collapse 40" no longer print over
    each other."""
    span = max(x_range[1] - x_range[0], 1e-9)
    placed: list[list[tuple[float, float]]] = []
    out = []
    for x, text in zip(xs, labels):
        half = 3.5 * len(text) + 4
        c = (x - x_range[0]) / span * width_px
        lo, hi = c - half, c + half
        row = next((i for i, spans in enumerate(placed) if all(hi < a or lo > b for a, b in spans)), len(placed))
        if row == len(placed):
            placed.append([])
        placed[row].append((lo, hi))
        out.append(row)
    return out


def timeline_figure(runs: Sequence, max_points: int) -> go.Figure | None:
    """Key signals in stacked panels (one step axis, ticks on every panel); the first run solid, a baseline dashed.
    Signals of different scale get panels of their own (split_by_scale). Alert bands and markers come from the
    first run."""
    panels = distinct_panels(runs, timeline_panels(runs))
    if not panels:
        return None
    height = 190 * len(panels) + 120
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=min(0.2, 70 / height),
                        subplot_titles=[t for t, _, _ in panels])
    for row, (_, sigs, log_y) in enumerate(panels, start=1):
        for j, sig in sigs:
            for k, r in enumerate(runs):
                col = r.cols.get(sig.key)
                if col is None:
                    continue
                x, y = downsample_xy(*series(r.steps, col), max_points)
                name = sig.label if k == 0 else f"{sig.label} [{r.name}]"
                # a baseline trace shares its signal's legend entry (dashed = baseline, said in the caption)
                fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=name, legendgroup=sig.key,
                                         showlegend=k == 0 or sig.key not in runs[0].cols,
                                         legend="legend" if row == 1 else f"legend{row}",
                                         line=dict(color=COLORS[j % len(COLORS)], dash="solid" if k == 0 else "dash",
                                                   width=1.6),
                                         hovertemplate=f"{col}<br>step %{{x}}<br>%{{y:.4g}}<extra>{r.name}</extra>"),
                              row=row, col=1)
        ys = [series(r.steps, r.cols[sig.key])[1] for _, sig in sigs for r in runs if sig.key in r.cols]
        if log_y and all((y > 0).all() for y in ys):  # a log axis would hide zeros (steps without update)
            fig.update_yaxes(type="log", row=row, col=1)
    main = runs[0]
    for x0, x1, state in alert_segments(main.timeline):
        fig.add_shape(type="rect", xref="x", yref="paper", x0=x0, x1=x1, y0=0, y1=1, fillcolor=STATE_COLORS[state],
                      line=dict(width=0), layer="below")
    marks = _markers(runs)
    xs = [s for r in runs for s in r.steps["step"].tolist()] if any(len(r.steps) for r in runs) else [0, 1]
    levels = marker_levels([m[0] for m in marks], [m[3] for m in marks], (min(xs), max(xs)))
    for (x, color, dash, text), level in zip(marks, levels):
        _vline(fig, x, color, dash, text, level)
    # one legend per panel, beside it (plotly >= 5.15 multiple legends), instead of one long list under the plot
    legends = {}
    for row in range(1, len(panels) + 1):
        dom = fig.layout["yaxis" if row == 1 else f"yaxis{row}"].domain
        legends["legend" if row == 1 else f"legend{row}"] = dict(x=1.01, xanchor="left", y=dom[1], yanchor="top",
                                                                  font=dict(size=10), bgcolor="rgba(0,0,0,0)")
    top = TITLE_PX + LABEL_PX * (max(levels, default=-1) + 1) + 20
    fig.update_layout(template=TEMPLATE, height=height, margin=dict(l=60, r=20, t=max(50, top), b=40),
                      hovermode="x unified", **legends)
    fig.update_xaxes(showticklabels=True)  # shared axes hide all but the bottom panel's ticks
    fig.update_xaxes(title_text="step", row=len(panels), col=1)
    return fig


def _markers(runs: Sequence) -> list[tuple[float, str, str, str]]:
    """(step, colour, dash, label) of the timeline's marker lines in step order: the outcome event, the first
    precursor, each step --auto-stabilize acted at, a baseline's collapse."""
    main, out = runs[0], []
    v = main.verdict
    if v.event is not None:  # the collapse, or the decline of a run that never learned enough to collapse
        what, step = v.event
        out.append((step, EVENT_COLORS[what], "solid", f"{what} {step}"))
    if v.first_precursor is not None:
        out.append((v.first_precursor["step"], "#e07000", "dash", f"precursor {v.first_precursor['step']}"))
    if main.actions is not None:  # what --auto-stabilize did, one marker per step that acted
        for step, grp in main.actions.groupby("step", sort=True):
            out.append((int(step), "#2060c0", "dot", "+".join(grp["action"]) + f" {int(step)}"))
    for r in runs[1:]:
        if r.verdict.collapse_step is not None:
            out.append((r.verdict.collapse_step, "#777777", "dot", f"{r.name} collapse"))
    return sorted(out, key=lambda m: m[0])


def heatmap_figure(hm: Heatmap, title: str) -> go.Figure:
    """log-ratio distribution per step bucket, A < 0 left and A > 0 right, with the clip band as lines."""
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=[f"A < 0 ({hm.counts['neg']:,} rows)", f"A > 0 ({hm.counts['pos']:,} rows)"])
    for c, sign in enumerate(("neg", "pos"), start=1):
        fig.add_trace(go.Heatmap(x=hm.x, y=hm.y, z=hm.z[sign], colorscale="Viridis", zmin=0,
                                 zmax=float(max(hm.z["neg"].max(), hm.z["pos"].max(), 1e-9)),
                                 showscale=c == 2, colorbar=dict(title="fraction"),
                                 hovertemplate="step %{x}<br>log ratio %{y:.3g}<br>fraction %{z:.3f}<extra></extra>"),
                      row=1, col=c)
        for b in hm.band:
            if math.isfinite(b) and abs(b) <= hm.limit:
                fig.add_shape(type="line", xref=f"x{'' if c == 1 else c} domain", yref=f"y{'' if c == 1 else c}",
                              x0=0, x1=1, y0=b, y1=b, line=dict(color="white", dash="dash", width=1))
    fig.update_layout(template=TEMPLATE, title=title, height=380, margin=dict(l=60, r=20, t=70, b=40))
    fig.update_yaxes(title_text=f"{hm.column} (clamped to +-{hm.limit:.3g})", row=1, col=1)
    fig.update_xaxes(title_text="step")
    return fig


def series_figure(runs: Sequence, keys: Sequence[str], title: str, max_points: int,
                  log_y: bool = False) -> go.Figure | None:
    """A small line chart of the given signal keys (first run solid, baseline dashed); None without data."""
    if not any(k in r.cols for r in runs for k in keys):
        return None
    fig = go.Figure()
    # signals far below the largest one's scale go on a right-hand axis, so they are not a flat line at zero
    scales = {k: _scale(runs, k) for k in keys}
    top = max(scales.values())
    right = {k for k, v in scales.items() if 0 < v and v * SCALE_RATIO < top}
    for j, key in enumerate(keys):
        for k, r in enumerate(runs):
            col = r.cols.get(key)
            if col is None:
                continue
            x, y = downsample_xy(*series(r.steps, col), max_points)
            label = S.BY_KEY[key].label if key in S.BY_KEY else key
            label += " (right axis)" if key in right else ""
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=label if k == 0 else f"{label} [{r.name}]",
                                     yaxis="y2" if key in right else "y",
                                     line=dict(color=COLORS[j % len(COLORS)], dash="solid" if k == 0 else "dash")))
    if right:
        fig.update_layout(yaxis2=dict(overlaying="y", side="right", showgrid=False, rangemode="tozero"))
    v = runs[0].verdict
    if v.event is not None:
        fig.add_vline(x=v.event[1], line=dict(color=EVENT_COLORS[v.event[0]], width=1))
    fig.update_layout(template=TEMPLATE, title=title, height=300, margin=dict(l=60, r=20, t=50, b=40),
                      legend=dict(orientation="h", y=-0.25))
    if log_y:
        fig.update_yaxes(type="log")
    fig.update_xaxes(title_text="step")
    return fig


def turns_figure(turns: pd.DataFrame) -> go.Figure:
    """Turn IS ratio s_ik by turn index: median with the 5-95 % range, and the out-of-band fraction."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    p50 = turns["p50"].to_numpy(dtype=np.float64)
    fig.add_trace(go.Scatter(x=turns["turn"], y=p50, mode="markers+lines", name="median s_ik",
                             error_y=dict(type="data", symmetric=False,
                                          array=turns["p95"].to_numpy(dtype=np.float64) - p50,
                                          arrayminus=p50 - turns["p05"].to_numpy(dtype=np.float64))),
                  secondary_y=False)
    fig.add_trace(go.Bar(x=turns["turn"], y=turns["oob_frac"], name="out of band", opacity=0.35),
                  secondary_y=True)
    fig.update_layout(template=TEMPLATE, title="Turn-level IS ratio by turn index", height=320,
                      margin=dict(l=60, r=60, t=50, b=40))
    fig.update_xaxes(title_text="turn index k", dtick=1)
    fig.update_yaxes(title_text="s_ik (5-50-95 %)", secondary_y=False)
    fig.update_yaxes(title_text="fraction out of band", secondary_y=True)
    return fig

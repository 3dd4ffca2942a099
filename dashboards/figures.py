"""Plotly figures from the small frames of arldiag.views (pure: data in, figure out)."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from arldiag.views.heatmap import Heatmap

# Runs in compare mode: no red (red means critical) and no orange/yellow (the alert shading)
RUN_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"]
# Series of one run: a distinct colour per metric of a panel (no red either)
SERIES_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#8c564b", "#e377c2"]
COLLAPSE_COLOR = "#c8102e"
STATE_ALPHA = {"watch": 0.10, "warning": 0.18, "critical": 0.28}  # compare mode: run colour, darker = more severe
METRIC_DASHES = ["solid", "dot", "dash", "dashdot", "longdash"]
STATE_COLORS = {"watch": "rgba(255, 215, 0, 0.18)", "warning": "rgba(255, 140, 0, 0.18)",
                "critical": "rgba(220, 20, 60, 0.14)"}
# hoverdistance -1: hovering anywhere over a panel picks the nearest step, so a click anywhere selects a step
LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=230, t=40, b=40), hovermode="x unified", hoverdistance=-1,
              legend=dict(x=1.01, xanchor="left", y=1, yanchor="top", font=dict(size=10)), uirevision="keep")
MARK_SHIFT = 16  # px a collapse/decline label sits above the plot area: the height of a subplot title (font 12)


def message_figure(text: str, height: int = 220) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=14))
    fig.update_layout(template="plotly_white", height=height, xaxis=dict(visible=False), yaxis=dict(visible=False),
                      margin=dict(l=20, r=20, t=20, b=20))
    return fig


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    return f"rgba({int(h[0:2], 16)}, {int(h[2:4], 16)}, {int(h[4:6], 16)}, {alpha})"


def recorded_panels(series: Mapping[str, pd.DataFrame], panels: Sequence[tuple[str, Sequence[str]]]
                    ) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """(panels with at least one recorded metric, keeping only those metrics; titles of the others)."""
    keep, missing = [], []
    for title, metrics in panels:
        have = [m for m in metrics if any(m in df and np.isfinite(df[m].to_numpy(float)).any()
                                           for df in series.values())]
        (keep.append((title, have)) if have else missing.append(title))
    return keep, missing


def panel_figure(series: Mapping[str, pd.DataFrame], panels: Sequence[tuple[str, Sequence[str]]],
                 bands: Mapping[str, Sequence[tuple[int, int, str]]] | Sequence[tuple[int, int, str]] = (),
                 height_per_panel: int = 190, title: str = "",
                 collapse: Mapping[str, int | None] | None = None,
                 decline: Mapping[str, int | None] | None = None,
                 partings: Mapping[str, int] | None = None) -> go.Figure:
    """Stacked line panels sharing the step axis (step ticks on every panel).

    ``series``: run name -> frame with ``step`` and metric columns. One run: each metric of a panel has its own
    colour. Several runs (compare mode): each run has its colour (never red), metrics are dash styles.
    ``bands``: {run: [(first, last, state)]} (or one run's list) shaded over all panels: one run in the alert
    colours, several runs each in its own colour (darker = more severe). ``collapse``: {run: collapse step},
    drawn as a vertical line; ``decline``: {run: decline step} (arldiag.label.run_decline), a dotted one.
    ``partings``: {metric: step} where two compared runs part (arldiag.diff): a dotted line on each panel that
    shows the metric, labelled on the panel.
    Panels whose metrics were not recorded are left out and named in the title."""
    panels, missing = recorded_panels(series, panels)
    if not panels:
        return message_figure("not recorded: " + "; ".join(missing))
    n = len(panels)
    height = max(240, height_per_panel * n + 80)
    # the gap holds the tick labels of the panel above and the title of the panel below (~70 px)
    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, vertical_spacing=min(0.3, 70 / height),
                        subplot_titles=[p[0] for p in panels])
    fig.update_annotations(font_size=12)  # the subplot titles (the only annotations so far)
    compare = len(series) > 1
    for row, (_, metrics) in enumerate(panels, start=1):
        # one legend per panel, beside it (plotly >= 5.15 multiple legends): names stay next to their curves
        legend = "legend" if row == 1 else f"legend{row}"
        top = fig.layout["yaxis" if row == 1 else f"yaxis{row}"].domain[1]
        fig.layout[legend] = dict(x=1.01, xanchor="left", y=top, yanchor="top", font=dict(size=10),
                                  tracegroupgap=2)
        for ri, (run, df) in enumerate(series.items()):
            for mi, m in enumerate(metrics):
                if m not in df or not np.isfinite(df[m].to_numpy(float)).any():
                    continue
                color = RUN_COLORS[ri % len(RUN_COLORS)] if compare else SERIES_COLORS[mi % len(SERIES_COLORS)]
                dash = METRIC_DASHES[mi % len(METRIC_DASHES)] if compare else "solid"
                # a sparse series (a validation score every N steps) is drawn point to point with markers
                sparse = bool(np.isfinite(df[m].to_numpy(float)).mean() < 0.5)
                fig.add_trace(go.Scatter(
                    x=df["step"], y=df[m], mode="lines+markers" if sparse else "lines",
                    name=f"{run} · {m}" if compare else m, legend=legend,
                    line=dict(color=color, dash=dash, width=1.6), connectgaps=sparse, marker=dict(size=4),
                    hovertemplate="%{y:.4g}"), row=row, col=1)
    if not isinstance(bands, Mapping):
        bands = {next(iter(series), ""): bands}
    for ri, run in enumerate(series):
        _add_bands(fig, bands.get(run, ()), RUN_COLORS[ri % len(RUN_COLORS)] if compare else None)
    marked = 0  # rows of marker labels above the top panel
    for ri, run in enumerate(series):
        for what, steps, dash in (("collapse", collapse, "dash"), ("decline", decline, "dot")):
            c = (steps or {}).get(run)
            if c is None:
                continue
            # one line over every panel (the step axes are shared), labelled once above the top panel
            color = RUN_COLORS[ri % len(RUN_COLORS)] if compare else COLLAPSE_COLOR
            fig.add_shape(type="line", xref="x", yref="paper", x0=c, x1=c, y0=0, y1=1,
                          line=dict(color=color, width=2, dash=dash), name=f"{what} {run}")
            # above the top panel's title (a label at y=1 prints over it), below the figure's own title
            fig.add_annotation(x=c, y=1, xref="x", yref="paper", yanchor="bottom", yshift=MARK_SHIFT + 12 * ri,
                               showarrow=False, text=f"{what} {c}" + (f" ({run})" if compare else ""),
                               font=dict(size=10, color=color))
            marked = max(marked, ri + 1)
    drawn = _add_partings(fig, panels, partings or {})
    note = ("not recorded: " + "; ".join(missing)) if missing else ""
    margin = dict(LAYOUT["margin"], t=LAYOUT["margin"]["t"] + (MARK_SHIFT + 12 * marked if marked else 0))
    fig.update_layout(**{k: v for k, v in LAYOUT.items() if k not in ("legend", "margin")}, margin=margin,
                      height=height + (margin["t"] - LAYOUT["margin"]["t"]),
                      title=dict(text=" · ".join(t for t in (title, note) if t) or None, font=dict(size=12)),
                      meta={**{k: {r: c for r, c in (v or {}).items() if c is not None}
                               for k, v in (("collapse", collapse), ("decline", decline))},
                            **({"partings": drawn} if drawn else {})})
    fig.update_xaxes(showticklabels=True)  # shared axes show ticks on the bottom panel only
    fig.update_xaxes(title_text="step", row=n, col=1)
    return fig


PARTING_COLOR = "#333333"


def _add_partings(fig: go.Figure, panels: Sequence[tuple[str, Sequence[str]]], partings: Mapping[str, int]
                  ) -> dict[str, int]:
    """A dotted line at each parting step on the panels that show the metric, with the metric named at its top;
    one line per step and panel (metrics of a panel often part together). Returns {metric: step} drawn."""
    drawn: dict[str, int] = {}
    for row, (_, metrics) in enumerate(panels, start=1):
        at: dict[int, list[str]] = {}
        for m in metrics:
            if m in partings:
                at.setdefault(int(partings[m]), []).append(m)
                drawn[m] = int(partings[m])
        xref, yref = ("x", "y domain") if row == 1 else (f"x{row}", f"y{row} domain")
        for step, names in sorted(at.items()):
            fig.add_shape(type="line", xref=xref, yref=yref, x0=step, x1=step, y0=0, y1=1,
                          line=dict(color=PARTING_COLOR, width=1.5, dash="dot"), name=f"parting {step}")
            fig.add_annotation(x=step, y=1, xref=xref, yref=yref, yanchor="top", xanchor="left", showarrow=False,
                               text=f"part {step}: {', '.join(names)}", font=dict(size=9, color=PARTING_COLOR))
    return drawn


def _add_bands(fig: go.Figure, bands: Sequence[tuple[int, int, str]], run_color: str | None = None) -> None:
    # One shape per band spanning the whole figure (yref=paper): cheap even with many panels.
    for first, last, state in bands:
        fill = _rgba(run_color, STATE_ALPHA.get(state, 0.1)) if run_color else \
            STATE_COLORS.get(state, "rgba(128,128,128,0.2)")
        fig.add_shape(type="rect", xref="x", yref="paper", x0=first - 0.5, x1=last + 0.5, y0=0, y1=1,
                      fillcolor=fill, line_width=0, layer="below", name=f"alert {state}")


def ratio_heatmap_figure(hm: Heatmap | None, level: str = "sequences") -> go.Figure:
    """Two heatmaps (A > 0, A < 0) of views.heatmap.ratio_heatmap: x = step, y = log IS ratio bin, colour = fraction
    of that step's rows; the clip band as dashed lines."""
    if hm is None:
        return message_figure(f"no {level} rows with a non-zero advantage")
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=["advantage > 0", "advantage < 0"])
    zmax = float(max(np.max(hm.z["pos"], initial=0), np.max(hm.z["neg"], initial=0))) or 1.0
    for col, sign in ((1, "pos"), (2, "neg")):
        fig.add_trace(go.Heatmap(
            x=[int(s) for s in hm.x], y=hm.y, z=hm.z[sign], colorscale="Viridis", zmin=0, zmax=zmax,
            showscale=(col == 2), colorbar=dict(title="fraction"),
            hovertemplate="step %{x}<br>log ratio %{y:.4f}<br>fraction %{z:.3f}<extra></extra>"), row=1, col=col)
        for e in hm.band:
            if math.isfinite(e) and abs(e) <= hm.limit:
                fig.add_hline(y=e, line=dict(color="white", dash="dash", width=1), row=1, col=col)
    what = "sequence log ratio log s_i" if level == "sequences" else "token log ratio log r_t (sampled)"
    fig.update_layout(**{**LAYOUT, "hovermode": "closest", "margin": {**LAYOUT["margin"], "t": 70}}, height=400,
                      title=f"{what}: distribution per step (dashed: clip band)")
    fig.update_yaxes(title_text=f"log ratio (clamped to +-{hm.limit:.3g})", row=1, col=1)
    fig.update_xaxes(title_text="step")
    return fig


def turn_heatmap_figure(df: pd.DataFrame) -> go.Figure:
    """x = step, y = turn index, colour = mean |log s_ik| (ATPO turn ratio drift)."""
    if df is None or df.empty:
        return message_figure("no turn rows (single-turn run, or turns not recorded)")
    piv = df.pivot_table(index="turn", columns="step", values="mean_abs_log_ratio", aggfunc="mean")
    fig = go.Figure(go.Heatmap(x=list(piv.columns), y=list(piv.index), z=piv.to_numpy(), colorscale="Magma",
                               colorbar=dict(title="mean |log s_ik|"),
                               hovertemplate="step %{x}<br>turn %{y}<br>%{z:.4f}<extra></extra>"))
    fig.update_layout(**{**LAYOUT, "hovermode": "closest"}, height=320, title="turn ratio drift by turn index",
                      xaxis_title="step", yaxis=dict(title="turn", dtick=1))
    return fig


def timeline_figure(timelines: Mapping[str, pd.DataFrame], findings_steps: Mapping[str, list[int]] | None = None,
                    actions: pd.DataFrame | None = None) -> go.Figure:
    """Collapse risk per step for each run, markers coloured by alert state; a dotted line with its label at each
    step where --auto-stabilize acted (``actions``: the first run's actions table)."""
    if not timelines or all(t is None or t.empty for t in timelines.values()):
        return message_figure("no alert timeline (detectors unavailable or no steps yet)")
    fig = go.Figure()
    colors = {"ok": "#2ca02c", "watch": "#e6c200", "warning": "#ff8c00", "critical": "#dc143c"}
    for ri, (run, t) in enumerate(timelines.items()):
        if t is None or t.empty:
            continue
        t = t.sort_values("step")
        fig.add_trace(go.Scatter(x=t["step"], y=t["risk"], mode="lines+markers", name=run,
                                 line=dict(color=RUN_COLORS[ri % len(RUN_COLORS)], width=1.5),
                                 marker=dict(size=6, color=[colors.get(s, "#888") for s in t["state"].astype(str)]),
                                 text=t["state"], hovertemplate="step %{x}<br>risk %{y:.2f}<br>%{text}"))
    if actions is not None and not actions.empty:
        for step, grp in actions.groupby("step", sort=True):
            label = "+".join(str(a) for a in grp["action"])
            fig.add_vline(x=int(step), line=dict(color="#2060c0", dash="dot", width=1.5))
            fig.add_annotation(x=int(step), y=1.05, text=label, showarrow=False, yanchor="bottom",
                               font=dict(color="#2060c0", size=11), name=f"action-{int(step)}")
    fig.update_layout(**LAYOUT, height=280, title="collapse risk (marker colour: alert state)",
                      yaxis=dict(range=[0, 1.05], title="risk"), xaxis_title="step")
    return fig


def token_figure(tokens: pd.DataFrame, color_by: str = "log_ratio") -> go.Figure:
    """Per-position bars of the token log ratio or k3 KL contribution of one sequence."""
    if tokens is None or tokens.empty:
        return message_figure("no token rows")
    col = "log_ratio" if color_by == "log_ratio" else "kl_k3"
    y = tokens[col].to_numpy(float)
    colors = token_colors(y, color_by)
    fig = go.Figure(go.Bar(x=tokens["pos"], y=y, marker_color=colors,
                           customdata=np.stack([tokens["token_id"], tokens["turn"]], axis=-1),
                           hovertemplate="pos %{x}<br>token %{customdata[0]} (turn %{customdata[1]})"
                                         "<br>%{y:.4g}<extra></extra>"))
    fig.update_layout(**{**LAYOUT, "hovermode": "closest"}, height=260, xaxis_title="position",
                      yaxis_title="log r_t = lp - lp_old" if col == "log_ratio" else "k3 = r - log r - 1")
    return fig


def token_colors(values: np.ndarray, color_by: str = "log_ratio", scale: float | None = None) -> list[str]:
    """CSS colours: log ratio on a diverging blue (r < 1) / red (r > 1) scale; KL contribution on a white -> red
    scale. ``scale`` is the value of full saturation (default: the largest |value|, at least 1e-6)."""
    v = np.nan_to_num(np.asarray(values, dtype=float), nan=0.0, posinf=0.0, neginf=0.0)
    s = scale if scale is not None else max(float(np.max(np.abs(v), initial=0.0)), 1e-6)
    out = []
    for x in v:
        a = min(abs(x) / s, 1.0)
        if color_by == "log_ratio" and x < 0:
            out.append(f"rgba(31, 119, 180, {0.15 + 0.85 * a:.3f})")
        else:
            out.append(f"rgba(214, 39, 40, {0.15 + 0.85 * a:.3f})")
    return out

"""Alert timeline view: collapse risk per step, every detector's finding with its explanation, stored alerts."""
from __future__ import annotations

from typing import Any, Sequence

from dash import html

from arldiag.dashboards import detectors_bridge, figures, queries, views_sequences
from arldiag.dashboards.source import RunSource
from arldiag.findings import severity_rank

SEVERITY_COLORS = {"info": "#5b8def", "watch": "#c9a800", "warning": "#e07b00", "critical": "#c8102e"}


def render_alerts(source: RunSource, runs: Sequence[str]) -> tuple[Any, list, list]:
    """(timeline figure, finding cards, stored-alert rows) for the selected runs (findings of the first run)."""
    if not runs:
        return figures.message_figure("no run selected"), [], []
    timelines, notes = {}, []
    for name in runs:
        t, note = source.cached(name, ("timeline",), detectors_bridge.timeline)
        timelines[name] = t
        if note:
            notes.append(note)
    acted = source.cached(runs[0], ("actions",), queries.actions)
    fig = figures.timeline_figure(timelines, actions=acted)
    found, reason = source.cached(runs[0], ("findings",), detectors_bridge.findings)
    # "inspect step" opens the sequence explorer: a run without sequence rows gets no button but one line saying why
    explorer = views_sequences.has_sequences(source, runs[0])
    cards = finding_cards(found, reason or (notes[0] if notes else ""), explorer=explorer)
    if not explorer and any(f.get("status") == "fired" for f in found):
        cards.insert(0, html.Div(views_sequences.no_sequences_text(runs[0]), className="muted",
                                 id="no-explorer-note"))
    stored = source.cached(runs[0], ("alerts",), queries.alerts)
    return fig, cards, alert_rows(stored) + action_rows(acted)


def finding_cards(found: list[dict], reason: str = "", explorer: bool = True) -> list:
    """One card per fired finding (most severe first), then the quiet ones folded; ``explorer``: whether each card
    gets an "inspect step" button (False for a run without sequence rows)."""
    if reason and not found:
        return [html.Div(reason, className="notice", id="detectors-note")]
    fired = sorted((f for f in found if f.get("status") == "fired"),
                   key=lambda f: (-severity_rank(f.get("severity", "")), f.get("first_step") or 0))
    others = [f for f in found if f.get("status") != "fired"]
    cards: list = []
    if not fired:
        cards.append(html.Div("No detector fired.", className="notice"))
    cards.extend(_card(f, explorer) for f in fired)
    if others:
        cards.append(html.Details([
            html.Summary(f"{len(others)} quiet or skipped detector(s)"),
            html.Ul([html.Li(f"{f.get('detector')}: {f.get('status')}"
                             + (f" ({f.get('skipped_reason')})" if f.get("skipped_reason") else ""))
                     for f in others])]))
    return cards


def _card(f: dict, explorer: bool = True) -> Any:
    """One fired finding: severity, title, first step (with a button opening the explorer there), explanation,
    recommendation and the evidence (folded)."""
    sev = f.get("severity", "info")
    steps = f.get("steps") or []
    goto = [] if f.get("first_step") is None or not explorer else [html.Button(
        f"inspect step {f['first_step']}", className="goto", n_clicks=0,
        id={"type": "goto-step", "index": int(f["first_step"])})]
    head = html.Div([html.Span(sev.upper(), className="sev", style={"color": SEVERITY_COLORS.get(sev)}),
                     html.B(f" {f.get('title') or f.get('detector')}"),
                     html.Span(f"  [{f.get('detector')}] first step {f.get('first_step')}, "
                               f"{len(steps)} step(s) affected ", className="muted"), *goto])
    return html.Div(className="finding", style={"borderLeftColor": SEVERITY_COLORS.get(sev, "#888")}, children=[
        head,
        html.P(f.get("explanation") or ""),
        html.P([html.B("Recommendation: "), f.get("recommendation") or "-"]),
        html.Details([html.Summary("evidence"), html.Pre(detectors_bridge.evidence_text(f.get("evidence")))]),
    ])


def action_rows(df) -> list:
    """The auto-stabilize actions of the run (nothing when it was not stabilized)."""
    if df is None or df.empty:
        return []
    head = ["step", "action", "params", "detector", "state", "reason", "policy"]
    body = [html.Tr([html.Td("" if v is None else str(v)) for v in (r[c] for c in head)])
            for r in df.tail(200).to_dict("records")]
    return [html.H4("Actions taken (auto-stabilize)"),
            html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(body)], className="actions",
                       id="actions-table")]


def alert_rows(df) -> list:
    if df is None or df.empty:
        return [html.Div("No alerts stored in this run (none raised online or by arldiag watch).", className="muted")]
    head = ["step", "severity", "detector", "title", "message", "source"]
    body = [html.Tr([html.Td("" if v is None else str(v)) for v in (r[c] for c in head)])
            for r in df.tail(200).to_dict("records")]
    return [html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(body)], className="alerts")]

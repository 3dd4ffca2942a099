"""Timeline of key signals: the catalog's TIMELINE panels over steps, with alert bands and the outcome event."""
from __future__ import annotations

from arldiag.report.blocks import Figure, Note, Section, Table, Text
from arldiag.report.panels import hidden_signals, timeline_panels
from arldiag.report.sections._common import figures, signal_summary
from arldiag.views import catalog as S

ID, TITLE = "timeline", "Timeline of key signals"


def build(report) -> Section:
    runs, mp = report.runs, report.max_points
    keys = [s.key for p in S.TIMELINE for s in p.signals if any(s.key in r.cols for r in runs)]
    if not keys:
        return Section(ID, TITLE, [Note("The run has no step metrics.")], nav="timeline")
    caption = ("Shaded bands: alert state (yellow watch, orange warning, red critical); blue dotted lines: "
               "auto-stabilize actions. Solid: this run" + (", dashed: baseline" if report.baseline else "")
               + f". Series are min-max downsampled to at most {mp} points; findings use the full data.")
    order = [sig.key for _, sigs, _ in timeline_panels(runs) for _, sig in sigs]
    hidden = hidden_signals(runs, order)
    if hidden:
        caption += " Not drawn: " + "; ".join(f"{S.BY_KEY[k].label} ({why})" for k, why in hidden.items()) + "."
    summary = Table(["signal"] + [r.name for r in runs],
                    [[S.BY_KEY[k].label] + [signal_summary(r, k) for r in runs] for k in keys])
    return Section(ID, TITLE, [Text(caption, muted=True, formats=("html",)),
                               Figure(lambda: figures().timeline_figure(runs, mp), alt=[summary])], nav="timeline")


def data(rep) -> dict:
    return {"signals": dict(rep.cols)}

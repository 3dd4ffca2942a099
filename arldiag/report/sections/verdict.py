"""Verdict: collapsed / declined / at risk / healthy per run, with the collapse step and the first precursor."""
from __future__ import annotations

from typing import Any

from arldiag.report import text as T
from arldiag.report.blocks import Box, Card, Section, Span, Table, Text

ID, TITLE = "verdict", "Verdict"


def _none(x: Any) -> Any:
    return x if x is not None else "none"


def build(report) -> Section:
    cards = []
    for r in report.runs:
        v = r.verdict
        rows = [("why", v.reason), ("collapse step", _none(v.collapse_step))]
        rows += [("decline step", v.decline_step)] if v.decline_step is not None else []
        rows += [("first precursor", T.precursor_line(v)), ("first warning alert", T.warning_line(v)),
                 ("worst alert state", v.max_state), ("fired findings", v.n_fired)]
        cards.append(Card(r.name, v.status, T.STATUS_COLORS.get(v.status, "#888"), rows, v.summary))
    v = report.main.verdict
    head = ["", report.main.name] + ([f"{report.baseline.name} (baseline)"] if report.baseline else [])
    lines = (("verdict", lambda x: x.status), ("why", lambda x: x.reason), ("collapse step", lambda x: _none(x.collapse_step)),
             ("decline step", lambda x: _none(x.decline_step)), ("first precursor", T.precursor_line),
             ("first warning alert", T.warning_line), ("worst alert state", lambda x: x.max_state),
             ("fired findings", lambda x: x.n_fired))
    return Section(ID, TITLE, [
        Box(cards, cls="verdicts", formats=("html",)),
        # Markdown: the status line, then the runs side by side in one table
        Text([Span(v.status.upper(), strong=True), f": {v.reason}. {v.details}".rstrip()], formats=("md",)),
        Table(head, [[name] + [fn(r.verdict) for r in report.runs] for name, fn in lines], formats=("md",)),
    ], nav="verdict")


def data(rep) -> dict:
    v = rep.verdict
    return {"verdict": v.status, "verdict_reason": v.reason, "alert_episode": v.to_dict()["episode"],
            "collapse_step": v.collapse_step, "decline_step": v.decline_step,
            "first_precursor": v.first_precursor, "first_warning_step": v.first_warning_step,
            "warning_lead_time": v.warning_lead_time, "max_state": v.max_state, "summary": v.summary}

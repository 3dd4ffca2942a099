"""The four ARLArena dimensions (loss aggregation, IS clipping, advantage design, dynamic filtering): what the run
did and what the data shows, for each (the content comes from report/dimensions.py)."""
from __future__ import annotations

from arldiag.report.blocks import Box, Bullets, Figure, Heading, Section, Span, Text
from arldiag.report.sections._common import figures

ID, TITLE = "dimensions", "The four ARLArena dimensions"


def build(report) -> Section:
    runs, mp = report.runs, report.max_points
    blocks = []
    for sec in report.main.sections:
        shows = [Text(Span("What the data shows", strong=True)), Bullets(sec.shows)]
        if sec.findings:
            shows += [Text(Span("Related findings", strong=True)), Bullets(sec.findings)]
        blocks += [Heading(sec.title, anchor=f"dim-{sec.key}"),
                   Box([Box([Text(Span("What the run did", strong=True)), Bullets(sec.did)]), Box(shows)], cls="two"),
                   Figure(lambda s=sec: figures().series_figure(runs, s.signals, s.title, mp))]
    return Section(ID, TITLE, blocks, nav="ARLArena dimensions")


def data(rep) -> dict:
    return {"sections": [s.to_dict() for s in rep.sections]}

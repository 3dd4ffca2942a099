"""Recommendations: each tied to the findings and the evidence it rests on."""
from __future__ import annotations

from arldiag.report.blocks import Bullets, Item, Note, Section, Span

ID, TITLE = "recommendations", "Recommendations"


def build(report) -> Section:
    recs = report.main.recommendations
    if not recs:
        return Section(ID, TITLE, [Note("No recommendation: no detector fired.")], nav="recommendations")
    return Section(ID, TITLE, [Bullets([Item([Span(f"[{r.severity}]", strong=True, cls=f"sev-{r.severity}"),
                                              f" {r.text}"], list(r.evidence), "Evidence")
                                        for r in recs], ordered=True)], nav="recommendations")


def data(rep) -> dict:
    return {"recommendations": [r.to_dict() for r in rep.recommendations]}

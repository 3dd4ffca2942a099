"""What moved before the collapse (or decline): the step metrics that moved most 10-20 steps before it."""
from __future__ import annotations

from arldiag.report import text as T
from arldiag.report.blocks import Note, Section, Table, Text

ID = "precursors"


def build(report) -> Section:
    rep = report.main
    word = T.event_word(rep)
    title, nav = f"What moved before the {word}", f"before the {word}"
    intro = T.precursor_intro(rep)
    if intro is None:  # nothing to say in a pasted issue; the HTML keeps its place in the page
        return Section(ID, title, [Note("The run neither collapsed nor declined.")], nav=nav, formats=("html",))
    blocks = [Text(intro)]
    if rep.precursors:
        blocks.append(Table(["metric", "z", "before", "lead window"],
                            [[p["metric"], T.num(p["z"], ".3g"), T.num(p["base_mean"]), T.num(p["lead_mean"])]
                             for p in rep.precursors]))
    return Section(ID, title, blocks, nav=nav)


def data(rep) -> dict:
    return {"precursors": rep.precursors}

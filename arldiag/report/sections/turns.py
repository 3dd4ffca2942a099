"""Turn-level IS ratios (ATPO s_ik): by turn index, and over steps."""
from __future__ import annotations

from arldiag.report import text as T
from arldiag.report.blocks import Figure, Note, Section, Table
from arldiag.report.sections._common import figures, series_block

ID, TITLE = "turns", "Turn-level IS ratios"


def build(report) -> Section:
    rep = report.main
    blocks = [Note(T.turns_missing(rep))]
    if rep.turns is not None:
        table = Table(["turn", "rows", "s_ik p05", "median", "p95", "out of band"],
                      [[int(r.turn), int(r.n), T.num(r.p05), T.num(r.p50), T.num(r.p95), T.num(r.oob_frac)]
                       for r in rep.turns.itertuples()])
        blocks.append(Figure(lambda: figures().turns_figure(rep.turns), alt=[table]))
    blocks.append(series_block(report, T.TURN_KEYS, "Turn ratios over steps"))
    return Section(ID, TITLE, blocks, nav="turns")

"""Side by side with the baseline (--baseline): verdicts, settings and each key signal of the two runs."""
from __future__ import annotations

from arldiag.report import text as T
from arldiag.report.blocks import Section, Table
from arldiag.report.sections._common import signal_summary
from arldiag.views import catalog as S

ID, TITLE = "baseline", "Side by side with the baseline"


def build(report) -> Section | None:
    if report.baseline is None:
        return None
    a, b = report.main, report.baseline
    keys = [s.key for p in S.TIMELINE for s in p.signals if s.key in a.cols or s.key in b.cols]
    rows = [["verdict", a.verdict.status, b.verdict.status],
            ["collapse step", a.verdict.collapse_step, b.verdict.collapse_step],
            ["first precursor", T.precursor_line(a.verdict), T.precursor_line(b.verdict)],
            ["fired findings", a.verdict.n_fired, b.verdict.n_fired],
            ["algorithm", a.manifest.get("algorithm"), b.manifest.get("algorithm")],
            ["clip", a.manifest.get("clip"), b.manifest.get("clip")]]
    rows += [[S.BY_KEY[k].label, *(signal_summary(r, k) for r in (a, b))] for k in keys]
    rows = [[n, *("none" if x is None else str(x) for x in xs)] for n, *xs in rows]
    return Section(ID, TITLE, [Table(["", a.name, f"{b.name} (baseline)"], rows, header_column=True)],
                   nav="baseline")

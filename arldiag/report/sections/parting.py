"""Where the runs part (--baseline): the settings that differ, where each shared metric parts from the baseline
beyond both runs' noise (arldiag.diff, docs/detectors.md "Where two runs part"), the first to part, the outcome's
parting and the lead, and the token statistics in the window before the outcome parts."""
from __future__ import annotations

import json

from arldiag.diff import text as DT
from arldiag.findings import jsonable
from arldiag.report.blocks import Bullets, Heading, Note, Section, Table

ID, TITLE = "parting", "Where the runs part"
TOP = 15  # partings in the table (the JSON holds every one)


def build(report) -> Section | None:
    if report.baseline is None:
        return None
    d = report.main.parting
    if d is None:
        return Section(ID, TITLE, [Note("The comparison with the baseline could not be computed.")], nav="parting")
    a, b = report.main.name, f"{report.baseline.name} (baseline)"
    blocks = [Bullets([f"A = {report.main.name}, B = {report.baseline.name} (the baseline)", *DT.summary(d)])]
    if d.settings:
        blocks += [Heading("Settings that differ (run.json)"),
                   Table(["setting", a, b], [[k, json.dumps(jsonable(x)), json.dumps(jsonable(y))]
                                             for k, x, y in d.settings])]
    acted = [f"{n}: " + ", ".join(f"{act} at step {s}" for s, act in acts) for n, acts in d.actions.items() if acts]
    if acted:
        blocks += [Heading("Closed-loop actions"), Bullets(acted)]
    if d.partings:
        rows = [[p.step, p.metric, DT.num(p.mean_a), DT.num(p.mean_b), DT.num(p.strength)] for p in d.partings[:TOP]]
        more = f" (the first {TOP} of {len(d.partings)})" if len(d.partings) > TOP else ""
        blocks += [Heading(f"Partings by step{more}"),
                   Table(["step", "metric", f"{a}: trailing median", f"{b}: trailing median", "gap / need"], rows)]
    token_rows = DT.token_rows(d)
    if token_rows:
        lo, hi = d.token_window
        blocks += [Heading(f"Token statistics in steps {lo}..{hi}, before the outcome parts"),
                   Table(["", a, b], token_rows, header_column=True)]
    return Section(ID, TITLE, blocks, nav="parting")


def data(rep) -> dict:
    """The comparison with the baseline (`arldiag diff --json`'s fields); null for a report without --baseline
    and for the baseline itself."""
    d = getattr(rep, "parting", None)
    return {"parting": d.to_dict() if d is not None else None}

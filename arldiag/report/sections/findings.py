"""Findings: the fired detectors (most severe first, as `arldiag detect` lists them), the quiet and skipped ones,
the alerts recorded online and what --auto-stabilize did."""
from __future__ import annotations

from arldiag.findings import level_steps, order_findings
from arldiag.report import text as T
from arldiag.report.blocks import Bullets, Cell, Folded, Heading, Note, Section, Span, Table, Text

ID, TITLE = "findings", "Findings"


def build(report) -> Section:
    rep = report.main
    fired = [f for f in order_findings(rep.findings) if f.fired]
    skipped = [f for f in rep.findings if f.status == "skipped"]
    quiet = sum(1 for f in rep.findings if f.status == "quiet")
    # the first step at each level reached next to the peak, so "critical" never reads as critical from step 1
    blocks = [Table(["peak severity", "detector", "first step at each level", "steps", "finding"],
                    [[Cell(f.severity, f"sev-{f.severity}"), f.detector, level_steps(f), len(f.steps),
                      [Span(f.title, strong=True), "\n", f.explanation]] for f in fired],
                    row_classes=[f"row-{f.severity}" for f in fired])
              if fired else Note("No detector fired."),
              Text(f"{quiet} detectors quiet, {len(skipped)} skipped.", muted=True, formats=("html",))]
    if skipped:
        blocks += [Folded("skipped detectors (missing data)",
                          [Bullets([f"{f.detector}: {f.skipped_reason}" for f in skipped])], formats=("html",)),
                   Text("Skipped (missing data): " + "; ".join(f"{f.detector} ({f.skipped_reason})" for f in skipped),
                        formats=("md",))]
    blocks.append(Text(T.alerts_line(rep), muted=True))
    if rep.alerts is not None:
        blocks.append(Folded("recorded alerts", [Table(
            ["step", "detector", "severity", "state", "title", "source"],
            [[a.step, a.detector, a.severity, a.state, a.title, a.source] for a in rep.alerts.itertuples()])],
            formats=("html",)))
    line = T.actions_line(rep)
    if line is not None:
        blocks += [Heading("Actions taken (auto-stabilize)", anchor="actions"), Text(line),
                   Table(["step", "action", "parameters", "trigger", "state", "reason"],
                         [[int(a.step), a.action, a.params, a.detector, a.state, a.reason]
                          for a in rep.actions.itertuples()], cls="actions")]
    return Section(ID, TITLE, blocks, nav="findings")


def data(rep) -> dict:
    return {"findings": [f.to_dict() for f in rep.findings],
            "alerts": [] if rep.alerts is None else rep.alerts.to_dict("records"),
            "actions": [] if rep.actions is None else rep.actions.to_dict("records")}

"""The report's sections, in the one order every format shows them. A section is a module with ``ID``,
``build(report) -> Section | None`` (None: nothing to show for this report) and, when it has fields a tool reads,
``data(run_report) -> dict`` (the JSON output). A new section is one module here and one entry in SECTIONS."""
from __future__ import annotations

from arldiag.report.sections import (baseline, dimensions, entropy, findings, mismatch, nalis, offenders, parting,
                                     precursors, recommendations, timeline, turns, verdict)

SECTIONS = (verdict, timeline, findings, recommendations, precursors, dimensions, nalis, mismatch, entropy, turns,
            offenders, baseline, parting)


def build_sections(report) -> list:
    """Every section's blocks for this report, in SECTIONS order."""
    return [s for s in (m.build(report) for m in SECTIONS) if s is not None]

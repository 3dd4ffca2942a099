"""Post-mortem reports (`arldiag report`): the same Findings the detectors produce, rendered as one self-contained
HTML file, Markdown for issue trackers, or JSON for tools.

Modules: build (gather a Report from arldiag.views and the detectors), verdict, recommend, dimensions (the four
ARLArena dimensions), sections/ (one module per report section, SECTIONS gives their order), blocks (what a section
is made of), figures (plotly), text (wording), html / markdown / jsonout (renderers), cli; data and signals keep
former names of arldiag.views.
"""
from __future__ import annotations

__all__ = ["build_report", "write_report", "render"]


def __getattr__(name: str):  # PEP 562: nothing heavy at import
    if name == "build_report":
        from arldiag.report.build import build_report

        return build_report
    if name in ("write_report", "render"):
        from arldiag.report import cli

        return getattr(cli, name)
    raise AttributeError(f"module 'arldiag.report' has no attribute {name!r}")

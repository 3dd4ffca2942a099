"""Post-mortem reports (`arldiag report`): the same Findings the detectors produce, rendered as one self-contained
HTML file, Markdown for issue trackers, or JSON for tools.

Modules: build (gather a Report), data (DuckDB queries), downsample, signals, verdict, recommend, dimensions
(the four ARLArena dimensions), figures (plotly), html / markdown / jsonout (renderers), cli.
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

"""JSON rendering of a Report for tools: per run, the ``data`` fields of every section (verdict, collapse step,
findings, recommendations, ...), in the section order. The field names are the documented format
(REPORT_JSON_VERSION); prose blocks are not part of it."""
from __future__ import annotations

import json
from typing import Any

from arldiag.findings import FINDINGS_VERSION, jsonable
from arldiag.report.sections import SECTIONS

REPORT_JSON_VERSION = "1.0"


def run_dict(rep) -> dict[str, Any]:
    out: dict[str, Any] = {"name": rep.name, "path": rep.path}
    for section in SECTIONS:
        if hasattr(section, "data"):
            out.update(section.data(rep))
    out["rows"] = dict(rep.rows)
    return out


def render_json(report) -> str:
    out = {"version": REPORT_JSON_VERSION, "findings_version": FINDINGS_VERSION, "generated": report.generated,
           "arldiag_version": report.version, **run_dict(report.main)}
    out["baseline"] = run_dict(report.baseline) if report.baseline is not None else None
    return json.dumps(jsonable(out), indent=2)

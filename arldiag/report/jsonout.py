"""JSON rendering of a Report for tools: verdict, collapse step, findings, recommendations (per run)."""
from __future__ import annotations

import json
from typing import Any

from arldiag.findings import FINDINGS_VERSION, jsonable

REPORT_JSON_VERSION = "1.0"


def run_dict(rep) -> dict[str, Any]:
    c = rep.comparison
    return {
        "name": rep.name,
        "path": rep.path,
        "verdict": rep.verdict.status,
        "collapse_step": rep.verdict.collapse_step,
        "decline_step": rep.verdict.decline_step,
        "first_precursor": rep.verdict.first_precursor,
        "first_warning_step": rep.verdict.first_warning_step,
        "warning_lead_time": rep.verdict.warning_lead_time,
        "max_state": rep.verdict.max_state,
        "summary": rep.verdict.summary,
        "recommendations": [r.to_dict() for r in rep.recommendations],
        "precursors": rep.precursors,
        "findings": [f.to_dict() for f in rep.findings],
        "sections": [s.to_dict() for s in rep.sections],
        "signals": dict(rep.cols),
        "rows": dict(rep.rows),
        "alerts": [] if rep.alerts is None else rep.alerts.to_dict("records"),
        "actions": [] if rep.actions is None else rep.actions.to_dict("records"),
        "neg_adv_low_is": None if c is None else {
            "labels": list(c.labels), "windows": [list(w) for w in c.windows],
            "metrics": {k: {"before": x, "at": y} for k, (x, y) in c.rows.items()}},
        "offenders": [{"step": o.step, "update": o.update, "sample_id": o.sample_id, "advantage": o.advantage,
                       "seq_ratio": o.seq_ratio, "kl_k3_sum": o.kl_k3_sum, "kl_share": o.kl_share,
                       "neg_adv_low_is": o.neg_adv_low_is, "source": o.source, "has_text": bool(o.text),
                       "n_token_rows": 0 if o.tokens is None else len(o.tokens)} for o in rep.offenders],
    }


def render_json(report) -> str:
    out = {"version": REPORT_JSON_VERSION, "findings_version": FINDINGS_VERSION, "generated": report.generated,
           "arldiag_version": report.version, **run_dict(report.main)}
    out["baseline"] = run_dict(report.baseline) if report.baseline is not None else None
    return json.dumps(jsonable(out), indent=2)

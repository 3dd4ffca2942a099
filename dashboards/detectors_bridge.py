"""Lazy access to arldiag.detectors: the dashboard works (and says "detectors unavailable") without them."""
from __future__ import annotations

import json
from typing import Any, Callable

import pandas as pd

from arldiag.dashboards import queries


def load() -> tuple[Any, Any, str]:
    """(detect, alert_timeline, "") or (None, None, reason)."""
    try:
        from arldiag.detectors import alert_timeline, detect
    except Exception as e:  # ImportError while the package is being written, or any error inside it
        return None, None, f"detectors unavailable ({type(e).__name__}: {e})"
    return detect, alert_timeline, ""


def timeline(run: Any) -> tuple[pd.DataFrame, str]:
    """(step, risk, state) per step from the detectors, or rebuilt from the stored alerts when they are missing."""
    _, alert_timeline, reason = load()
    if alert_timeline is not None:
        try:
            t = alert_timeline(run)
            if t is not None and len(t):
                return t[["step", "risk", "state"]].copy(), ""
            return pd.DataFrame(columns=["step", "risk", "state"]), ""
        except Exception as e:
            reason = f"alert_timeline failed ({type(e).__name__}: {e})"
    a = queries.alerts(run)
    if a.empty:
        return pd.DataFrame(columns=["step", "risk", "state"]), reason
    last = a.groupby("step", as_index=False).agg(risk=("risk", "max"), state=("state", "last"))
    return last, (reason + "; showing stored alerts") if reason else ""


def _label(run: Any, pick: Callable[[Any], Callable]) -> int | None:
    """The first run's step from the outcome label that ``pick`` takes from the detectors package
    (collapse_step or decline_step), None when there is none or without detectors."""
    try:
        import arldiag.detectors as det
    except Exception:  # noqa: BLE001 - the dashboard works without the detectors
        return None
    try:
        steps = pick(det)(run)
    except Exception:  # noqa: BLE001 - a run without outcome series has no label
        return None
    vals = [v for v in steps.values() if v is not None]
    return int(vals[0]) if vals else None


def collapse(run: Any) -> int | None:
    """The run's collapse step (the detectors' documented label), None when it did not collapse."""
    return _label(run, lambda det: det.collapse_step)


def decline(run: Any) -> int | None:
    """The step at which a run that never collapsed declined (arldiag.label.run_decline), else None."""
    return _label(run, lambda det: det.decline_step)


def findings(run: Any) -> tuple[list[dict], str]:
    """Findings of every registered detector as dicts (Finding.to_dict), or ([], reason)."""
    detect, _, reason = load()
    if detect is None:
        return [], reason
    try:
        return [f.to_dict() for f in detect(run)], ""
    except Exception as e:
        return [], f"detect failed ({type(e).__name__}: {e})"


def evidence_text(evidence: Any, limit: int = 600) -> str:
    """Short JSON view of a finding's evidence (series are long: keep the head)."""
    try:
        s = json.dumps(evidence, default=str)
    except (TypeError, ValueError):
        s = str(evidence)
    return s if len(s) <= limit else s[:limit] + " ..."

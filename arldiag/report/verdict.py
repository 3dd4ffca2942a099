"""The verdict at the top of a report: collapsed / declined / at risk / healthy, the collapse (or decline) step, the
first precursor and its lead time. Pure functions of the detectors' outputs (findings, the outcome label of
detectors.label, alert_timeline)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Sequence

import pandas as pd

from arldiag.findings import Finding, severity_rank
from arldiag.levels import LEVELS

COLLAPSED, AT_RISK, HEALTHY, TOO_SHORT = "collapsed", "at risk", "healthy", "not enough history"
# a run that never reached the collapse label's peak, then fell under half of its own best
# (detectors.label.run_decline)
DECLINED = "declined"
STATES = LEVELS
# Detectors whose signal *is* the collapse label (success / reward / valid-format ratio, the lagging signals):
# they make a run collapsed or at risk but are not precursors of the collapse.
LAGGING_KEYWORDS = ("success", "reward", "format")


def is_lagging(detector: str, lagging: Collection[str] | None = None) -> bool:
    """``lagging``: the names the detector registry flags as lagging; names it does not know fall back to
    keywords."""
    if lagging is not None and detector in lagging:
        return True
    known = _registry_names()
    if detector in known:
        return False
    d = detector.lower()
    return any(k in d for k in LAGGING_KEYWORDS)


def _registry_names() -> set[str]:
    try:
        from arldiag.detectors import REGISTRY
    except ImportError:
        return set()
    return set(REGISTRY)


def registry_lagging() -> set[str]:
    """Names of registered detectors flagged ``lagging`` (the outcome signals)."""
    try:
        from arldiag.detectors import REGISTRY
    except ImportError:
        return set()
    return {n for n, d in REGISTRY.items() if getattr(d, "lagging", False)}


def detector_warmup() -> int:
    """Steps the registered detectors need before they can fire at all (the largest ``warmup`` / ``min_history``
    of their parameters): a run shorter than that cannot be called healthy, only too short to tell."""
    try:
        from arldiag.detectors import REGISTRY
    except ImportError:
        return 0
    return max((int(d.params.get(k, 0)) for d in REGISTRY.values() for k in ("warmup", "min_history")
                if isinstance(d.params.get(k, 0), (int, float))), default=0)


@dataclass
class Verdict:
    status: str                         # collapsed | at risk | healthy
    collapse_step: int | None
    first_precursor: dict[str, Any] | None  # detector, title, severity, step, lead_time
    first_warning_step: int | None      # first step the alert timeline reached warning or critical
    warning_lead_time: int | None
    max_state: str                      # worst alert state over the run
    n_fired: int
    summary: str
    decline_step: int | None = None     # set only when the run declined (never learned enough to collapse)

    @property
    def event(self) -> tuple[str, int] | None:
        """("collapse", step) or ("decline", step): the outcome event the report explains; None for neither."""
        if self.collapse_step is not None:
            return "collapse", self.collapse_step
        return None if self.decline_step is None else ("decline", self.decline_step)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def first_precursor(findings: Sequence[Finding], collapse: int | None,
                    lagging: Collection[str] | None = None) -> dict[str, Any] | None:
    """Earliest fired, non-lagging finding of severity watch or above (ties: the more severe first)."""
    cands = [f for f in findings if f.fired and severity_rank(f.severity) >= 1 and f.first_step is not None
             and not is_lagging(f.detector, lagging)]
    if not cands:
        return None
    f = min(cands, key=lambda f: (f.first_step, -severity_rank(f.severity), f.detector))
    lead = None if collapse is None else int(collapse) - int(f.first_step)
    return {"detector": f.detector, "title": f.title, "severity": f.severity, "step": int(f.first_step),
            "lead_time": lead}


def first_state_step(timeline: pd.DataFrame | None, min_state: str = "warning") -> int | None:
    if timeline is None or timeline.empty or "state" not in timeline:
        return None
    hit = timeline[timeline["state"].map(lambda s: STATES.index(s) if s in STATES else 0) >= STATES.index(min_state)]
    return None if hit.empty else int(hit["step"].min())


def max_state(timeline: pd.DataFrame | None) -> str:
    if timeline is None or timeline.empty or "state" not in timeline:
        return "ok"
    return max(timeline["state"], key=lambda s: STATES.index(s) if s in STATES else 0)


def verdict(findings: Sequence[Finding], collapse: int | None, timeline: pd.DataFrame | None = None,
            lagging: Collection[str] | None = None, n_steps: int | None = None,
            warmup: int | None = None, decline: int | None = None) -> Verdict:
    """``n_steps``: steps recorded; below ``warmup`` (default: detector_warmup()) a quiet run is "not enough
    history", not healthy. ``decline``: the step at which a run without a collapse declined
    (detectors.decline_of); lead times then count to it."""
    if collapse is not None:
        decline = None  # a collapse wins: run_decline never marks a collapsed run, a caller might
    event = collapse if collapse is not None else decline
    fired = [f for f in findings if f.fired]
    worst = max((severity_rank(f.severity) for f in fired), default=-1)
    state = max_state(timeline)
    warn = first_state_step(timeline)
    pre = first_precursor(findings, event, lagging)
    if collapse is not None:
        status = COLLAPSED
    elif decline is not None:
        status = DECLINED
    elif worst >= severity_rank("warning") or STATES.index(state) >= STATES.index("warning"):
        status = AT_RISK
    else:
        status = HEALTHY
        warmup = detector_warmup() if warmup is None else warmup
        if n_steps is not None and n_steps < warmup:
            status = TOO_SHORT
    parts = [{COLLAPSED: f"Collapsed at step {collapse}.",
              DECLINED: f"Declined at step {decline}: the outcome never reached the collapse label's peak, then fell "
                        "under half of its own best to the end.",
              AT_RISK: "At risk: warnings fired, no collapse (yet).",
              HEALTHY: "Healthy: no warning or critical finding and no collapse.",
              TOO_SHORT: f"Not enough history: {n_steps} step(s) recorded, the detectors need {warmup} before "
                         "they can tell a healthy run from a failing one."}[status]]
    if pre is not None:
        what = "collapse" if collapse is not None else "decline"
        lead = f", {pre['lead_time']} steps before the {what}" if pre["lead_time"] is not None else ""
        parts.append(f"First precursor: {pre['detector']} ({pre['severity']}) at step {pre['step']}{lead}.")
    if warn is not None and event is not None:
        parts.append(f"First warning alert at step {warn} (lead time {event - warn} steps).")
    return Verdict(status=status, collapse_step=None if collapse is None else int(collapse), first_precursor=pre,
                   first_warning_step=warn, warning_lead_time=None if (warn is None or event is None)
                   else int(event) - warn, max_state=state, n_fired=len(fired), summary=" ".join(parts),
                   decline_step=None if decline is None else int(decline))

"""Findings: what a detector concludes, as a versioned, JSON-serialisable snapshot (Evidently-style).

The report, the dashboard, `arldiag detect --json` and the alerts table all render the same objects.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from arldiag.levels import SEVERITIES, rank

FINDINGS_VERSION = "1.0"
STATUSES = ("fired", "quiet", "skipped")


def severity_rank(severity: str) -> int:
    """0 = info ... 3 = critical; -1 for anything else (quiet/skipped findings)."""
    return rank(severity) if severity in SEVERITIES else -1


_STATUS_ORDER = {"fired": 0, "skipped": 1, "quiet": 2}


def order_findings(findings: "list[Finding]") -> "list[Finding]":
    """The one order every output lists findings in (CLI, HTML, Markdown): fired ones first, most severe first,
    then earliest first step, then name; then skipped, then quiet ones, by name."""
    return sorted(findings, key=lambda f: (_STATUS_ORDER.get(f.status, 3), -severity_rank(f.severity) if f.fired
                                           else 0, f.first_step if f.fired and f.first_step is not None else 0,
                                           f.detector))


def level_steps(f: "Finding") -> str:
    """The first step at each level a fired finding reached ("watch at 20, warning at 75, critical at 80"), from
    the evaluator's ``evidence["first_at"]``; a finding without it (built by hand, an older JSON) gives its peak
    severity and first step."""
    first_at = f.evidence.get("first_at") or {}
    if not first_at:
        return f"{f.severity} from step {f.first_step}" if f.first_step is not None else f.severity
    return ", ".join(f"{lv} at {first_at[lv]}" for lv in SEVERITIES if lv in first_at)


def jsonable(x: Any) -> Any:
    """JSON-safe copy: NaN/Inf -> None, numpy scalars -> Python, tuples -> lists."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        try:
            x = x.item()
        except (TypeError, ValueError):
            pass
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


@dataclass
class Finding:
    detector: str                 # registry name
    status: str                   # fired | quiet | skipped
    severity: str = "info"        # info | watch | warning | critical (meaningful when fired)
    title: str = ""
    first_step: int | None = None  # first step at which the condition held
    steps: list[int] = field(default_factory=list)   # steps affected
    explanation: str = ""         # plain language: what happened and why it matters
    recommendation: str = ""      # what to change, naming the evidence it rests on
    evidence: dict[str, Any] = field(default_factory=dict)  # e.g. {"series": {...}, "top_sequences": [...]}
    run: str | None = None
    skipped_reason: str = ""      # when status == "skipped": which column/table the run lacks

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    @property
    def fired(self) -> bool:
        return self.status == "fired"

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"version": FINDINGS_VERSION, **asdict(self)})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        d = dict(d)
        version = str(d.pop("version", FINDINGS_VERSION))
        if int(version.split(".")[0]) > int(FINDINGS_VERSION.split(".")[0]):
            raise ValueError(f"findings version {version} is newer than this arldiag ({FINDINGS_VERSION}); upgrade")
        return cls(**d)


def findings_to_json(findings: list[Finding], **extra: Any) -> str:
    return json.dumps(jsonable({"version": FINDINGS_VERSION, **extra,
                              "findings": [f.to_dict() for f in findings]}), indent=2)


def findings_from_json(text: str) -> list[Finding]:
    data = json.loads(text)
    return [Finding.from_dict(f) for f in data["findings"]]

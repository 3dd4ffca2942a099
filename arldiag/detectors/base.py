"""Detector = a frozen config (name, parameters, thresholds) + one pure rule over a bounded step window.

The rule is written once and evaluated by both evaluators (DESIGN.md "Two evaluators, one definition"):
the batch evaluator (`detectors.batch`, feeding the rows of the DuckDB ``steps`` view) and the online Monitor
(feeding the Collector's per-step metrics dicts). Both push one step at a time into the same ``Evaluator``
(`detectors.engine`), so the findings cannot drift apart. This module imports only the standard library and numpy:
it runs inside the training process.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping

from arldiag.levels import LEVELS  # index = level: a rule returns level 1..3 when it fires (re-exported)

if TYPE_CHECKING:  # pragma: no cover
    from arldiag.detectors.window import Window

# Parameters that are windows in optimizer steps -> the fewest logged points each may shrink to when a run logs
# every few steps (Detector.at_interval): a TRL run logged every 5 steps reads a 10-step baseline from 3 points.
WINDOW_PARAMS = {"smooth": 2, "baseline_steps": 3, "trend_steps": 3, "warmup": 2, "min_history": 3, "lag": 1,
                 "cov_steps": 3}


@dataclass(frozen=True)
class Signal:
    """What a rule says about the current step when it fires.

    level: 1 watch, 2 warning, 3 critical. value: the headline number (e.g. the smoothed fraction or the ratio to
    the baseline), named by ``metric``. note: one short plain-language line about this step.
    """
    level: int
    value: float
    metric: str
    note: str = ""

    def __post_init__(self) -> None:
        if self.level not in (1, 2, 3):
            raise ValueError(f"level must be 1, 2 or 3, got {self.level!r}")


# rule(window, state, params) -> Signal | None. `state` is the detector's own small dict (bounded: running peaks,
# early baselines); `window` holds the last `window_size` values of each column the detector reads.
Rule = Callable[["Window", dict, Mapping[str, Any]], "Signal | None"]


@dataclass(frozen=True)
class Detector:
    name: str
    title: str
    inputs: tuple[str, ...]          # any-of: the detector is skipped when none of them is ever finite in the run
    rule: Rule
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    columns: tuple[str, ...] = ()    # every step column the rule reads (inputs are added automatically)
    explanation: str = ""            # what the condition means and why it matters
    recommendation: str = ""
    source: str = ""                 # paper / metric definition it rests on
    lagging: bool = False            # True for the outcome signal (reward/success collapse), also used as label
    evidence_sql: str | None = None  # batch-only: ordering expression over the `sequences` view for top sequences
    evidence_where: str = "true"     # batch-only filter for those sequences
    token_evidence_sql: str | None = None  # batch-only: ordering expression over the `tokens` view (top tokens)

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"name must be a non-empty identifier, got {self.name!r}")
        if not self.inputs:
            raise ValueError(f"detector {self.name!r}: inputs must name at least one step column")
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))
        object.__setattr__(self, "columns", tuple(dict.fromkeys(tuple(self.inputs) + tuple(self.columns))))

    def with_params(self, **overrides: Any) -> "Detector":
        """A copy with some parameters changed (unknown names are an error, so typos do not pass silently)."""
        unknown = set(overrides) - set(self.params)
        if unknown:
            raise ValueError(f"detector {self.name!r} has no parameter(s) {sorted(unknown)}; "
                             f"known: {sorted(self.params)}")
        return dataclasses.replace(self, params={**self.params, **overrides})

    def at_interval(self, interval: int) -> "Detector":
        """The detector for a run logged every ``interval`` optimizer steps: each window parameter
        (``WINDOW_PARAMS``, declared in optimizer steps) becomes the number of logged points that covers as many
        steps, ceil(k / interval), and at least the parameter's minimum of points (a smoothing over one point is
        none). ``interval`` 1 returns the detector unchanged."""
        if interval <= 1:
            return self
        over = {k: max(min(WINDOW_PARAMS[k], int(v)), math.ceil(int(v) / interval))
                for k, v in self.params.items() if k in WINDOW_PARAMS and isinstance(v, int)}
        return self.with_params(**over) if over else self

    def evaluate(self, window: "Window", state: dict) -> "Signal | None":
        return self.rule(window, state, self.params)



def strongest(parts: list[tuple[int, float, str, str]]) -> Signal | None:
    """Combine a rule's sub-signals ``(level, value, metric, note)``: the highest level gives the headline value
    and metric (the earlier part wins a tie), and the notes of every firing part are kept."""
    firing = [part for part in parts if part[0]]
    if not firing:
        return None
    level, value, metric, _ = max(firing, key=lambda part: part[0])
    return Signal(level, value, metric, "; ".join(part[3] for part in firing))

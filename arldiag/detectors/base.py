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


# The four dimensions of ARLArena's stability analysis that the report groups findings under
DIMENSIONS = ("loss_aggregation", "is_clipping", "advantage_design", "dynamic_filtering")

# A detector's role in the closed loop -> what the built-in policies answer it with (arldiag.stabilize.policies
# reads the roles from the registry; ARLArena: negative-advantage low-IS sequences drive the collapse of
# tolerant-clipping losses, and KL and gradient spikes come with it).
LOOP_ROLES = {
    "off_policy": "the update is too far off-policy: at warning or above the auto-stabilize policies switch on the "
                  "low-IS mask; with the mask on, the default policy tightens the clip range at critical",
    "broken": "the policy itself has broken: at critical the default policy names it as the cause of its rollback "
              "to the last calm checkpoint",
    "entropy": "the entropy is running away: at warning or above the default policy switches the entropy bonus off "
               "when the run has one, else brings clip-high back down to clip-low when the band is asymmetric",
    "length": "responses pile up at the length cap: at warning or above the default policy leaves truncated "
              "responses out of the policy-gradient term",
}

# What a detector parameter means, for the names several detectors share (a detector documents its own
# parameters in Detector.param_docs); arldiag.toml's comments and docs/detectors.md read them from here.
PARAM_DOCS = {
    "conv_success": "a converged run: the outcome is at least this ...",
    "conv_keep": "... and within this share of its peak",
    "improve_keep": "the outcome counts as climbing while within this share of its peak ...",
    "improve_rise": "... and it rose by at least this over the last 20 steps",
    "improve_z": "... and by at least this many standard deviations of that rise's noise, to a new peak",
    "abs_levels": "absolute values of the metric for watch / warning / critical",
    "ratio_levels": "ratios to the metric's baseline for watch / warning / critical",
    "frac_levels": "fractions for watch / warning / critical",
    "levels": "values for watch / warning / critical",
    "isolated_levels": "isolated-token measure for watch / warning / critical",
    "trunc_levels": "truncated-response fractions for watch / warning / critical",
    "baseline_steps": "steps in the rolling baseline",
    "min_history": "steps of history needed before the rule can fire",
    "floor": "lower bound of the baseline (avoids huge ratios over a near-zero baseline)",
    "min_value": "the metric must be at least this large to fire on a ratio",
    "min_growth": "the metric must have grown by this factor over its baseline",
    "min_rise": "rise over the early level needed to fire",
    "trunc_min_rise": "rise of the truncated fraction needed to fire",
    "smooth": "steps averaged before comparing (smoothing)",
    "lag": "compare with the level this many steps earlier",
    "trend_steps": "steps over which the trend is measured",
    "warmup": "first steps ignored (the run is still settling)",
    "early_frac": "fraction of the early level the metric must fall below",
    "cov_steps": "steps of covariance history considered",
    "cov_pos_share": "share of those steps with positive Cov(logp, A) needed",
    "kl_share_min": "minimum share of the KL carried by the flagged sequences",
    "kl_share_ratio": "KL share relative to their share of sequences",
    "min_kl": "minimum KL for concentration to matter",
    "min_ratio": "minimum concentration ratio",
    "min_peak": "the metric must have peaked at least this high before a collapse counts",
    "critical_token_frac": "fraction of non-finite tokens that is critical",
    "bulk_k3_max": "maximum bulk k3 mismatch for an isolated drift to count",
}


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
    # its level is a floor of the alert state: while it fires, the state is at least that level at once (no
    # hysteresis points, no corroboration gate, no demotion): detectors/floor.py, the collapse label's own conditions
    floor: bool = False
    evidence_sql: str | None = None  # batch-only: ordering expression over the `sequences` view for top sequences
    evidence_where: str = "true"     # batch-only filter for those sequences
    token_evidence_sql: str | None = None  # batch-only: ordering expression over the `tokens` view (top tokens)
    # -- the rest of the declaration: docs/detectors.md's catalog is rendered from it (detectors/catalog_doc.py)
    summary: str = ""                # one line under the catalog heading
    rule_doc: str = ""               # the rule in words and formulas (ALGORITHMS.md notation)
    param_docs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # its own parameters;
    #                                  names several detectors share are documented in PARAM_DOCS
    remedies: tuple = ()             # advice.Remedy items: the recommendation fitted to the run's config
    dimension: str | None = None     # the ARLArena dimension the report files it under (report/dimensions.py)
    loop_role: str | tuple[str, ...] | None = None  # its closed-loop role(s), LOOP_ROLES (stabilize/policies.py);
    #                                  a tuple when it plays both (a non-finite update is off-policy and broken)
    loop_priority: int = 0           # which finding of a role the built-in policies name as the cause when several
    #                                  fire at the same level and none leads the risk: the lowest (then catalog order)

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"name must be a non-empty identifier, got {self.name!r}")
        if not self.inputs:
            raise ValueError(f"detector {self.name!r}: inputs must name at least one step column")
        undocumented = sorted(k for k in self.params if k not in self.param_docs and k not in PARAM_DOCS)
        if undocumented:
            raise ValueError(f"detector {self.name!r}: document parameter(s) {undocumented} in its param_docs")
        if self.dimension is not None and self.dimension not in DIMENSIONS:
            raise ValueError(f"detector {self.name!r}: dimension must be one of {DIMENSIONS}, got {self.dimension!r}")
        bad_roles = [r for r in self.loop_roles if r not in LOOP_ROLES]
        if bad_roles or (self.loop_role is not None and not self.loop_roles):
            raise ValueError(f"detector {self.name!r}: loop_role must be None, one of {tuple(LOOP_ROLES)} or a tuple "
                             f"of them, got {self.loop_role!r}")
        if not isinstance(self.loop_priority, int) or isinstance(self.loop_priority, bool):
            raise ValueError(f"detector {self.name!r}: loop_priority must be an int, got {self.loop_priority!r}")
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))
        object.__setattr__(self, "param_docs", MappingProxyType(dict(self.param_docs)))
        object.__setattr__(self, "columns", tuple(dict.fromkeys(tuple(self.inputs) + tuple(self.columns))))

    @property
    def loop_roles(self) -> tuple[str, ...]:
        """``loop_role`` as a tuple (() when it has none)."""
        r = self.loop_role
        return () if r is None else (r,) if isinstance(r, str) else tuple(r)

    def param_doc(self, name: str) -> str:
        """What parameter ``name`` means: the detector's own doc, else the shared one."""
        return self.param_docs.get(name) or PARAM_DOCS.get(name, "")

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

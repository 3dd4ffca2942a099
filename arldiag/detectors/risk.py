"""Per-step collapse risk in [0, 1] and the alert state machine (ok / watch / warning / critical) with hysteresis.

risk_t = 1 - prod_d (1 - score(level_{d,t}))   (noisy-OR: independent pieces of evidence add up; one detector at
"warning" alone gives a warning-level risk; watch-level signals stay "watch" until three agree at one step:
1 - 0.78^2 = 0.39, 1 - 0.78^3 = 0.53).

The state is the highest of three independent *latches*, one per level L (watch, warning, critical). Latch L
opens at a step where the risk has reached its threshold T_L on each of the last n_L logged points (n_L: the
"for:" clause of Prometheus alert rules; a one-point blip of a noisy metric raises nothing) and closes after e
consecutive points below T_L - exit_margin (so a noisy metric does not flap); n_L and e are counted both in
optimizer steps and in logged points, whichever asks more points: max(enter_points, ceil(enter_steps / interval)),
max(exit_points, ceil(exit_steps / interval)) (a log written every 5 steps has few points, and one point is one
batch's noise however many steps it spans). critical_steps replaces enter_steps for the critical latch (1: a NaN
must not wait).

Why independent latches: each latch is a monotone function of its own threshold. Lowering T_L only adds points
where the risk reaches it and removes points that count as calm, so the latch is open on a superset of steps, and
the first watch or warning can only come earlier (an earlier design carried the state of one level into the next
and was not monotone). For the same reason ``risk_for`` changes the elements of ``enter`` a user set, not
the whole triple (``with_changes``).

Corroboration (step-scalar profile, ``corroborate``): while the task score holds at its peak and keeps its trend,
precursors of one family alone (length, update size, entropy, ...; ``FAMILIES``) open at most a watch: a healthy run
can reach its length cap or drift far from its reference while it still learns. A second family, the score itself
(no longer holding, or a lagging detector firing), or one precursor at its own critical level on
``solo_critical_steps`` consecutive optimizer steps corroborates it. An episode already open stays open.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from arldiag.detectors.base import LEVELS


def _doc(default, doc: str):
    """A RiskConfig field with its meaning (arldiag.toml's comments and `arldiag init` read ``metadata["doc"]``)."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class RiskConfig:
    level_scores: tuple[float, float, float, float] = _doc(
        (0.0, 0.22, 0.55, 0.85), "score of a detector at level ok / watch / warning / critical (combined by noisy-OR)")
    enter: tuple[float, float, float] = _doc((0.25, 0.5, 0.8),
                                             "risk needed to enter the watch / warning / critical state")
    exit_margin: float = _doc(0.1, "the risk must fall this far below a threshold to leave the state")
    exit_steps: int = _doc(3, "steps below the threshold before leaving a state")
    # 2: on the 13 sample runs of seeds 0 and 1, 11 -> 8 false-alarm episodes, leads 0-1 step shorter
    # (docs/detectors.md "Results on the first sample runs")
    enter_steps: int = _doc(2, "consecutive steps above a threshold before entering a state")
    # 1 = at once (a NaN must not wait). 2 asks a one-step KL spike, common on healthy runs of the suite, to last or
    # to be joined by a second signal
    critical_steps: int = _doc(1, "consecutive steps at critical risk before entering critical (1 = at once)")
    # the false-alarm sources on the dev runs, chosen by the calibration
    demote: tuple[str, ...] = _doc((), "detectors whose level counts one lower in the risk (they warn only with a "
                                       "second signal)")
    # the least evidence in logged points, whatever the steps ask: a log written every 5 steps turns enter_steps=5
    # into one point, and one point is one batch's noise (binomial noise of 8 samples: a score in steps of 0.125)
    enter_points: int = _doc(1, "logged points above a threshold before entering a state (at least; with "
                                "enter_steps and critical_steps, whichever asks more points)")
    exit_points: int = _doc(1, "logged points below the exit threshold before leaving a state (at least; with "
                               "exit_steps, whichever asks more points)")
    corroborate: bool = _doc(False, "while the outcome is not weakening beyond its noise, one precursor family "
                                    "alone opens at most a watch (until it has held critical, solo_critical_steps)")
    solo_critical_steps: int = _doc(10, "optimizer steps one precursor family alone must stay critical to warn while "
                                        "the outcome holds (with corroborate; at least 2 logged points)")

    def at_interval(self, interval: int) -> "RiskConfig":
        """The same hysteresis for a run logged every ``interval`` optimizer steps: enter_steps, exit_steps,
        critical_steps and solo_critical_steps are optimizer steps, so each becomes ceil(k / interval) logged points
        (at least 1; AlertState then asks at least enter_points / exit_points)."""
        if interval <= 1:
            return self
        rows = lambda k: max(1, math.ceil(k / interval))  # noqa: E731
        return dataclasses.replace(self, enter_steps=rows(self.enter_steps), exit_steps=rows(self.exit_steps),
                                   critical_steps=rows(self.critical_steps),
                                   solo_critical_steps=rows(self.solo_critical_steps))

    def with_changes(self, changes: Mapping[str, object], shipped: "RiskConfig") -> "RiskConfig":
        """These settings with a user's ``changes`` applied, each relative to ``shipped`` (the settings the user's
        file was written against): a field changed as a whole, but of ``enter`` only the thresholds that differ
        from ``shipped.enter`` (lowering the watch threshold of the token profile's triple must not carry its
        warning threshold into the step-scalar profile). Thresholds above a changed one are raised to it at least,
        so the triple stays ascending."""
        out = {k: v for k, v in changes.items() if k != "enter"}
        if "enter" in changes:
            new, old = tuple(float(x) for x in changes["enter"]), tuple(shipped.enter)  # type: ignore[union-attr]
            if len(new) != len(old):
                raise ValueError(f"enter must have {len(old)} thresholds, got {changes['enter']}")
            enter, changed = list(self.enter), False
            for i, (a, b) in enumerate(zip(new, old)):
                if a != b:
                    enter[i], changed = a, True
            if changed:
                enter = [max(enter[: i + 1]) if i and new[i] == old[i] else x for i, x in enumerate(enter)]
            out["enter"] = tuple(enter)
        return dataclasses.replace(self, **out)

    def __post_init__(self) -> None:
        if list(self.enter) != sorted(self.enter) or not all(0 < t <= 1 for t in self.enter):
            raise ValueError(f"enter must be ascending thresholds in (0, 1], got {self.enter}")
        if self.exit_steps < 1:
            raise ValueError(f"exit_steps must be >= 1, got {self.exit_steps}")
        if self.enter_steps < 1:
            raise ValueError(f"enter_steps must be >= 1, got {self.enter_steps}")
        for k in ("critical_steps", "enter_points", "exit_points", "solo_critical_steps"):
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1, got {getattr(self, k)}")
        if not 0 <= self.exit_margin < min(self.enter):
            raise ValueError(f"exit_margin must be in [0, {min(self.enter)}), got {self.exit_margin}")


CALIBRATED = Path(__file__).with_name("calibrated.json")  # written by benchmarks/calibrate.py (dev runs only)


# Evidence profiles: a run with token statistics (a Collector's record_update: the reference trainer, the TRL and
# verl hooks) and a run with step scalars only (an imported log, a trainer that forwards its logged metrics). The
# two see different detectors (no token-level rule can run on step scalars), so each has its own fitted risk
# settings: ``risk`` and ``risk_steps`` in calibrated.json.
PROFILES = ("tokens", "steps")


def profile_of(metrics: Mapping[str, object]) -> str:
    """"tokens" when the step carries token statistics (n_tokens > 0), else "steps"."""
    try:
        n = float(metrics.get("n_tokens"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "steps"
    return "tokens" if n > 0 else "steps"


def calibrated_risk(path: Path = CALIBRATED, profile: str = "tokens") -> RiskConfig:
    """RiskConfig with the fields the calibration chose on the dev runs (``risk``, or ``risk_steps`` for the
    step-scalar profile, in calibrated.json) when the file says ``"apply": true`` (a fit on a real dev split, or
    ``--apply``); the class defaults otherwise (no file, or a stand-in fit that only proposes values)."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return RiskConfig()
    key = "risk" if profile == "tokens" else "risk_steps"
    fields = (data.get(key) or {}) if data.get("apply") is True else {}
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    return RiskConfig(**fields)


def risk_of(settings) -> RiskConfig:
    """The [risk] section of an arldiag.settings.Settings as a RiskConfig (every field as the settings give it)."""
    return RiskConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in settings.values["risk"].items()})


def risk_for(settings, profile: str) -> RiskConfig:
    """The risk settings of a profile ("tokens" or "steps", PROFILES) under an arldiag.settings.Settings: its
    calibrated fit with the settings' changes applied on top, each relative to the shipped (token) settings the file
    shows (RiskConfig.with_changes: of ``enter``, only the thresholds the user changed)."""
    return calibrated_risk(profile=profile).with_changes(settings.risk_changes(), calibrated_risk())


def calibrated_model(path: Path = CALIBRATED) -> str:
    """The default risk model: ``default_model`` of calibrated.json ("rules" or "learned", the one that scored better
    on the held-out runs) when the file says ``"apply": true``; "rules" otherwise."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return "rules"
    m = data.get("default_model", "rules") if data.get("apply") is True else "rules"
    return m if m in ("rules", "learned") else "rules"


def detector_levels(signals: Mapping[str, int], cfg: RiskConfig = RiskConfig()) -> list[int]:
    """The levels that enter the risk: a demoted detector's level counts one lower."""
    return [max(0, int(lv) - 1) if name in cfg.demote else int(lv) for name, lv in signals.items()]


def combine_risk(levels: Iterable[int], cfg: RiskConfig = RiskConfig()) -> float:
    """Noisy-OR of the detectors' level scores."""
    keep = 1.0
    for lv in levels:
        keep *= 1.0 - cfg.level_scores[int(lv)]
    return 1.0 - keep


def level_of(risk: float, thresholds) -> int:
    return sum(1 for t in thresholds if risk >= t) if math.isfinite(risk) else 0


# Precursor families: detectors that measure the same thing (one cause shows in all of them, so together they are one
# piece of evidence, not two). update: how far the policy moves (KL to the reference accumulates the updates, the
# per-update KL, the clipped share and the gradient norm are their size); the rest by what they read. A detector
# not listed is a family of its own; lagging detectors (the score itself) and non-finite values always corroborate.
FAMILIES = {
    "kl_ref_drift": "update", "ppo_kl_spike": "update", "kl_concentration": "update", "grad_norm_spike": "update",
    "clip_pressure": "update",
    "entropy_collapse": "entropy", "entropy_blowup": "entropy",
    "length_growth": "length", "length_shrink": "length",
    "zero_std_groups": "signal",
    "neg_adv_low_is": "mismatch", "mismatch_drift": "mismatch", "retok_drift": "mismatch",
}
ALWAYS_CORROBORATE = ("nonfinite",)  # a NaN in the update is the failure itself


class Corroboration:
    """The gate (RiskConfig.corroborate): ``ceiling(levels, holding, lagging)`` is the highest state the step may
    open: 1 (watch) while the outcome holds (is not weakening beyond its noise: context.Outcome.weakening) and the
    firing precursors form one family that has not held its critical level for ``solo_critical_steps`` (in logged
    points after ``at_interval``, and at least 2: one logged point is a spike, not a level held); 3 otherwise (a
    second family, the outcome weakening, a lagging detector or a non-finite update). O(1) state: the consecutive
    critical points of each family."""

    def __init__(self, cfg: RiskConfig) -> None:
        self.cfg = cfg
        self._critical: dict[str, int] = {}

    def ceiling(self, levels: Mapping[str, int], holding: bool, lagging: Iterable[str] = ()) -> int:
        fam: dict[str, int] = {}
        for name, lv in levels.items():
            if lv:
                f = FAMILIES.get(name, name)
                fam[f] = max(fam.get(f, 0), int(lv))
        self._critical = {f: self._critical.get(f, 0) + 1 for f, lv in fam.items() if lv >= 3}
        if not self.cfg.corroborate or not holding or len(fam) != 1:
            return 3
        if any(n in ALWAYS_CORROBORATE or n in lagging for n, lv in levels.items() if lv):
            return 3
        (f,) = fam
        return 3 if self._critical.get(f, 0) >= max(2, self.cfg.solo_critical_steps) else 1


class _Latch:
    """One level's hysteresis: opens at a step where the risk reached ``enter`` on each of the last ``n_in``
    points (and the step's ceiling allows the level), closes after ``n_out`` consecutive points below ``leave``."""

    def __init__(self, enter: float, leave: float, n_in: int, n_out: int) -> None:
        self.enter, self.leave, self.n_in, self.n_out = enter, leave, n_in, n_out
        self.open, self._above, self._calm = False, 0, 0

    def update(self, risk: float, allowed: bool, forced: bool = False) -> bool:
        """One logged point; ``forced`` (the alert floor holds at this level) opens the latch at once and counts the
        point as not calm."""
        finite = math.isfinite(risk)
        self._above = self._above + 1 if finite and risk >= self.enter else 0
        self._calm = self._calm + 1 if not finite or risk < self.leave else 0
        if forced:
            self.open, self._calm = True, 0
        elif not self.open and allowed and self._above >= self.n_in:
            self.open, self._calm = True, 0
        elif self.open and self._calm >= self.n_out:
            self.open = False
        return self.open


class AlertState:
    """Hysteresis over the risk series (the module doc: one latch per level, the state is the highest open one).
    ``update(risk, ceiling)`` returns the state level 0..3 after this step; ``ceiling`` (Corroboration) is the
    highest level this step may open (an open one stays open)."""

    def __init__(self, cfg: RiskConfig = RiskConfig()) -> None:
        self.cfg = cfg
        n_in = max(cfg.enter_points, cfg.enter_steps)
        n_out = max(cfg.exit_points, cfg.exit_steps)
        self._latches = [_Latch(t, t - cfg.exit_margin, n, n_out)
                         for t, n in zip(cfg.enter, (n_in, n_in, max(cfg.enter_points, cfg.critical_steps)))]
        self.level = 0

    @property
    def state(self) -> str:
        return LEVELS[self.level]

    def update(self, risk: float, ceiling: int = 3, floor: int = 0) -> int:
        """``floor``: the level the alert floor holds at this point (detectors/floor.py): the latches up to it open
        at once and stay open while it holds, whatever the risk and the ceiling."""
        opened = [la.update(risk, i + 1 <= ceiling, i + 1 <= floor) for i, la in enumerate(self._latches)]
        self.level = max((i + 1 for i, o in enumerate(opened) if o), default=0)
        return self.level


def risk_series(levels_per_step: Iterable[Mapping[str, int]], cfg: RiskConfig = RiskConfig()):
    """[(risk, state)] for a sequence of {detector: level} dicts (used by tests and by the batch evaluator)."""
    st = AlertState(cfg)
    out = []
    for lv in levels_per_step:
        r = combine_risk(detector_levels(lv, cfg), cfg)
        out.append((r, LEVELS[st.update(r)]))
    return out

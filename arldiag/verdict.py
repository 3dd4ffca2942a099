"""The verdict of a run, defined once: one word and its reason in words, shared by the report (HTML, Markdown,
JSON), `arldiag ls` and the fleet row (keys ``verdict`` and ``verdict_reason``), the dashboard and `eval-detect`.

The words, in the order they are decided:

- ``collapsed``: the collapse label (docs/detectors.md "collapse label") marks a step;
- ``declined``: no collapse, but the run never reached the label's peak and then fell under half of its own best
  (arldiag.label.run_decline);
- ``no signal``: no detector could read the run (every finding is skipped: e.g. a CSV with columns step,foo,bar),
  so nothing can be said about its health;
- ``at risk``: the alert state is at warning or above now, or was within the last ``RECENT_ALERT_STEPS`` steps;
  a finding at warning severity alone does not make a run at risk: the alert state (the combination of every
  detector's level with its hysteresis, detectors/risk.py) is what the user is warned by;
- ``too short``: fewer logged steps than the detectors' warm-up, so a quiet run cannot be called healthy;
- ``healthy``: none of the above.

The first precursor of a collapse (or decline) is the first finding at warning or above *inside the alert episode
open at that step* (the stretch of the alert timeline at warning or above that holds it): a blip that fell back to
ok long before is not a lead. Pure functions of the findings and the (step, state) timeline: no pandas.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Iterable, Sequence

from arldiag.detectors import REGISTRY
from arldiag.findings import Finding, severity_rank
from arldiag.levels import LEVELS, rank
from arldiag.wording import plural

COLLAPSED, DECLINED, AT_RISK, HEALTHY, NO_SIGNAL, TOO_SHORT = (
    "collapsed", "declined", "at risk", "healthy", "no signal", "too short")
# every verdict word, least to most alarming (a fleet view sorts by this); "error" is a fleet row that failed
VERDICTS = (HEALTHY, TOO_SHORT, NO_SIGNAL, AT_RISK, DECLINED, COLLAPSED)
# Which run needs a look first (the dashboard opens on the worst run, its fleet table sorts by this): a collapse is
# over, a run at risk can still be saved, a declined run never learned; the three that say nothing bad come last.
WORST_FIRST = (COLLAPSED, AT_RISK, DECLINED, NO_SIGNAL, TOO_SHORT, HEALTHY)


def verdict_rank(word: str | None) -> int:
    """How alarming a verdict word is: 0 for healthy up to len(WORST_FIRST) - 1 for collapsed; -1 for anything
    else (no verdict yet, a fleet row's "error")."""
    return len(WORST_FIRST) - 1 - WORST_FIRST.index(word) if word in WORST_FIRST else -1


# A run is "at risk" while its alert state is at warning or above, and for this many (optimizer) steps after it
# fell back: the alert state leaves warning through hysteresis (RiskConfig.exit), so a run that just dipped under it
# is not yet healthy. 20 steps = 4 logged points of a TRL run logged every 5 steps, 20 of a run logged every step.
RECENT_ALERT_STEPS = 20
WARNING = rank("warning")
# Detectors whose signal *is* the collapse label (success / reward / valid-format ratio, the lagging signals):
# they make a run collapsed but are not precursors of the collapse.
LAGGING_KEYWORDS = ("success", "reward", "format")

Timeline = Sequence[tuple[int, str]]  # (step, alert state) in step order


def registry_lagging() -> set[str]:
    """Names of registered detectors flagged ``lagging`` (the outcome signals)."""
    return {n for n, d in REGISTRY.items() if getattr(d, "lagging", False)}


def is_lagging(detector: str, lagging: Collection[str] | None = None) -> bool:
    """``lagging``: the names the detector registry flags as lagging; names it does not know fall back to
    keywords."""
    if lagging is not None and detector in lagging:
        return True
    if detector in REGISTRY:
        return False
    return any(k in detector.lower() for k in LAGGING_KEYWORDS)


def detector_warmup() -> int:
    """Steps the registered detectors need before they can fire at all (the largest ``warmup`` / ``min_history``
    of their parameters): a run shorter than that cannot be called healthy, only too short to tell."""
    return max((int(d.params.get(k, 0)) for d in REGISTRY.values() for k in ("warmup", "min_history")
                if isinstance(d.params.get(k, 0), (int, float))), default=0)


def _alarming(state: str) -> bool:
    return rank(state, 0) >= WARNING


def alert_episode(timeline: Timeline, at: int) -> tuple[int, int] | None:
    """(first step, last step up to ``at``) of the alert episode open at step ``at``: the stretch of the timeline
    at warning or above that holds the last timeline point at or before ``at``; None when that point is below
    warning (no episode is open there)."""
    upto = [(s, st) for s, st in timeline if s <= at]
    if not upto or not _alarming(upto[-1][1]):
        return None
    start = upto[-1][0]
    for s, st in reversed(upto):
        if not _alarming(st):
            break
        start = s
    return start, upto[-1][0]


def _first_alarm_in(f: Finding, lo: int, hi: int) -> int | None:
    """First step in [lo, hi] at which finding ``f`` was at warning or above (its ``alarm_intervals``); a finding
    without them (built by hand, an older JSON) counts only when its first step at warning lies inside."""
    ivs = f.evidence.get("alarm_intervals")
    if ivs is None:
        first = (f.evidence.get("first_at") or {}).get("warning") or (
            f.first_step if severity_rank(f.severity) >= WARNING else None)
        ivs = [] if first is None else [[first, first]]
    hits = [max(int(a), lo) for a, b in ivs if int(a) <= hi and int(b) >= lo]
    return min(hits) if hits else None


def first_precursor(findings: Sequence[Finding], episode: tuple[int, int] | None, event: int | None,
                    lagging: Collection[str] | None = None) -> dict[str, Any] | None:
    """The first non-lagging finding at warning or above inside ``episode`` (ties: the more severe, then the
    name); its lead time counts to ``event``. None without an episode or such a finding."""
    if episode is None:
        return None
    cands = []
    for f in findings:
        if not f.fired or is_lagging(f.detector, lagging):
            continue
        step = _first_alarm_in(f, *episode)
        if step is not None:
            cands.append((step, -severity_rank(f.severity), f.detector, f))
    if not cands:
        return None
    step, _, _, f = min(cands, key=lambda c: c[:3])
    first_at = dict(f.evidence.get("first_at") or {})
    # the level it had reached by that step (not its later peak): "warning from step 75", then critical from 80
    reached = [lv for lv, s in first_at.items() if lv in LEVELS and s <= step]
    return {"detector": f.detector, "title": f.title, "severity": max(reached, key=LEVELS.index) if reached
            else f.severity, "peak_severity": f.severity, "step": int(step),
            "lead_time": None if event is None else int(event) - int(step), "first_at": first_at}


def first_state_step(timeline: Timeline, min_state: str = "warning") -> int | None:
    return next((int(s) for s, st in timeline if rank(st, 0) >= rank(min_state)), None)


def max_state(timeline: Timeline) -> str:
    return max((st for _, st in timeline if st in LEVELS), key=LEVELS.index, default="ok")


def last_alarm_step(timeline: Timeline) -> int | None:
    return next((int(s) for s, st in reversed(list(timeline)) if _alarming(st)), None)


@dataclass
class Verdict:
    status: str                         # one of VERDICTS
    reason: str                         # why, in words (one clause, without the word: "the alert state is ...")
    collapse_step: int | None
    first_precursor: dict[str, Any] | None  # detector, title, severity, step, lead_time, first_at
    first_warning_step: int | None      # first step the alert timeline reached warning or critical
    warning_lead_time: int | None       # event - start of the alert episode open at the event
    max_state: str                      # worst alert state over the run
    n_fired: int
    summary: str                        # "Word: reason." then the details
    details: str                        # the first precursor and the alert episode at the event, in sentences
    decline_step: int | None = None     # set only when the run declined (never learned enough to collapse)
    episode: tuple[int, int] | None = None  # the alert episode open at the event (or, at risk, the last one)

    @property
    def event(self) -> tuple[str, int] | None:
        """("collapse", step) or ("decline", step): the outcome event the report explains; None for neither."""
        if self.collapse_step is not None:
            return "collapse", self.collapse_step
        return None if self.decline_step is None else ("decline", self.decline_step)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "episode": None if self.episode is None else list(self.episode)}


def _status(findings: Sequence[Finding], timeline: Timeline, collapse: int | None, decline: int | None,
            n_steps: int | None, warmup: int, recent: int) -> tuple[str, str]:
    """(word, reason) in the order of the module docstring."""
    if collapse is not None:
        return COLLAPSED, f"the outcome fell under the collapse label's threshold at step {collapse}"
    if decline is not None:
        return DECLINED, (f"the outcome never reached the collapse label's peak, then "
                          f"fell under half of its own best from step {decline} to the end")
    if findings and all(f.status == "skipped" for f in findings):
        return NO_SIGNAL, (f"none of the {len(findings)} detectors could read the run (it logs none of "
                           "the columns they read, e.g. entropy, kl, task_score), so its health is unknown")
    last = int(timeline[-1][0]) if timeline else None
    alarm = last_alarm_step(timeline)
    if alarm is not None and last is not None and last - alarm <= recent:
        now = timeline[-1][1]
        if _alarming(now):
            return AT_RISK, f"the alert state is {now} now (step {last})"
        worst = max((st for s, st in timeline if s >= last - recent and st in LEVELS), key=LEVELS.index)
        return AT_RISK, (f"the alert state was {worst} at step {alarm}, within the last {recent} steps "
                         f"(now {now} at step {last})")
    if n_steps is not None and n_steps < warmup:
        return TOO_SHORT, (f"{plural(n_steps, 'logged step')}, the detectors need {warmup} before they "
                           "can tell a healthy run from a failing one")
    if alarm is None:
        return HEALTHY, "the alert state never reached warning and the outcome did not collapse"
    return HEALTHY, (f"the alert state last reached warning at step {alarm}, more than {recent} steps "
                     f"before the last step ({last}), and the outcome did not collapse")


def verdict(findings: Sequence[Finding], collapse: int | None, timeline: Iterable[tuple[int, str]] = (),
            lagging: Collection[str] | None = None, n_steps: int | None = None, warmup: int | None = None,
            decline: int | None = None, recent: int = RECENT_ALERT_STEPS) -> Verdict:
    """The verdict of one run. ``timeline``: (step, alert state) pairs in step order; ``n_steps``: steps logged
    (below ``warmup``, default detector_warmup(), a quiet run is "too short"); ``decline``: the step at which a run
    without a collapse declined (detectors.decline_of); lead times then count to it."""
    timeline = [(int(s), str(st)) for s, st in timeline]
    lagging = registry_lagging() if lagging is None else lagging
    if collapse is not None:
        decline = None  # a collapse wins: run_decline never marks a collapsed run, a caller might
    event = collapse if collapse is not None else decline
    warmup = detector_warmup() if warmup is None else warmup
    status, reason = _status(findings, timeline, collapse, decline, n_steps, warmup, recent)
    anchor = event if event is not None else (last_alarm_step(timeline) if status == AT_RISK else None)
    episode = None if anchor is None else alert_episode(timeline, anchor)
    pre = first_precursor(findings, episode, event, lagging)
    parts = []
    what = "collapse" if collapse is not None else "decline"
    if pre is not None:
        lead = f", {plural(pre['lead_time'], 'step')} before the {what}" if pre["lead_time"] is not None else ""
        parts.append(f"First precursor: {pre['detector']} at {pre['severity']} from step {pre['step']}, inside the "
                     f"alert episode from step {episode[0]}{lead}.")
    elif event is not None:
        parts.append(f"No alert episode was open at the {what}: no precursor is claimed." if episode is None else
                     f"No detector other than the outcome's own reached warning in the alert episode from step "
                     f"{episode[0]}.")
    if episode is not None and event is not None:
        parts.append(f"Alert at warning from step {episode[0]} (lead time {plural(event - episode[0], 'step')}).")
    return Verdict(status=status, reason=reason, collapse_step=None if collapse is None else int(collapse),
                   first_precursor=pre, first_warning_step=first_state_step(timeline),
                   warning_lead_time=None if (episode is None or event is None) else int(event) - episode[0],
                   max_state=max_state(timeline), n_fired=sum(f.fired for f in findings),
                   summary=f"{status[0].upper()}{status[1:]}: {reason}." + "".join(" " + p for p in parts),
                   details=" ".join(parts),
                   decline_step=None if decline is None else int(decline), episode=episode)


def timeline_of(evaluation: Any) -> list[tuple[int, str]]:
    """(step, state) pairs of a ``detectors.batch.RunEvaluation``'s timeline [(step, risk, state, top)]."""
    return [(int(s), st) for s, _, st, _ in evaluation.timeline]


def verdict_of(evaluation: Any, collapse: int | None, decline: int | None = None) -> Verdict:
    """The verdict of one replayed run (``detectors.evaluate_run``): the fleet row and eval-detect use this."""
    return verdict(evaluation.evaluator.findings(evaluation.name, evaluation.steps), collapse,
                   timeline_of(evaluation), n_steps=len(evaluation.steps), decline=decline)

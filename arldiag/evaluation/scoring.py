"""Scoring an alert-state series against the collapse label: per-run events, lead times, false alarms, and the
set figures of `arldiag eval-detect` (docs/detectors.md "How alerts are scored").

Pure functions over plain lists (standard library only), so the same scoring serves arldiag's own alert state,
the learned risk score and a peer tool (benchmarks/peer_rlwatch.py) on the same runs.

Events of a run: at most one *collapse* (the label's step c, an outcome fall that lasts to the end of the run) and
any number of recovered *dips* (an outcome fall as deep that recovers); a run without a collapse may instead have
*declined* (below). A warning episode is a stretch of steps in
state warning or critical.

* lead: c - start of the episode that is active at c (started at or before c and not cleared before c). A warning
  that cleared before the collapse is not the lead, however close.
* early collapse: c < warmup + min_lead, so no detector can have warned min_lead steps ahead; it is caught when an
  episode is active at c (an alarm at or before the collapse), and then counts as caught at every lead target.
* dip window [d0 - window, d1]: an episode that starts inside it is a *dip warning*, neither a false alarm nor a
  caught collapse; its steps are not healthy steps.
* collapse window [c - window, c + after]: onsets inside it are scored by the NAB-style profile below; steps from
  c - window on are not healthy steps. Healthy steps in warning: those in any episode but the lead episode. An episode that cleared within ``alarm_gap`` steps before c - window is
  build-up (not false), earlier ones are false alarms.
* decline window [d - window, end of run] of a run that did not collapse but *declined* at step d (never reached
  the label's min_peak, then fell under half of its own best to the end: arldiag.label.run_decline): an episode
  that starts inside it is a *decline warning*, neither a false alarm nor a caught collapse; its steps are not
  healthy steps. Such a run is of kind "decline", not "stable".
* false alarm: any other episode (on a fault run: one whose leading detector is not planted).

NAB-style score (Lavin & Ahmad 2015, standard profile A_TP = 1, A_FP = 0.11, A_FN = 1): the first onset inside a
collapse window at step s scores sigma(y) = 2 / (1 + exp(5 y)) - 1 with y = (s - (c + after)) / (window + after)
(0.987 at the window's start, 0.46 at c for the defaults, 0 at its end); a collapse with no onset in its window
scores -A_FN; each false-alarm episode -A_FP. Normalised: 100 (raw - null) / (perfect - null), null = never
alarming (-A_FN per collapse), perfect = an onset at every window's start.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median
from typing import Mapping, Sequence

ALARM = ("warning", "critical")


@dataclass(frozen=True)
class ScoreConfig:
    min_lead: int = 10          # recall targets are min_lead and 2 * min_lead
    warmup: int = 10            # steps before any detector has an early baseline (baseline_steps of the rules)
    window: int = 40            # NAB window before the collapse (steps)
    after: int = 10             # NAB window after the collapse (late detection still scores a little)
    alarm_gap: int = 20         # an episode that cleared this close before the window is build-up, not false
    late_points: int = 3        # "alarmed by the collapse": an onset no later than this many logged points after it
    a_tp: float = 1.0
    a_fp: float = 0.11
    a_fn: float = 1.0

    def __post_init__(self) -> None:
        for k in ("min_lead", "window", "after", "alarm_gap"):
            if getattr(self, k) < 0:
                raise ValueError(f"{k} must be >= 0, got {getattr(self, k)}")
        if self.window + self.after <= 0:
            raise ValueError("window + after must be > 0")


def episodes(steps: Sequence[int], states: Sequence[str], levels=ALARM) -> list[tuple[int, int | None]]:
    """[(start_step, end_step)] of stretches with state in ``levels``; end = the first step after the stretch
    (exclusive), None when still active at the end of the run."""
    out, start = [], None
    for s, st in zip(steps, states):
        if st in levels and start is None:
            start = s
        elif st not in levels and start is not None:
            out.append((start, s))
            start = None
    if start is not None:
        out.append((start, None))
    return out


def nab_sigma(y: float) -> float:
    """NAB's scaled sigmoid: 2 / (1 + e^{5y}) - 1 (positive for y < 0, 0 at y = 0)."""
    return 2.0 / (1.0 + math.exp(5.0 * y)) - 1.0


def score_run(steps: Sequence[int], states: Sequence[str], collapse: int | None,
              dips: Sequence[tuple[int, int]] = (), tops: Mapping[int, str | None] | None = None,
              faults: Sequence[str] = (), cfg: ScoreConfig = ScoreConfig(), decline: int | None = None,
              interval: int = 1, ambiguous: bool = False) -> dict:
    """Score one run's alert-state series (see the module doc). ``tops``: step -> leading detector (fault runs);
    ``decline``: the step at which the run declined (ignored when it collapsed); ``interval``: optimizer steps
    between logged points (for ``late_points``); ``ambiguous``: a run its label marks ambiguous, scored apart."""
    steps = list(steps)
    eps = episodes(steps, states)
    c = collapse
    dec = decline if c is None else None
    dip_windows = [(d0 - cfg.window, d1) for d0, d1 in dips]
    in_dip = lambda s: any(a <= s <= b for a, b in dip_windows)  # noqa: E731
    in_decline = lambda s: dec is not None and s >= dec - cfg.window  # noqa: E731
    kind = "collapse" if c is not None else ("fault" if faults else ("decline" if dec is not None else "stable"))
    if ambiguous:
        kind = "ambiguous"
    early = c is not None and c < (steps[0] if steps else 0) + cfg.warmup + cfg.min_lead
    false_eps, dip_eps, decline_eps, build_up, lead_ep, planted = [], [], [], [], None, []
    for a, b in eps:
        if c is not None and a <= c and (b is None or b > c):
            lead_ep = (a, b)
        elif c is not None and a >= c - cfg.window:
            pass  # an onset in the collapse window (late or after the collapse): scored by NAB, never false
        elif c is not None and b is not None and b > c - cfg.window - cfg.alarm_gap:
            build_up.append((a, b))
        elif in_dip(a):
            dip_eps.append((a, b))
        elif in_decline(a):
            decline_eps.append((a, b))
        elif faults and tops is not None and tops.get(a) in faults:
            planted.append((a, b))
        else:
            false_eps.append((a, b))
    lead = (c - lead_ep[0]) if lead_ep is not None else None
    # healthy steps: outside every event window
    healthy = [s for s in steps if not in_dip(s) and not in_decline(s) and (c is None or s < c - cfg.window)]
    hset = set(healthy)
    last = steps[-1] + 1 if steps else 0  # steps missing from the series are not counted (hset)
    # the episode that leads into the collapse is a true alarm, however early it started; a planted fault's
    # episodes are wanted warnings, not healthy steps in warning
    warn_healthy = sum(1 for a, b in eps if (a, b) != lead_ep and (a, b) not in planted
                       for s in range(a, last if b is None else b) if s in hset)
    warn_all = sum(1 for st in states if st in ALARM)
    nab = 0.0
    if c is not None:
        onsets = [a for a, b in eps if c - cfg.window <= a <= c + cfg.after]
        if lead_ep is not None and lead_ep[0] < c - cfg.window:
            onsets.append(c - cfg.window)  # an episode running since before the window counts from its start
        if onsets:
            nab += cfg.a_tp * nab_sigma((min(onsets) - (c + cfg.after)) / (cfg.window + cfg.after))
        else:
            nab -= cfg.a_fn
    nab -= cfg.a_fp * len(false_eps)
    caught = {t: (lead is not None and (early or lead >= t)) for t in (cfg.min_lead, 2 * cfg.min_lead)}
    # a warning before the collapse (in its window) or within late_points logged points after it
    late = cfg.late_points * max(1, int(interval))
    alarmed_late = c is not None and (lead_ep is not None or any(c - cfg.window <= a <= c + late for a, _ in eps))
    return {"kind": kind, "collapse_step": c, "early_collapse": bool(early), "dips": [list(d) for d in dips],
            "episodes": [[a, b] for a, b in eps], "lead_time": lead,
            "lead_episode": list(lead_ep) if lead_ep else None,
            "false_alarms": len(false_eps), "false_alarm_episodes": [[a, b] for a, b in false_eps],
            "dip_warnings": len(dip_eps), "decline_step": dec, "decline_warnings": len(decline_eps),
            "build_up_episodes": len(build_up), "planted_episodes": len(planted),
            "steps": len(steps), "warning_share": warn_all / len(steps) if steps else 0.0,
            "healthy_steps": len(healthy), "healthy_steps_in_warning": warn_healthy,
            f"caught_at_{cfg.min_lead}": caught[cfg.min_lead], "alarmed_by_late_points": bool(alarmed_late),
            "first_episode_step": eps[0][0] if eps else None,
            f"caught_at_{2 * cfg.min_lead}": caught[2 * cfg.min_lead], "nab_raw": nab}


def summarize(rows: Sequence[dict], cfg: ScoreConfig = ScoreConfig()) -> dict:
    """Set figures over scored runs (``score_run`` outputs)."""
    coll = [r for r in rows if r["kind"] == "collapse"]
    t1, t2 = cfg.min_lead, 2 * cfg.min_lead
    leads = [r["lead_time"] for r in coll if r["lead_time"] is not None and not r["early_collapse"]]
    healthy = sum(r["healthy_steps"] for r in rows)
    fa = sum(r["false_alarms"] for r in rows)
    raw = sum(r["nab_raw"] for r in rows)
    null = -cfg.a_fn * len(coll)
    perfect = cfg.a_tp * nab_sigma(-1.0) * len(coll)
    return {
        "runs": len(rows), "collapsing": len(coll), "early_collapses": sum(r["early_collapse"] for r in coll),
        "stable": sum(r["kind"] == "stable" for r in rows), "fault": sum(r["kind"] == "fault" for r in rows),
        "dips": sum(len(r["dips"]) for r in rows), "declines": sum(r["kind"] == "decline" for r in rows),
        "declines_warned": sum(1 for r in rows if r["kind"] == "decline" and r["decline_warnings"]),
        f"recall_at_{t1}": (sum(r[f"caught_at_{t1}"] for r in coll) / len(coll)) if coll else None,
        f"recall_at_{t2}": (sum(r[f"caught_at_{t2}"] for r in coll) / len(coll)) if coll else None,
        "early_caught": sum(r[f"caught_at_{t1}"] for r in coll if r["early_collapse"]),
        "alarmed_by_late_points": sum(bool(r.get("alarmed_by_late_points")) for r in coll),
        "warned_ahead": sum(bool(r[f"caught_at_{t1}"]) for r in coll),
        "ambiguous": sum(r["kind"] == "ambiguous" for r in rows),
        "stable_runs_without_warning": sum(1 for r in rows if r["kind"] == "stable" and not r["episodes"]),
        "median_lead": median(leads) if leads else None, "leads": sorted(leads),
        "false_alarm_episodes": fa, "healthy_steps": healthy,
        "false_alarms_per_100_healthy_steps": 100.0 * fa / healthy if healthy else None,
        "healthy_warning_share": (sum(r["healthy_steps_in_warning"] for r in rows) / healthy) if healthy else None,
        "stable_runs_with_warning": sum(1 for r in rows if r["kind"] == "stable" and r["false_alarms"]),
        "nab_raw": raw, "nab_score": (100.0 * (raw - null) / (perfect - null)) if coll else None,
    }

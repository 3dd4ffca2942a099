"""Fit the alert state of the step-scalar profile (``risk_steps`` in calibrated.json) on labelled dev runs.

A run with step scalars only (an imported verl / TRL / hand-written log) sees no token-level detector, so its
evidence combines differently from a run with token statistics; its hysteresis and demotions are fitted here, on
labelled development runs, with the objective of the reference trainer's calibration (benchmarks/calibrate.py)
in the terms of real runs:

    J = R10 + R3 - F - 5 H

R10: share of collapses warned >= 10 optimizer steps ahead; R3: share alarmed before the collapse or within 3
logged points of it; F: share of stable runs with any warning; H: share of healthy steps in warning. Ambiguous runs
are left out. The detectors are replayed once per run (their per-step levels and whether the score held kept), then
every RiskConfig of ``GRID`` (on top of the declared ``STEP_PRIORS``) is scored; from the best ``GREEDY_FROM`` of them detectors are demoted greedily while J rises by more than
``DEMOTE_COST``, starting from the token profile's demotions and ``STEP_PRIOR_DEMOTE``. Ties go to the earlier grid point (the grid lists the more conservative settings first).

A run whose run.json says ``split: heldout`` is refused: held-out runs are scored, never fitted on.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Mapping

from arldiag.detectors.base import LEVELS
from arldiag.detectors.batch import evaluate_run
from arldiag.detectors.registry import REGISTRY
from arldiag.detectors.risk import AlertState, Corroboration, RiskConfig, combine_risk, detector_levels
from arldiag.evaluation.evaluate import split_of
from arldiag.evaluation.scoring import ScoreConfig, score_run

# Demoted from the start in this profile: a one-point spike in a step log gives a lead of one or two logged points
# at best (the real runs' own notes), which score_collapse already covers, while single spikes are common on healthy
# real runs (the stable verl PPO notebook: grad_norm at 21x and 15x its median at steps 23 and 25). Demoted, a spike
# still raises the state together with a second signal.
LAGGING = tuple(n for n, d in REGISTRY.items() if d.lagging)  # the score itself corroborates (risk.Corroboration)
FLOORS = tuple(n for n, d in REGISTRY.items() if d.floor)  # their level is a floor of the state (detectors/floor.py)
STEP_PRIOR_DEMOTE = ("clip_pressure", "grad_norm_spike", "ppo_kl_spike")
# Declared, not fitted (docs/detectors.md "Alert episodes on step-scalar runs"): two logged points of evidence to
# open a state and three to close it, whatever the interval; one precursor family alone stays a watch while the score
# holds unless it is critical for 10 optimizer steps (two points of a log written every 5 steps).
STEP_PRIORS = dict(enter_points=2, exit_points=3, corroborate=True, solo_critical_steps=10)
# The warning threshold and the exit are declared too, since corroboration took over what fitting them did: 0.55 =
# one warning-level precursor warns once corroborated (a second family, or the score no longer holding), and an
# episode closes after 40 calm steps (counted once, not re-opened by the next noisy point). Fitting them on 6
# collapses was unstable: each run left out moved them (leave-one-out 1 of 6 warned >= 10 steps ahead with them in
# the grid, 0.75 / 10 steps chosen without rho0.30_s43 / rho0.70_s44).
GRID = dict(warning=(0.55,), exit_steps=(40,), enter_steps=(5, 1, 10), critical_steps=(1, 2))
GREEDY_FROM = 3
DEMOTE_COST = 0.02


@dataclass
class Replay:
    name: str
    steps: list[int]
    levels: list[dict[str, int]]   # per step: {detector: level} of the detectors firing
    interval: int
    collapse: int | None
    ambiguous: bool
    holding: list[bool] | None = None  # per step: the score held (the corroboration gate's input); None: never


def replay(run, name: str, label: dict) -> Replay:
    """Per-step detector levels of one run (the batch evaluator's replay), with its label."""
    if split_of(run, name) == "heldout":
        raise ValueError(f"run: {name!r} is a held-out run (run.json split); calibration reads dev runs only")
    levels: list[dict[str, int]] = []
    holding: list[bool] = []
    re = evaluate_run(run, name, risk=RiskConfig(), levels_out=levels, holding_out=holding)
    return Replay(name, re.steps, levels, re.evaluator.interval or 1, label["collapse_step"],
                  bool(label.get("ambiguous")), holding)


def states(rp: Replay, cfg: RiskConfig, lagging: tuple[str, ...] = LAGGING) -> list[str]:
    """The alert states of a replay under ``cfg``: the Evaluator's state machine and corroboration gate."""
    c = cfg.at_interval(rp.interval)
    st, gate = AlertState(c), Corroboration(c)
    holding = rp.holding or [False] * len(rp.levels)
    return [LEVELS[st.update(combine_risk(detector_levels(lv, cfg), cfg), gate.ceiling(lv, h, lagging),
                             max((lv.get(n, 0) for n in FLOORS), default=0))]
            for lv, h in zip(rp.levels, holding)]


def _figures(rows: list[dict], score: ScoreConfig) -> dict:
    """The set figures of scored runs (``score_run`` outputs; ambiguous runs already left out)."""
    coll = [r for r in rows if r["kind"] == "collapse"]
    stable = [r for r in rows if r["kind"] == "stable"]
    healthy = sum(r["healthy_steps"] for r in rows)
    return {"warned_10_ahead": sum(r[f"caught_at_{score.min_lead}"] for r in coll),
            "alarmed_by_3_points": sum(r["alarmed_by_late_points"] for r in coll), "collapses": len(coll),
            "stable": len(stable), "stable_without_warning": sum(1 for r in stable if not r["episodes"]),
            "healthy_warning_share": sum(r["healthy_steps_in_warning"] for r in rows) / healthy if healthy else 0.0}


def objective(replays: list[Replay], cfg: RiskConfig, score: ScoreConfig = ScoreConfig()) -> tuple[float, dict]:
    rows = [score_run(rp.steps, states(rp, cfg), rp.collapse, cfg=score, interval=rp.interval)
            for rp in replays if not rp.ambiguous]
    fig = _figures(rows, score)
    n_coll, n_stable = fig["collapses"], fig["stable"]
    r10 = fig["warned_10_ahead"] / n_coll if n_coll else 0.0
    r3 = fig["alarmed_by_3_points"] / n_coll if n_coll else 0.0
    f = (n_stable - fig["stable_without_warning"]) / n_stable if n_stable else 0.0
    return r10 + r3 - f - 5 * fig["healthy_warning_share"], fig


def fit(replays: list[Replay], start_demote: tuple[str, ...] = ()) -> tuple[RiskConfig, dict]:
    """The best RiskConfig for ``replays`` and its figures. ``start_demote``: demotions every grid point starts
    from (the token profile's, fitted on the reference trainer's dev runs: the two profiles are fitted together,
    the real runs deciding what the step-scalar profile adds)."""
    base = RiskConfig(demote=tuple(sorted(set(start_demote) | set(STEP_PRIOR_DEMOTE))), **STEP_PRIORS)
    scored = []
    for i, (warn, ex, en, cr) in enumerate(itertools.product(*GRID.values())):
        cfg = replace(base, enter=(base.enter[0], warn, max(warn, base.enter[2])), exit_steps=ex, enter_steps=en,
                      critical_steps=cr)
        j, fig = objective(replays, cfg)
        scored.append((-j, i, cfg, fig))
    scored.sort(key=lambda t: (t[0], t[1]))
    names = sorted({d for rp in replays for lv in rp.levels for d in lv})
    best = (scored[0][0], scored[0][2], scored[0][3])
    for negj, _, cfg, fig in scored[:GREEDY_FROM]:
        cur_j, cur = -negj, cfg
        while True:
            trials = [(objective(replays, replace(cur, demote=tuple(sorted(cur.demote + (d,)))))[0], d)
                      for d in names if d not in cur.demote]
            if not trials:
                break
            j, d = max(trials)
            if j <= cur_j + DEMOTE_COST:
                break
            cur_j, cur = j, replace(cur, demote=tuple(sorted(cur.demote + (d,))))
        if -cur_j < best[0]:
            best = (-cur_j, cur, objective(replays, cur)[1])
    return best[1], {**best[2], "objective": -best[0], "grid_points": len(scored)}


def leave_one_out(replays: list[Replay], start_demote: tuple[str, ...] = (),
                  groups: Mapping[str, str] | None = None) -> dict:
    """Each run scored with the settings fitted on the others: a less optimistic estimate than the in-sample fit
    (the figures a run not used for fitting would get). ``groups`` (run name -> its repository): leave one
    repository out instead, each run scored with the settings fitted on the runs of the other repositories."""
    group = (lambda n: n) if groups is None else (lambda n: groups.get(n, n))  # noqa: E731
    rows, fitted = [], {}
    for rp in replays:
        if rp.ambiguous:
            continue
        g = group(rp.name)
        if g not in fitted:
            fitted[g] = fit([o for o in replays if group(o.name) != g], start_demote)[0]
        rows.append(score_run(rp.steps, states(rp, fitted[g]), rp.collapse, interval=rp.interval))
    fig = _figures(rows, ScoreConfig())
    return {k: fig[k] for k in ("warned_10_ahead", "alarmed_by_3_points", "collapses", "stable_without_warning",
                                "stable")}

"""`arldiag eval-detect RUN...`: the detection benchmark.

Per run: the collapse step (the label rule of detectors.label, documented in docs/detectors.md), the first step at
which the alert state reaches "warning" or above, the lead time (collapse step - first warning step), and false
alarms. A warning episode is a stretch of steps whose alert state is warning or critical. A false alarm is any
episode on a run that never collapses, or, on a collapsing run, an episode that cleared at least --alarm-gap steps
(20) before the collapse step (an alert that clears a few steps before the collapse is part of its build-up). The
first warning step and the lead time count from the first episode that is not a false alarm; "watch" is the step at
which the state left ok in the elevated stretch holding that first warning (informative). A collapsing run
passes when it was warned at least --min-lead steps (10) before its collapse; a stable run passes with no episode.

A run that does not collapse but plants faults on purpose (run.json ``config.injected_faults``: {detector: why},
written by the reference trainer for --rollout-dtype and --retokenize) is a *fault* run, not a stable one: it passes
when every planted detector reached warning, and its episodes led by any other detector count as false alarms.
"""
from __future__ import annotations

import json
import math


def add_arguments(p) -> None:
    p.add_argument("run", nargs="+", help="run directories, roots of runs, or globs")
    p.add_argument("--min-lead", type=int, default=10, help="steps of warning required before a collapse")
    p.add_argument("--alarm-gap", type=int, default=20,
                   help="on a collapsing run, a warning that cleared this many steps before the collapse is a false "
                        "alarm")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--check", action="store_true", help="exit with code 1 unless every run passes")
    p.add_argument("--precursors", type=int, default=0, metavar="K",
                   help="for each collapsing run, also list the K step metrics that moved most in the window from "
                        "20 to 10 steps before the collapse (z against the 40 steps before that)")


def episodes(steps, states, levels=("warning", "critical")) -> list[tuple[int, int | None]]:
    """[(start_step, end_step)] of stretches with state in ``levels``; end is None when still active at the end."""
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


def injected_faults(run, name: str) -> dict:
    """{detector: why} planted on purpose in run ``name`` (run.json config.injected_faults), {} when none."""
    faults = (run.manifests.get(name, {}).get("config") or {}).get("injected_faults") or {}
    return dict(faults) if isinstance(faults, dict) else {str(d): "" for d in faults}


def evaluate(run, min_lead: int = 10, alarm_gap: int = 20, precursors: int = 0) -> dict:
    from arldiag.detectors import evaluate_run, label_of
    from arldiag.detectors.precursors import precursor_scan

    rows = []
    for name in run.names:
        re = evaluate_run(run, name)
        steps = [s for s, *_ in re.timeline]
        states = [st for _, _, st, _ in re.timeline]
        tops = {s: top for s, _, _, top in re.timeline}
        eps = episodes(steps, states)
        c = label_of(re.frame)
        faults = injected_faults(run, name)
        expected_fired = None
        if c is not None:
            kind = "collapse"
            false_eps = [(a, b) for a, b in eps if b is not None and b <= c - alarm_gap]
            true_eps = [e for e in eps if e not in false_eps]
            first = true_eps[0][0] if true_eps else None
            lead = (c - first) if first is not None else None
            ok = lead is not None and lead >= min_lead
        elif faults:
            kind = "fault"
            expected_fired = {d: re.evaluator.tracks[d].max_level >= 2 for d in faults if d in re.evaluator.tracks}
            false_eps = [e for e in eps if tops[e[0]] not in faults]
            true_eps = [e for e in eps if e not in false_eps]
            first, lead = (true_eps[0][0] if true_eps else None), None
            ok = len(expected_fired) == len(faults) and all(expected_fired.values()) and not false_eps
        else:
            kind = "stable"
            false_eps, first, lead = eps, (eps[0][0] if eps else None), None
            ok = not eps
        top = watch_from = None
        if first is not None:
            top = tops[first]
            # the state left "ok" at the start of the elevated stretch that contains the first warning
            watch_from = next(a for a, b in episodes(steps, states, ("watch", "warning", "critical"))
                              if a <= first and (b is None or b > first))
        rows.append({"run": name, "kind": kind, "collapsed": c is not None, "collapse_step": c,
                     "first_warning_step": first, "first_warning_detector": top, "lead_time": lead,
                     "elevated_from_step": watch_from, "false_alarms": len(false_eps),
                     "injected_faults": sorted(faults) or None, "injected_faults_fired": expected_fired,
                     "steps": len(steps), "max_risk": max((r for _, r, _, _ in re.timeline), default=0.0),
                     "pass": ok})
        if precursors and c is not None:
            rows[-1]["precursors"] = precursor_scan(re.frame, c, (min_lead, 2 * min_lead), top=precursors)
    coll = [r for r in rows if r["kind"] == "collapse"]
    stable = [r for r in rows if r["kind"] == "stable"]
    fault = [r for r in rows if r["kind"] == "fault"]
    leads = sorted(r["lead_time"] for r in coll if r["lead_time"] is not None)
    summary = {
        "runs": len(rows), "collapsing": len(coll), "stable": len(stable), "fault": len(fault),
        "collapsing_warned_in_time": sum(r["pass"] for r in coll),
        "stable_without_warning": sum(r["pass"] for r in stable),
        "faults_flagged": sum(r["pass"] for r in fault),
        "median_lead_time": leads[len(leads) // 2] if leads else None,
        "false_alarms": sum(r["false_alarms"] for r in rows), "min_lead": min_lead, "alarm_gap": alarm_gap,
        "all_pass": all(r["pass"] for r in rows),
    }
    return {"runs": rows, "summary": summary}


def main(args) -> int:
    from arldiag.store.reader import open_run

    run = open_run(args.run if len(args.run) > 1 else args.run[0])
    res = evaluate(run, args.min_lead, args.alarm_gap, args.precursors)
    if args.json:
        print(json.dumps(res, indent=2, default=str))
    else:
        hdr = (f"{'run':<28} {'kind':<8} {'collapse':>8} {'1st warn':>8} {'lead':>5} {'false':>5}  {'by':<18} "
               f"{'watch':>5} pass")
        print(hdr)
        print("-" * len(hdr))
        f = lambda v: "-" if v is None else str(v)  # noqa: E731
        for r in res["runs"]:
            print(f"{r['run'][:28]:<28} {r['kind']:<8} {f(r['collapse_step']):>8} {f(r['first_warning_step']):>8} "
                  f"{f(r['lead_time']):>5} {r['false_alarms']:>5}  {f(r['first_warning_detector']):<18} "
                  f"{f(r['elevated_from_step']):>5} {'yes' if r['pass'] else 'NO'}")
        s = res["summary"]
        print(f"\ncollapsing runs warned >= {s['min_lead']} steps ahead: {s['collapsing_warned_in_time']}/"
              f"{s['collapsing']}; stable runs without warning: {s['stable_without_warning']}/{s['stable']}; "
              f"runs with planted faults flagged: {s['faults_flagged']}/{s['fault']}; "
              f"median lead {f(s['median_lead_time'])}; false alarms {s['false_alarms']}")
        for r in res["runs"]:
            if r.get("precursors") is not None:
                lo, hi = r["collapse_step"] - 2 * s["min_lead"], r["collapse_step"] - s["min_lead"]
                print(f"\n{r['run']}: metrics that moved in steps {lo}..{hi} (z against the 40 steps before)")
                for p in r["precursors"] or [{"metric": "(too little history before the collapse)", "z": "",
                                              "base_mean": math.nan, "lead_mean": math.nan}]:
                    print(f"  {p['metric']:<32} z {p['z']:>7}  {p['base_mean']:.4g} -> {p['lead_mean']:.4g}")
    return 1 if args.check and not res["summary"]["all_pass"] else 0

"""`arldiag eval-detect RUN...`: the detection benchmark.

Per run: the collapse step (the label rule of detectors.label, documented in docs/detectors.md), the first step at
which the alert state reaches "warning" or above, the lead time (collapse step - first warning step), and false
alarms. A warning episode is a stretch of steps whose alert state is warning or critical. A false alarm is any
episode on a run that never collapses, or, on a collapsing run, an episode that cleared at least --alarm-gap steps
(20) before the collapse step (an alert that clears a few steps before the collapse is part of its build-up). The
first warning step and the lead time count from the first episode that is not a false alarm; "watch" is the step at
which the state left ok in the elevated stretch holding that first warning (informative). A collapsing run
passes when it was warned at least --min-lead steps (10) before its collapse; a stable run passes with no episode.
"""
from __future__ import annotations

import json


def add_arguments(p) -> None:
    p.add_argument("run", nargs="+", help="run directories, roots of runs, or globs")
    p.add_argument("--min-lead", type=int, default=10, help="steps of warning required before a collapse")
    p.add_argument("--alarm-gap", type=int, default=20,
                   help="on a collapsing run, a warning that cleared this many steps before the collapse is a false "
                        "alarm")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--check", action="store_true", help="exit with code 1 unless every run passes")


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


def evaluate(run, min_lead: int = 10, alarm_gap: int = 20) -> dict:
    from arldiag.detectors import alert_timeline, collapse_step

    labels = collapse_step(run)
    tl = alert_timeline(run)
    rows = []
    for name in run.names:
        t = tl[tl["run"] == name]
        steps, states = t["step"].tolist(), t["state"].tolist()
        eps = episodes(steps, states)
        c = labels.get(name)
        if c is None:
            first = eps[0][0] if eps else None
            false_alarms, lead = len(eps), None
            ok = not eps
        else:
            false_eps = [(a, b) for a, b in eps if b is not None and b <= c - alarm_gap]
            true_eps = [e for e in eps if e not in false_eps]
            first = true_eps[0][0] if true_eps else None
            false_alarms = len(false_eps)
            lead = (c - first) if first is not None else None
            ok = lead is not None and lead >= min_lead
        top = watch_from = None
        if first is not None:
            top = t.loc[t["step"] == first, "top"].iloc[0]
            # the state left "ok" at the start of the elevated stretch that contains the first warning
            watch_from = next(a for a, b in episodes(steps, states, ("watch", "warning", "critical"))
                              if a <= first and (b is None or b > first))
        rows.append({"run": name, "collapsed": c is not None, "collapse_step": c, "first_warning_step": first,
                     "first_warning_detector": top, "lead_time": lead, "elevated_from_step": watch_from,
                     "false_alarms": false_alarms,
                     "steps": len(steps), "max_risk": float(t["risk"].max()) if len(t) else 0.0, "pass": ok})
    coll = [r for r in rows if r["collapsed"]]
    stable = [r for r in rows if not r["collapsed"]]
    leads = sorted(r["lead_time"] for r in coll if r["lead_time"] is not None)
    summary = {
        "runs": len(rows), "collapsing": len(coll), "stable": len(stable),
        "collapsing_warned_in_time": sum(r["pass"] for r in coll),
        "stable_without_warning": sum(r["pass"] for r in stable),
        "median_lead_time": leads[len(leads) // 2] if leads else None,
        "false_alarms": sum(r["false_alarms"] for r in rows), "min_lead": min_lead, "alarm_gap": alarm_gap,
        "all_pass": all(r["pass"] for r in rows),
    }
    return {"runs": rows, "summary": summary}


def main(args) -> int:
    from arldiag.store.reader import open_run

    run = open_run(args.run if len(args.run) > 1 else args.run[0])
    res = evaluate(run, args.min_lead, args.alarm_gap)
    if args.json:
        print(json.dumps(res, indent=2, default=str))
    else:
        hdr = (f"{'run':<28} {'collapse':>8} {'1st warn':>8} {'lead':>5} {'false':>5}  {'by':<18} {'watch':>5} "
               "pass")
        print(hdr)
        print("-" * len(hdr))
        f = lambda v: "-" if v is None else str(v)  # noqa: E731
        for r in res["runs"]:
            print(f"{r['run'][:28]:<28} {f(r['collapse_step']):>8} {f(r['first_warning_step']):>8} "
                  f"{f(r['lead_time']):>5} {r['false_alarms']:>5}  {f(r['first_warning_detector']):<18} "
                  f"{f(r['elevated_from_step']):>5} {'yes' if r['pass'] else 'NO'}")
        s = res["summary"]
        print(f"\ncollapsing runs warned >= {s['min_lead']} steps ahead: {s['collapsing_warned_in_time']}/"
              f"{s['collapsing']}; stable runs without warning: {s['stable_without_warning']}/{s['stable']}; "
              f"median lead {f(s['median_lead_time'])}; false alarms {s['false_alarms']}")
    return 1 if args.check and not res["summary"]["all_pass"] else 0

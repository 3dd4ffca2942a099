"""`arldiag eval-detect RUN...`: the detection benchmark.

Per run: the collapse step and recovered dips (the label of arldiag.label), the warning episodes, the lead time
(collapse step - start of the episode still active at the collapse), false alarms and the share of steps in
warning; over the set: recall at lead >= min_lead and >= 2 min_lead, false-alarm episodes per 100 healthy steps,
the share of healthy steps in warning, the median lead and a NAB-style windowed score. The rules are those of
arldiag.evaluation.scoring (docs/detectors.md "How alerts are scored"). A collapsing run passes when it is caught at
min_lead (an early collapse: alarmed at or before it); a stable run passes without a false alarm.

A run that does not collapse but plants faults on purpose (run.json ``config.injected_faults``: {detector: why},
written by the reference trainer for --rollout-dtype and --retokenize) is a *fault* run, not a stable one: it passes
when every planted detector reached warning, and its episodes led by any other detector count as false alarms.
``--split dev|heldout`` keeps the runs whose run.json says so (``config.split``, or a top-level ``split``).
With ``--engine local|ray`` (or $ARLDIAG_ENGINE) each run is scored by its own task (arldiag.fleetrun), here or on
Ray, and the summary is computed over the joined rows; a run that cannot be read is left out of the summary and
listed under ``errors``.
"""
from __future__ import annotations

import json
import math
import sys

from arldiag.evaluation.evaluate import (SPLITS, evaluate, injected_faults, load_labels,  # noqa: F401 (API)
                                         score_evaluation, select_split, split_of)
from arldiag.evaluation.scoring import ScoreConfig, episodes, score_run, summarize  # noqa: F401 (API)
from arldiag.detectors.risk import calibrated_model
from arldiag.evaluation.evaluate import summary_of
from arldiag.fleetrun.engine import add_engine_argument, run_all
from arldiag.fleetrun.locate import locate_runs
from arldiag.fleetrun.tasks import call, eval_error
from arldiag.store.reader import open_run


def add_arguments(p) -> None:
    p.add_argument("run", nargs="+", help="run directories, roots of runs, or globs")
    p.add_argument("--min-lead", type=int, default=10, help="steps of warning required before a collapse")
    p.add_argument("--alarm-gap", type=int, default=20,
                   help="on a collapsing run, a warning that cleared this many steps before the collapse is a false "
                        "alarm")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--check", action="store_true", help="exit with code 1 unless every run passes")
    p.add_argument("--window", type=int, default=40, help="NAB window: steps before the collapse that score")
    p.add_argument("--split", choices=SPLITS, help="only the runs whose run.json names this split")
    p.add_argument("--risk", choices=("rules", "learned"), default=None,
                   help="alert state from the rule-based risk or the learned risk score (default: the model "
                        "calibrated.json ships, benchmarks/calibrate.py)")
    p.add_argument("--labels", metavar="FILE",
                   help="score against these labels instead of arldiag's own: JSON {run: {collapse_step: N|null, "
                        "ambiguous: bool, log_interval_steps: N}} (the format of shared/real_runs/labels.json); "
                        "ambiguous runs are scored apart, a run the file does not name keeps arldiag's label")
    p.add_argument("--precursors", type=int, default=0, metavar="K",
                   help="for each collapsing run, also list the K step metrics that moved most in the window from "
                        "20 to 10 steps before the collapse (z against the 40 steps before that)")

    add_engine_argument(p)


def _of(n: int, total: int, what: str, none: str) -> str:
    """"stable runs without warning: 3/4", or ``none`` ("no stable runs") when there are none (not "0/0")."""
    return f"{what}: {n}/{total}" if total else none


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.0f} %"


def summary_line(s: dict) -> str:
    f = lambda v, fmt="{:.2f}": "-" if v is None else fmt.format(v)  # noqa: E731
    t1, t2 = s["min_lead"], 2 * s["min_lead"]
    return (f"recall@{t1} {_pct(s[f'recall_at_{t1}'])}, recall@{t2} {_pct(s[f'recall_at_{t2}'])} "
            f"({s['collapsing']} collapses, {s['early_collapses']} early); median lead {f(s['median_lead'], '{:g}')}; "
            f"false-alarm episodes {s['false_alarm_episodes']} = {f(s['false_alarms_per_100_healthy_steps'])} per 100 "
            f"healthy steps; healthy steps in warning {f(s['healthy_warning_share'] and 100 * s['healthy_warning_share'], '{:.1f}')} %; "
            f"NAB score {f(s['nab_score'], '{:.1f}')}")


def fleet_evaluate(args, labels: dict | None) -> dict:
    """``evaluate`` over every run under ``args.run``, one task per run on ``args.engine``: the same rows and summary
    as ``evaluate(open_run(args.run), ...)``, plus ``errors`` when a run could not be scored."""
    cfg = ScoreConfig(min_lead=args.min_lead, alarm_gap=args.alarm_gap, window=args.window)
    risk = calibrated_model() if args.risk is None else args.risk
    options = {"min_lead": args.min_lead, "alarm_gap": args.alarm_gap, "window": args.window, "risk": risk,
               "precursors": args.precursors, "split": args.split, "labels": labels}
    out = run_all(call("eval_row", options), locate_runs(args.run), args.engine, on_error=eval_error,
                  progress=not args.no_progress and sys.stderr.isatty(), desc="eval-detect")
    rows = [r for r in out if r is not None and "error" not in r]
    errors = [r for r in out if r is not None and "error" in r]
    if errors and not rows:
        raise ValueError(f"no run could be scored: {errors[0]['run']}: {errors[0]['error']}")
    res = {"runs": rows, "summary": summary_of(rows, cfg, args.split, risk, labels)}
    if errors:
        res["errors"] = errors
    return res


def main(args) -> int:
    import os

    labels = load_labels(args.labels) if getattr(args, "labels", None) else None
    if getattr(args, "engine", None) or os.environ.get("ARLDIAG_ENGINE"):
        res = fleet_evaluate(args, labels)
    else:
        run = open_run(args.run if len(args.run) > 1 else args.run[0])
        res = evaluate(run, args.min_lead, args.alarm_gap, args.precursors, args.split, args.window, args.risk,
                       labels=labels)
    for err in res.get("errors", []):
        print(f"arldiag eval-detect: warning: run {err['run']} could not be scored: {err['error']}", file=sys.stderr)
    if labels is not None:
        missing = [r["run"] for r in res["runs"] if r["label_source"] != "labels file"]
        if missing:
            print(f"arldiag eval-detect: {len(missing)} run(s) not in {args.labels}, scored on arldiag's own label: "
                  f"{', '.join(missing[:8])}", file=sys.stderr)
    if args.json:
        print(json.dumps(res, indent=2, default=str))
        return 1 if args.check and not res["summary"]["all_pass"] else 0
    hdr = (f"{'run':<26} {'kind':<8} {'collapse':>8} {'dips':<10} {'1st warn':>8} {'lead':>5} {'false':>5} "
           f"{'warn%':>5}  {'by':<18} {'verdict':<9} pass")
    print(hdr)
    print("-" * len(hdr))
    f = lambda v: "-" if v is None else str(v)  # noqa: E731
    for r in res["runs"]:
        dips = ",".join(f"{a}-{b}" for a, b in r["dips"]) or "-"
        c = (f(r["collapse_step"]) + ("*" if r["early_collapse"] else "") if r["decline_step"] is None
             else f"{r['decline_step']}d")
        print(f"{r['run'][:26]:<26} {r['kind']:<8} {c:>8} {dips[:10]:<10} {f(r['first_warning_step']):>8} "
              f"{f(r['lead_time']):>5} {r['false_alarms']:>5} {100 * r['warning_share']:>5.0f}  "
              f"{f(r['first_warning_detector']):<18} {r['verdict']:<9} {'yes' if r['pass'] else 'NO'}")
    s = res["summary"]
    print(f"\n{summary_line(s)}")
    quiet = _of(s["stable_runs_without_warning"], s["stable"], "stable runs without any warning", "no stable runs")
    late = f"collapses alarmed before or within {ScoreConfig.late_points} logged points"
    print(f"{_of(s['alarmed_by_late_points'], s['collapsing'], late, 'no collapsing runs')}; {quiet}"
          + (f"; ambiguous runs (scored apart): {s['ambiguous']}" if s["ambiguous"] else ""))
    ahead = f"collapsing runs caught >= {s['min_lead']} steps ahead"
    print(f"{_of(s['collapsing_warned_in_time'], s['collapsing'], ahead, 'no collapsing runs')}"
          + (" (* early collapse: alarm at or before it); " if s["collapsing"] else "; ")
          + f"{_of(s['stable_without_warning'], s['stable'], 'stable runs without warning', 'no stable runs')}; "
          f"{_of(s['faults_flagged'], s['fault'], 'runs with planted faults flagged', 'no runs with planted faults')}")
    if s["declines"]:
        print(f"declining runs (never learned, then fell; d: the step, not scored as collapses): {s['declines']}, "
              f"{s['declines_warned']} warned inside the {s['window']} steps before their decline or after, "
              f"{s['declines'] - s['declines_without_false_alarm']} with a false alarm before that")
    for r in res["runs"]:
        if r.get("precursors") is not None:
            lo, hi = r["collapse_step"] - 2 * s["min_lead"], r["collapse_step"] - s["min_lead"]
            print(f"\n{r['run']}: metrics that moved in steps {lo}..{hi} (z against the 40 steps before)")
            for p in r["precursors"] or [{"metric": "(too little history before the collapse)", "z": "",
                                          "base_mean": math.nan, "lead_mean": math.nan}]:
                print(f"  {p['metric']:<32} z {p['z']:>7}  {p['base_mean']:.4g} -> {p['lead_mean']:.4g}")
    return 1 if args.check and not res["summary"]["all_pass"] else 0

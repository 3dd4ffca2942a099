"""`arldiag eval-detect RUN...`: the detection benchmark.

Per run: the collapse step and recovered dips (the label of detectors.label), the warning episodes, the lead time
(collapse step - start of the episode still active at the collapse), false alarms and the share of steps in
warning; over the set: recall at lead >= min_lead and >= 2 min_lead, false-alarm episodes per 100 healthy steps,
the share of healthy steps in warning, the median lead and a NAB-style windowed score. The rules are those of
detectors.scoring (docs/detectors.md "How alerts are scored"). A collapsing run passes when it is caught at
min_lead (an early collapse: alarmed at or before it); a stable run passes without a false alarm.

A run that does not collapse but plants faults on purpose (run.json ``config.injected_faults``: {detector: why},
written by the reference trainer for --rollout-dtype and --retokenize) is a *fault* run, not a stable one: it passes
when every planted detector reached warning, and its episodes led by any other detector count as false alarms.
``--split dev|heldout`` keeps the runs whose run.json says so (``config.split``, or a top-level ``split``).
"""
from __future__ import annotations

import json
import math
import sys

from arldiag.detectors.scoring import ScoreConfig, episodes, score_run, summarize  # noqa: F401 (episodes: API)
from arldiag.levels import ALERTING

SPLITS = ("dev", "heldout")


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


def injected_faults(run, name: str) -> dict:
    """{detector: why} planted on purpose in run ``name`` (run.json config.injected_faults), {} when none."""
    faults = (run.manifests.get(name, {}).get("config") or {}).get("injected_faults") or {}
    return dict(faults) if isinstance(faults, dict) else {str(d): "" for d in faults}


def split_of(run, name: str) -> str | None:
    """The run's split from run.json: ``config.split``, else a top-level ``split``; None when neither is set."""
    m = run.manifests.get(name, {}) or {}
    sp = (m.get("config") or {}).get("split", m.get("split"))
    return None if sp is None else str(sp)


def select_split(run, split: str | None) -> list[str]:
    if split is None:
        return list(run.names)
    if split not in SPLITS:
        raise ValueError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    return [n for n in run.names if split_of(run, n) == split]


def load_labels(path: str) -> dict[str, dict]:
    """{run: {"collapse_step": int | None, "ambiguous": bool, "log_interval_steps": int | None}} from a labels
    file; a malformed file is an error that names it and the entry."""
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"labels: {path!r} does not exist")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"labels: {path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise ValueError(f"labels: {path} must hold a JSON object {{run: {{collapse_step: ...}}}}")
    out = {}
    for name, lab in data.items():
        if not isinstance(lab, dict) or "collapse_step" not in lab:
            raise ValueError(f"labels: entry {name!r} of {path} needs a collapse_step (a step or null)")
        c = lab["collapse_step"]
        if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float)) or c != int(c)):
            raise ValueError(f"labels: collapse_step of {name!r} in {path} must be an integer step or null, got {c!r}")
        iv = lab.get("log_interval_steps")
        out[str(name)] = {"collapse_step": None if c is None else int(c), "ambiguous": bool(lab.get("ambiguous")),
                          "log_interval_steps": int(iv) if isinstance(iv, (int, float)) and iv >= 1 else None}
    return out


def score_evaluation(name: str, timeline, collapse, dips, faults: dict, tracks, cfg: ScoreConfig,
                     decline: int | None = None, interval: int = 1, ambiguous: bool = False) -> dict:
    """Score one run's alert timeline [(step, risk, state, top)] (the batch Evaluator's or any other tool's)."""
    steps = [s for s, *_ in timeline]
    states = [st for _, _, st, _ in timeline]
    tops = {s: top for s, _, _, top in timeline}
    r = score_run(steps, states, collapse, dips, tops, tuple(faults), cfg, decline=decline, interval=interval,
                  ambiguous=ambiguous)
    lead_ep = r["lead_episode"]
    first = lead_ep[0] if lead_ep else None
    expected_fired = None
    if r["kind"] == "collapse":
        ok = r[f"caught_at_{cfg.min_lead}"]
    elif r["kind"] == "fault":
        expected_fired = {d: tracks[d].max_level >= 2 for d in faults if d in tracks}
        ok = len(expected_fired) == len(faults) and all(expected_fired.values()) and not r["false_alarms"]
        eps = r["episodes"]
        first = next((a for a, _ in eps if tops.get(a) in faults), None)
    elif r["kind"] == "ambiguous":
        ok = True
        first = r["first_episode_step"]
    else:
        ok = not r["false_alarms"]
        first = r["false_alarm_episodes"][0][0] if r["false_alarm_episodes"] else None
    watch_from = None
    if first is not None:
        # the state left "ok" at the start of the elevated stretch that contains that warning
        watch_from = next(a for a, b in episodes(steps, states, ALERTING)
                          if a <= first and (b is None or b > first))
    r.update({"run": name, "collapsed": collapse is not None, "first_warning_step": first,
              "first_warning_detector": tops.get(first) if first is not None else None,
              "elevated_from_step": watch_from, "injected_faults": sorted(faults) or None,
              "injected_faults_fired": expected_fired,
              "max_risk": max((rk for _, rk, _, _ in timeline), default=0.0), "pass": bool(ok)})
    return r


def evaluate(run, min_lead: int = 10, alarm_gap: int = 20, precursors: int = 0, split: str | None = None,
             window: int = 40, risk: str | None = None, names=None, labels: dict | None = None) -> dict:
    """Score the runs (``names``: a subset of run.names, else those of ``split``, else all); ``labels``
    (``load_labels``) replaces arldiag's own label for the runs it names."""
    from arldiag.detectors import decline_of, evaluate_run, events_of
    from arldiag.detectors.precursors import precursor_scan
    from arldiag.detectors.risk import calibrated_model

    cfg = ScoreConfig(min_lead=min_lead, alarm_gap=alarm_gap, window=window)
    risk = calibrated_model() if risk is None else risk
    rows = []
    for name in (list(names) if names is not None else select_split(run, split)):
        re = evaluate_run(run, name, risk_model=risk)
        lab = (labels or {}).get(name)
        interval = re.evaluator.interval  # the batch evaluator's (batch.log_interval)
        if lab is not None:
            c, dips, dec = lab["collapse_step"], [], None
            interval = lab["log_interval_steps"] or interval
        else:
            c, dips = events_of(re.frame)
            dec = decline_of(re.frame)
        r = score_evaluation(name, re.timeline, c, dips, injected_faults(run, name), re.evaluator.tracks, cfg,
                             dec, interval=interval, ambiguous=bool(lab and lab["ambiguous"]))
        r["split"] = split_of(run, name)
        r["label_source"] = "labels file" if lab is not None else "arldiag"
        rows.append(r)
        if precursors and c is not None:
            r["precursors"] = precursor_scan(re.frame, c, (min_lead, 2 * min_lead), top=precursors)
    summary = summarize(rows, cfg)
    summary.update({
        "collapsing_warned_in_time": sum(r["pass"] for r in rows if r["kind"] == "collapse"),
        "stable_without_warning": sum(r["pass"] for r in rows if r["kind"] == "stable"),
        "declines_without_false_alarm": sum(r["pass"] for r in rows if r["kind"] == "decline"),
        "faults_flagged": sum(r["pass"] for r in rows if r["kind"] == "fault"),
        "false_alarms": summary["false_alarm_episodes"], "min_lead": min_lead, "alarm_gap": alarm_gap,
        "window": window, "split": split, "risk": risk, "all_pass": all(r["pass"] for r in rows),
        "labels": "file" if labels else "arldiag",
    })
    return {"runs": rows, "summary": summary}


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


def main(args) -> int:
    from arldiag.store.reader import open_run

    labels = load_labels(args.labels) if getattr(args, "labels", None) else None
    run = open_run(args.run if len(args.run) > 1 else args.run[0])
    res = evaluate(run, args.min_lead, args.alarm_gap, args.precursors, args.split, args.window, args.risk,
                   labels=labels)
    if labels is not None:
        missing = [r["run"] for r in res["runs"] if r["label_source"] != "labels file"]
        if missing:
            print(f"arldiag eval-detect: {len(missing)} run(s) not in {args.labels}, scored on arldiag's own label: "
                  f"{', '.join(missing[:8])}", file=sys.stderr)
    if args.json:
        print(json.dumps(res, indent=2, default=str))
        return 1 if args.check and not res["summary"]["all_pass"] else 0
    hdr = (f"{'run':<26} {'kind':<8} {'collapse':>8} {'dips':<10} {'1st warn':>8} {'lead':>5} {'false':>5} "
           f"{'warn%':>5}  {'by':<18} pass")
    print(hdr)
    print("-" * len(hdr))
    f = lambda v: "-" if v is None else str(v)  # noqa: E731
    for r in res["runs"]:
        dips = ",".join(f"{a}-{b}" for a, b in r["dips"]) or "-"
        c = (f(r["collapse_step"]) + ("*" if r["early_collapse"] else "") if r["decline_step"] is None
             else f"{r['decline_step']}d")
        print(f"{r['run'][:26]:<26} {r['kind']:<8} {c:>8} {dips[:10]:<10} {f(r['first_warning_step']):>8} "
              f"{f(r['lead_time']):>5} {r['false_alarms']:>5} {100 * r['warning_share']:>5.0f}  "
              f"{f(r['first_warning_detector']):<18} {'yes' if r['pass'] else 'NO'}")
    s = res["summary"]
    print(f"\n{summary_line(s)}")
    print(f"collapses alarmed before or within {ScoreConfig.late_points} logged points: {s['alarmed_by_late_points']}/"
          f"{s['collapsing']}; stable runs without any warning: {s['stable_runs_without_warning']}/{s['stable']}"
          + (f"; ambiguous runs (scored apart): {s['ambiguous']}" if s["ambiguous"] else ""))
    print(f"collapsing runs caught >= {s['min_lead']} steps ahead: {s['collapsing_warned_in_time']}/{s['collapsing']} "
          f"(* early collapse: alarm at or before it); stable runs without warning: {s['stable_without_warning']}/"
          f"{s['stable']}; runs with planted faults flagged: {s['faults_flagged']}/{s['fault']}")
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

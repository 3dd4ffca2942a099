"""Scoring runs' alert timelines against their collapse labels: the library behind `arldiag eval-detect`
(arldiag/commands/eval_detect.py is its command line).

``evaluate(run, ...)`` replays each run (``detectors.evaluate_run``), takes its label (arldiag's own,
``evaluation.label``, or a labels file: ``load_labels``) and scores the timeline (``score_evaluation``, the rules of
``evaluation.scoring``). A run that plants faults on purpose (run.json ``config.injected_faults``) is a *fault* run;
``split_of`` reads a run's dev/heldout split from run.json.
"""
from __future__ import annotations

import json

from arldiag.detectors import decline_of, evaluate_run, events_of
from arldiag.detectors.risk import calibrated_model
from arldiag.evaluation.precursors import precursor_scan
from arldiag.evaluation.scoring import ScoreConfig, episodes, score_run, summarize
from arldiag.levels import ALERTING
from arldiag.verdict import verdict_of

SPLITS = ("dev", "heldout")


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
    cfg = ScoreConfig(min_lead=min_lead, alarm_gap=alarm_gap, window=window)
    risk = calibrated_model() if risk is None else risk
    rows = [score_one(run, name, cfg, risk, precursors, split, labels)
            for name in (list(names) if names is not None else select_split(run, split))]
    return {"runs": rows, "summary": summary_of(rows, cfg, split, risk, labels)}


def score_one(run, name: str, cfg: ScoreConfig, risk, precursors: int = 0, split: str | None = None,
              labels: dict | None = None) -> dict:
    """The eval-detect row of run ``name`` (one replay); a fleet task (arldiag.fleetrun.tasks) calls it per run."""
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
    v = verdict_of(re, c, dec if c is None else None)  # the report's and `ls`'s word, on this run's label
    r.update(verdict=v.status, verdict_reason=v.reason)
    r["split"] = split_of(run, name)
    r["label_source"] = "labels file" if lab is not None else "arldiag"
    if precursors and c is not None:
        r["precursors"] = precursor_scan(re.frame, c, (cfg.min_lead, 2 * cfg.min_lead), top=precursors)
    return r


def summary_of(rows: list[dict], cfg: ScoreConfig, split: str | None, risk, labels: dict | None) -> dict:
    """The set's summary over the runs' rows (``score_one``)."""
    min_lead, alarm_gap, window = cfg.min_lead, cfg.alarm_gap, cfg.window
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
    return summary

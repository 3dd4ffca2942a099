"""Batch evaluator: replay the ``steps`` view of each run through the shared Evaluator, then attach batch-only
evidence (the per-step series and the top sequences from the ``sequences`` view, via DuckDB).

pandas is used only for the small per-step frame (one row per step); nothing here imports DuckDB directly: the
run object (arldiag.store.reader) owns the connection.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from arldiag.detectors.advice import settings_of, with_actions
from arldiag.detectors.base import Detector
from arldiag.detectors.engine import Evaluator
from arldiag.detectors.risk import RiskConfig
from arldiag.findings import Finding
from arldiag.label import (EVAL_COLUMN, FORMAT_COLUMNS, REWARD_COLUMN, SCORE_COLUMN, SUCCESS_COLUMNS, run_decline,
                           run_events)
from arldiag.store.reader import open_run

TOP_SEQUENCES = 5
_SEQ_COLUMNS = ("step", "update", "rank", "sample_id", "group_id", "turn", "n_tokens", "advantage", "seq_ratio",
                "ppo_kl_k3_sum", "neg_adv_low_is", "nonfinite", "retok_mismatch", "mismatch_log_abs_max",
                "entropy_mean", "response_length", "reward", "format_valid", "success")


def as_run(run):
    """Accept an open Run or anything ``open_run`` accepts (a path, a glob, a list of them)."""
    if hasattr(run, "names") and hasattr(run, "sql"):
        return run

    return open_run(run)


def _q(name: str) -> str:
    return "'" + str(name).replace("'", "''") + "'"


def steps_frame(run, name: str):
    """The ``steps`` view of one run as a pandas frame ordered by step (one row per step)."""
    return run.sql(f"select * from steps where run = {_q(name)} order by step").df()


@dataclass
class RunEvaluation:
    name: str
    evaluator: Evaluator
    steps: list[int]
    timeline: list[tuple[int, float, str, str | None]]  # (step, risk, state, top detector)
    frame: Any                                           # pandas DataFrame of the steps view


def evaluate_run(run, name: str, names=None, risk: RiskConfig | None = None,
                 risk_model: str | None = None, levels_out: list | None = None,
                 holding_out: list | None = None) -> RunEvaluation:
    """Replay one run through the Evaluator; ``levels_out`` (a list) receives each step's {detector: level},
    ``holding_out`` whether the score held at that step (StepResult.holding: the corroboration gate's input)."""
    # A user metric named like a derived one already fills it in the steps view where arldiag recorded nothing,
    # exactly as the Collector does online, so both evaluators see the same series.
    df = steps_frame(run, name)
    manifest = getattr(run, "manifests", {}).get(name)
    ev = Evaluator(names, risk=risk, config=settings_of(manifest), risk_model=risk_model,
                   interval=log_interval(df["step"].tolist() if len(df) else [], manifest))
    cols = [c for c in ev.window.columns if c in df.columns]
    timeline = []
    steps = [int(s) for s in df["step"].tolist()] if len(df) else []
    records = df[cols].to_dict("records") if cols else [{} for _ in steps]
    pending = actions_of(run, name)  # [(step, outcome JSON)] of the auto-stabilize actions, in the order applied
    for step, rec in zip(steps, records):
        # an action taken at step s changed the settings from step s + 1 on, as online (Monitor.note_action)
        while pending and pending[0][0] < step:
            ev.config = with_actions(ev.config, [pending.pop(0)[1]])
        r = ev.update(step, rec)
        timeline.append((step, r.risk, r.state, r.top))
        if levels_out is not None:
            levels_out.append({n: sig.level for n, sig in r.signals.items()})
        if holding_out is not None:
            holding_out.append(r.holding)
    return RunEvaluation(name, ev, steps, timeline, df)


def log_interval(steps, manifest=None) -> int:
    """Optimizer steps between logged points: the manifest's ``config.log_interval_steps`` (written by
    `arldiag import`), else the median gap of the logged steps (1 for a run logged every step)."""
    given = ((manifest or {}).get("config") or {}).get("log_interval_steps")
    if isinstance(given, (int, float)) and given >= 1:
        return int(given)
    gaps = [b - a for a, b in zip(steps, steps[1:]) if b > a]
    if not gaps:
        return 1
    gaps.sort()
    return max(1, int(gaps[len(gaps) // 2]))


def actions_of(run, name: str) -> list[tuple[int, str]]:
    """[(step, outcome JSON)] of run ``name``'s auto-stabilize actions in the order applied; [] without any."""
    try:
        if not run.count("actions"):
            return []
        rows = run.con.execute("select step, outcome from actions where run = ? order by step, time",
                               [name]).fetchall()
    except Exception:  # noqa: BLE001 - a store without an actions view (older runs, imports) has no actions
        return []
    return [(int(s), o) for s, o in rows]


def _series_evidence(df, metric: str) -> dict[str, list]:
    if metric not in df.columns:
        return {}
    vals = [None if v is None or (isinstance(v, float) and not math.isfinite(v)) else float(v)
            for v in df[metric].tolist()]
    return {"step": [int(s) for s in df["step"].tolist()], metric: vals}


def _top_sequences(run, name: str, d: Detector, lo: int, hi: int) -> list[dict] | str:
    """The sequences of steps [lo, hi] that best show the detector's condition (batch-only evidence)."""
    if not d.evidence_sql:
        return []
    try:
        have = set(run.columns("sequences"))
    except Exception as e:  # the run has no sequences table
        return f"no sequences table ({e})"
    if not have:
        return "no sequences table"
    cols = [c for c in _SEQ_COLUMNS if c in have]
    text = ", left(text, 300) as text" if "text" in have else ""
    sql = (f"select {', '.join(cols)}{text}, ({d.evidence_sql})::DOUBLE as score from sequences "
           f"where run = {_q(name)} and step between {int(lo)} and {int(hi)} and ({d.evidence_where}) "
           # the key columns break ties, so the same run always gives the same evidence
           f"order by score desc nulls last, step, update, rank, sample_id limit {TOP_SEQUENCES}")
    try:
        rows = run.sql(sql).df().to_dict("records")
    except Exception as e:  # a column the expression needs is missing in this run
        return f"top sequences unavailable: {e}"
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in rows]


_TOK_COLUMNS = ("step", "update", "sample_id", "pos", "turn", "token_id", "token_id_rollout", "logp", "logp_old",
                "logp_rollout", "advantage")


def _top_tokens(run, name: str, d: Detector, lo: int, hi: int) -> list[dict] | str:
    """The stored token rows of steps [lo, hi] that best show the detector's condition (batch-only evidence)."""
    try:
        have = set(run.columns("tokens"))
        cols = [c for c in _TOK_COLUMNS if c in have]
        sql = (f"select {', '.join(cols)}, ({d.token_evidence_sql})::DOUBLE as score from tokens "
               f"where run = {_q(name)} and step between {int(lo)} and {int(hi)} "
               f"order by score desc nulls last, step, update, rank, sample_id, pos limit {TOP_SEQUENCES}")
        rows = run.sql(sql).df().to_dict("records")
    except Exception as e:  # no tokens table, or a column the expression needs is missing
        return f"top tokens unavailable: {e}"
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in rows]


def _run_findings(run, name: str, re: RunEvaluation, evidence: bool) -> list[Finding]:
    out = []
    for d in re.evaluator.detectors:
        f = re.evaluator.finding(d, name, re.steps)
        if evidence and f.status == "fired":
            tr = re.evaluator.tracks[d.name]
            f.evidence["series"] = _series_evidence(re.frame, f.evidence["metric"])
            lo, hi = next(((a, b) for a, b in tr.intervals if a <= tr.peak_step <= b),
                          (tr.peak_step, tr.peak_step))
            f.evidence["top_sequences"] = _top_sequences(run, name, d, lo, hi)
            if d.token_evidence_sql:
                f.evidence["top_tokens"] = _top_tokens(run, name, d, lo, hi)
        out.append(f)
    return out


def _outcomes(frame) -> dict:
    """The outcome series the label reads, as float arrays."""
    return {c: frame[c].astype("float64").to_numpy()
            for c in SUCCESS_COLUMNS + FORMAT_COLUMNS + (EVAL_COLUMN, REWARD_COLUMN, SCORE_COLUMN)
            if c in frame.columns}


def events_of(frame, **rule: Any) -> tuple[int | None, list[tuple[int, int]]]:
    """(collapse step, recovered dips) of one run's steps frame under the documented label (arldiag.label);
    keyword args override the rule."""
    if not len(frame):
        return None, []
    return run_events(frame["step"].tolist(), _outcomes(frame), **rule)


def decline_of(frame, **rule: Any) -> int | None:
    """The step at which a run that did not collapse declined (arldiag.label.run_decline), or None."""
    if not len(frame):
        return None
    return run_decline(frame["step"].tolist(), _outcomes(frame), **rule)


def label_of(frame, **rule: Any) -> int | None:
    """The documented collapse label (arldiag.label) of one run's steps frame; keyword args override the rule."""
    return events_of(frame, **rule)[0]


def analyse(run, names=None, risk: RiskConfig | None = None, evidence: bool = True):
    """One replay per run for all three batch outputs: (findings as ``detect``, {run: collapse label},
    alert timeline as ``alert_timeline``)."""
    import pandas as pd

    run = as_run(run)
    findings: list[Finding] = []
    labels: dict[str, int | None] = {}
    rows = []
    for name in run.names:
        re = evaluate_run(run, name, names, risk)
        findings += _run_findings(run, name, re, evidence)
        labels[name] = label_of(re.frame)
        rows += [{"run": name, "step": s, "risk": r, "state": st, "top": top} for s, r, st, top in re.timeline]
    return findings, labels, pd.DataFrame(rows, columns=["run", "step", "risk", "state", "top"])


def detect(run, names=None, risk: RiskConfig | None = None, evidence: bool = True) -> list[Finding]:
    """One Finding per (detector, run name); status fired | quiet | skipped."""
    run = as_run(run)
    return [f for name in run.names for f in _run_findings(run, name, evaluate_run(run, name, names, risk), evidence)]


def alert_timeline(run, names=None, risk: RiskConfig | None = None):
    """pandas DataFrame: run, step, risk (0..1), state (ok|watch|warning|critical), top (leading detector)."""
    return analyse(run, names, risk, evidence=False)[2]


def collapse_step(run, **rule: Any) -> dict[str, int | None]:
    """The documented collapse label (arldiag.label) per run name; keyword args override the rule defaults."""
    run = as_run(run)
    return {name: label_of(steps_frame(run, name), **rule) for name in run.names}


def decline_step(run, **rule: Any) -> dict[str, int | None]:
    """The decline step (arldiag.label.run_decline) per run name: None for a run that collapsed or did not
    decline."""
    run = as_run(run)
    return {name: decline_of(steps_frame(run, name), **rule) for name in run.names}

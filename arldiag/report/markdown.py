"""Markdown rendering of a Report, for pasting into an issue tracker (no figures; tables and lists)."""
from __future__ import annotations

import math

import numpy as np

from arldiag.findings import order_findings
from arldiag.report import text as T
from arldiag.views import catalog as S
from arldiag.views.offenders import token_labels
from arldiag.views.series import series


def _cell(x) -> str:
    return str("" if x is None else x).replace("|", "\\|").replace("\n", " ")


def _table(head: list[str], rows: list[list]) -> list[str]:
    return (["| " + " | ".join(_cell(h) for h in head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows] + [""])


def _signal_summary(rep, key: str) -> str:
    col = rep.cols.get(key)
    if col is None:
        return "n/a"
    y = series(rep.steps, col)[1]
    k5 = max(1, y.size // 5)
    return f"mean {T.num(y.mean())}, max {T.num(y.max())}, last fifth {T.num(y[-k5:].mean())}"


def _offender_tokens(o, decode, k: int = 8) -> str:
    """The k tokens with the largest |log-ratio|, as `label`(log r)."""
    labels, mode = token_labels(o, decode)
    if not labels:
        return T.LABEL_NOTES["none"]
    lr = o.tokens["log_ratio"].to_numpy(dtype=np.float64)
    order = np.argsort(-np.nan_to_num(np.abs(lr), nan=-1.0))[:k]
    return ", ".join(f"`{labels[i]}` ({T.num(lr[i], '.3g')})" for i in sorted(order)) + f" ({T.LABEL_NOTES[mode]})"


def render_markdown(report) -> str:
    rep, v = report.main, report.main.verdict
    L = [f"# arldiag report: {rep.name}", "",
         f"_generated {report.generated} by arldiag {report.version}_", "",
         "## Verdict", "",
         f"**{v.status.upper()}**: {v.summary}", ""]
    L += _table(["", rep.name] + ([f"{report.baseline.name} (baseline)"] if report.baseline else []),
                [[name] + [fn(r.verdict) for r in report.runs] for name, fn in (
                    ("verdict", lambda x: x.status),
                    ("collapse step", lambda x: x.collapse_step if x.collapse_step is not None else "none"),
                    ("decline step", lambda x: x.decline_step if x.decline_step is not None else "none"),
                    ("first precursor", T.precursor_line),
                    ("first warning alert", T.warning_line),
                    ("worst alert state", lambda x: x.max_state),
                    ("fired findings", lambda x: x.n_fired))])
    L += ["## Recommendations", ""]
    if rep.recommendations:
        for i, r in enumerate(rep.recommendations, 1):
            L.append(f"{i}. **[{r.severity}]** {r.text}")
            L += [f"   - evidence: {e}" for e in r.evidence]
        L.append("")
    else:
        L += ["No recommendation: no detector fired.", ""]
    intro = T.precursor_intro(rep)
    if intro is not None:
        L += [f"## What moved before the {T.event_word(rep)}", "", intro, ""]
        if rep.precursors:
            L += _table(["metric", "z", "before", "lead window"],
                        [[p["metric"], T.num(p["z"], ".3g"), T.num(p["base_mean"]), T.num(p["lead_mean"])]
                         for p in rep.precursors])
    L += ["## Findings", ""]
    fired = [f for f in order_findings(rep.findings) if f.fired]
    if fired:
        L += _table(["severity", "detector", "first step", "steps", "finding"],
                    [[f.severity, f.detector, f.first_step, len(f.steps), f"**{f.title}** {f.explanation}"]
                     for f in fired])
    else:
        L += ["No detector fired.", ""]
    skipped = [f for f in rep.findings if f.status == "skipped"]
    if skipped:
        L += ["Skipped (missing data): " + "; ".join(f"{f.detector} ({f.skipped_reason})" for f in skipped), ""]
    L += [T.alerts_line(rep), ""]
    if T.actions_line(rep) is not None:
        L += ["### Actions taken (auto-stabilize)", "", T.actions_line(rep), ""]
        L += _table(["step", "action", "parameters", "trigger", "state", "reason"],
                    [[int(a.step), a.action, a.params, a.detector, a.state, a.reason] for a in rep.actions.itertuples()])
    L += ["## Key signals", ""]
    keys = [s.key for p in S.TIMELINE for s in p.signals if any(s.key in r.cols for r in report.runs)]
    if keys:
        L += _table(["signal"] + [r.name for r in report.runs],
                    [[S.BY_KEY[k].label] + [_signal_summary(r, k) for r in report.runs] for k in keys])
    else:
        L += ["The run has no step metrics.", ""]
    L += ["## The four ARLArena dimensions", ""]
    for sec in rep.sections:
        L += [f"### {sec.title}", "", "What the run did:"] + [f"- {d}" for d in sec.did] + ["", "What the data shows:"]
        L += [f"- {s}" for s in sec.shows] + [f"- finding: {f}" for f in sec.findings] + [""]
    L += ["## Negative-advantage low-IS analysis", ""]
    c = rep.comparison
    if c is None:
        L += ["No negative-advantage low-IS step metrics recorded.", ""]
    else:
        (a0, a1), (b0, b1) = c.windows
        L += _table(["metric", f"{c.labels[0]} (steps {a0}-{a1})", f"{c.labels[1]} (steps {b0}-{b1})"],
                    [[T.NALIS_LABELS.get(k, k), T.num(x), T.num(y)] for k, (x, y) in c.rows.items()])
    for key, hm in rep.heatmaps.items():
        L.append(f"- {key}: {hm.counts['neg']:,} rows with A < 0, {hm.counts['pos']:,} with A > 0 "
                 f"(distribution heatmap in the HTML report)")
    if T.heatmap_missing(rep):
        L.append(T.heatmap_missing(rep))
    L += ["", "## Mismatch, entropy and turns", ""]
    for key in T.MISMATCH_KEYS + ("retok_mismatch_frac",) + T.ENTROPY_KEYS + T.TURN_KEYS:
        if key in rep.cols:
            L.append(f"- {S.BY_KEY[key].label}: {_signal_summary(rep, key)}")
    for msg in (T.mismatch_missing(rep), T.retok_note(rep), T.entropy_missing(rep), T.turns_missing(rep)):
        if msg:
            L.append(f"- {msg}")
    if rep.turns is not None:
        L += [""] + _table(["turn", "rows", "s_ik p05", "median", "p95", "out of band"],
                           [[int(r.turn), int(r.n), T.num(r.p05), T.num(r.p50), T.num(r.p95), T.num(r.oob_frac)]
                            for r in rep.turns.itertuples()])
    L += ["", "## Top offender sequences", ""]
    if not rep.offenders:
        L += [T.offenders_missing(rep), ""]
    else:
        L += [f"From {T.window_line(rep)}.", ""]
        for o in rep.offenders:
            share = o.kl_share * 100 if math.isfinite(o.kl_share) else o.kl_share
            L.append(f"- step {o.step}, update {o.update}, sample {o.sample_id}"
                     f"{' (neg-adv low-IS)' if o.neg_adv_low_is else ''}, picked by {o.source}: "
                     f"A = {T.num(o.advantage)}, s_i = {T.num(o.seq_ratio)}, {T.num(share, '.3g')} % of its step's KL")
            if o.text:
                L.append(f"  - text: `{o.text[:300].replace('`', chr(39))}`")
            L.append(f"  - largest |log r| tokens: {_offender_tokens(o, report.decode)}")
        L.append("")
    return "\n".join(L) + "\n"

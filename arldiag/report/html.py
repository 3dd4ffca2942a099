"""Self-contained HTML rendering of a Report: one file, plotly.js inlined once in <head>, no network needed."""
from __future__ import annotations

import html as _h
import math
import re
from typing import Any, Callable, Sequence

import numpy as np

from arldiag.findings import order_findings
from arldiag.report import figures as F
from arldiag.report import text as T
from arldiag.views import catalog as S
from arldiag.views.offenders import token_labels
from arldiag.views.series import series

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
CSS = """
body{font-family:-apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif;margin:0 auto;max-width:1200px;
padding:0 24px 48px;color:#222;line-height:1.45}
h1{margin-top:24px}h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:36px}
.verdicts{display:flex;gap:16px;flex-wrap:wrap}
.verdict{flex:1;min-width:320px;border-left:8px solid #888;background:#f7f7f7;padding:12px 16px;border-radius:4px}
.verdict .status{font-size:1.6em;font-weight:700;text-transform:uppercase}
table{border-collapse:collapse;margin:8px 0;font-size:.92em}td,th{border:1px solid #ddd;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f0f0f0}
.sev-critical{color:#c00000;font-weight:700}.sev-warning{color:#e07000;font-weight:700}.sev-watch{color:#b08800}
.nodata{color:#777;font-style:italic}.muted{color:#777}
.tok{display:inline-block;padding:1px 2px;margin:1px;border-radius:3px;font-family:monospace;font-size:.88em}
.seqtext{white-space:pre-wrap;font-family:monospace;background:#fafafa;border:1px solid #eee;padding:6px;
max-height:12em;overflow:auto}
.two{display:flex;gap:16px;flex-wrap:wrap}.two>div{flex:1;min-width:320px}
nav a{margin-right:12px}
details.section>summary{cursor:pointer;list-style-position:outside}
details.section>summary>h2{display:inline-block;border-bottom:none;margin:28px 0 4px}
tr.row-critical{background:#fdecec}tr.row-warning{background:#fff3e6}tr.row-watch{background:#fffbe6}
"""
SECTION_RE = re.compile(r'^<h2 id="([^"]+)">(.*?)</h2>', re.S)


def esc(x: Any) -> str:
    return _h.escape("" if x is None else str(x))


class _Figs:
    """Collects figure divs; plotly.js itself is inlined once in the page head, never per figure."""

    def __init__(self) -> None:
        self.n = 0

    def div(self, fig) -> str:
        if fig is None:
            return ""
        self.n += 1
        return fig.to_html(include_plotlyjs=False, full_html=False, div_id=f"fig{self.n}", config=PLOTLY_CONFIG)


def _ul(items: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>" if items else ""


def _nodata(msg: str | None) -> str:
    return f'<p class="nodata">{esc(msg)}</p>' if msg else ""


def _verdict(rep) -> str:
    v = rep.verdict
    color = T.STATUS_COLORS.get(v.status, "#888")
    return (f'<div class="verdict" style="border-color:{color}"><div class="muted">{esc(rep.name)}</div>'
            f'<div class="status" style="color:{color}">{esc(v.status)}</div>'
            f"<table><tr><th>collapse step</th><td>{esc(v.collapse_step if v.collapse_step is not None else 'none')}"
            + (f"</td></tr><tr><th>decline step</th><td>{esc(v.decline_step)}" if v.decline_step is not None else "")
            + f"</td></tr><tr><th>first precursor</th><td>{esc(T.precursor_line(v))}</td></tr>"
            f"<tr><th>first warning alert</th><td>{esc(T.warning_line(v))}</td></tr>"
            f"<tr><th>worst alert state</th><td>{esc(v.max_state)}</td></tr>"
            f"<tr><th>fired findings</th><td>{v.n_fired}</td></tr></table><p>{esc(v.summary)}</p></div>")


def _findings_table(rep) -> str:
    fired = [f for f in order_findings(rep.findings) if f.fired]
    skipped = [f for f in rep.findings if f.status == "skipped"]
    out = ""
    if fired:
        out += ("<table><tr><th>severity</th><th>detector</th><th>first step</th><th>steps</th><th>finding</th></tr>"
                + "".join(f'<tr class="row-{esc(f.severity)}"><td class="sev-{esc(f.severity)}">{esc(f.severity)}</td><td>{esc(f.detector)}</td>'
                          f"<td>{esc(f.first_step)}</td><td>{len(f.steps)}</td><td><b>{esc(f.title)}</b><br>"
                          f"{esc(f.explanation)}</td></tr>" for f in fired) + "</table>")
    else:
        out += '<p class="nodata">No detector fired.</p>'
    quiet = sum(1 for f in rep.findings if f.status == "quiet")
    out += f'<p class="muted">{quiet} detectors quiet, {len(skipped)} skipped.</p>'
    if skipped:
        out += "<details><summary>skipped detectors (missing data)</summary>" + _ul(
            [f"{f.detector}: {f.skipped_reason}" for f in skipped]) + "</details>"
    return out


def _alerts(rep) -> str:
    out = f'<p class="muted">{esc(T.alerts_line(rep))}</p>'
    if rep.alerts is not None:
        out += ("<details><summary>recorded alerts</summary><table><tr><th>step</th><th>detector</th>"
                "<th>severity</th><th>state</th><th>title</th><th>source</th></tr>"
                + "".join(f"<tr><td>{esc(a.step)}</td><td>{esc(a.detector)}</td><td>{esc(a.severity)}</td>"
                          f"<td>{esc(a.state)}</td><td>{esc(a.title)}</td><td>{esc(a.source)}</td></tr>"
                          for a in rep.alerts.itertuples()) + "</table></details>")
    return out


def _actions(rep) -> str:
    line = T.actions_line(rep)
    if line is None:
        return ""
    return (f'<h3 id="actions">Actions taken (auto-stabilize)</h3><p>{esc(line)}</p><table class="actions"><tr>'
            "<th>step</th><th>action</th><th>parameters</th><th>trigger</th><th>state</th><th>reason</th></tr>"
            + "".join(f"<tr><td>{esc(a.step)}</td><td>{esc(a.action)}</td><td>{esc(a.params)}</td>"
                      f"<td>{esc(a.detector)}</td><td>{esc(a.state)}</td><td>{esc(a.reason)}</td></tr>"
                      for a in rep.actions.itertuples()) + "</table>")


def _recommendations(rep) -> str:
    if not rep.recommendations:
        return '<p class="nodata">No recommendation: no detector fired.</p>'
    items = []
    for r in rep.recommendations:
        items.append(f'<li><span class="sev-{esc(r.severity)}">[{esc(r.severity)}]</span> {esc(r.text)}'
                     f"<br><span class=\"muted\">Evidence:</span>{_ul(r.evidence)}</li>")
    return "<ol>" + "".join(items) + "</ol>"


def _comparison(rep) -> str:
    c = rep.comparison
    if c is None:
        return _nodata("No negative-advantage low-IS step metrics recorded.")
    (a0, a1), (b0, b1) = c.windows
    head = (f"<tr><th>metric</th><th>{esc(c.labels[0])} (steps {a0}-{a1})</th>"
            f"<th>{esc(c.labels[1])} (steps {b0}-{b1})</th><th>ratio</th></tr>")
    rows = "".join(f"<tr><td>{esc(T.NALIS_LABELS.get(k, k))}</td><td>{T.num(x)}</td><td>{T.num(y)}</td>"
                   f"<td>{T.num(y / x if x and math.isfinite(x) and x != 0 else float('nan'), '.3g')}</td></tr>"
                   for k, (x, y) in c.rows.items())
    return "<table>" + head + rows + "</table>"


def _precursors(rep) -> str:
    intro = T.precursor_intro(rep)
    if intro is None:
        return _nodata("The run neither collapsed nor declined.")
    rows = "".join(f"<tr><td>{esc(p['metric'])}</td><td>{T.num(p['z'], '.3g')}</td><td>{T.num(p['base_mean'])}</td>"
                   f"<td>{T.num(p['lead_mean'])}</td></tr>" for p in rep.precursors)
    return (f"<p>{esc(intro)}</p>" + ("<table><tr><th>metric</th><th>z</th><th>before</th><th>lead window</th></tr>"
                                     + rows + "</table>" if rows else ""))


def _token_spans(offender, decode: Callable[[int], str] | None, scale: float) -> tuple[str, str]:
    labels, mode = token_labels(offender, decode)
    if not labels:
        return "", mode
    lr = offender.tokens["log_ratio"].to_numpy(dtype=np.float64)
    ids = offender.tokens["token_id"].to_numpy()
    pos = offender.tokens["pos"].to_numpy()
    spans = []
    for lab, x, i, p in zip(labels, lr, ids, pos):
        a = 0.0 if not math.isfinite(x) else min(1.0, abs(x) / scale) * 0.85
        rgb = "214,39,40" if x > 0 else "31,119,180"
        spans.append(f'<span class="tok" style="background:rgba({rgb},{a:.2f})" '
                     f'title="pos {int(p)} | id {int(i)} | log r = {T.num(x)}">{esc(lab)}</span>')
    return "".join(spans), mode


def _offenders(rep, decode) -> str:
    if not rep.offenders:
        return _nodata(T.offenders_missing(rep))
    all_lr = np.concatenate([o.tokens["log_ratio"].to_numpy(dtype=np.float64) for o in rep.offenders
                             if o.tokens is not None] or [np.zeros(1)])
    all_lr = all_lr[np.isfinite(all_lr)]
    scale = max(float(np.quantile(np.abs(all_lr), 0.95)) if all_lr.size else 0.0, 1e-3)
    out = [f"<p>Taken from {esc(T.window_line(rep))}. Token colour: log-ratio lp - lp_old, "
           f'<span class="tok" style="background:rgba(31,119,180,.85)">r &lt; 1</span> '
           f'<span class="tok" style="background:rgba(214,39,40,.85)">r &gt; 1</span>, full colour at '
           f"|log r| = {T.num(scale, '.3g')} (95th percentile); hover a token for its value.</p>"]
    for o in rep.offenders:
        spans, mode = _token_spans(o, decode, scale)
        flag = " <b>neg-adv low-IS</b>" if o.neg_adv_low_is else ""
        out.append(f"<h4>step {o.step}, update {o.update}, sample {o.sample_id}{flag} "
                   f'<span class="muted">(picked by: {esc(o.source)})</span></h4>'
                   f"<p>A = {T.num(o.advantage)}, s_i = {T.num(o.seq_ratio)}, k3 KL sum = {T.num(o.kl_k3_sum)} "
                   f"({T.num(o.kl_share * 100 if math.isfinite(o.kl_share) else o.kl_share, '.3g')} % of its step), "
                   f"{o.n_tokens} tokens</p>")
        out.append(f'<div class="seqtext">{esc(o.text)}</div>' if o.text else
                   '<p class="nodata">No text recorded for this sequence (record_rollout(texts=...)).</p>')
        out.append(f"<div>{spans}</div><p class=\"muted\">{esc(T.LABEL_NOTES[mode])}</p>")
    return "".join(out)


def _section_block(sec, figs: _Figs, runs, max_points: int) -> str:
    fig = F.series_figure(runs, sec.signals, sec.title, max_points)
    return (f'<h3 id="dim-{esc(sec.key)}">{esc(sec.title)}</h3><div class="two"><div><b>What the run did</b>'
            f"{_ul(sec.did)}</div><div><b>What the data shows</b>{_ul(sec.shows)}"
            + (f"<b>Related findings</b>{_ul(sec.findings)}" if sec.findings else "") + "</div></div>"
            + figs.div(fig))


def _baseline_table(report) -> str:
    a, b = report.main, report.baseline
    keys = [s.key for p in S.TIMELINE for s in p.signals if s.key in a.cols or s.key in b.cols]
    rows = [("verdict", a.verdict.status, b.verdict.status),
            ("collapse step", a.verdict.collapse_step, b.verdict.collapse_step),
            ("first precursor", T.precursor_line(a.verdict), T.precursor_line(b.verdict)),
            ("fired findings", a.verdict.n_fired, b.verdict.n_fired),
            ("algorithm", a.manifest.get("algorithm"), b.manifest.get("algorithm")),
            ("clip", a.manifest.get("clip"), b.manifest.get("clip"))]
    for k in keys:
        vals = []
        for r in (a, b):
            col = r.cols.get(k)
            if col is None:
                vals.append("n/a")
                continue
            y = series(r.steps, col)[1]
            k5 = max(1, y.size // 5)
            vals.append(f"mean {T.num(y.mean())}, max {T.num(y.max())}, last fifth {T.num(y[-k5:].mean())}")
        rows.append((S.BY_KEY[k].label, *vals))
    return ("<table><tr><th></th><th>" + esc(a.name) + "</th><th>" + esc(b.name) + " (baseline)</th></tr>"
            + "".join(f"<tr><th>{esc(n)}</th><td>{esc('none' if x is None else x)}</td>"
                      f"<td>{esc('none' if y is None else y)}</td></tr>" for n, x, y in rows)
            + "</table>")


def _collapsible(block: str) -> str:
    """A section that starts with <h2 id=...> becomes <details open> with the heading as its summary: a reader
    folds what they do not need; the nav links still land on it (the id moves to the details element)."""
    m = SECTION_RE.match(block)
    if not m:
        return block
    return (f'<details open class="section" id="{m.group(1)}"><summary><h2>{m.group(2)}</h2></summary>'
            f"{block[m.end():]}</details>")


def render_html(report, progress: Any = None) -> str:
    """The whole report as one HTML string (plotly.js inlined once)."""
    from plotly.offline import get_plotlyjs

    tick = (lambda: progress.update(1)) if progress is not None else (lambda: None)
    rep, runs, mp = report.main, report.runs, report.max_points
    figs = _Figs()
    body = [f"<h1>arldiag report: {esc(rep.name)}</h1>",
            f'<p class="muted">generated {esc(report.generated)} by arldiag {esc(report.version)}; run folder '
            f"{esc(rep.path)}" + (f"; baseline: {esc(report.baseline.name)}" if report.baseline else "") + "</p>",
            '<nav><a href="#verdict">verdict</a><a href="#timeline">timeline</a><a href="#findings">findings</a>'
            f'<a href="#recommendations">recommendations</a><a href="#precursors">before the {T.event_word(rep)}</a>'
            '<a href="#dimensions">ARLArena dimensions</a>'
            '<a href="#nalis">neg-adv low-IS</a><a href="#mismatch">mismatch</a><a href="#entropy">entropy</a>'
            '<a href="#turns">turns</a><a href="#offenders">offenders</a>'
            + ('<a href="#baseline">baseline</a>' if report.baseline else "") + "</nav>",
            '<h2 id="verdict">Verdict</h2><div class="verdicts">' + "".join(_verdict(r) for r in runs) + "</div>"]
    tl = F.timeline_figure(runs, mp)
    body.append('<h2 id="timeline">Timeline of key signals</h2><p class="muted">Shaded bands: alert state '
                "(yellow watch, orange warning, red critical); blue dotted lines: auto-stabilize actions. Solid: this run"
                + (", dashed: baseline" if report.baseline else "") + ". Series are min-max downsampled to at most "
                f"{mp} points; findings use the full data.</p>"
                + (figs.div(tl) if tl is not None else _nodata("The run has no step metrics.")))
    tick()
    body.append('<h2 id="findings">Findings</h2>' + _findings_table(rep) + _alerts(rep) + _actions(rep))
    body.append('<h2 id="recommendations">Recommendations</h2>' + _recommendations(rep))
    body.append(f'<h2 id="precursors">What moved before the {T.event_word(rep)}</h2>' + _precursors(rep))
    body.append('<h2 id="dimensions">The four ARLArena dimensions</h2>'
                + "".join(_section_block(s, figs, runs, mp) for s in rep.sections))
    tick()
    nalis = ['<h2 id="nalis">Negative-advantage low-IS analysis</h2><p>ARLArena: collapse is driven by sequences with '
             "a negative advantage and an IS ratio below 1; their tokens leave the clip band at the lower bound and "
             "their share of the KL jumps at collapse.</p>", _comparison(rep)]
    for key, title in (("sequences", "Sequence IS ratio log s_i by advantage sign over steps"),
                       ("tokens", "Token IS ratio log r_t by advantage sign over steps (unbiased token sample)")):
        if key in rep.heatmaps:
            nalis.append(figs.div(F.heatmap_figure(rep.heatmaps[key], title)))
    nalis.append(_nodata(T.heatmap_missing(rep)))
    nalis.append(figs.div(F.series_figure(runs, ["nalis_frac", "nalis_kl_share", "kl_top1pct_share"],
                                          "Neg-adv low-IS fraction and KL shares", mp)))
    body.append("".join(nalis))
    tick()
    body.append('<h2 id="mismatch">Training-inference mismatch</h2>' + _nodata(T.mismatch_missing(rep))
                + figs.div(F.series_figure(runs, list(T.MISMATCH_KEYS), "Mismatch", mp))
                + figs.div(F.series_figure(runs, ["retok_mismatch_frac"], "Retokenization drift", mp))
                + _nodata(T.retok_note(rep)))
    body.append('<h2 id="entropy">Entropy and Cov(logp, A)</h2><p>Cui et al.: a sustained positive Cov(logp, A) '
                "predicts entropy collapse.</p>" + _nodata(T.entropy_missing(rep))
                + figs.div(F.series_figure(runs, ["entropy"], "Entropy", mp))
                + figs.div(F.series_figure(runs, ["cov_logp_adv", "turn_entropy_mean"], "Cov(logp, A) and turn "
                                           "entropy", mp)))
    body.append('<h2 id="turns">Turn-level IS ratios</h2>' + _nodata(T.turns_missing(rep))
                + (figs.div(F.turns_figure(rep.turns)) if rep.turns is not None else "")
                + figs.div(F.series_figure(runs, list(T.TURN_KEYS), "Turn ratios over steps", mp)))
    tick()
    body.append('<h2 id="offenders">Top offender sequences</h2>' + _offenders(rep, report.decode))
    if report.baseline is not None:
        body.append('<h2 id="baseline">Side by side with the baseline</h2>' + _baseline_table(report))
    body.append(f'<p class="muted">rows: {esc(", ".join(f"{k} {v:,}" for k, v in rep.rows.items()))}</p>')
    tick()
    body = [_collapsible(b) for b in body]
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>arldiag report: {esc(rep.name)}</title><style>{CSS}</style>"
            f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>'
            + "".join(body) + "</body></html>")

"""Self-contained HTML rendering of a Report: one file, plotly.js inlined once in <head>, no network needed.

Walks the sections' blocks (blocks.py); each section is a <details open> whose summary is its heading, so a reader
folds what they do not need while the nav links still land on it."""
from __future__ import annotations

import html as _h
import math
from typing import Any

from arldiag.report import blocks as B
from arldiag.report.sections import build_sections

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
.tok-neg{background:rgba(31,119,180,.85)}.tok-pos{background:rgba(214,39,40,.85)}
.seqtext{white-space:pre-wrap;font-family:monospace;background:#fafafa;border:1px solid #eee;padding:6px;
max-height:12em;overflow:auto}
.two{display:flex;gap:16px;flex-wrap:wrap}.two>div{flex:1;min-width:320px}
nav a{margin-right:12px}
details.section>summary{cursor:pointer;list-style-position:outside}
details.section>summary>h2{display:inline-block;border-bottom:none;margin:28px 0 4px}
tr.row-critical{background:#fdecec}tr.row-warning{background:#fff3e6}tr.row-watch{background:#fffbe6}
"""


def esc(x: Any) -> str:
    return _h.escape("" if x is None else str(x))


def inline(x: Any) -> str:
    """Inline content (blocks.Inline) as HTML; "\\n" in a list is a line break."""
    if isinstance(x, B.Span):
        t = f"<code>{esc(x.text)}</code>" if x.code else esc(x.text)
        if x.cls:
            return f'<span class="{esc(x.cls)}">{t}</span>'
        return f"<b>{t}</b>" if x.strong else t
    if isinstance(x, (list, tuple)):
        return "".join("<br>" if p == "\n" else inline(p) for p in x)
    return esc(x)


class Renderer:
    """Walks blocks into HTML; numbers the figure divs (fig1, fig2, ... in page order)."""

    def __init__(self) -> None:
        self.n_figs = 0

    def blocks(self, blocks) -> str:
        return "".join(self.block(b) for b in blocks if "html" in b.formats)

    def block(self, b: B.Block) -> str:
        return getattr(self, type(b).__name__.lower())(b)

    def text(self, b: B.Text) -> str:
        return f'<p class="muted">{inline(b.text)}</p>' if b.muted else f"<p>{inline(b.text)}</p>"

    def note(self, b: B.Note) -> str:
        return f'<p class="nodata">{esc(b.text)}</p>' if b.text else ""

    def bullets(self, b: B.Bullets) -> str:
        if not b.items:
            return ""
        tag = "ol" if b.ordered else "ul"
        return f"<{tag}>" + "".join(f"<li>{self._item(i)}</li>" for i in b.items) + f"</{tag}>"

    def _item(self, i: Any) -> str:
        if not isinstance(i, B.Item):
            return inline(i)
        sub = "".join(f"<li>{inline(s)}</li>" for s in i.sub)
        label = f'<br><span class="muted">{esc(i.sub_label)}:</span>' if i.sub_label else ""
        return inline(i.text) + (f"{label}<ul>{sub}</ul>" if sub else "")

    def table(self, b: B.Table) -> str:
        def cell(c: Any, th: bool = False) -> str:
            tag = "th" if th else "td"
            if isinstance(c, B.Cell):
                return f'<{tag} class="{esc(c.cls)}">{inline(c.value)}</{tag}>'
            return f"<{tag}>{inline(c)}</{tag}>"

        cls = f' class="{esc(b.cls)}"' if b.cls else ""
        rows = []
        for k, r in enumerate(b.rows):
            rc = f' class="{esc(b.row_classes[k])}"' if b.row_classes else ""
            rows.append(f"<tr{rc}>" + "".join(cell(c, b.header_column and j == 0) for j, c in enumerate(r)) + "</tr>")
        return f"<table{cls}><tr>" + "".join(cell(h, True) for h in b.head) + "</tr>" + "".join(rows) + "</table>"

    def figure(self, b: B.Figure) -> str:
        fig = b.figure() if callable(b.figure) else b.figure
        if fig is None:
            return ""
        self.n_figs += 1
        return fig.to_html(include_plotlyjs=False, full_html=False, div_id=f"fig{self.n_figs}", config=PLOTLY_CONFIG)

    def heading(self, b: B.Heading) -> str:
        anchor = f' id="{esc(b.anchor)}"' if b.anchor else ""
        return f"<h{b.level}{anchor}>{inline(b.text)}</h{b.level}>"

    def folded(self, b: B.Folded) -> str:
        return f"<details><summary>{esc(b.summary)}</summary>{self.blocks(b.blocks)}</details>"

    def box(self, b: B.Box) -> str:
        cls = f' class="{esc(b.cls)}"' if b.cls else ""
        return f"<div{cls}>{self.blocks(b.blocks)}</div>"

    def card(self, b: B.Card) -> str:
        rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in b.rows)
        return (f'<div class="verdict" style="border-color:{b.color}"><div class="muted">{esc(b.name)}</div>'
                f'<div class="status" style="color:{b.color}">{esc(b.status)}</div>'
                f"<table>{rows}</table><p>{esc(b.summary)}</p></div>")

    def tokens(self, b: B.Tokens) -> str:
        spans = []
        for lab, x, title in zip(b.labels, b.values, b.titles):
            a = 0.0 if not math.isfinite(x) else min(1.0, abs(x) / b.scale) * 0.85
            rgb = "214,39,40" if x > 0 else "31,119,180"
            spans.append(f'<span class="tok" style="background:rgba({rgb},{a:.2f})" title="{esc(title)}">'
                         f"{esc(lab)}</span>")
        return "<div>" + "".join(spans) + "</div>"

    def pre(self, b: B.Pre) -> str:
        return f'<div class="seqtext">{esc(b.text)}</div>'


def render_html(report, progress: Any = None) -> str:
    """The whole report as one HTML string (plotly.js inlined once)."""
    from plotly.offline import get_plotlyjs

    tick = (lambda: progress.update(1)) if progress is not None else (lambda: None)
    rep = report.main
    sections = [s for s in build_sections(report) if "html" in s.formats]
    tick()
    r = Renderer()
    body = [f"<h1>arldiag report: {esc(rep.name)}</h1>",
            f'<p class="muted">generated {esc(report.generated)} by arldiag {esc(report.version)}; run folder '
            f"{esc(rep.path)}" + (f"; baseline: {esc(report.baseline.name)}" if report.baseline else "") + "</p>",
            "<nav>" + "".join(f'<a href="#{s.id}">{esc(s.nav)}</a>' for s in sections if s.nav) + "</nav>"]
    per_tick = max(1, math.ceil(len(sections) / 3))
    for k, s in enumerate(sections, start=1):
        body.append(f'<details open class="section" id="{esc(s.id)}"><summary><h2>{esc(s.title)}</h2></summary>'
                    f"{r.blocks(s.blocks)}</details>")
        if k % per_tick == 0 and k // per_tick <= 3:
            tick()
    body.append(f'<p class="muted">rows: {esc(", ".join(f"{k} {v:,}" for k, v in rep.rows.items()))}</p>')
    tick()
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>arldiag report: {esc(rep.name)}</title><style>{CSS}</style>"
            f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>'
            + "".join(body) + "</body></html>")

"""The report built section by section: every block renders in HTML and Markdown (hand-written expectations), every
section of SECTIONS shows up in each format it declares, and the JSON holds every section's data fields."""
from __future__ import annotations

import json

import pytest

from arldiag.report import blocks as B
from arldiag.report.html import Renderer
from arldiag.report.markdown import blocks as md_blocks
from arldiag.report.sections import SECTIONS, build_sections


def test_blocks_render_in_both_formats() -> None:
    bs = [B.Text(["a ", B.Span("b", strong=True), "\n", "c|d"]),
          B.Note("no data"), B.Note(None),
          B.Bullets([B.Item([B.Span("[watch]", strong=True, cls="sev-watch"), " x"], ["e1"], "Evidence")],
                    ordered=True),
          B.Table(["k", "v"], [[B.Cell("critical", "sev-critical"), 1]], row_classes=["row-critical"]),
          B.Figure(None, alt=[B.Text("alt text")]),
          B.Heading("sub", anchor="s"),
          B.Text("html only", formats=("html",)), B.Text("md only", formats=("md",))]
    html = Renderer().blocks(bs)
    assert html == ('<p>a <b>b</b><br>c|d</p><p class="nodata">no data</p>'
                    '<ol><li><span class="sev-watch">[watch]</span> x<br><span class="muted">Evidence:</span>'
                    '<ul><li>e1</li></ul></li></ol>'
                    '<table><tr><th>k</th><th>v</th></tr><tr class="row-critical"><td class="sev-critical">critical'
                    '</td><td>1</td></tr></table><h3 id="s">sub</h3><p>html only</p>')
    assert md_blocks(bs) == ["a **b** c|d", "", "no data", "",
                             "1. **[watch]** x", "   - evidence: e1", "",
                             "| k | v |", "|---|---|", "| critical | 1 |", "",
                             "alt text", "", "### sub", "", "md only", ""]


def test_every_block_type_has_a_renderer() -> None:
    """A new block type without an HTML method or a Markdown branch fails here, not in a user's report."""
    from arldiag.report.markdown import block

    kinds = [c for c in vars(B).values() if isinstance(c, type) and issubclass(c, B.Block) and c is not B.Block]
    samples = {B.Text: B.Text("t"), B.Note: B.Note("n"), B.Bullets: B.Bullets(["i"]), B.Table: B.Table(["h"], [[1]]),
               B.Figure: B.Figure(None), B.Heading: B.Heading("h"), B.Folded: B.Folded("s", [B.Text("t")]),
               B.Box: B.Box([B.Text("t")]), B.Card: B.Card("run", "healthy", "#2a8a2a", [("k", 1)], "ok"),
               B.Tokens: B.Tokens(["a"], [0.5], ["pos 0"], 1.0), B.Pre: B.Pre("text")}
    assert set(kinds) == set(samples), "add a sample of the new block here"
    for kind in kinds:
        assert isinstance(Renderer().block(samples[kind]), str)
        assert isinstance(block(samples[kind]), list)


def test_sections_in_every_format(steps_only_run) -> None:
    from arldiag.report.build import build_report
    from arldiag.report.html import render_html
    from arldiag.report.jsonout import render_json
    from arldiag.report.markdown import render_markdown

    rep = build_report(steps_only_run, progress=False)
    secs = build_sections(rep)
    ids = [s.id for s in secs]
    assert len(set(ids)) == len(ids) and ids == [m.ID for m in SECTIONS if m.build(rep) is not None]
    html, md = render_html(rep), render_markdown(rep)
    for s in secs:
        assert (f'<details open class="section" id="{s.id}"><summary><h2>' in html) == ("html" in s.formats)
        assert (f'<a href="#{s.id}">' in html) == ("html" in s.formats and bool(s.nav))
        assert (f"\n## {s.title}\n" in md) == ("md" in s.formats)
    # the sections' order is the same in both formats
    assert [html.index(f'id="{s.id}"') for s in secs] == sorted(html.index(f'id="{s.id}"') for s in secs)
    md_secs = [s for s in secs if "md" in s.formats]
    assert [md.index(f"## {s.title}") for s in md_secs] == sorted(md.index(f"## {s.title}") for s in md_secs)
    j = json.loads(render_json(rep))
    want = {"version", "findings_version", "generated", "arldiag_version", "name", "path", "rows", "baseline"}
    for m in SECTIONS:
        if hasattr(m, "data"):
            want |= set(m.data(rep.main))
    assert set(j) == want and j["baseline"] is None


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_a_section_that_has_nothing_to_show_is_left_out(steps_only_run, fmt) -> None:
    from arldiag.report.build import build_report
    from arldiag.report.cli import render

    rep = build_report(steps_only_run, progress=False)
    out = render(rep, fmt)
    assert "Side by side with the baseline" not in out  # no --baseline: baseline.build returns None

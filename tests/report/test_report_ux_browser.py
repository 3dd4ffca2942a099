"""The sample CISPO run's report in headless Chromium: the timeline gives ppo_kl a panel apart from kl_ref_k3, every
panel draws its step tick labels, the collapse step is a line at the collapse step (in the figure and in a screenshot), and
sections fold."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from report_browser import chromium_available, screenshot, start_driver, stop_driver, wait_for

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not chromium_available(), reason="chromium/chromedriver not installed")]
SAMPLE = Path(__file__).resolve().parents[2] / "sample_runs" / "cispo_s0"
RED = np.array([192, 0, 0])  # the report's collapse line (#c00000)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from arldiag.report.cli import write_report

    out = tmp_path_factory.mktemp("ux") / "report.html"
    write_report(str(SAMPLE), str(out), progress=False)
    drv = start_driver(width=1280, height=1400)
    drv.get(out.as_uri())
    assert wait_for(drv, "document.getElementById('fig1') && document.getElementById('fig1')._fullLayout && "
                         "document.querySelector('#fig1 .main-svg')")
    yield drv
    stop_driver(drv)


def test_timeline_panels_scales_ticks_and_collapse(page) -> None:
    import arldiag
    from arldiag.detectors import collapse_step

    collapse = collapse_step(arldiag.open_run(SAMPLE))["cispo_s0"]
    info = page.execute_script("""const g = document.getElementById('fig1'); const L = g._fullLayout;
        const xs = Object.keys(L).filter(k => /^xaxis\\d*$/.test(k)).map(k => L[k]._id);
        return {axes: xs.length, yaxes: Object.keys(L).filter(k => /^yaxis\\d*$/.test(k)).length,
                traces: g.data.map(t => [t.name, t.yaxis || 'y']),
                ticks: xs.map(id => g.querySelectorAll('.xaxislayer-above .' + id + 'tick text').length),
                lines: (g.layout.shapes || []).filter(s => s.type === 'line').map(s => [s.x0, s.line.color]),
                titles: L.annotations.map(a => a.text)}""")
    axis = dict(info["traces"])
    assert axis["ppo_kl (k1, update)"] != axis["kl_ref_k3 (to reference)"]  # ~0.07 and ~3: two panels
    panels = [t for t in info["titles"] if not t.startswith(("collapse", "precursor"))]
    assert info["axes"] == info["yaxes"] == len(panels) >= 9
    assert any(t.startswith("KL: ") and "kl_ref_k3" in t for t in panels)
    assert min(info["ticks"]) >= 2, info["ticks"]  # step tick labels under every panel
    assert [collapse, "#c00000"] in info["lines"]
    # the screenshot of the timeline shows the red collapse line at the collapse step's x position
    x_px = page.execute_script("""const g = document.getElementById('fig1'); const xa = g._fullLayout.xaxis;
        return xa._offset + xa.l2p(arguments[0]);""", collapse)
    img = screenshot(page, "fig1", scale=1.0)[..., :3].astype(int)
    ys, xs = np.nonzero(np.abs(img - RED).sum(-1) < 60)
    assert len(ys) > 200, "no collapse line in the screenshot"
    # the most frequent column of red pixels is the line (the red "collapse" label text spreads over others)
    assert abs(np.bincount(xs).argmax() - x_px) < 8
    assert np.ptp(ys) > 0.8 * img.shape[0]  # it spans the panels top to bottom


def test_sections_fold(page) -> None:
    is_open = "return document.getElementById('findings').open"
    assert page.execute_script(is_open) is True
    page.find_element("css selector", "#findings > summary").click()
    assert page.execute_script(is_open) is False
    assert page.find_element("css selector", "#findings table").is_displayed() is False

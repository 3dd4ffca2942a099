"""The HTML report of a collapsing run, opened in headless Chromium: no JavaScript errors, every plot rendered with
data, and a screenshot that is not blank."""
from __future__ import annotations

import re

import numpy as np
import pytest

from report_browser import chromium_available, screenshot, start_driver, stop_driver, wait_for

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not chromium_available(), reason="chromium/chromedriver not installed")]


@pytest.fixture(scope="module")
def report_html(collapse_run, stable_run, tmp_path_factory):
    from arldiag.report.cli import write_report

    out = tmp_path_factory.mktemp("html") / "report.html"
    write_report(collapse_run, str(out), baseline=stable_run, progress=False)
    return out


@pytest.fixture(scope="module")
def driver():
    drv = start_driver()
    yield drv
    stop_driver(drv)


def test_report_renders_in_chromium(report_html, driver):
    n_figs = len(re.findall(r'<div id="fig\d+"', report_html.read_text()))
    driver.get(report_html.as_uri())
    # plotly draws asynchronously: wait until every figure div carries its rendered svg
    drawn = wait_for(driver, f"document.querySelectorAll('.js-plotly-plot').length >= {n_figs} && "
                             f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {n_figs}")
    assert drawn, "plots did not render"
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors
    plots = driver.execute_script("""
        return Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => ({
            id: d.id, traces: d.data.length,
            // _fullData holds the decoded arrays (the figure JSON ships numpy arrays base64-encoded)
            points: d._fullData.reduce((n, t) => n + ((t.z && t.z.length) || (t.y && t.y.length) || 0), 0),
            width: d.getBoundingClientRect().width, height: d.getBoundingClientRect().height,
            drawn: d.querySelectorAll('path.js-line, .heatmaplayer image, g.point, .bars path').length}))""")
    assert len(plots) == n_figs
    for p in plots:
        assert p["traces"] > 0 and p["points"] > 0, p
        assert p["drawn"] > 0, p          # the traces were drawn as svg lines / heatmap images / markers
        assert p["width"] > 300 and p["height"] > 200, p
    # the timeline carries the alert bands and the collapse marker as shapes
    shapes = driver.execute_script("return document.getElementById('fig1').layout.shapes.length")
    assert shapes >= 2
    assert "COLLAPSED" in driver.find_element("css selector", ".verdict .status").text.upper()


def test_report_screenshot_is_not_blank(report_html, driver):
    driver.get(report_html.as_uri())
    wait_for(driver, "document.querySelectorAll('.js-plotly-plot .main-svg').length > 0")
    page = screenshot(driver, scale=0.25).astype(np.float64)  # [H, W, C] the top of the page
    timeline = screenshot(driver, "fig1").astype(np.float64)
    for img in (page, timeline):
        assert img.shape[0] > 100 and img.shape[1] > 100
        gray = img[..., :3].mean(axis=2)
        assert gray.std() > 10.0                  # not a uniform area
        assert (gray < 200).mean() > 0.02         # a real share of non-white pixels (lines, bands, text)
    # the timeline's red critical band (rgba(220, 0, 0, .25) over white) is visible
    r, g, b = timeline[..., 0], timeline[..., 1], timeline[..., 2]
    assert ((r > 200) & (g < 215) & (b < 215) & (r - g > 30)).mean() > 0.05
    # the IS-ratio heatmap shows viridis cells (dark purple background, bright cells)
    hm = driver.execute_script("return Array.from(document.querySelectorAll('.js-plotly-plot'))"
                               ".find(d => d._fullData.some(t => t.type === 'heatmap')).id")
    img = screenshot(driver, hm).astype(np.float64)
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    assert ((r < 100) & (g < 60) & (b > 60)).mean() > 0.2      # viridis' low end fills most cells
    assert ((r > 150) & (g > 150) & (b < 120)).mean() > 0.001  # and its high end marks the mass

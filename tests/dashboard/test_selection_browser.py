"""The run view in headless Chromium: a run selected by URL (?run=NAME, an unknown name says so and falls back),
the worst run first with its verdict banner, the address bar naming the shown run, an empty root that waits for
runs, and a run of step metrics only that opens no empty explorer."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from arldiag.dashboards import fleet as F
from arldiag.dashboards import views_sequences
from arldiag.dashboards.source import RunSource
from synthetic_runs import write_steps
from test_dashboard_browser import _click_tab, _plot_js, _rendered, _severe, _shown, _wait, browser, serve  # noqa: F401
from test_fleet import collapsing, write_outcome_run
from test_selection import _imported

pytestmark = pytest.mark.browser


def _picked(d) -> str:
    return d.find_element("css selector", "#run-select").text.strip()


def _banner(d) -> str:
    return d.find_element("id", "run-verdict").text.strip()


def _last_step(d) -> float:
    return d.execute_script(f"return Math.max(...{_plot_js('g-overview')}._fullData.map("
                            "t => Math.max(...Array.from(t.x))))")


def _rows(root: Path) -> dict:
    fleet = F.FleetRows(RunSource(root))
    fleet.refresh()
    return {r["id"]: r for r in fleet.rows()}


@pytest.fixture()
def mixed_root(tmp_path: Path) -> Path:
    """An old collapsed run, a healthy one and the newest, too short: the newest is not the worst."""
    write_outcome_run(tmp_path / "m_collapsed", collapsing(40, 25))
    write_outcome_run(tmp_path / "sweep" / "b_stable", [0.6] * 30)
    write_outcome_run(tmp_path / "z_short", [0.1, 0.5, 0.3])
    return tmp_path


def test_worst_run_first_with_its_banner_and_url(mixed_root: Path, serve, browser) -> None:
    rows = _rows(mixed_root)
    assert rows["m_collapsed"]["verdict"] == "collapsed" and rows["z_short"]["verdict"] == "too short"
    browser.get(serve(mixed_root))
    _wait(browser, lambda d: _picked(d) == "m_collapsed", "the worst run picked")
    _wait(browser, _rendered("g-overview"), "its overview")
    assert _last_step(browser) == 39
    _wait(browser, lambda d: _banner(d).startswith("COLLAPSED"), "verdict banner")
    assert _banner(browser) == f"COLLAPSED m_collapsed: {rows['m_collapsed']['verdict_reason']}."
    # the address bar names the run shown: copying it shares this view
    _wait(browser, lambda d: parse_qs(urlparse(d.current_url).query).get("run") == ["m_collapsed"], "URL names it")
    assert _severe(browser) == []


def test_run_selected_by_url(mixed_root: Path, serve, browser) -> None:
    rows = _rows(mixed_root)
    base = serve(mixed_root)
    browser.get(base + "?run=sweep/b_stable")
    _wait(browser, lambda d: _picked(d) == "sweep/b_stable", "the URL's run picked")
    _wait(browser, _rendered("g-overview"), "its overview")
    assert _last_step(browser) == 29
    _wait(browser, lambda d: _banner(d).startswith("HEALTHY"), "its verdict")
    assert _banner(browser) == f"HEALTHY sweep/b_stable: {rows['sweep/b_stable']['verdict_reason']}."
    assert browser.find_element("id", "url-note").text == ""
    # a name that is no run says so and falls back to the worst run
    browser.get(base + "?run=no_such_run")
    _wait(browser, lambda d: "No run called 'no_such_run'" in d.find_element("id", "url-note").text, "unknown run")
    _wait(browser, lambda d: _picked(d) == "m_collapsed", "fell back to the worst run")
    # a name escaping the root is no run either
    browser.get(base + "?run=../" + mixed_root.name + "/m_collapsed")
    _wait(browser, lambda d: "No run called" in d.find_element("id", "url-note").text, "escaping name refused")
    assert _severe(browser) == []


def test_empty_root_waits_for_runs(tmp_path: Path, serve, browser) -> None:
    root = tmp_path / "not_yet"  # the dashboard is started before the trainer creates its output folder
    browser.get(serve(root, refresh_ms=500))
    _wait(browser, lambda d: "waiting for runs under" in d.find_element("id", "status").text, "waiting status")
    assert "waiting for runs under" in _banner(browser)
    _wait(browser, _rendered("g-overview"), "overview placeholder")
    assert "waiting for runs" in browser.execute_script(
        f"return JSON.stringify({_plot_js('g-overview')}.layout.annotations)")
    write_steps(root / "live", range(3), seed=1)  # the trainer writes its first steps
    _wait(browser, lambda d: _picked(d) == "live", "the new run picked up")
    _wait(browser, lambda d: d.execute_script(f"const g = {_plot_js('g-overview')}; return g.data.length") > 0,
          "its overview drawn")
    _wait(browser, lambda d: _banner(d).split()[0] in ("HEALTHY", "TOO", "AT"), "its verdict")
    assert _severe(browser) == []


def test_imported_run_opens_no_empty_explorer(tmp_path: Path, serve, browser) -> None:
    root = _imported(tmp_path)
    browser.get(serve(root) + "?run=imp")
    _wait(browser, lambda d: _picked(d) == "imp", "imported run")
    _click_tab(browser, "Alert timeline")
    _wait(browser, lambda d: d.find_elements("css selector", "#findings .finding"), "findings")
    assert browser.find_elements("css selector", "#findings button.goto") == []
    note = browser.find_element("id", "no-explorer-note").text
    assert note == views_sequences.no_sequences_text("imp")
    _click_tab(browser, "Sequence explorer")
    _wait(browser, _shown("view-sequences"), "explorer tab")
    _wait(browser, lambda d: d.find_element("id", "seq-info").text == note, "one line saying why")
    assert browser.find_element("id", "view-sequences").text.count("no sequence rows") == 1  # said once
    assert browser.find_element("id", "seq-table").text == ""
    assert _severe(browser) == []

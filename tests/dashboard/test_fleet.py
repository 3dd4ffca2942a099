"""The fleet view the dashboard opens on: a table of every run under the root (arldiag.fleet rows), sortable and
filterable, refreshed while runs are written, a click opening the run. Data level first (the rows, their cache,
filter and sort, the callbacks over HTTP as the browser calls them), then in headless Chromium with 20 runs."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from arldiag.dashboards import fleet as F
from arldiag.dashboards.source import RunSource
from test_dashboard_browser import _plot_js, _rendered, _severe, _wait, browser, serve  # noqa: F401


def write_outcome_run(path: Path, values, algorithm: str = "grpo", start: int = 0) -> None:
    """A run of step rows only: success_rate per step as given (plus a flat grad_norm)."""
    import arldiag

    with arldiag.Collector(path, algorithm=algorithm, flush_every=10) as col:
        for i, v in enumerate(values):
            col.record_step(start + i, metrics={"success_rate": float(v), "grad_norm": 1.0})


def collapsing(n: int, at: int) -> list[float]:
    """0.8 up to step ``at``, then 0.05: with at least 10 low steps the label puts the collapse at ``at`` (see
    tests/core/test_ls.py)."""
    return [0.8] * at + [0.05] * (n - at)


@pytest.fixture()
def small_root(tmp_path: Path) -> Path:
    write_outcome_run(tmp_path / "a_collapsed", collapsing(40, 25), "cispo")
    write_outcome_run(tmp_path / "b_stable", [0.6] * 30)
    write_outcome_run(tmp_path / "sweep" / "c_short", [0.1, 0.5, 0.3], "gspo")
    return tmp_path


class Counting:
    """An opener that counts the runs it opened (arldiag.open_run underneath)."""

    def __init__(self):
        self.opened: list[str] = []

    def __call__(self, path):
        import arldiag

        self.opened.append(Path(path).name)
        return arldiag.open_run(path)


def test_rows_are_the_fleet_table_and_recomputed_only_when_a_run_changes(small_root: Path) -> None:
    from arldiag.fleet import fleet_table

    opener = Counting()
    rows = F.FleetRows(RunSource(small_root), opener=opener)
    assert rows.refresh() is True and rows.pending() == 0
    assert sorted(opener.opened) == ["a_collapsed", "b_stable", "c_short"]  # one open (one replay) per run
    got = {r["id"]: r for r in rows.rows()}
    want = {r["name"]: r for r in fleet_table(small_root)}
    assert set(got) == set(want) == {"a_collapsed", "b_stable", "sweep/c_short"}
    for name, w in want.items():
        assert {k: got[name][k] for k in w if k != "path"} == {k: v for k, v in w.items() if k != "path"}, name
    assert (got["a_collapsed"]["verdict"], got["a_collapsed"]["collapse_step"]) == ("collapsed", 25)
    assert (got["b_stable"]["verdict"], got["b_stable"]["state"]) == ("healthy", "ok")
    assert got["sweep/c_short"]["verdict"] == "too short"
    # nothing changed: no run is opened again
    v = rows.version
    opener.opened.clear()
    assert rows.refresh() is False and opener.opened == [] and rows.version == v
    # a run grows: only its row is recomputed
    write_outcome_run(small_root / "b_stable", [0.6] * 5, start=30)
    assert rows.refresh() is True and opener.opened == ["b_stable"]
    assert {r["id"]: r["steps"] for r in rows.rows()}["b_stable"] == 35
    # a new run (listed by the source's poll) gets a row; a removed one loses it
    write_outcome_run(small_root / "d_new", [0.4] * 12)
    rows.source.poll()
    assert rows.refresh() is True and "d_new" in {r["id"] for r in rows.rows()}
    import shutil

    shutil.rmtree(small_root / "d_new")
    rows.source.poll()
    assert rows.refresh() is True and "d_new" not in {r["id"] for r in rows.rows()}


def test_a_run_that_cannot_be_opened_is_an_error_row_with_its_reason(small_root: Path) -> None:
    """The verdict says why in words everywhere (verdict_reason), the dashboard's error rows too."""
    def opener(path):
        if Path(path).name == "b_stable":
            raise OSError("disk gone")
        return Counting()(path)

    rows = F.FleetRows(RunSource(small_root), opener=opener)
    rows.refresh()
    broken = next(r for r in rows.rows() if r["name"].endswith("b_stable"))
    assert (broken["verdict"], broken["error"], broken["steps"]) == ("error", "OSError: disk gone", None)
    assert broken["verdict_reason"] == "the run could not be opened: OSError: disk gone"
    assert all(r["verdict"] != "error" for r in rows.rows() if r is not broken)


def test_a_large_root_fills_in_over_ticks(small_root: Path) -> None:
    rows = F.FleetRows(RunSource(small_root), budget_s=0.0)  # one row per refresh
    assert rows.refresh() is True and rows.pending() == 2
    pending = [r for r in rows.rows() if r["verdict"] == F.PENDING]
    assert len(pending) == 2 and all(r["algorithm"] for r in pending)  # named from run.json meanwhile
    body, note, _ = F.render_table(rows, "", None, "root")
    assert len(body) == 3 and "2 still computing" in note
    assert rows.refresh() and rows.refresh() and rows.pending() == 0
    assert rows.refresh() is False


def _rows() -> list[dict]:
    base = {"algorithm": "grpo", "last_step": None, "collapse_step": None, "first_warning": None,
            "outcome": "success_rate", "error": None}
    spec = [("r1", 40, "critical", "collapsed", 0.8), ("r2", 12, "ok", "healthy", 0.5),
            ("r3", None, None, F.PENDING, None), ("r4", 30, "warning", "at risk", 0.7), ("r5", 3, "ok",
                                                                                         "too short", 0.1)]
    return [dict(base, id=n, name=n, steps=s, state=st, verdict=v, peak=p, last=p) for n, s, st, v, p in spec]


def test_filter_and_sort() -> None:
    rows = _rows()
    names = lambda rs: [r["name"] for r in rs]  # noqa: E731
    assert names(F.filter_rows(rows, "")) == ["r1", "r2", "r3", "r4", "r5"]
    assert names(F.filter_rows(rows, "verdict:collapsed")) == ["r1"]
    assert names(F.filter_rows(rows, "state:warn")) == ["r4"]
    assert names(F.filter_rows(rows, "HEALTHY")) == ["r2"]
    assert names(F.filter_rows(rows, "at risk")) == ["r4"]  # every word, each anywhere in the row
    assert names(F.filter_rows(rows, "first_warning:1")) == []
    assert names(F.filter_rows(rows, "steps:40")) == ["r1"]
    assert names(F.sort_rows(rows, "steps")) == ["r5", "r2", "r4", "r1", "r3"]  # numbers as numbers, blank last
    assert names(F.sort_rows(rows, "steps", desc=True)) == ["r1", "r4", "r2", "r5", "r3"]
    assert names(F.sort_rows(rows, "state", desc=True)) == ["r1", "r4", "r2", "r5", "r3"]  # by severity
    assert names(F.sort_rows(rows, "verdict", desc=True))[:2] == ["r1", "r4"]
    assert names(F.sort_rows(rows, "no such column")) == names(rows)
    assert names(F.view_rows(rows, "ok", {"col": "peak", "desc": True})) == ["r2", "r5"]


# ---------------------------------------------------------------------------------------------- callbacks over HTTP
def _post(client, app, output_has: str, inputs: list, state: list | None = None):
    """POST a callback request as the Dash renderer does; returns (status, response JSON or None)."""
    key = next(k for k in app.callback_map if output_has in k)
    outs = app.callback_map[key]["output"]
    outs = outs if isinstance(outs, list) else [outs]
    outputs = []
    for o in outs:
        oid = o.component_id
        if isinstance(oid, dict):  # an ALL pattern: one entry per column header
            outputs.append([{"id": {"type": oid["type"], "index": k}, "property": o.component_property}
                            for k, _ in F.COLUMNS])
        else:
            outputs.append({"id": oid, "property": o.component_property})
    changed = inputs[0][0] if isinstance(inputs[0], list) else inputs[0]
    cid = json.dumps(changed["id"], separators=(",", ":"), sort_keys=True) if isinstance(changed["id"], dict) \
        else changed["id"]
    body = {"output": key, "outputs": outputs if len(outputs) > 1 else outputs[0], "inputs": inputs,
            "state": state or [], "changedPropIds": [f"{cid}.{changed['property']}"]}
    r = client.post("/_dash-update-component", json=body)
    return r.status_code, (r.get_json() if r.status_code == 200 else None)


def test_table_callbacks(small_root: Path) -> None:
    from arldiag.dashboards.app import create_app

    app = create_app(small_root)
    client = app.server.test_client()
    assert client.get("/").status_code == 200
    # the tick computes the rows and hands the browser their version
    code, resp = _post(client, app, "fleet-version.data", [{"id": "tick", "property": "n_intervals", "value": 0}],
                       [{"id": "fleet-version", "property": "data", "value": -1}])
    assert code == 200
    version = resp["response"]["fleet-version"]["data"]
    assert version == app.arldiag_fleet.version >= 1
    # same version again: nothing to send
    code, _ = _post(client, app, "fleet-version.data", [{"id": "tick", "property": "n_intervals", "value": 1}],
                    [{"id": "fleet-version", "property": "data", "value": version}])
    assert code == 204
    # the table, filtered and sorted as the browser asks
    code, resp = _post(client, app, "fleet-body.children", [
        {"id": "fleet-version", "property": "data", "value": version},
        {"id": "fleet-filter", "property": "value", "value": "verdict:collapsed"},
        {"id": "fleet-sort", "property": "data", "value": {"col": "steps", "desc": True}},
        {"id": "run-select", "property": "value", "value": "a_collapsed"}])
    assert code == 200
    out = resp["response"]
    body = out["fleet-body"]["children"]
    assert [tr["props"]["id"]["index"] for tr in body] == ["a_collapsed"]
    assert "selected" in body[0]["props"]["className"]  # the run shown below is marked
    cells = [td["props"]["children"] for td in body[0]["props"]["children"]]  # steps, last step, state, verdict ...
    assert cells[2:4] == ["40", "39"] and cells[4] in ("warning", "critical") and cells[5:7] == ["collapsed", "25"]
    assert out["fleet-summary"]["children"].startswith("1 of 3 run(s)")
    heads = [v["children"] for k, v in out.items() if k.startswith("{")]
    assert "steps ▼" in heads
    # a click on a row opens that run on its overview; a forged name outside the root opens nothing
    click = lambda name: [[{"id": {"index": name, "type": "fleet-row"}, "property": "n_clicks", "value": 1}]]  # noqa
    code, resp = _post(client, app, "run-select.value", click("sweep/c_short"))
    assert code == 200 and resp["response"]["run-select"]["value"] == "sweep/c_short"
    assert resp["response"]["tabs"]["value"] == "overview"
    for forged in ("../..", "/etc", "sweep"):
        assert _post(client, app, "run-select.value", click(forged))[0] == 204
    # rows rebuilt by a refresh (n_clicks 0) open nothing
    rebuilt = [[{"id": {"index": "b_stable", "type": "fleet-row"}, "property": "n_clicks", "value": 0}]]
    assert _post(client, app, "run-select.value", rebuilt)[0] == 204


# ---------------------------------------------------------------------------------------------- in the browser
N_RUNS = 20


def _fleet_root(root: Path) -> dict[str, int]:
    """20 runs: run00..run19 (sweep/ for the odd ones), 15 + i steps, every third one collapsing; the steps per
    run, by name. run19 is written last (the one the page selects)."""
    steps = {}
    for i in range(N_RUNS):
        name = f"sweep/run{i:02d}" if i % 2 else f"run{i:02d}"
        n = 15 + i
        vals = collapsing(n, n - 12) if i % 3 == 0 else [0.3 + 0.01 * i] * n
        write_outcome_run(root / name, vals, ("grpo", "cispo", "gspo")[i % 3])
        steps[name] = n
    return steps


def _table(driver) -> list[list[str]]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#fleet-body tr')).map("
        "tr => Array.from(tr.querySelectorAll('td')).map(td => td.textContent));")


@pytest.mark.browser
def test_fleet_view_in_the_browser(tmp_path: Path, serve, browser) -> None:  # noqa: F811
    """The page opens on the table of 20 runs; sorting reorders, filtering narrows, a click opens the run's overview,
    a run written after the page opened appears after the refresh interval."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    steps = _fleet_root(tmp_path)
    url = serve(tmp_path, refresh_ms=500)
    t0 = time.perf_counter()
    browser.get(url)
    # the table is the first thing on the page, every run in it with its steps and verdict
    _wait(browser, lambda d: len(_table(d)) == N_RUNS and all(r[5] and r[5] != F.PENDING for r in _table(d)),
          "20 computed rows")
    filled = time.perf_counter() - t0
    top = browser.execute_script("return [document.getElementById('view-fleet').getBoundingClientRect().top,"
                                 " document.getElementById('tabs').getBoundingClientRect().top]")
    assert top[0] < top[1]
    rows = _table(browser)
    assert [r[0] for r in rows] == sorted(steps)  # by name at first
    assert {r[0]: int(r[2]) for r in rows} == steps
    assert [r[0] for r in rows if r[5] == "collapsed"] == sorted(n for n in steps if int(n[-2:]) % 3 == 0)
    assert "20 run(s)" in browser.find_element(By.ID, "fleet-summary").text
    # sorting by steps: ascending, then descending on a second click
    sort_steps = browser.find_element(By.CSS_SELECTOR, "#fleet-table th:nth-child(3) button")
    sort_steps.click()
    by_steps = sorted(steps, key=steps.get)
    _wait(browser, lambda d: [r[0] for r in _table(d)] == by_steps, "sorted by steps")
    assert "▲" in sort_steps.text
    sort_steps.click()
    _wait(browser, lambda d: [r[0] for r in _table(d)] == by_steps[::-1], "sorted by steps, descending")
    # filtering narrows the rows
    box = browser.find_element(By.ID, "fleet-filter")
    box.send_keys("verdict:collapsed")
    collapsed = [n for n in by_steps[::-1] if int(n[-2:]) % 3 == 0]
    _wait(browser, lambda d: [r[0] for r in _table(d)] == collapsed, "only the collapsed runs")
    assert f"{len(collapsed)} of 20" in browser.find_element(By.ID, "fleet-summary").text
    box.send_keys(" sweep")
    _wait(browser, lambda d: [r[0] for r in _table(d)] == [n for n in collapsed if n.startswith("sweep/")],
          "collapsed runs under sweep/")
    # a click opens the run: the picker names it and the overview draws its series with its collapse line
    _wait(browser, _rendered("g-overview"), "overview of the selected run")
    target = "sweep/run03"
    browser.find_element(By.XPATH, f"//tr[contains(@class, 'fleetrow')][td[1][normalize-space()='{target}']]").click()
    _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#run-select").text.strip().startswith(target),
          "clicked run selected")
    meta = f"return ({_plot_js('g-overview')}.layout.meta || {{}}).collapse"
    _wait(browser, lambda d: list((d.execute_script(meta) or {}).keys()) == [target], "its overview drawn")
    assert browser.execute_script(meta)[target] == steps[target] - 12
    _wait(browser, lambda d: [e.text.split()[0] for e in d.find_elements(By.CSS_SELECTOR, "#fleet-body tr.selected")]
          == [target], "its row marked")
    # a run written after the page opened appears after the refresh interval
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.BACKSPACE)
    _wait(browser, lambda d: len(_table(d)) == N_RUNS, "filter cleared")
    write_outcome_run(tmp_path / "zz_late", [0.5] * 11)
    _wait(browser, lambda d: "zz_late" in [r[0] for r in _table(d)], "the new run listed")
    late = next(r for r in _table(browser) if r[0] == "zz_late")
    assert (late[2], late[5]) == ("11", "healthy")
    assert "21 run(s)" in browser.find_element(By.ID, "fleet-summary").text
    assert _severe(browser) == []
    print(f"\nfleet of {N_RUNS} runs filled in the browser in {filled:.1f} s")

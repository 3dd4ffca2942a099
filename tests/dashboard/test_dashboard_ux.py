"""The dashboard as a new user meets it, in headless Chromium over copies of two sample runs: one run selected (the
most recently written), comparing is a choice; the collapse step is marked (checked in the figure and in a
screenshot); each series has its colour, compare mode gives each run a non-red colour and shades every run's
alerts; subplot titles sit clear of the plots; the sequence explorer opens at the first warning; a run without
turns says so; a truncated part does not break the page."""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from test_dashboard_browser import (_click_tab, _plot_js, _rendered, _severe, _shown, _wait, browser,  # noqa: F401
                                    serve)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from report_browser import decode_png  # noqa: E402

from arldiag.dashboards.figures import PARTING_COLOR  # noqa: E402

pytestmark = pytest.mark.browser
SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"
RED = np.array([200, 16, 46])  # figures.COLLAPSE_COLOR


@pytest.fixture(scope="module")
def samples_root(tmp_path_factory) -> Path:
    """root/cispo_s0 (collapses at step 40) and root/grpo_s0 (never collapses); cispo_s0 written last."""
    root = tmp_path_factory.mktemp("samples")
    for n in ("grpo_s0", "cispo_s0"):
        shutil.copytree(SAMPLES / n, root / n)
    now = time.time()
    for sub in ("run.json", "steps"):  # copies keep the originals' mtimes: make cispo the most recently written
        os.utime(root / "grpo_s0" / sub, (now - 100, now - 100))
        os.utime(root / "cispo_s0" / sub, (now, now))
    return root


def _expected(root: Path, name: str) -> tuple[int | None, int | None]:
    """(collapse step, first warning step) computed by the detectors directly."""
    import arldiag
    from arldiag.detectors import analyse

    _, collapse, tl = analyse(arldiag.open_run(root / name))
    warned = tl[tl["state"].isin(["warning", "critical"])]["step"]
    return collapse[name], (int(warned.min()) if len(warned) else None)


def _figure(driver, gid: str) -> dict:
    return driver.execute_script(f"""const g = {_plot_js(gid)};
        return {{traces: g.data.map(t => ({{name: t.name, color: t.line && t.line.color, yaxis: t.yaxis || 'y'}})),
                 shapes: (g.layout.shapes || []).map(s => ({{type: s.type, x0: s.x0, x1: s.x1, fill: s.fillcolor,
                                                           color: s.line && s.line.color}})),
                 annotations: (g.layout.annotations || []).map(a => a.text), meta: g.layout.meta || null,
                 xaxes: Object.keys(g._fullLayout).filter(k => /^xaxis\\d*$/.test(k))
                              .map(k => g._fullLayout[k].showticklabels)}}""")


def _title_overlaps(driver, gid: str, titles: list[str]) -> list[str]:
    """Subplot titles whose drawn box intersects a plot area (the drag rectangles cover exactly the plot areas)."""
    return driver.execute_script(f"""const g = {_plot_js(gid)}; const titles = arguments[0];
        const areas = Array.from(g.querySelectorAll('.draglayer .nsewdrag')).map(r => r.getBoundingClientRect());
        const out = [];
        g.querySelectorAll('.infolayer .annotation').forEach(a => {{
            const t = a.textContent; if (!titles.includes(t)) return;
            const b = a.querySelector('.annotation-text-g').getBoundingClientRect();
            if (areas.some(r => b.bottom > r.top + 1 && b.top < r.bottom - 1 && b.right > r.left && b.left < r.right))
                out.push(t);
        }});
        return out;""", titles)


def test_one_run_by_default_with_the_collapse_marked(samples_root, serve, browser) -> None:
    collapse, first_warning = _expected(samples_root, "cispo_s0")
    browser.get(serve(samples_root))
    _wait(browser, _rendered("g-overview"), "overview")
    assert browser.find_element("css selector", "#run-select").text.strip().startswith("cispo_s0")
    fig = _figure(browser, "g-overview")
    names = [t["name"].split(" · ")[0] for t in fig["traces"]]
    assert set(names) <= {"success_rate", "eval_success", "format_valid_frac", "ppo_kl", "kl_ref_k3", "grad_norm",
                          "entropy", "response_length_mean", "truncated_frac"}
    # one success line (success_frac, equal to success_rate, is not drawn over it) and the greedy evaluation's
    assert names.count("success_rate") == 1 and "success_frac" not in names and names.count("eval_success") == 1
    assert not any(" · " in t["name"] for t in fig["traces"])  # one run: no run prefix
    # the collapse step: a vertical line at x = the collapse step in the figure, named in its meta and annotation
    assert fig["meta"] == {"collapse": {"cispo_s0": collapse}, "decline": {}}
    lines = [s for s in fig["shapes"] if s["type"] == "line"]
    assert [(s["x0"], s["x1"]) for s in lines] == [(collapse, collapse)]
    assert f"collapse {collapse}" in fig["annotations"]
    # one panel per recorded signal group, each with its own step tick labels
    panels = [a for a in fig["annotations"] if not a.startswith("collapse")]
    # task score, format, ppo_kl, kl_ref, grad norm, entropy, response length, truncation
    assert len(fig["xaxes"]) == len(panels) == 8 and all(fig["xaxes"])
    # tick labels drawn under every panel (plotly names them xtick, x2tick, ... per axis)
    drawn = browser.execute_script(f"""const g = {_plot_js('g-overview')};
        return Object.keys(g._fullLayout).filter(k => /^xaxis\\d*$/.test(k)).map(k => g._fullLayout[k]._id)
            .map(id => g.querySelectorAll('.xaxislayer-above .' + id + 'tick text').length);""")
    assert len(drawn) == len(panels) and min(drawn) >= 2, drawn
    # one colour per series within a panel (the KL panel overlays nothing here, the colours come per panel)
    by_axis: dict = {}
    for t in fig["traces"]:
        by_axis.setdefault(t["yaxis"], []).append(t["color"])
    assert all(len(set(c)) == len(c) for c in by_axis.values())
    assert _title_overlaps(browser, "g-overview", panels) == []
    # the screenshot shows the line: saturated collapse-red pixels in a narrow column at the collapse step's x position
    x_px = browser.execute_script(f"""const g = {_plot_js('g-overview')}; const xa = g._fullLayout.xaxis;
        return g.getBoundingClientRect().left + xa._offset + xa.l2p(arguments[0]);""", collapse)
    img = decode_png(browser.get_screenshot_as_png())[..., :3].astype(int)
    scale = img.shape[1] / browser.execute_script("return window.innerWidth")
    ys, xs = np.nonzero(np.abs(img - RED).sum(-1) < 40)
    assert len(xs) > 50, "no collapse line in the screenshot"
    assert abs(np.median(xs) / scale - x_px) < 4 and np.ptp(xs) / scale < 60  # the line and its label
    assert _severe(browser) == []


def test_compare_mode_colours_and_alert_shading(samples_root, serve, browser) -> None:
    (c_cispo, _), (c_grpo, _) = _expected(samples_root, "cispo_s0"), _expected(samples_root, "grpo_s0")
    browser.get(serve(samples_root))
    _wait(browser, _rendered("g-overview"), "overview")
    # choose the comparison run as a user's pick would (dash 4's dropdown renders its search box only when open,
    # and headless typing does not commit the option): set the dropdown's value through Dash's renderer
    browser.execute_script("dash_clientside.set_props('compare-select', {value: ['grpo_s0']});")
    _wait(browser, lambda d: any(" · " in (t["name"] or "") for t in _figure(d, "g-overview")["traces"]),
          "compare mode drawn")
    fig = _figure(browser, "g-overview")
    colors = {t["name"].split(" · ")[0]: set() for t in fig["traces"]}
    for t in fig["traces"]:
        colors[t["name"].split(" · ")[0]].add(t["color"])
    assert set(colors) == {"cispo_s0", "grpo_s0"}
    assert all(len(c) == 1 for c in colors.values()) and colors["cispo_s0"] != colors["grpo_s0"]
    for (c,) in colors.values():  # not red, the colour of critical
        r, g, b = int(c[1:3], 16), int(c[3:5], 16), int(c[5:7], 16)
        assert not (r > 180 and g < 80 and b < 80), c
    # each run's alerts shaded in its own colour; each collapse marked
    fills = {s["fill"].rsplit(",", 1)[0] for s in fig["shapes"] if s["type"] == "rect"}
    rgb = {n: "rgba({}, {}, {}".format(*(int(c[i:i + 2], 16) for i in (1, 3, 5))) for n, (c,) in colors.items()}
    assert rgb["cispo_s0"] in fills  # grpo_s0 is shaded only where it warned
    assert c_grpo is None
    # solid lines: the collapses; dotted ones (PARTING_COLOR): where the two runs part (arldiag diff), in the meta too
    assert sorted(s["x0"] for s in fig["shapes"] if s["type"] == "line" and s["color"] != PARTING_COLOR) == [c_cispo]
    parted = sorted({s["x0"] for s in fig["shapes"] if s["type"] == "line" and s["color"] == PARTING_COLOR})
    assert parted == sorted({v for v in (fig["meta"] or {}).get("partings", {}).values()})
    assert {k: v for k, v in fig["meta"].items() if k != "partings"} == {"collapse": {"cispo_s0": c_cispo}}
    assert _severe(browser) == []


def test_sequence_explorer_opens_at_the_first_warning(samples_root, serve, browser) -> None:
    _, first_warning = _expected(samples_root, "cispo_s0")
    browser.get(serve(samples_root))
    _wait(browser, _rendered("g-overview"), "overview")
    _click_tab(browser, "Sequence explorer")
    _wait(browser, _shown("view-sequences"), "explorer")
    _wait(browser, lambda d: d.find_element("id", "seq-info").text.startswith(f"step {first_warning} (first warning"),
          "explorer at the first warning")
    assert browser.find_elements("css selector", "#seq-table tr.seqrow")
    assert _severe(browser) == []


def _write_no_turns(path: Path) -> None:
    import arldiag

    rng = np.random.default_rng(0)
    with arldiag.Collector(path, flush_every=1) as col:
        for s in range(4):
            lpo = rng.normal(-1, 0.2, (4, 6)).astype(np.float32)
            col.record_rollout(s, sample_ids=np.arange(4) + 10 * s, group_ids=[0, 0, 1, 1], rewards=[1., 0., 1., 0.],
                               response_mask=np.ones((4, 6), bool))
            col.record_update(s, logp=lpo + 0.02, logp_old=lpo, advantages=[1., -1., 1., -1.],
                              response_mask=np.ones((4, 6), bool), sample_ids=np.arange(4) + 10 * s)
            col.record_step(s, {"success_rate": 0.5})


def test_turns_tab_says_when_turns_were_not_recorded(tmp_path, serve, browser) -> None:
    _write_no_turns(tmp_path / "single_turn")
    browser.get(serve(tmp_path))
    _wait(browser, _rendered("g-overview"), "overview")
    _click_tab(browser, "Turns")
    _wait(browser, _shown("view-turns"), "turns view")
    _wait(browser, lambda d: "Turns were not recorded for single_turn" in d.find_element("id", "turns-note").text,
          "turns message")
    hidden = browser.execute_script("return ['g-turns-heat', 'g-turns'].map(i => "
                                    "getComputedStyle(document.getElementById(i)).display)")
    assert hidden == ["none", "none"]
    assert _severe(browser) == []


def test_a_truncated_part_does_not_break_the_page(samples_root, tmp_path, serve, browser) -> None:
    root = tmp_path / "root"
    shutil.copytree(samples_root / "cispo_s0", root / "cispo_s0")
    for t in ("tokens", "sequences"):
        part, = (root / "cispo_s0" / t).glob("*.parquet")
        part.write_bytes(part.read_bytes()[:4000])
    with pytest.warns(UserWarning, match="skipping unreadable part"):
        url = serve(root)
        browser.get(url)
        _wait(browser, _rendered("g-overview"), "overview")
        assert len(_figure(browser, "g-overview")["traces"]) >= 6  # the steps table is intact
        _click_tab(browser, "Sequence explorer")
        _wait(browser, _shown("view-sequences"), "explorer")
        _wait(browser, lambda d: d.find_element("id", "seq-info").text.strip() != "", "explorer message")
    assert "no sequence rows" in browser.find_element("id", "seq-info").text
    assert _severe(browser) == []  # an HTTP 500 from a callback is a SEVERE console entry

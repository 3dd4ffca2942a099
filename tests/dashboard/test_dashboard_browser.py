"""The dashboard in a real browser (headless Debian Chromium via selenium): every view renders without console
errors, picking a step and a sequence shows its tokens, and a run growing while the page is open shows new steps."""
from __future__ import annotations

import logging
import socket
import threading
from pathlib import Path

import pytest

from synthetic_runs import write_steps

pytestmark = pytest.mark.browser

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TIMEOUT = 60  # generous: the CI machine is small and shared


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def serve():
    """serve(root, **create_app_kw) -> base URL of the app running in a background thread on a free port."""
    from werkzeug.serving import make_server

    from arldiag.dashboards.app import create_app

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request is noise in test output
    servers = []

    def start(root: Path, **kw) -> str:
        app = create_app(root, **kw)
        port = _free_port()
        srv = make_server("127.0.0.1", port, app.server, threaded=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{port}/"

    yield start
    for srv in servers:
        srv.shutdown()


@pytest.fixture()
def browser(tmp_path_factory):
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("headless chromium/chromedriver not installed (see .ci/run)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
              "--disable-dev-shm-usage", "--window-size=1400,1000",
              f"--user-data-dir={tmp_path_factory.mktemp('chrome-profile')}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(TIMEOUT)
    yield driver
    driver.quit()


def _wait(driver, predicate, what: str, timeout: float = TIMEOUT):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda d: predicate(d), message=what)


def _severe(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def _radio(driver, rid: str, text: str) -> None:
    """Click the option of a dcc.RadioItems by its label text (Dash styles the input itself away)."""
    driver.find_element("xpath", f"//*[@id='{rid}']//label[contains(., '{text}')]").click()


def _plot_js(gid: str) -> str:
    return f"document.querySelector('#{gid} .js-plotly-plot')"


def _rendered(gid: str):
    """Predicate: the graph's plotly div holds a drawn figure (traces or an annotation-only message)."""
    def check(d):
        # Dash first draws an empty placeholder figure: wait for the callback's (traces or a message annotation)
        return d.execute_script(f"const g = {_plot_js(gid)}; return !!(g && g._fullLayout && "
                                f"g.querySelector('.main-svg') && ((g.data || []).length > 0 || "
                                f"((g.layout || {{}}).annotations || []).length > 0))")
    return check


def _click_tab(driver, label: str) -> None:
    from selenium.webdriver.common.by import By

    tab = _wait(driver, lambda d: next((t for t in d.find_elements(By.CSS_SELECTOR, "#tabs .tab")
                                        if t.text.strip() == label), None), f"tab {label}")
    tab.click()


def _shown(view: str):
    return lambda d: d.execute_script(f"const e = document.getElementById('{view}'); "
                                      "return !!e && getComputedStyle(e).display !== 'none'")


def test_every_view_renders_without_console_errors(runs_root, serve, browser) -> None:
    from arldiag.dashboards.layout import TABS

    browser.get(serve(runs_root))
    _wait(browser, _rendered("g-overview"), "overview figure")
    # the newest run is selected and its overview has the six key panels with data
    n_traces = browser.execute_script(f"return {_plot_js('g-overview')}.data.length")
    assert n_traces >= 6
    views = {"overview": ["g-overview"], "ratios": ["g-ratios-heat", "g-clipping"], "kl": ["g-kl"],
             "advantages": ["g-advantages"], "entropy": ["g-entropy"], "turns": ["g-turns-heat", "g-turns"],
             "alerts": ["g-timeline"], "sequences": []}
    for value, label in TABS:
        _click_tab(browser, label)
        _wait(browser, _shown(f"view-{value}"), f"view {value} shown")
        for gid in views[value]:
            _wait(browser, _rendered(gid), f"{gid} rendered")
    _wait(browser, lambda d: d.find_elements("css selector", "#seq-table tr.seqrow"), "sequence table rows")
    # token-level heatmap as well as the sequence-level one
    _click_tab(browser, "IS ratios & clipping")
    _wait(browser, _shown("view-ratios"), "ratios view shown again")
    _radio(browser, "ratio-level", "token ratio")
    _wait(browser, lambda d: "token log ratio" in d.execute_script(
        f"return JSON.stringify({_plot_js('g-ratios-heat')}.layout.title)"), "token heatmap")
    _click_tab(browser, "Alert timeline")
    _wait(browser, _shown("view-alerts"), "alerts view shown again")
    _wait(browser, lambda d: d.find_element("id", "findings").text.strip() != "", "findings listed")
    # a fired finding's "inspect step" button opens the sequence explorer on its first step
    buttons = browser.find_elements("css selector", "#findings button.goto")
    text = browser.find_element("id", "findings").text
    if "No detector fired" not in text and "unavailable" not in text:
        step = buttons[0].text.split()[-1]
        buttons[0].click()
        _wait(browser, _shown("view-sequences"), "explorer opened from a finding")
        _wait(browser, lambda d: d.find_element("id", "seq-info").text.startswith(f"step {step}:"), "finding's step")
    assert _severe(browser) == []


def test_pick_step_and_sequence_shows_tokens(runs_root, serve, browser) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(serve(runs_root))
    _wait(browser, _rendered("g-overview"), "overview figure")
    # click a step on the overview chart: the explorer opens on the clicked step
    drag = browser.find_element(By.CSS_SELECTOR, "#g-overview .nsewdrag")
    from selenium.webdriver import ActionChains

    ActionChains(browser).move_to_element(drag).pause(0.3).click().perform()
    _wait(browser, _shown("view-sequences"), "explorer opened by a chart click")
    clicked = browser.find_element(By.ID, "step-input").get_attribute("value")
    assert clicked != "" and 0 <= int(clicked) <= 29
    _wait(browser, lambda d: f"step {clicked}:" in d.find_element(By.ID, "seq-info").text, "table of clicked step")
    # type a step explicitly
    box = browser.find_element(By.ID, "step-input")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("5", Keys.ENTER)
    _wait(browser, lambda d: d.find_element(By.ID, "seq-info").text.startswith("step 5:"), "table of step 5")
    rows = browser.find_elements(By.CSS_SELECTOR, "#seq-table tr.seqrow")
    kept = [r for r in rows if r.find_elements(By.TAG_NAME, "td")[-1].text == "yes"]
    dropped = [r for r in rows if r.find_elements(By.TAG_NAME, "td")[-1].text == "no"]
    assert kept and dropped  # token_sample_rate 0.25 keeps some sequences' tokens, not all
    sample = kept[0].find_elements(By.TAG_NAME, "td")[0].text
    kept[0].click()
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#token-spans .tok")) > 0, "token spans")
    assert f"sample {sample}" in browser.find_element(By.ID, "seq-header").text
    n_tok = len(browser.find_elements(By.CSS_SELECTOR, "#token-spans .tok"))
    assert n_tok == int(kept[0].find_elements(By.TAG_NAME, "td")[4].text)  # one span per masked token
    _wait(browser, _rendered("g-tokens"), "token bars")
    # colour by KL contribution re-renders the same sequence
    _radio(browser, "color-by", "KL contribution")
    _wait(browser, lambda d: "k3 KL contribution" in d.find_element(By.ID, "seq-header").text, "KL colouring")
    # a sequence whose tokens were not sampled says so
    browser.find_elements(By.CSS_SELECTOR, "#seq-table tr.seqrow")[rows.index(dropped[0])].click()
    _wait(browser, lambda d: d.find_elements(By.ID, "tokens-not-sampled"), "not-sampled notice")
    assert browser.find_elements(By.CSS_SELECTOR, "#token-spans .tok") == []
    assert _severe(browser) == []


def test_growing_run_shows_new_steps(tmp_path, serve, browser) -> None:
    run = tmp_path / "live"
    write_steps(run, range(5), seed=3)
    browser.get(serve(tmp_path, refresh_ms=500))
    _wait(browser, _rendered("g-overview"), "overview figure")
    last = f"return Math.max(...{_plot_js('g-overview')}._fullData.map(t => Math.max(...Array.from(t.x))))"
    assert browser.execute_script(last) == 4
    write_steps(run, range(5, 9), seed=4)  # the trainer keeps going while the page is open
    _wait(browser, lambda d: d.execute_script(last) == 8, "new steps appear after the refresh interval")
    # a run created after the page opened shows up in the run picker
    write_steps(tmp_path / "zz_latecomer", range(2), seed=5)
    _wait(browser, lambda d: d.find_element("id", "status").text.startswith("2 run(s)"), "new run counted")
    browser.find_element("css selector", "#run-select").click()
    _wait(browser, lambda d: "zz_latecomer" in d.page_source, "new run offered in the picker")
    assert _severe(browser) == []


def test_token_guard_in_the_browser(runs_root, serve, browser) -> None:
    from selenium.webdriver.common.by import By

    base = serve(runs_root, token="letmein")
    browser.get(base)
    assert "missing or wrong token" in browser.find_element(By.TAG_NAME, "body").text
    browser.get(base + "?token=letmein")
    _wait(browser, _rendered("g-overview"), "overview behind the token")
    assert "token" not in browser.current_url
    assert [m for m in _severe(browser) if "403" not in m] == []


def _sample_roots() -> list[Path]:
    root = Path(__file__).resolve().parents[2] / "sample_runs"
    return [root] if root.is_dir() and any(root.rglob("run.json")) else []


@pytest.mark.parametrize("root", _sample_roots() or [pytest.param(None, marks=pytest.mark.skip("no sample runs"))])
def test_sample_runs_render(root, serve, browser) -> None:
    """The bundled sample runs (sample_runs/) open on the overview and the alert timeline without console errors."""
    browser.get(serve(root))
    _wait(browser, _rendered("g-overview"), "overview of a sample run")
    _click_tab(browser, "Alert timeline")
    _wait(browser, _shown("view-alerts"), "alerts view")
    _wait(browser, _rendered("g-timeline"), "timeline of a sample run")
    assert _severe(browser) == []

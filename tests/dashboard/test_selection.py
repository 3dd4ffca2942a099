"""The run the run view shows and what it says about it (data level; the browser side is in
test_dashboard_browser.py): ``?run=NAME``, the worst run first (arldiag.verdict.WORST_FIRST, the order the fleet
table sorts by), the verdict banner from the fleet row, a root that does not exist yet, one success line and the
evaluation line in the score panel, no sequence explorer for a run of step metrics only."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from arldiag import verdict as V
from arldiag.dashboards import fleet as F
from arldiag.dashboards import selection as S
from arldiag.dashboards import views_alerts, views_sequences, views_series
from arldiag.dashboards.source import RunSource
from synthetic_runs import write_steps
from test_fleet import collapsing, write_outcome_run


# ---------------------------------------------------------------------------------------------- the URL
@pytest.mark.parametrize("search, want", [("?run=alpha", "alpha"), ("?run=sweep%2Fbeta&x=1", "sweep/beta"),
                                          ("?x=1&run=sweep/beta", "sweep/beta"), ("", None), (None, None),
                                          ("?run=", None), ("?runs=alpha", None)])
def test_url_names_the_run(search, want) -> None:
    assert S.url_run(search) == want


# ---------------------------------------------------------------------------------------------- worst run first
def _row(name, verdict, state="ok", steps=10, max_state=None):
    return {"id": name, "name": name, "verdict": verdict, "state": state, "max_state": max_state or state,
            "steps": steps}


def test_worst_first_order_is_written_once() -> None:
    # the order the brief asks for, by hand: a collapse, then a run that can still be saved, then one that never
    # learned, then the verdicts that say nothing bad
    assert V.WORST_FIRST == ("collapsed", "at risk", "declined", "no signal", "too short", "healthy")
    assert [V.verdict_rank(w) for w in V.WORST_FIRST] == [5, 4, 3, 2, 1, 0]
    assert V.verdict_rank("error") == V.verdict_rank(None) == V.verdict_rank(F.PENDING) == -1
    assert set(V.WORST_FIRST) == set(V.VERDICTS)  # every verdict word has its place
    # the fleet table sorts by the same order (an unreadable run above all)
    rows = [_row(w, w) for w in reversed(V.WORST_FIRST)] + [_row("broken", "error")]
    assert [r["id"] for r in F.sort_rows(rows, "verdict", desc=True)] == ["broken", *V.WORST_FIRST]


def test_worst_run_picks_by_verdict_then_state() -> None:
    rows = [_row("h", "healthy"), _row("d", "declined", "watch"), _row("r", "at risk", "warning"),
            _row("s", "too short"), _row("n", "no signal")]
    assert S.worst_run(rows) == "r"
    assert S.worst_run(rows + [_row("c", "collapsed", "ok")]) == "c"  # a collapse wins whatever the state now
    # within one verdict: the alert state now, then the worst state the run reached
    assert S.worst_run([_row("w", "at risk", "warning"), _row("k", "at risk", "critical")]) == "k"
    assert S.worst_run([_row("a", "healthy", "ok", max_state="watch"), _row("b", "healthy", "ok")]) == "a"
    # ties: the first row (the source lists the most recently written run first)
    assert S.worst_run([_row("new", "healthy"), _row("old", "healthy")]) == "new"


def test_worst_run_waits_for_verdicts() -> None:
    rows = [_row("h", "healthy"), _row("p", F.PENDING, None, steps=None)]
    assert S.worst_run(rows, pending=1) is None  # the worst may be the one still computing
    assert S.worst_run([_row("empty", None, None, steps=0)]) is None  # a run with no step yet is not opened
    assert S.worst_run([_row("x", "error", None, steps=None), _row("h", "healthy")]) == "h"
    assert S.worst_run([]) is None


def test_worst_run_on_written_runs(tmp_path: Path) -> None:
    # the collapsed run is the oldest and is not first by name: only the verdict can put it first
    write_outcome_run(tmp_path / "m_collapsed", collapsing(40, 25))
    write_outcome_run(tmp_path / "a_stable", [0.6] * 30)
    write_outcome_run(tmp_path / "z_short", [0.1, 0.5, 0.3])
    fleet = F.FleetRows(RunSource(tmp_path))
    fleet.refresh()
    assert fleet.rows()[0]["id"] == "z_short"  # newest first
    assert S.worst_run(fleet.rows(), fleet.pending()) == "m_collapsed"


# ---------------------------------------------------------------------------------------------- verdict banner
def test_banner_says_the_verdict_module_word_and_reason(tmp_path: Path) -> None:
    import arldiag
    from arldiag.detectors import evaluate_run, label_of

    write_outcome_run(tmp_path / "c", collapsing(40, 25))
    fleet = F.FleetRows(RunSource(tmp_path))
    fleet.refresh()
    word, reason = S.banner_text(fleet.row("c"))
    # the verdict computed here from the replay, independently of the fleet row
    run = arldiag.open_run(tmp_path / "c")
    ev = evaluate_run(run, run.names[0])
    v = V.verdict_of(ev, label_of(ev.frame))
    assert (word, reason) == (v.status, v.reason) == ("collapsed", v.reason)
    assert "step 25" in reason
    assert S.banner_text(None) == ("", "reading the run ...")
    assert S.banner_text({"verdict": F.PENDING, "steps": None})[0] == ""
    assert S.banner_text({"verdict": "error", "verdict_reason": "the run could not be read: X"}) == (
        "error", "the run could not be read: X")


# ---------------------------------------------------------------------------------------------- empty root
def test_source_over_a_root_that_does_not_exist_yet(tmp_path: Path) -> None:
    root = tmp_path / "later"
    src = RunSource(root)
    assert src.names() == [] and src.valid(["x"]) == [] and src.poll() is False
    fleet = F.FleetRows(src)
    assert fleet.refresh() is False and fleet.rows() == []
    write_outcome_run(root / "r1", [0.5] * 12)  # the trainer starts writing
    assert src.poll() is True and src.names() == ["r1"]
    fleet.refresh()
    assert S.worst_run(fleet.rows(), fleet.pending()) == "r1"
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ValueError, match="file.txt"):
        RunSource(tmp_path / "file.txt")


@pytest.mark.parametrize("make", [False, True])
def test_cli_waits_for_runs(tmp_path: Path, monkeypatch, capsys, make: bool) -> None:
    import dash

    from arldiag.dashboards import cli

    root = tmp_path / "runs"
    if make:
        root.mkdir()
    started = []
    monkeypatch.setattr(dash.Dash, "run", lambda self, **kw: started.append(kw))  # no server in a unit test
    args = argparse.Namespace(root=root, port=8123, host="127.0.0.1", token=None, refresh=1.0)
    assert cli.main(args) == 0
    assert started == [{"host": "127.0.0.1", "port": 8123, "debug": False}]
    err = capsys.readouterr().err
    assert f"waiting for runs under {root.resolve()}" in err
    assert ("does not exist yet" if not make else "holds no run yet") in err
    (tmp_path / "f").write_text("x")
    assert cli.main(argparse.Namespace(**{**vars(args), "root": tmp_path / "f"})) == 2


# ---------------------------------------------------------------------------------------------- score lines
def test_score_lines_keep_one_success_and_one_eval_line() -> None:
    steps = np.arange(6)
    rate = np.array([0.1, 0.2, 0.3, 0.3, 0.4, 0.5])
    ev = np.array([0.0, np.nan, np.nan, 0.25, np.nan, np.nan])
    own = pd.DataFrame({"step": steps, "success_rate": rate, "success_frac": rate + 1e-9, "task_score": rate,
                        "eval_success": ev, "val_score": ev})
    frames, cols = views_series.score_lines({"own": own})
    assert cols == ["success_rate", "eval_success"]
    got = frames["own"]
    assert np.isnan(got[["success_frac", "task_score", "val_score"]].to_numpy()).all()
    np.testing.assert_array_equal(got["success_rate"], rate)
    np.testing.assert_array_equal(got["eval_success"], ev)
    assert not np.isnan(own["success_frac"]).any()  # the caller's frame is left alone
    # a run logging only the derived success and a validation score; compare mode keeps each run's own line
    other = pd.DataFrame({"step": steps, "success_rate": np.nan, "success_frac": rate, "val_score": ev})
    assert views_series.score_lines({"other": other})[1] == ["success_frac", "val_score"]
    assert views_series.score_lines({"own": own, "other": other})[1] == [
        "success_rate", "success_frac", "eval_success", "val_score"]
    panels = views_series.view_panels("overview", ["success_rate", "eval_success"])
    assert panels[0] == (views_series.SCORE_PANEL[0], ["success_rate", "eval_success"])
    assert panels[1:] == views_series.PANELS["overview"][1:]


def test_overview_draws_one_success_line_and_eval_success(tmp_path: Path) -> None:
    import arldiag

    write_steps(tmp_path / "r", range(6), seed=1)  # success_rate logged, success_frac derived from rollouts
    with arldiag.Collector(tmp_path / "r", flush_every=1) as col:  # greedy evaluation every 3 steps
        for s, v in ((6, 0.5), (9, 0.75)):
            col.record_step(s, metrics={"success_rate": 0.4, "eval_success": v})
        col.record_step(10, metrics={"success_rate": 0.4})
    fig, _ = views_series.render_panels(RunSource(tmp_path), ["r"], "overview")
    score = [t for t in fig.data if t.xaxis in (None, "x")]
    assert [t.name for t in score] == ["success_rate", "eval_success"]
    ev = score[1]
    finite = np.isfinite(np.asarray(ev.y, float))
    assert list(np.asarray(ev.x)[finite]) == [6, 9] and list(np.asarray(ev.y, float)[finite]) == [0.5, 0.75]


# ---------------------------------------------------------------------------------------------- imported runs
def _imported(tmp_path: Path) -> Path:
    from arldiag.cli import main

    rows = ["step,critic/score/mean,actor/entropy,actor/grad_norm"]
    for s in range(1, 61):  # the entropy blows up and the score falls: detectors fire on step metrics alone
        rows.append(f"{s},{0.6 if s < 40 else 0.02:.3f},{0.4 + (0 if s < 30 else 0.08 * (s - 30)):.4f},"
                    f"{1.0 + (0 if s < 30 else 0.5 * (s - 30)):.3f}")
    (tmp_path / "log.csv").write_text("\n".join(rows) + "\n")
    assert main(["import", "csv", str(tmp_path / "log.csv"), "--out", str(tmp_path / "root" / "imp")]) == 0
    return tmp_path / "root"


def _find(component, pred) -> list:
    """Every component in a Dash tree for which ``pred`` holds."""
    out, stack = [], [component]
    while stack:
        c = stack.pop()
        if isinstance(c, (list, tuple)):
            stack.extend(c)
            continue
        if c is None or isinstance(c, (str, int, float)):
            continue
        if pred(c):
            out.append(c)
        stack.append(getattr(c, "children", None))
    return out


def test_imported_run_has_no_explorer(tmp_path: Path) -> None:
    root = _imported(tmp_path)
    write_steps(root / "own", range(3), seed=1)
    src = RunSource(root)
    assert views_sequences.has_sequences(src, "imp") is False
    assert views_sequences.has_sequences(src, "own") is True
    _, cards, _ = views_alerts.render_alerts(src, ["imp"])
    fired = _find(cards, lambda c: getattr(c, "className", None) == "finding")
    assert fired, "the detectors fire on the imported run's step metrics"
    assert _find(cards, lambda c: getattr(c, "className", None) == "goto") == []
    note = _find(cards, lambda c: getattr(c, "id", None) == "no-explorer-note")
    assert len(note) == 1 and note[0].children == views_sequences.no_sequences_text("imp")
    # the run with sequence rows keeps its buttons
    assert views_alerts.finding_cards([{"status": "fired", "severity": "warning", "first_step": 4}])[0] \
        .children[0].children[-1].id == {"type": "goto-step", "index": 4}

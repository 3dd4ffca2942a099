"""The alert floor holds by construction: whenever the verdict's collapse rule (arldiag.label) places a collapse,
the alert state is at warning or above by the collapse + 3 logged points, whatever the score's noise, scale, length
or log interval (hypothesis over the families of floor_families.py), online (Evaluator, Monitor) and in batch
(`arldiag import` + detect / ls / report)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from arldiag.detectors.engine import Evaluator
from arldiag.detectors.floor import LEAD, ScoreFloor, SeriesFloor
from arldiag.label import run_events, score_collapse_index, series_events
from arldiag.levels import rank
from _floor_families import PLACES, SCALES, SHAPES, Family, series

WARNING = rank("warning")


@st.composite
def families(draw, shapes=SHAPES[1:]):
    binomial = draw(st.sampled_from([0, 0, 8, 16]))
    return Family(n=draw(st.integers(20, 2000)), interval=draw(st.integers(1, 10)),
                  noise=draw(st.floats(0.01, 0.45)), level=draw(st.floats(0.3, 0.95)),
                  shape=draw(st.sampled_from(shapes)), place=draw(st.sampled_from(PLACES)),
                  slide=draw(st.integers(20, 100)), scale=draw(st.sampled_from(SCALES)), binomial=binomial,
                  seed=draw(st.integers(0, 2 ** 31)))


def states(steps, cols: dict[str, np.ndarray]) -> list[int]:
    """The alert state (0..3) after each logged point, shipped settings, online order."""
    ev = Evaluator()
    out = []
    for i, s in enumerate(steps):
        res = ev.update(int(s), {c: float(v) for c, v in ((c, y[i]) for c, y in cols.items()) if np.isfinite(v)})
        out.append(rank(res.state))
    return out


def check_floor(steps, cols) -> tuple[int | None, list[int]]:
    collapse, _ = run_events(steps, cols)
    st_ = states(steps, cols)
    if collapse is not None:
        i = int(np.flatnonzero(np.asarray(steps) == collapse)[0])
        j = min(i + LEAD, len(steps) - 1)
        assert st_[j] >= WARNING, (f"collapse at step {collapse} (point {i}) but state {st_[j]} at point {j}: "
                                   f"states {st_[max(0, i - 3):j + 1]}")
    return collapse, st_


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(families())
def test_task_score_collapse_warns_by_three_points(f):
    steps, y = series(f)
    check_floor(steps, {"task_score": y})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(families(), st.sampled_from(["success_rate", "format_valid_frac"]))
def test_success_and_format_collapse_warns_by_three_points(f, col):
    steps, _ = series(f)
    from _floor_families import unit_series
    check_floor(steps, {col: unit_series(f)})


def test_the_issue_case_exact_zero_after_a_noisy_score():
    """A loop logs the mean reward of 8 samples of one prompt (jumps between 0 and 1, ~0.35 from one step to the
    next); at step 56 of 500 it falls to exactly 0 and stays there: the label calls it a collapse, and the state
    is at warning within 3 points (it was silent: the significance test's bias term exceeded the score's range)."""
    rng = np.random.default_rng(3)
    y = rng.binomial(8, 0.45, 500) / 8.0
    y[56:] = 0.0
    steps = np.arange(500)
    d = np.diff(y[:56])
    assert 0.25 < np.sqrt(np.mean(d ** 2)) < 0.45
    collapse, st_ = check_floor(steps, {"task_score": y})
    assert collapse is not None and collapse <= 56
    assert max(st_[collapse + LEAD:]) >= WARNING and min(st_[collapse + LEAD:]) >= WARNING


@pytest.mark.parametrize("seed", range(200))
def test_score_floor_is_necessary_numpy(seed):
    """The floor against the label computed on the whole series (no engine): at the label's point + 3 the floor
    holds. Hand-built shapes and scales, many seeds."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 400))
    y = np.clip(rng.uniform(0.2, 0.9) + rng.uniform(0.01, 0.45) * rng.standard_normal(n), 0, 1)
    c = int(rng.integers(5, n))
    y[c:] *= rng.choice([0.0, 0.1, 0.3])
    y = [y, 2 * y - 1, 100 * y, 5 * y - 2][seed % 4]
    t = score_collapse_index(y)
    f = ScoreFloor()
    on = [f.push(float(v)) for v in y]
    if t is not None and t + LEAD < n:
        assert on[t + LEAD]
    w = 10 if seed % 3 else 3
    t2, _ = series_events(np.clip(y, 0, None) / max(np.max(np.abs(y)), 1e-9), w, 0.5, 0.2, 5 if w == 10 else 2)
    g = SeriesFloor(w, 5 if w == 10 else 2)
    on2 = [g.push(float(v)) for v in np.clip(y, 0, None) / max(np.max(np.abs(y)), 1e-9)]
    if t2 is not None:  # by + 3, or by the run's last point when the label's tail is shorter
        assert on2[min(t2 + LEAD, n - 1)]


@pytest.mark.parametrize("tail", [3, 4, 5, 8])
def test_eval_success_collapse_with_a_short_tail_warns(tail):
    """The label reads eval success on its evaluation points with a tail of 2 below-points (label.EVAL_MIN_TAIL): a
    run whose last evaluations fell is collapsed with as few as 3 evaluations after the fall, so the floor warns
    by then (after 2 low evaluations), not only at + 3."""
    ev = [0.6, 0.62, 0.58, 0.6, 0.61, 0.6, 0.59, 0.6] + [0.0] * tail
    steps = np.arange(len(ev)) * 10
    # a training metric beside it: a row of validation metrics alone joins the next training row (Evaluator)
    collapse, st_ = check_floor(steps, {"eval_success": np.asarray(ev), "grad_norm": np.ones(len(ev))})
    assert collapse is not None and st_[-1] >= WARNING


def test_floor_ends_when_a_dip_recovers():
    """A dip to zero for four points, then back to the plateau: the floor holds during the dip and ends once the
    centred mean is back above half the best (it is a candidate the label refutes)."""
    y = np.r_[np.full(30, 0.8), np.zeros(4), np.full(30, 0.8)]
    f = ScoreFloor()
    on = [f.push(float(v)) for v in y]
    assert any(on[30:36])
    assert not any(on[40:])


def test_batch_detect_ls_and_report_agree_with_the_label(tmp_path, capsys):
    """`arldiag import csv` of the issue's case, then detect, ls and the report's JSON: verdict collapsed, state at
    warning or above in each."""
    from arldiag.cli import main
    rng = np.random.default_rng(5)
    y = rng.binomial(8, 0.4, 300) / 8.0
    y[80:] = 0.0
    csv = tmp_path / "loop.csv"
    csv.write_text("step,score\n" + "".join(f"{i},{v}\n" for i, v in enumerate(y)))
    run = tmp_path / "run"
    assert main(["import", "csv", str(csv), "--out", str(run)]) == 0
    capsys.readouterr()
    main(["detect", str(run), "--json"])
    out = json.loads(capsys.readouterr().out)
    text = json.dumps(out)
    assert "collapse_floor" in text
    main(["ls", str(tmp_path), "--json", "--no-progress"])
    (row,) = json.loads(capsys.readouterr().out)
    assert row["verdict"] == "collapsed" and rank(row["state"]) >= WARNING, row
    first = next(v for k, v in row.items() if k.startswith("first_warn"))
    assert first is not None and first <= row["collapse_step"] + LEAD, row
    # the report (JSON) and `arldiag watch --once` (the online evaluator over the store, its alerts table)
    assert main(["report", str(run), "--format", "json", "-o", str(tmp_path / "r.json")]) == 0
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["verdict"] == "collapsed" and rank(rep["max_state"]) >= WARNING
    capsys.readouterr()
    main(["watch", str(run), "--once", "--quiet"])
    import arldiag
    alerts = arldiag.open_run(run).sql("select step, state from alerts order by step").fetchall()
    assert any(rank(st) >= WARNING and s <= row["collapse_step"] + LEAD for s, st in alerts), alerts


def test_online_monitor_warns_by_three_points():
    """The Monitor (the Collector's online hook) on the issue's case: an alert at warning or above by the collapse
    + 3 points, sent through a callback sink."""
    from arldiag.monitor import Monitor
    got = []
    m = Monitor(sinks=[got.append])
    rng = np.random.default_rng(7)
    y = rng.binomial(8, 0.5, 200) / 8.0
    y[120:] = 0.0
    c, _ = run_events(np.arange(200), {"task_score": y})
    for i, v in enumerate(y):
        m.on_step(i, {"task_score": float(v)})
    assert c is not None
    assert any(rank(a.state) >= WARNING and a.step <= c + LEAD for a in got), [(a.step, a.state) for a in got]

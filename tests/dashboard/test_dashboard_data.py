"""Data functions of the dashboard on small hand-made runs, checked against values worked out independently."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from arldiag.dashboards import figures, queries, views_sequences
from arldiag.dashboards.source import RunSource, run_signature

T = 4          # tokens per sample
STEPS = 3
X = 0.125      # per-step log-ratio increment: chosen so values fall on bin centres of the histogram below


def _write_exact_run(path: Path, steps=range(STEPS)) -> None:
    """Two samples per step, all tokens kept: sample 0 (A = +1) has log r_t = +X (s+1) on every token,
    sample 1 (A = -1) has log r_t = -X (s+1)."""
    import arldiag

    with arldiag.Collector(path, clip=(0.2, 0.28), token_sample_rate=1.0, flush_every=1) as col:
        for s in steps:
            mask = np.ones((2, T), bool)                                      # [2, T]
            lp_old = np.full((2, T), -1.0, np.float32)                        # [2, T]
            lr = np.array([[X * (s + 1)], [-X * (s + 1)]], np.float32)        # [2, 1]
            sid = np.array([10 * s, 10 * s + 1])
            col.record_rollout(s, sid, group_ids=[s, s], response_mask=mask, rewards=[1.0, 0.0])
            col.record_update(s, 0, logp=lp_old + lr, logp_old=lp_old, advantages=np.array([1.0, -1.0]),
                              response_mask=mask, sample_ids=sid)
            col.record_step(s, metrics={"grad_norm": 2.0 * s + 1.0})


@pytest.fixture()
def exact(tmp_path: Path):
    _write_exact_run(tmp_path / "exact")
    return RunSource(tmp_path).get("exact").run


def test_step_series_values_and_bucketing(exact) -> None:
    full = queries.step_series(exact, ["grad_norm", "ppo_kl", "never_logged"])
    assert full["step"].tolist() == [0, 1, 2]
    np.testing.assert_allclose(full["grad_norm"], [1.0, 3.0, 5.0])
    # ppo_kl = token mean of lp_old - lp: the two samples cancel exactly
    np.testing.assert_allclose(full["ppo_kl"], [0.0, 0.0, 0.0], atol=1e-6)
    assert full["never_logged"].isna().all()
    coarse = queries.step_series(exact, ["grad_norm"], max_points=2)  # k = ceil(3 / 2) = 2 steps per bucket
    assert coarse["step"].tolist() == [0, 2]
    np.testing.assert_allclose(coarse["grad_norm"], [(1.0 + 3.0) / 2, 5.0])


def test_bucket_width() -> None:
    assert queries.bucket_width(0, 999, 1000) == 1
    assert queries.bucket_width(0, 1000, 1000) == 2
    assert queries.bucket_width(5, 5, 10) == 1
    assert queries.bucket_width(None, None, 10) == 1


@pytest.mark.parametrize("level", ["sequences", "tokens"])
def test_ratio_histogram_bins_by_sign(exact, level) -> None:
    h = queries.ratio_histogram(exact, level, bins=40, half_range=1.0)  # bin width 0.05
    assert h["steps"] == [0, 1, 2]
    for s in range(STEPS):
        x = X * (s + 1)
        pos_bin, neg_bin = math.floor((x + 1.0) / 0.05), math.floor((-x + 1.0) / 0.05)
        expect_pos = np.zeros(40)
        expect_pos[pos_bin] = 1.0
        expect_neg = np.zeros(40)
        expect_neg[neg_bin] = 1.0
        np.testing.assert_allclose(h["pos"][:, s], expect_pos)
        np.testing.assert_allclose(h["neg"][:, s], expect_neg)
    assert h["n"] == (2 * STEPS if level == "sequences" else 2 * T * STEPS)


def test_ratio_histogram_clamps_outliers_into_edge_bins(exact) -> None:
    h = queries.ratio_histogram(exact, "sequences", bins=10, half_range=0.2)  # |x| = 0.25, 0.375 fall outside
    assert h["pos"][-1, 1] == 1.0 and h["neg"][0, 2] == 1.0


def test_band_edges() -> None:
    lo, hi = queries.band_edges({"clip": [0.2, 0.28], "seq_clip": [0.003, 0.004]}, "tokens")
    assert lo == pytest.approx(math.log(0.8)) and hi == pytest.approx(math.log(1.28))
    lo, hi = queries.band_edges({"clip": [0.2, 0.28], "seq_clip": [0.003, 0.004]}, "sequences")
    assert lo == pytest.approx(math.log(0.997)) and hi == pytest.approx(math.log(1.004))
    assert queries.band_edges({}, "tokens") is None


def _k3(x: float) -> float:
    return math.exp(x) - x - 1.0


def test_worst_sequences_order_share_and_flags(exact) -> None:
    df = queries.worst_sequences(exact, 1, by="ppo_kl_k3_sum")
    x = 2 * X
    k_pos, k_neg = T * _k3(x), T * _k3(-x)   # exp(x) - x - 1 is larger for x > 0
    assert df["sample_id"].tolist() == [10, 11]
    np.testing.assert_allclose(df["ppo_kl_k3_sum"], [k_pos, k_neg], rtol=1e-4)
    np.testing.assert_allclose(df["kl_share"], [k_pos / (k_pos + k_neg), k_neg / (k_pos + k_neg)], rtol=1e-4)
    assert df["has_tokens"].tolist() == [True, True]
    # ARLArena set at step 1: A < 0 and s_i = exp(-0.25) = 0.78 < 1 - eps_low = 0.8 -> sample 11 first
    nalis = queries.worst_sequences(exact, 1, by="neg_adv_low_is")
    assert nalis["sample_id"].tolist()[0] == 11 and bool(nalis["neg_adv_low_is"].iloc[0])
    # at step 0, s_i = exp(-0.125) = 0.88 is inside the band: nobody is flagged
    assert not queries.worst_sequences(exact, 0, by="neg_adv_low_is")["neg_adv_low_is"].any()
    assert queries.worst_sequences(exact, 99).empty
    with pytest.raises(ValueError, match="by must be"):
        queries.worst_sequences(exact, 1, by="1; drop table steps")


def test_sequence_tokens_values(exact) -> None:
    tok = queries.sequence_tokens(exact, 2, 21, 0, 0)
    x = -3 * X
    assert tok["pos"].tolist() == list(range(T))
    np.testing.assert_allclose(tok["log_ratio"], [x] * T, rtol=1e-5)
    np.testing.assert_allclose(tok["kl_k3"], [_k3(x)] * T, rtol=1e-4)
    np.testing.assert_allclose(tok["kl_share"], [1 / T] * T, rtol=1e-5)
    assert queries.sequence_tokens(exact, 2, 999, 0, 0).empty


def test_state_segments() -> None:
    import pandas as pd

    t = pd.DataFrame({"step": [0, 1, 2, 3, 4, 5, 6, 7],
                      "state": ["ok", "watch", "watch", "ok", "watch", "critical", "critical", "ok"]})
    assert queries.state_segments(t) == [(1, 2, "watch"), (4, 4, "watch"), (5, 6, "critical")]
    assert queries.state_segments(pd.DataFrame(columns=["step", "state"])) == []


def test_token_colors_scale() -> None:
    c = figures.token_colors(np.array([-1.0, 0.5, np.nan]), "log_ratio", scale=1.0)
    assert c[0] == "rgba(31, 119, 180, 1.000)"          # r < 1: blue, full saturation at |x| = scale
    assert c[1] == "rgba(214, 39, 40, 0.575)"           # 0.15 + 0.85 * 0.5
    assert c[2] == "rgba(214, 39, 40, 0.150)"           # NaN shown as 0
    assert figures.token_colors(np.array([0.2]), "kl")[0] == "rgba(214, 39, 40, 1.000)"


def test_row_key_round_trip_and_rejects_garbage() -> None:
    key = views_sequences.row_key(3, 30, 1, 0)
    assert views_sequences.parse_row_key(key) == {"step": 3, "sample_id": 30, "update": 1, "rank": 0}
    for bad in ("1:2:3", "a:b:c:d", "1:2:3:4:5", "'; select 1"):
        with pytest.raises(ValueError):
            views_sequences.parse_row_key(bad)


def test_poll_refreshes_only_when_files_change(tmp_path: Path) -> None:
    _write_exact_run(tmp_path / "exact", range(2))
    src = RunSource(tmp_path)
    calls = []

    def last_step(run):
        calls.append(1)
        return queries.step_range(run)[1]

    assert src.cached("exact", ("last",), last_step) == 1
    assert src.cached("exact", ("last",), last_step) == 1 and len(calls) == 1  # cached
    v = src.version
    assert src.poll() is False and src.version == v                           # nothing changed on disk
    sig = run_signature(src.get("exact").path)
    _write_exact_run(tmp_path / "exact", range(2, 4))                          # the run grows
    assert run_signature(src.get("exact").path) != sig
    assert src.poll() is True and src.version == v + 1
    assert src.cached("exact", ("last",), last_step) == 3 and len(calls) == 2


def test_render_functions_on_a_run(exact, tmp_path: Path) -> None:
    from arldiag.dashboards import views_alerts, views_series

    src = RunSource(tmp_path)
    fig, _ = views_series.render_panels(src, ["exact"], "overview")
    names = {t.name for t in fig.data}
    assert {"grad_norm", "ppo_kl"} <= names and "entropy" not in names  # entropy was never recorded
    heat = views_series.render_ratios(src, ["exact"], "sequences")
    assert len(heat.data) == 2  # A > 0 and A < 0 panels
    timeline, cards, rows = views_alerts.render_alerts(src, ["exact"])
    assert cards  # findings, or the "detectors unavailable" notice
    table, info = views_sequences.render_table(src, "exact", None, "ppo_kl_k3_sum")
    assert info.startswith("step 2 (last step with non-zero advantages") and [r["sample_id"] for r in table] == [20, 21]
    header, spans, _ = views_sequences.render_tokens(src, "exact", views_sequences.parse_row_key(table[1]["id"]),
                                                     "log_ratio")
    assert len(spans) == T and "sample 21" in str(header)


def test_overview_overlays_several_runs(runs_root: Path) -> None:
    from arldiag.dashboards import views_series

    src = RunSource(runs_root)
    fig, _ = views_series.render_panels(src, ["alpha", "sweep/beta"], "overview")
    names = {t.name for t in fig.data}
    assert {"alpha · grad_norm", "sweep/beta · grad_norm"} <= names
    steps = {t.name: list(t.x) for t in fig.data}
    assert steps["alpha · grad_norm"] == list(range(12)) and steps["sweep/beta · grad_norm"] == list(range(30))
    # conftest logs grad_norm = 1 + 0.1 step
    np.testing.assert_allclose([y for t in fig.data if t.name == "alpha · grad_norm" for y in t.y],
                               1.0 + 0.1 * np.arange(12))


def test_without_detectors_the_alert_view_degrades(tmp_path: Path, monkeypatch) -> None:
    """With arldiag.detectors unimportable, findings say so and the timeline comes from the stored alerts."""
    import sys

    import arldiag
    from arldiag.dashboards import detectors_bridge, views_alerts

    with arldiag.Collector(tmp_path / "r", token_sample_rate=0.0) as col:
        mask = np.ones((2, 3), bool)
        for s in range(3):
            col.record_update(s, 0, logp=np.zeros((2, 3)), logp_old=np.zeros((2, 3)), advantages=np.array([1., -1.]),
                              response_mask=mask)
            col.record_step(s)
        col.record_alert(step=2, detector="clip_pressure", severity="warning", state="warning", risk=0.6,
                         title="t", message="m")
    monkeypatch.setitem(sys.modules, "arldiag.detectors", None)  # import now raises ImportError
    detect, timeline_fn, reason = detectors_bridge.load()
    assert detect is None and "detectors unavailable" in reason
    src = RunSource(tmp_path)
    t, note = detectors_bridge.timeline(src.get("r").run)
    assert t["step"].tolist() == [2] and t["state"].tolist() == ["warning"] and "stored alerts" in note
    _, cards, rows = views_alerts.render_alerts(src, ["r"])
    assert "detectors unavailable" in str(cards) and "clip_pressure" in str(rows)


def test_a_run_without_rows_yet_renders_messages(tmp_path: Path) -> None:
    """A run whose trainer has just started (run.json, no parts) renders 'no steps' messages, not errors."""
    import arldiag
    from arldiag.dashboards import views_alerts, views_series

    col = arldiag.Collector(tmp_path / "fresh")
    try:
        src = RunSource(tmp_path)
        for view in views_series.PANELS:
            fig, _ = views_series.render_panels(src, ["fresh"], view)
            assert "no steps recorded yet" in str(fig.layout.annotations)
        assert "no sequences rows" in str(views_series.render_ratios(src, ["fresh"], "sequences").layout.annotations)
        assert "no turn rows" in str(views_series.render_turn_heatmap(src, ["fresh"]).layout.annotations)
        views_alerts.render_alerts(src, ["fresh"])
        assert views_sequences.render_table(src, "fresh", None, "ppo_kl_k3_sum") == ([], "no steps recorded yet")
        assert views_sequences.render_table(src, "fresh", 3, "ppo_kl_k3_sum") == ([], "step 3: no sequence rows")
    finally:
        col.close()


def test_a_declining_run_gets_its_decline_line(tmp_path: Path) -> None:
    """Success 0.05 -> 0.15 (never the label's 0.2 peak) -> 0 from step 40: the decline step is 40 (worked by hand
    in tests/report/test_report_outputs.py); the overview draws it dotted and names it in the figure's meta."""
    from arldiag.commands.import_steps import import_steps
    from arldiag.dashboards import views_series

    csv = tmp_path / "steps.csv"
    csv.write_text("step,success_rate\n" + "".join(f"{s},{0.05 if s < 5 else 0.15 if s < 40 else 0.0}\n"
                                                   for s in range(80)))
    import_steps(str(csv), str(tmp_path / "runs" / "declining"), name="declining")
    fig, _ = views_series.render_panels(RunSource(tmp_path / "runs"), ["declining"], "overview")
    assert fig.layout.meta == {"collapse": {}, "decline": {"declining": 40}}
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    assert [(s.x0, s.line.dash) for s in lines] == [(40, "dot")]
    assert "decline 40" in [a.text for a in fig.layout.annotations]

"""arldiag.views: the read side the report and the dashboard share, checked on hand-made runs against values worked
out independently (numpy over the Parquet files, or by hand)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest

T = 4       # tokens per sample
X = 0.125   # per-step log-ratio increment


def _write_run(path: Path, steps=range(3), updates: int = 2) -> None:
    """Two samples per step and ``updates`` updates per step: sample 0 (A = +1) has log r_t = +X (s+1)(u+1), sample
    1 (A = -1) has log r_t = -X (s+1)(u+1); every token kept."""
    import arldiag

    with arldiag.Collector(path, clip=(0.2, 0.28), token_sample_rate=1.0, flush_every=1) as col:
        for s in steps:
            mask = np.ones((2, T), bool)                                      # [2, T]
            lp_old = np.full((2, T), -1.0, np.float32)                        # [2, T]
            sid = np.array([10 * s, 10 * s + 1])
            col.record_rollout(s, sid, group_ids=[s, s], response_mask=mask, rewards=[1.0, 0.0])
            for u in range(updates):
                lr = np.array([[X * (s + 1) * (u + 1)], [-X * (s + 1) * (u + 1)]], np.float32)  # [2, 1]
                col.record_update(s, u, logp=lp_old + lr, logp_old=lp_old, advantages=np.array([1.0, -1.0]),
                                  response_mask=mask, sample_ids=sid)
            col.record_step(s, metrics={"grad_norm": 2.0 * s + 1.0})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("views") / "two_updates"
    _write_run(d)
    return d


@pytest.fixture()
def run(run_dir):
    import arldiag

    return arldiag.open_run(run_dir)


def _parquet(run_dir: Path, table: str) -> pd.DataFrame:
    return ds.dataset(str(run_dir / table), format="parquet").to_table().to_pandas()


def test_heatmap_range_rule_is_one_rule(run, run_dir) -> None:
    """L = min(20, max(q99 |x|, 1.5 max |band edge|, 1e-4)) over the plotted rows, and the dashboard draws the very
    heatmap the report computes."""
    from arldiag.dashboards import views_series
    from arldiag.dashboards.source import RunSource
    from arldiag.report import data as D
    from arldiag.views.heatmap import ratio_heatmap

    seq = _parquet(run_dir, "sequences")
    x = np.abs(seq.seq_log_ratio.to_numpy(np.float64)[seq.advantage.to_numpy() != 0])
    band = (math.log(0.8), math.log(1.28))  # no seq_clip: sequences are held to the token band
    expect = max(np.quantile(x, 0.99, method="higher"), 1.5 * max(abs(b) for b in band))
    hm = ratio_heatmap(run, "sequences")
    assert hm.limit == pytest.approx(expect, rel=1e-6)
    assert hm.counts == {"neg": int((seq.advantage < 0).sum()), "pos": int((seq.advantage > 0).sum())}
    report_hm = D.ratio_heatmap(run, run.names[0], "sequences", "seq_log_ratio", D.log_band([0.2, 0.28]))
    assert report_hm.limit == hm.limit
    fig = views_series.render_ratios(RunSource(run_dir.parent), [run_dir.name], "sequences")
    np.testing.assert_allclose(fig.data[0].y, report_hm.y)                 # same bins
    np.testing.assert_allclose(np.asarray(fig.data[0].z), report_hm.z["pos"])  # same fractions
    with pytest.raises(ValueError, match="table must be"):
        ratio_heatmap(run, "steps")


def test_range_rule_clip_band_and_cap() -> None:
    from arldiag.views.heatmap import range_limit

    assert range_limit(0.01, (math.log(0.8), math.log(1.28))) == pytest.approx(1.5 * math.log(1.28))
    assert range_limit(50.0, (-0.1, 0.1)) == 20.0          # the store clamps log ratios to +-20
    assert range_limit(0.0, (-math.inf, math.inf)) == 1e-4


def test_kl_share_is_of_the_step_in_both_uis(run, run_dir) -> None:
    """With two updates per step, a row's share is its k3 sum over the sum of every row of its step (both updates):
    the sequence explorer and the report's offenders give the same number."""
    from arldiag.views.offenders import top_offenders, worst_sequences

    seq = _parquet(run_dir, "sequences")
    tot = seq.groupby("step").ppo_kl_k3_sum.sum()
    df = worst_sequences(run, 2)
    assert len(df) == 4  # 2 samples x 2 updates
    np.testing.assert_allclose(df["kl_share"], df["ppo_kl_k3_sum"] / tot[2], rtol=1e-6)
    assert df["kl_share"].sum() == pytest.approx(1.0)
    offs = {(o.step, o.update, o.sample_id): o.kl_share for o in top_offenders(run, None, (2, 2), n=4)}
    for r in df.itertuples():
        if (2, r.update, r.sample_id) in offs:
            assert offs[(2, r.update, r.sample_id)] == pytest.approx(r.kl_share)


def test_state_segments_and_band_spans() -> None:
    from arldiag.views.events import band_spans, state_segments

    t = pd.DataFrame({"step": [0, 1, 2, 3, 4, 5], "state": ["ok", "watch", "watch", "unknown", "critical", "critical"]})
    assert state_segments(t) == [(1, 2, "watch"), (4, 5, "critical")]  # an unknown state is no alert level
    assert band_spans(t) == [(0.5, 2.5, "watch"), (3.5, 5.5, "critical")]
    assert band_spans(t, max_segments=1) == [(0.5, 2.5, "watch")]


def test_events_of_one_run_and_missing_tables(run) -> None:
    from arldiag.views.events import ALERT_COLUMNS, alerts

    df = alerts(run, name=run.names[0])
    assert list(df.columns) == ALERT_COLUMNS and df.empty  # no monitor: no alert rows, the columns all the same


def test_every_panel_column_is_declared() -> None:
    """A column a panel reads is a stored step metric (schema.STEP_METRICS) or one a trainer logs (TRAINER_LOGGED):
    a renamed metric cannot leave a panel silently empty."""
    from arldiag.schema import STEP_METRICS
    from arldiag.views.catalog import ALL_SIGNALS, DASHBOARD_PANELS, TRAINER_LOGGED, label

    known = {m.name for m in STEP_METRICS} | set(TRAINER_LOGGED)
    own = {s.candidates[0] for s in ALL_SIGNALS}  # arldiag's own name comes first; the rest are other trainers'
    dash = {c for panels in DASHBOARD_PANELS.values() for _, cols in panels for c in cols}
    assert own - known == set() and dash - known == set()
    assert label("actor/entropy") == "entropy" and label("user/actor/entropy") == "entropy"
    assert label("not_a_metric") == "not_a_metric"


def test_discover_runs_orders_by_last_write(tmp_path) -> None:
    import os

    from arldiag.views.runs import discover_runs

    for i, name in enumerate(("a", "b/c", "d/e/f/g")):  # d/e/f/g is deeper than MAX_DEPTH
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "run.json").write_text("{}")
        os.utime(tmp_path / name / "run.json", (1000 + i, 1000 + i))
    assert discover_runs(tmp_path) == ["b/c", "a"]

"""arldiag/evaluation/ceiling.py: the one-metric zero-false-alarm ceiling, on hand-worked series."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from arldiag.evaluation import ceiling as C  # noqa: E402


def test_zscore_against_the_previous_steps_only():
    rng = np.random.default_rng(3)
    x = rng.normal(size=60)
    x[[7, 33]] = np.nan
    z = C.zscore(x, base=12, min_periods=5)
    for t in range(60):
        prev = x[max(0, t - 12):t]
        prev = prev[np.isfinite(prev)]
        if prev.size < 5 or not np.isfinite(x[t]):
            assert np.isnan(z[t])
        else:
            assert z[t] == pytest.approx((x[t] - prev.mean()) / prev.std(ddof=1))


def test_ceiling_threshold_and_lead_window_by_hand():
    st = np.arange(100)
    quiet = np.zeros(100)
    s1 = quiet.copy(); s1[50] = 3.0            # stable runs: maxima 3 and 5 after warm-up
    s2 = quiet.copy(); s2[70] = 5.0
    s2[5] = 99.0                                # before warm-up (20): does not count
    c_early = quiet.copy(); c_early[55] = 4.0   # collapse at 80: 25 steps ahead, inside [40, 70]
    c_late = quiet.copy(); c_late[75] = 9.0     # collapse at 80: only 5 ahead, outside the window
    c_far = quiet.copy(); c_far[30] = 9.0       # collapse at 80: 50 ahead, outside the window
    c_first = quiet.copy(); c_first[2] = 9.0    # collapse at 25: before warm-up + 10, left out
    stable = [(st, s1), (st, s2)]
    coll = [(st, c_early, 80), (st, c_late, 80), (st, c_far, 80), (st, c_first, 25)]
    zero = C.ceiling(stable, coll, allow=0)
    assert (zero.threshold, zero.ahead, zero.collapses) == (5.0, 0, 3)   # 4 < 5: no collapse warned ahead
    one = C.ceiling(stable, coll, allow=1)
    assert (one.threshold, one.ahead) == (3.0, 1)                         # 4 > 3: the early one only
    two = C.ceiling(stable, coll, allow=2)
    assert two.threshold == -np.inf and two.ahead == 3                    # everything crosses
    with pytest.raises(ValueError, match="allow"):
        C.ceiling(stable, coll, allow=-1)


def test_table_orients_metrics_and_skips_settings():
    """Two stable runs and one that collapses at step 60: its grad_norm jumps to 8 at step 40
    (20 steps ahead), the stable runs' peaks are 2 and 3; lr is a setting (constant in each run), not a metric."""
    import pandas as pd

    steps = np.arange(100)

    def frame(success, grad, lr):
        return pd.DataFrame({"step": steps, "success_rate": success, "grad_norm": grad, "lr": lr})

    g1, g2, gc = np.ones(100), np.ones(100), np.ones(100)
    g1[50], g2[30], gc[40] = 2.0, 3.0, 8.0
    frames = {"a": frame(np.full(100, 0.6), g1, 1e-4), "b": frame(np.full(100, 0.6), g2, 2e-4),
              "c": frame(np.where(steps < 60, 0.6, 0.0), gc, 1e-4)}
    rows = {(r["metric"], r["direction"], r["kind"]): r for r in C.table(frames, ["a", "b"], {"c": 60}, allows=(0,))}
    assert "lr" not in {m for m, _, _ in rows}
    up = rows[("grad_norm", "up", "level")]
    assert (up["threshold_allow0"], up["ahead_allow0"], up["collapses"]) == (3.0, 1, 1)
    down = rows[("grad_norm", "down", "level")]
    assert (down["threshold_allow0"], down["ahead_allow0"]) == (1.0, 0)  # nothing falls below 1


def test_load_splits_the_committed_sample_runs():
    """The dev sample runs: cispo_s0 collapses at step 40 (its documented label), grpo_s0 and cispo_nalis_s0 stay
    stable; a held-out run is not read with --split dev."""
    from arldiag.detectors import label_of
    from arldiag.store.reader import open_run

    root = Path(__file__).resolve().parents[2] / "sample_runs"
    run = open_run([str(root / n) for n in ("cispo_s0", "grpo_s0", "cispo_nalis_s0", "cispo_s3")])
    frames, stable, collapsing = C.load(run, "dev")
    assert collapsing == {"cispo_s0": 40} == {"cispo_s0": label_of(frames["cispo_s0"])}
    assert sorted(stable) == ["cispo_nalis_s0", "grpo_s0"] and "cispo_s3" not in frames

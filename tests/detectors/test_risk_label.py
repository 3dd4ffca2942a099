"""Hand-worked checks of the numeric helpers, the risk combination, the hysteresis and the collapse label."""
import math

import numpy as np
import pytest

from arldiag.detectors.risk import AlertState, RiskConfig, combine_risk, risk_series
from arldiag.detectors.window import (Window, early_baseline, grade_above, grade_below, prior_median, running_max,
                                      slope, tail_mean, tail_median)
from arldiag.label import collapse_step_of, series_collapse_index, trailing_mean


def test_helpers_against_numpy():
    x = np.array([1.0, np.nan, 3.0, 5.0, 4.0, 10.0])
    assert tail_mean(x, 3) == pytest.approx((5 + 4 + 10) / 3)
    assert tail_mean(x, 5) == pytest.approx((3 + 5 + 4 + 10) / 4)
    # the median of the last 3 is what two of them reach: one spike (10) does not lift it
    assert tail_median(x, 3) == 5.0 and tail_median(x, 5) == pytest.approx(np.median([3, 5, 4, 10]))
    assert math.isnan(tail_median(np.array([np.nan, np.nan]), 3))
    # prior median excludes the last value: median of [3, 5, 4] over the 4 entries before it (NaN dropped)
    assert prior_median(x, 1, 4, 3) == 4.0
    assert math.isnan(prior_median(x, 1, 4, 4))
    y = np.array([2.0, 2.5, np.nan, 3.9, 4.2, 5.1])
    ok = np.isfinite(y)
    expected = np.polyfit(np.arange(6)[ok], y[ok], 1)[0]
    assert slope(y, 6) == pytest.approx(expected)
    assert grade_above(0.5, (0.25, 0.5, 0.8)) == 2 and grade_above(math.nan, (0.1, 0.2, 0.3)) == 0
    assert grade_below(0.1, (0.5, 0.3, 0.1)) == 3 and grade_below(0.4, (0.5, 0.3, 0.1)) == 1


def test_early_baseline_freezes_and_running_max():
    st = {}
    vals = [5.0, math.nan, 1.0, 3.0, 100.0]
    got = [early_baseline(st, "k", v, 3) for v in vals]
    assert all(math.isnan(g) for g in got[:3]) and got[3] == 3.0 and got[4] == 3.0  # median(5, 1, 3), frozen
    st = {}
    assert [running_max(st, "p", v) for v in (1.0, math.nan, 0.5, 2.0)][1:] == [1.0, 1.0, 2.0]


def test_window_is_bounded():
    w = Window(["a"], 4)
    for t in range(10):
        w.push(t, {"a": t})
    assert w.series("a").tolist() == [6.0, 7.0, 8.0, 9.0] and math.isnan(w.last("missing"))


def test_combine_risk_noisy_or():
    cfg = RiskConfig()
    assert combine_risk([], cfg) == 0.0
    assert combine_risk([2], cfg) == pytest.approx(0.55)
    assert combine_risk([1, 1], cfg) == pytest.approx(1 - 0.78 ** 2)      # 0.39: two watches stay "watch"
    assert combine_risk([1, 1, 1], cfg) == pytest.approx(1 - 0.78 ** 3)   # 0.53: three corroborate -> warning
    assert combine_risk([1, 1, 3], cfg) == pytest.approx(1 - 0.78 ** 2 * 0.15)


def test_hysteresis_hand_worked():
    cfg = RiskConfig(enter=(0.25, 0.5, 0.8), exit_margin=0.1, exit_steps=3, enter_steps=1)
    st = AlertState(cfg)
    risks = [0.0, 0.6, 0.45, 0.45, 0.39, 0.39, 0.39, 0.0, 0.0, 0.0, 0.9, 0.1, 0.1]
    got = [["ok", "watch", "warning", "critical"][st.update(r)] for r in risks]
    # 0.45 >= exit 0.4 keeps "warning"; three steps < 0.4 drop to the level of the exit thresholds (watch,
    # since 0.39 >= 0.15); three steps at 0 drop to ok; 0.9 enters critical at once.
    assert got == ["ok", "warning", "warning", "warning", "warning", "warning", "watch", "watch", "watch", "ok",
                   "critical", "critical", "critical"]


def test_entry_needs_enter_steps_except_critical():
    st = AlertState(RiskConfig(enter=(0.25, 0.5, 0.8), exit_margin=0.1, exit_steps=3, enter_steps=2))
    risks = [0.6, 0.0, 0.6, 0.3, 0.6, 0.6, 0.3, 0.0, 0.9, 0.0]
    got = [["ok", "watch", "warning", "critical"][st.update(r)] for r in risks]
    # one step at warning level raises nothing; warning then watch-level risk enters watch (the highest level held
    # on both steps); two warning-level steps in a row enter warning; two calm steps (< exit 0.4) are fewer than
    # exit_steps, so warning holds; a critical reading enters at once
    assert got == ["ok", "ok", "ok", "watch", "watch", "warning", "warning", "warning", "critical", "critical"]


def test_critical_steps_asks_a_critical_reading_to_last():
    """critical_steps=2: a lone critical step (a one-step KL spike) raises nothing beyond what enter_steps grants;
    two in a row enter critical; a critical step after warning-level steps holds warning, not critical."""
    cfg = RiskConfig(enter=(0.25, 0.5, 0.8), exit_margin=0.1, exit_steps=3, enter_steps=2, critical_steps=2)
    st = AlertState(cfg)
    risks = [0.9, 0.0, 0.0, 0.9, 0.9, 0.0, 0.0, 0.0, 0.6, 0.9, 0.0]
    got = [["ok", "watch", "warning", "critical"][st.update(r)] for r in risks]
    assert got == ["ok", "ok", "ok", "ok", "critical", "critical", "critical", "ok", "ok", "warning", "warning"]
    # the default (1) is the old behaviour: critical at once
    assert [["ok", "watch", "warning", "critical"][AlertState(RiskConfig()).update(0.9)]] == ["critical"]
    with pytest.raises(ValueError, match="critical_steps"):
        RiskConfig(critical_steps=0)


def test_risk_series_and_config_validation():
    out = risk_series([{"a": 0}, {"a": 2}, {"a": 2, "b": 1}])
    assert [s for _, s in out] == ["ok", "ok", "warning"]  # warning-level risk on two steps in a row
    assert out[2][0] == pytest.approx(1 - 0.45 * 0.78)
    assert [s for _, s in risk_series([{"a": 2}, {"a": 0}], RiskConfig(enter_steps=1))] == ["warning", "warning"]
    with pytest.raises(ValueError, match="enter"):
        RiskConfig(enter=(0.5, 0.2, 0.9))
    with pytest.raises(ValueError, match="enter_steps"):
        RiskConfig(enter_steps=0)


def test_label_rule_hand_worked():
    # success rises to 0.8, then falls to 0.1 from index 10 on: trailing mean (window 2) at 10 = 0.45 >= 0.4,
    # at 11 = 0.1 < 0.5 * 0.8 -> the final below-stretch of the mean starts at 11; the raw value at 10 (0.1) is
    # already below 0.4, so the label moves back to 10 (the trailing mean lags by one step here)
    y = [0.2, 0.4, 0.6, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8] + [0.1] * 8
    assert trailing_mean(np.array(y), 2)[10] == pytest.approx(0.45)
    assert series_collapse_index(y, window=2, frac=0.5, min_peak=0.2, min_tail=5) == 10
    # a dip that recovers is not a collapse; a run that never learned (peak < min_peak) is not either
    assert series_collapse_index([0.8] * 10 + [0.0] * 6 + [0.8] * 6, window=2) is None
    assert series_collapse_index([0.1] * 10 + [0.0] * 10, window=2) is None
    # too short a tail
    assert series_collapse_index([0.8] * 10 + [0.0] * 3, window=1, min_tail=5) is None
    steps = list(range(100, 118))
    assert collapse_step_of(steps, {"success_rate": y}, window=2) == 110
    # the valid-format ratio can collapse first: mean below from index 6, raw value 0 from index 5
    fmt = [0.9] * 5 + [0.0] * 13
    assert collapse_step_of(steps, {"success_rate": y, "format_valid_frac": fmt}, window=2) == 105

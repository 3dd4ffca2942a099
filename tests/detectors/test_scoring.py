"""Scoring of alert-state series (evaluation.scoring), worked by hand on small series."""
import math

import pytest

from arldiag.evaluation.scoring import ScoreConfig, nab_sigma, score_run, summarize
from arldiag.label import run_decline, run_events, series_events

CFG = ScoreConfig(min_lead=10, warmup=10, window=40, after=10, alarm_gap=20)


def _states(n, warn):
    """n steps 0..n-1, 'warning' on the steps in ``warn`` (a set), 'ok' elsewhere."""
    return list(range(n)), ["warning" if s in warn else "ok" for s in range(n)]


def test_lead_counts_from_the_episode_active_at_the_collapse():
    # episodes [30, 36) and [85, end); collapse at 100: the first cleared 64 steps before it (> window 40 +
    # alarm_gap 20 -> false alarm); the lead counts from 85, the episode still active at 100 -> 15
    steps, states = _states(150, set(range(30, 36)) | set(range(85, 150)))
    r = score_run(steps, states, 100, cfg=CFG)
    assert r["episodes"] == [[30, 36], [85, None]]
    assert (r["lead_time"], r["false_alarms"], r["caught_at_10"], r["caught_at_20"]) == (15, 1, True, False)
    # healthy steps: 0..59 (the window starts at 100 - 40 = 60); in warning: 30..35
    assert (r["healthy_steps"], r["healthy_steps_in_warning"]) == (60, 6)
    assert r["warning_share"] == pytest.approx((6 + 65) / 150)
    # NAB: onset 85, y = (85 - 110) / 50 = -0.5 -> sigma = 2 / (1 + e^-2.5) - 1; minus 0.11 for the false alarm
    assert r["nab_raw"] == pytest.approx(2 / (1 + math.exp(-2.5)) - 1 - 0.11)


def test_warning_that_cleared_before_the_collapse_is_not_the_lead():
    # warning 40..95 cleared at 96, collapse at 100: no lead (missed), and the episode is build-up, not false
    steps, states = _states(120, set(range(40, 96)))
    r = score_run(steps, states, 100, cfg=CFG)
    assert (r["lead_time"], r["false_alarms"], r["caught_at_10"]) == (None, 0, False)
    # its onset lies in the NAB window [60, 110]? no: 40 < 60 and it is not active at 100 -> a miss, -A_FN
    assert r["nab_raw"] == pytest.approx(-1.0)
    # an alarm that starts after the collapse is late: no lead, not false, a small NAB credit (y = -0.1)
    steps, states = _states(120, set(range(105, 120)))
    r = score_run(steps, states, 100, cfg=CFG)
    assert (r["lead_time"], r["false_alarms"]) == (None, 0)
    assert r["nab_raw"] == pytest.approx(nab_sigma(-5 / 50))


def test_early_collapse_scored_by_an_alarm_at_or_before_it():
    # collapse at step 5 < warmup 10 + min lead 10: caught at every target by an alarm active at 5
    steps, states = _states(30, set(range(5, 30)))
    r = score_run(steps, states, 5, cfg=CFG)
    assert r["early_collapse"] and r["lead_time"] == 0 and r["caught_at_10"] and r["caught_at_20"]
    steps, states = _states(30, set(range(6, 30)))
    r = score_run(steps, states, 5, cfg=CFG)
    assert not r["caught_at_10"] and r["lead_time"] is None


def test_dip_warning_is_neither_false_nor_caught_and_stable_false_alarms():
    # stable run of 100 steps with a recovered dip at 50..60; warnings 45..52 (onset inside the dip window
    # [10, 60]) and 80..84 (a false alarm)
    steps, states = _states(100, set(range(45, 53)) | set(range(80, 85)))
    r = score_run(steps, states, None, dips=[(50, 60)], cfg=CFG)
    assert (r["kind"], r["dip_warnings"], r["false_alarms"]) == ("stable", 1, 1)
    # healthy steps: 0..9 and 61..99 = 49, in warning 80..84 = 5
    assert (r["healthy_steps"], r["healthy_steps_in_warning"]) == (49, 5)
    assert r["nab_raw"] == pytest.approx(-0.11)


def test_fault_runs_planted_episodes_are_not_false():
    steps, states = _states(20, {3, 4, 10, 11})
    tops = {3: "mismatch_drift", 10: "kl_ref_drift"}
    r = score_run(steps, states, None, tops=tops, faults=("mismatch_drift",), cfg=CFG)
    assert (r["kind"], r["planted_episodes"], r["false_alarms"]) == ("fault", 1, 1)
    # the planted episode (steps 3-4) is a wanted warning; only the false one (10-11) counts as healthy in warning
    assert (r["healthy_steps"], r["healthy_steps_in_warning"]) == (20, 2)


def test_summary_figures():
    a = score_run(*_states(150, set(range(30, 36)) | set(range(85, 150))), 100, cfg=CFG)  # lead 15
    b = score_run(*_states(150, set(range(50, 150))), 100, cfg=CFG)                       # lead 50
    c = score_run(*_states(100, set()), None, cfg=CFG)                                      # stable, quiet
    s = summarize([a, b, c], CFG)
    assert (s["recall_at_10"], s["recall_at_20"], s["median_lead"]) == (1.0, 0.5, 32.5)
    # healthy steps 60 + 60 + 100 = 220; 1 false alarm; in warning 6 (a); b's 50..59 lie before its window but
    # belong to the episode that leads into the collapse: a true alarm, not counted
    assert s["false_alarms_per_100_healthy_steps"] == pytest.approx(100 / 220)
    assert s["healthy_warning_share"] == pytest.approx(6 / 220)
    perfect, null = 2 * nab_sigma(-1.0), -2.0
    assert s["nab_score"] == pytest.approx(100 * (a["nab_raw"] + b["nab_raw"] - null) / (perfect - null))
    assert b["nab_raw"] == pytest.approx(nab_sigma(-1.0))  # active since before the window: its start counts


def test_label_dips_and_eval_success():
    y = [0.8] * 10 + [0.0] * 6 + [0.8] * 6
    assert series_events(y, window=2) == (None, [(10, 15)])
    # eval_success every 10 steps (NaN between) is preferred over the noisy batch success: it falls at step 60
    # and stays down; the batch success alone never collapses
    steps = list(range(100))
    ev = [math.nan] * 100
    for i, s in enumerate(range(0, 100, 10)):
        ev[s] = 0.9 if s < 60 else 0.0
    batch = [0.6] * 100
    c, dips = run_events(steps, {"success_rate": batch, "eval_success": ev})
    # trailing mean over 3 evaluations: at 60 (0.9, 0.9, 0) = 0.6 >= 0.45, at 70 = 0.3 < 0.45; the raw value at
    # 60 is already 0 -> the label moves back to 60
    assert (c, dips) == (60, [])
    assert run_events(steps, {"success_rate": batch})[0] is None
    # a dip of the format series that recovers, before a collapse of eval success
    fmt = [0.9] * 20 + [0.1] * 6 + [0.9] * 74
    c, dips = run_events(steps, {"eval_success": ev, "format_valid_frac": fmt})
    # the 10-step trailing mean stays below 0.45 until step 29 ((6 x 0.1 + 4 x 0.9) / 10 = 0.42; at 30: 0.5)
    assert c == 60 and dips == [(20, 29)]


def test_decline_label_needs_no_peak_above_min_peak_and_no_collapse():
    # eval success every 10 steps: 0.15 at the start, 0.0 from step 60 on. Trailing mean over 3 evaluations:
    # peak 0.15 (< min_peak 0.2: no collapse) but >= the floor 0.1; at 70 it is 0.05, under half of 0.15, and
    # stays there; the raw value at 60 is already 0 < 0.075 -> the decline moves back to 60
    steps = list(range(100))
    ev = [math.nan] * 100
    for s in range(0, 100, 10):
        ev[s] = 0.15 if s < 60 else 0.0
    cols = {"eval_success": ev}
    assert run_events(steps, cols) == (None, [])
    assert run_decline(steps, cols) == 60
    # a run that starts at 0.08 never reaches the floor: no decline
    assert run_decline(steps, {"eval_success": [v if math.isnan(v) or v == 0 else 0.08 for v in ev]}) is None
    # a run that collapsed (peak 0.9) has a collapse, not a decline
    high = [v if math.isnan(v) or v == 0 else 0.9 for v in ev]
    assert run_events(steps, {"eval_success": high})[0] == 60 and run_decline(steps, {"eval_success": high}) is None
    with pytest.raises(ValueError, match="floor"):
        run_decline(steps, cols, floor=0.2)


def test_label_falls_back_to_a_unit_mean_reward():
    """A run that logs only reward_mean (TRL and verl step logs): 0.8 for steps 0-49, then 0.1. Hand-worked: the
    10-step trailing mean first drops under 0.4 (half of the peak 0.8) at step 55 (5 of its 10 steps at 0.8 give
    0.45, 4 give 0.38), then the label moves back over the raw values already under 0.4 to step 50."""
    steps = list(range(80))
    reward = [0.8 if s < 50 else 0.1 for s in steps]
    assert run_events(steps, {"reward_mean": reward}) == (50, [])
    # a run store's unused success column (all NULL) does not count as a success series
    assert run_events(steps, {"reward_mean": reward, "success_frac": [math.nan] * 80}) == (50, [])
    # a success column wins: the reward is then not read
    assert run_events(steps, {"reward_mean": reward, "success_rate": [0.5] * 80})[0] is None
    # one value outside [0, 1]: the scale is unknown, no label
    assert run_events(steps, {"reward_mean": reward[:-1] + [1.5]})[0] is None
    assert run_events(steps, {"reward_mean": [2 * r for r in reward]})[0] is None


def test_decline_warning_is_neither_false_nor_caught():
    # a run of 100 steps that declined at 70: warnings 20..24 (before the window [30, end]: a false alarm) and
    # 35..49 (an onset inside the window: a decline warning)
    steps, states = _states(100, set(range(20, 25)) | set(range(35, 50)))
    r = score_run(steps, states, None, cfg=CFG, decline=70)
    assert (r["kind"], r["decline_step"], r["decline_warnings"], r["false_alarms"]) == ("decline", 70, 1, 1)
    # healthy steps: 0..29 = 30, in warning 20..24 = 5
    assert (r["healthy_steps"], r["healthy_steps_in_warning"]) == (30, 5)
    s = summarize([r, score_run(*_states(100, set(range(20, 25))), None, cfg=CFG)], CFG)
    # the decline run is not a stable run: 1 stable run (warned), 1 decline (warned in its window)
    assert (s["stable"], s["stable_runs_with_warning"], s["declines"], s["declines_warned"]) == (1, 1, 1, 1)
    assert s["false_alarm_episodes"] == 2 and s["healthy_steps"] == 130
    # a collapse wins over a decline given with it
    r = score_run(steps, states, 60, cfg=CFG, decline=70)
    assert (r["kind"], r["decline_step"]) == ("collapse", None)

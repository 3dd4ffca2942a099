"""Alert episodes that do not flap, corroboration on step-scalar runs, and thresholds that are monotone: the state
machine of detectors.risk (one latch per level), driven by hand-worked risk series, random ones (hypothesis), noisy
simulated step series through the Evaluator, and the 17 real development runs."""
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from arldiag.detectors import Evaluator
from arldiag.detectors.risk import AlertState, Corroboration, RiskConfig, calibrated_risk, risk_for
from arldiag.evaluation.scoring import episodes
from arldiag.settings import load

REAL = Path(__file__).resolve().parents[3] / "shared" / "real_runs"
STATES = ("ok", "watch", "warning", "critical")


def _run(cfg, risks, ceilings=None):
    a = AlertState(cfg)
    return [a.update(r, c) for r, c in zip(risks, ceilings or [3] * len(risks))]


def _first(levels, at_least):
    return next((i for i, lv in enumerate(levels) if lv >= at_least), None)


# ------------------------------------------------------------------------------------------ hand-worked latches
def test_enter_points_and_steps_whichever_asks_more():
    # a log every 5 steps: enter_steps=5 is one point, enter_points=2 asks two; exit_steps=10 is 2 points,
    # exit_points=3 asks three
    cfg = RiskConfig(enter=(0.25, 0.5, 0.8), exit_margin=0.1, enter_steps=5, exit_steps=10, critical_steps=5,
                     enter_points=2, exit_points=3).at_interval(5)
    risks = [0.6, 0.0, 0.6, 0.6, 0.3, 0.3, 0.3, 0.0, 0.0, 0.0, 0.9, 0.9]
    got = [STATES[x] for x in _run(cfg, risks)]
    # one point at 0.6 raises nothing; two enter warning; three points < 0.4 close the warning latch while the
    # watch latch (0.3 >= 0.15) holds; three points at 0 close it; two critical points enter critical (a critical
    # reading also waits for enter_points)
    assert got == ["ok", "ok", "ok", "warning", "warning", "warning", "watch", "watch", "watch", "ok", "ok",
                   "critical"]


def test_an_open_episode_survives_noise_and_counts_once():
    cfg = RiskConfig(enter=(0.25, 0.5, 0.8), exit_margin=0.1, enter_steps=1, exit_steps=4)
    risks = [0.6, 0.6, 0.0, 0.6, 0.0, 0.0, 0.6, 0.0, 0.0, 0.0, 0.0, 0.0]
    states = [STATES[x] for x in _run(cfg, risks)]
    # never four calm points in a row until the end: one episode, not three
    assert episodes(range(len(risks)), states) == [(0, 10)]


def test_ceiling_blocks_opening_not_an_open_episode():
    cfg = RiskConfig(enter=(0.25, 0.5, 0.8), exit_margin=0.1, enter_steps=1, exit_steps=3)
    # warning-level risk while the gate allows watch only: watch; once allowed, warning; gated again: stays warning
    assert [STATES[x] for x in _run(cfg, [0.6, 0.6, 0.6, 0.6], [1, 1, 3, 1])] == ["watch", "watch", "warning",
                                                                                 "warning"]


# ------------------------------------------------------------------------------------------ corroboration
def _gate_states(levels, holding, cfg):
    a, g = AlertState(cfg), Corroboration(cfg)
    from arldiag.detectors.risk import combine_risk, detector_levels

    return [STATES[a.update(combine_risk(detector_levels(lv, cfg), cfg), g.ceiling(lv, h, ("score_collapse",)))]
            for lv, h in zip(levels, holding)]


CFG = RiskConfig(enter=(0.25, 0.55, 0.8), enter_steps=1, exit_steps=5, corroborate=True, solo_critical_steps=3)


@pytest.mark.parametrize("name,levels,holding,fires", [
    # one family (length) at warning while the score holds: a watch; its twin with the score sliding: a warning
    ("length alone, score holds", [{"length_growth": 2}] * 6, [True] * 6, False),
    ("length alone, score slides", [{"length_growth": 2}] * 6, [True] * 3 + [False] * 3, True),
    # KL to the reference and grad-norm spikes are one family (the size of the update): still a watch
    ("KL + grad norm, score holds", [{"kl_ref_drift": 2, "grad_norm_spike": 2}] * 6, [True] * 6, False),
    # a second family corroborates
    ("length + entropy, score holds", [{"length_growth": 2, "entropy_blowup": 1}] * 6, [True] * 6, True),
    # one family at its own critical level for solo_critical_steps (3) points; its twin critical for 2 points only
    ("length critical 3 points", [{"length_growth": 3}] * 3 + [{}] * 3, [True] * 6, True),
    ("length critical 2 points", [{"length_growth": 3}] * 2 + [{}] * 4, [True] * 6, False),
    # the score itself, or a NaN, always corroborates
    ("score collapse", [{"score_collapse": 2}] * 3, [True] * 3, True),
    ("nonfinite", [{"nonfinite": 3}] * 2, [True] * 2, True),
])
def test_corroboration_fire_quiet_pairs(name, levels, holding, fires):
    states = _gate_states(levels, holding, CFG)
    assert any(s in ("warning", "critical") for s in states) is fires, (name, states)
    if not fires:
        assert "watch" in states or not any(levels[0].values())  # the precursor still shows, as a watch


def test_without_corroborate_one_family_warns():
    cfg = RiskConfig(enter=(0.25, 0.55, 0.8), enter_steps=1, corroborate=False)
    assert "warning" in _gate_states([{"length_growth": 2}] * 3, [True] * 3, cfg)


# ------------------------------------------------------------------------------------------ monotone thresholds
def _lower(cfg, field, i, by):
    if field == "enter":
        e = list(cfg.enter)
        lo = e[i - 1] if i else 0.0
        e[i] = max(lo, e[i] - by) if i else max(cfg.exit_margin + 0.01, e[i] - by)
        return RiskConfig(**{**cfg.__dict__, "enter": tuple(e)})
    return RiskConfig(**{**cfg.__dict__, field: max(1, getattr(cfg, field) - 1)})


@settings(max_examples=300, deadline=None)
@given(risks=st.lists(st.floats(0, 1), min_size=1, max_size=60), ceil=st.lists(st.sampled_from([1, 3]), min_size=60,
                                                                            max_size=60),
       level=st.integers(0, 2), by=st.floats(0.01, 0.3), enter_steps=st.integers(1, 4), points=st.integers(1, 3),
       exit_steps=st.integers(1, 5), field=st.sampled_from(["enter", "enter_steps", "critical_steps", "enter_points"]))
def test_lowering_a_threshold_never_delays_a_state(risks, ceil, level, by, enter_steps, points, exit_steps, field):
    cfg = RiskConfig(enter=(0.25, 0.55, 0.8), enter_steps=enter_steps, exit_steps=exit_steps, critical_steps=2,
                     enter_points=points)
    low = _lower(cfg, field, level, by)
    a, b = _run(cfg, risks, ceil[: len(risks)]), _run(low, risks, ceil[: len(risks)])
    assert all(y >= x for x, y in zip(a, b))  # pointwise: the lower threshold's state is never lower
    for at_least in (1, 2, 3):
        fa, fb = _first(a, at_least), _first(b, at_least)
        assert fa is None or (fb is not None and fb <= fa)


def test_user_lowering_watch_keeps_the_step_profile_warning():
    # the file shows the token profile's triple; lowering its watch threshold changes the watch threshold only
    token, steps = calibrated_risk(), calibrated_risk(profile="steps")
    s = load(risk={"enter": [0.2, *token.enter[1:]]})
    assert risk_for(s, "steps").enter == (0.2, *steps.enter[1:])
    assert risk_for(s, "tokens").enter == (0.2, *token.enter[1:])
    # raising the watch threshold above the profile's warning raises the warning with it (still ascending)
    assert risk_for(load(risk={"enter": [0.7, *token.enter[1:]]}), "steps").enter[:2] == (0.7, 0.7)


# ------------------------------------------------------------------------------------------ noisy step series
def _states(x, interval=1):
    ev = Evaluator(risk=None, interval=interval)
    return [ev.update((i + 1) * interval, {"task_score": float(v)}).state for i, v in enumerate(x)]


@pytest.mark.parametrize("seed", range(4))
def test_noisy_stable_scores_stay_quiet(seed):
    rng = np.random.default_rng(seed)
    flat = rng.binomial(8, 0.5, size=300) / 8                       # one prompt x 8 samples: steps of 0.125
    rising = rng.binomial(8, 0.3 + 0.3 * (1 - np.exp(-np.arange(300) / 80))) / 8
    trl = rng.binomial(8, 0.7, size=(60, 5)).mean(axis=1) / 8     # a mean over 5 steps, logged every 5
    for x, interval in ((flat, 1), (rising, 1), (trl, 5)):
        st_ = _states(x, interval)
        assert not episodes(range(len(st_)), st_), (interval, episodes(range(len(st_)), st_))


@pytest.mark.parametrize("seed", range(4))
def test_noisy_collapse_still_warns_once(seed):
    rng = np.random.default_rng(seed)
    p = np.where(np.arange(300) < 180, 0.6, 0.02)                   # falls at step 181 (index 180)
    st_ = _states(rng.binomial(8, p) / 8)
    eps = episodes(range(1, 301), st_)
    # one episode that stays open, within fall_points (20) points: a fall on a score this noisy (sd 0.17 a point)
    # is significant once its mean over the low points so far passes the t-test (2-18 points on 30 seeds)
    assert len(eps) == 1 and 181 <= eps[0][0] <= 181 + 20 and eps[0][1] is None
    # a log every 5 steps of the same run (means over 5 steps): warned within 3 logged points of the fall
    x5 = rng.binomial(8, p.reshape(60, 5)).mean(axis=1) / 8
    eps5 = episodes(range(5, 301, 5), _states(x5, 5))
    assert len(eps5) == 1 and 185 <= eps5[0][0] <= 185 + 3 * 5 and eps5[0][1] is None


# ------------------------------------------------------------------------------------------ the 17 dev runs
@pytest.mark.skipif(not (REAL / "labels.json").exists(), reason="shared/real_runs not beside the repo")
def test_dev_runs_lower_thresholds_never_warn_later(tmp_path):
    from arldiag.cli import main
    from arldiag.evaluation.calibrate_steps import replay, states
    from arldiag.store.reader import open_run

    labels = json.loads((REAL / "labels.json").read_text())
    base = calibrated_risk(profile="steps")
    lowered = [_lower(base, "enter", i, 0.05) for i in range(3)] + [
        _lower(base, f, 0, 0) for f in ("enter_steps", "enter_points", "solo_critical_steps")]
    for csv in sorted(REAL.glob("*.csv")):
        assert main(["import", "csv", str(csv), "--out", str(tmp_path / csv.stem)]) == 0
        rp = replay(open_run(str(tmp_path / csv.stem)), csv.stem, labels[csv.stem])
        ref = [STATES.index(s) for s in states(rp, base)]
        for low in lowered:
            got = [STATES.index(s) for s in states(rp, low)]
            for at_least in (1, 2):
                fa, fb = _first(ref, at_least), _first(got, at_least)
                assert fa is None or (fb is not None and fb <= fa), (csv.stem, low, at_least)

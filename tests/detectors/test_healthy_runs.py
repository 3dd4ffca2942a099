"""Detectors that know a healthy run: one converged/learning case (quiet) next to the failing case it resembles
(fires), per rule that reads the outcome context or the run's own early level."""
import math

import numpy as np
import pytest

from arldiag.detectors import Evaluator
from arldiag.detectors.context import OutcomeTracker
from arldiag.detectors.window import Window


def _run(name, rows):
    ev = Evaluator([name])
    res = [ev.update(r["step"], r) for r in rows]
    (f,) = ev.findings()
    return f, res


def _rows(n, **cols):
    """n steps; each column a function of the step t."""
    return [{"step": t, **{c: fn(t) for c, fn in cols.items()}} for t in range(n)]


def _noise(seed, s):
    rng = np.random.default_rng(seed)
    return lambda: float(rng.normal(0, s))


def test_entropy_low_at_high_steady_success_is_convergence():
    e = _noise(0, 0.01)
    entropy = lambda t: max(0.01, 0.63 * 0.95 ** t)  # noqa: E731  0.63 -> 0.01 over 80 steps
    converged = _rows(150, entropy=entropy, success_rate=lambda t: min(0.93, 0.3 + 0.02 * t) + e())
    f, _ = _run("entropy_collapse", converged)
    assert f.status == "quiet", f.evidence
    # the same entropy course while success falls from its peak is a collapse
    failing = _rows(150, entropy=entropy, success_rate=lambda t: min(0.93, 0.3 + 0.02 * t) if t < 40
                    else max(0.1, 0.93 - 0.02 * (t - 40)))
    f, _ = _run("entropy_collapse", failing)
    assert f.status == "fired" and f.severity in ("warning", "critical")
    assert "success_rate" in f.evidence["note"]


def test_kl_ref_growing_while_success_improves_is_learning():
    kl = lambda t: 0.01 + 0.004 * t  # noqa: E731  0.01 -> 0.6: twelve-fold within the run
    learning = _rows(150, kl_ref_k3=kl, success_rate=lambda t: min(0.95, 0.1 + 0.006 * t))
    f, _ = _run("kl_ref_drift", learning)
    assert f.status == "quiet" or f.severity == "watch", f.evidence
    stalled = _rows(150, kl_ref_k3=kl, success_rate=lambda t: 0.3)
    f, _ = _run("kl_ref_drift", stalled)
    assert f.status == "fired" and f.severity in ("warning", "critical")


def test_kl_ref_high_from_the_first_step_is_not_a_drift():
    e = _noise(1, 0.02)
    high = _rows(120, kl_ref_k3=lambda t: 0.8 + e(), success_rate=lambda t: 0.3)
    f, _ = _run("kl_ref_drift", high)
    assert f.status == "quiet", f.evidence
    # the same level reached by growth from 0.05 is a drift
    grown = _rows(120, kl_ref_k3=lambda t: 0.05 if t < 60 else 0.8, success_rate=lambda t: 0.3)
    f, _ = _run("kl_ref_drift", grown)
    assert f.status == "fired" and f.first_step >= 60 and f.severity in ("warning", "critical")


@pytest.mark.parametrize("outcome", ["success_frac", "reward_mean"])
def test_zero_std_groups_all_success_is_mastery(outcome):
    # reward_mean: a run that logs a reward in [0, 1] and no success flag (TRL, verl recipes), via the outcome context
    zs = lambda t: min(1.0, 0.2 + 0.01 * t)  # noqa: E731
    mastery = _rows(120, zero_std_group_frac=zs, **{outcome: lambda t: min(1.0, 0.5 + 0.006 * t)})
    f, _ = _run("zero_std_groups", mastery)
    assert f.status == "quiet", f.evidence
    starving = _rows(120, zero_std_group_frac=zs, **{outcome: lambda t: max(0.0, 0.5 - 0.006 * t)})
    f, _ = _run("zero_std_groups", starving)
    assert f.status == "fired" and f.severity in ("warning", "critical")
    assert ("mean reward" if outcome == "reward_mean" else "success") in f.evidence["note"]
    # the graded value is the bound min(x, 1 - s) on the all-fail share, computed here with numpy (the reward
    # fallback smooths over the outcome context's 10 steps, success over the rule's 8)
    t = f.evidence["peak_step"]
    k = 10 if outcome == "reward_mean" else 8
    x = np.mean([zs(s) for s in range(t - 7, t + 1)])
    s = np.mean([max(0.0, 0.5 - 0.006 * u) for u in range(t - k + 1, t + 1)])
    assert f.evidence["peak_value"] == pytest.approx(min(x, 1 - s))


def test_outcome_tracker_prefers_eval_success_and_stays_bounded():
    w = Window(["eval_success", "success_rate"], 32)
    tr = OutcomeTracker()
    for t in range(100):
        w.push(t, {"success_rate": 0.2, "eval_success": (0.5 + t / 200) if t % 10 == 0 else math.nan})
        out = tr.update(w)
    # the last three evaluations in the window: steps 70, 80, 90
    assert out.source == "eval_success" and out.level == pytest.approx(np.mean([0.85, 0.9, 0.95]))
    assert out.peak == pytest.approx(out.level) and out.rise > 0
    assert len(tr.state) <= 6


def test_outcome_falls_back_to_a_reward_in_the_unit_interval():
    # no success column (TRL, most verl recipes): a mean reward in [0, 1] is the outcome, smoothed like success
    w = Window(["success_rate", "success_frac", "reward_mean"], 32)
    tr = OutcomeTracker()
    for t in range(40):
        w.push(t, {"reward_mean": min(1.0, 0.2 + 0.02 * t) if t % 2 == 0 else math.nan})  # a rollout every 2 steps
        out = tr.update(w)
    assert out.source == "reward_mean"
    assert out.level == pytest.approx(np.mean([min(1.0, 0.2 + 0.02 * t) for t in range(30, 40, 2)]))
    # one reward outside [0, 1]: the scale is unknown, no outcome from then on (even when it returns to [0, 1])
    w.push(40, {"reward_mean": 3.5})
    assert not tr.update(w).known
    w.push(41, {"reward_mean": 0.5})
    assert not tr.update(w).known
    # success, when logged, still wins over the reward
    w2, tr2 = Window(["success_frac", "reward_mean"], 32), OutcomeTracker()
    w2.push(0, {"success_frac": 0.4, "reward_mean": 0.9})
    assert tr2.update(w2).source == "success_frac"


def test_zero_std_groups_reward_on_another_scale_is_no_outcome():
    # a reward outside [0, 1] tells nothing about failing groups: the share itself is graded, as without outcome
    zs = lambda t: min(1.0, 0.2 + 0.01 * t)  # noqa: E731
    scaled = _rows(120, zero_std_group_frac=zs, reward_mean=lambda t: 10 * min(1.0, 0.5 + 0.006 * t))
    f, _ = _run("zero_std_groups", scaled)
    assert f.status == "fired"


def test_clip_pressure_single_step_spikes_are_not_pressure():
    """A mastered run whose off-policy update pushes many tokens out of the band on one step every 15 steps (tiny
    TRL runs at lr 5e-2) has no clip pressure; the same value held on two steps of three has."""
    e = _noise(3, 0.002)
    spikes = _rows(120, tok_oob_frac=lambda t: (0.5 if t % 15 == 14 else 0.01 + abs(e())), success_rate=lambda t: 0.95)
    f, _ = _run("clip_pressure", spikes)
    assert f.status == "quiet", f.evidence
    # two of every three steps at the spike level from step 60 on: a lasting rise
    lasting = _rows(120, tok_oob_frac=lambda t: (0.5 if t >= 60 and t % 3 else 0.01 + abs(e())),
                    success_rate=lambda t: 0.95)
    f, res = _run("clip_pressure", lasting)
    assert f.status == "fired" and f.severity == "critical"
    first = next(r.step for r in res if "clip_pressure" in r.signals)
    assert first == 62  # the median of steps 60..62 is the first to reach 0.5 (step 60 is t % 3 == 0: 0.01)


def test_retok_drift_warns_on_one_id_in_a_thousand():
    """Token-in-token-out keeps the id mismatch at exactly 0: a lasting 0.3 % (the planted retokenization of the
    calculator sample run differs on 0.14-0.85 % of its tokens) is a warning, 0 is nothing."""
    f, _ = _run("retok_drift", _rows(40, retok_mismatch_frac=lambda t: 0.003))
    assert f.status == "fired" and f.severity == "warning"
    f, _ = _run("retok_drift", _rows(40, retok_mismatch_frac=lambda t: 0.0))
    assert f.status == "quiet"


def test_kl_ref_high_and_steady_at_convergence_is_where_learning_went():
    """KL to the reference rose with success (learning), then stays at 0.8 nats while success holds at 0.95: the
    level alone no longer warns; a seven-fold jump of it still does. The same course with success back at 0.3 is
    a drift."""
    e = _noise(4, 0.02)
    kl = lambda t: min(0.8, 0.05 + 0.02 * t) + e()  # noqa: E731  0.05 -> 0.8 by step 38, then steady
    success = lambda t: min(0.95, 0.1 + 0.025 * t)  # noqa: E731  0.95 from step 34 on
    _, res = _run("kl_ref_drift", _rows(150, kl_ref_k3=kl, success_rate=success))
    assert all(r.signals.get("kl_ref_drift") is None or r.signals["kl_ref_drift"].level < 2 for r in res[60:])
    jump = _rows(150, kl_ref_k3=lambda t: kl(t) * (7.0 if t >= 120 else 1.0), success_rate=success)
    _, res = _run("kl_ref_drift", jump)
    fired = [r.signals["kl_ref_drift"] for r in res[120:] if "kl_ref_drift" in r.signals]
    assert fired and max(s.level for s in fired) >= 2 and "only the growth counts" in fired[0].note
    failing = _rows(150, kl_ref_k3=kl, success_rate=lambda t: success(t) if t < 60 else 0.3)
    f, _ = _run("kl_ref_drift", failing)
    assert f.status == "fired" and f.severity in ("warning", "critical")

"""arldiag/evaluation/calibrate_token.py (benchmarks/calibrate.py) and the learned risk: fit on dev only, the
logistic fit against a numpy check, calibrated defaults loaded by the Evaluator, and risk_model="learned" in batch
and online alike."""
import json

import numpy as np
import pytest

from arldiag.evaluation import calibrate_token as calibrate  # noqa: E402

from arldiag.detectors import Evaluator  # noqa: E402
from arldiag.detectors.learned import FEATURE_NAMES, LearnedRisk  # noqa: E402
from arldiag.detectors.risk import RiskConfig, calibrated_risk  # noqa: E402


def test_fit_refuses_heldout_runs():
    runs = [{"name": "a", "split": "dev"}, {"name": "b", "split": "heldout"}]
    with pytest.raises(ValueError, match="dev runs only.*b"):
        calibrate.fit_rules(runs)
    with pytest.raises(ValueError, match="dev runs only"):
        calibrate.fit_learned(runs)


def test_logistic_fit_is_the_optimum():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    y = (X @ np.array([2.0, -1.0, 0.0]) + 0.3 + rng.normal(0, 0.5, 400) > 0).astype(float)
    w, b = calibrate.fit_logistic(X, y, l2=1.0)
    # the gradient of the class-balanced, L2-regularised loss vanishes at the fit (computed here with numpy)
    n, pos = len(y), y.sum()
    c = np.where(y > 0, n / (2 * pos), n / (2 * (n - pos)))
    p = 1 / (1 + np.exp(-(X @ w + b)))
    g = c * (p - y)
    assert np.allclose(X.T @ g + w, 0, atol=1e-3) and abs(g.sum()) < 1e-3
    assert w[0] > 1 and w[1] < -0.5 and abs(w[2]) < 0.3


def test_calibrated_defaults_apply_only_when_marked(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"apply": False, "risk": {"enter_steps": 1, "enter": [0.25, 0.75, 0.8]}}))
    assert calibrated_risk(f) == RiskConfig()
    f.write_text(json.dumps({"apply": True, "risk": {"enter_steps": 1, "enter": [0.25, 0.75, 0.8],
                                                     "exit_steps": 5}}))
    assert calibrated_risk(f) == RiskConfig(enter_steps=1, enter=(0.25, 0.75, 0.8), exit_steps=5)
    assert calibrated_risk(tmp_path / "missing.json") == RiskConfig()


def test_learned_peak_feature_remembers_an_excursion_for_30_steps():
    """peak = log10(max of the last 30 values / early median), from numpy on the same series; level and shift have
    forgotten the excursion 10 steps later, peak has not, and 31 steps later it has."""
    from arldiag.detectors.learned import FEATURE_METRICS, PEAK_METRICS, FeatureState
    from arldiag.detectors.window import Window

    rng = np.random.default_rng(3)
    kl = 0.02 + 0.002 * rng.random(80)
    kl[40] = 20.0  # one step's excursion
    w, fs = Window(FEATURE_METRICS, 32), FeatureState()
    peak_i = FEATURE_NAMES.index("kl_ref_k3:peak")
    level_i, shift_i = FEATURE_NAMES.index("kl_ref_k3:level"), FEATURE_NAMES.index("kl_ref_k3:shift")
    got = {}
    for t, v in enumerate(kl):
        w.push(t, {"kl_ref_k3": float(v)})
        got[t] = fs.features(w)
    early_median = np.median(kl[:10])
    for t in (9, 30, 45, 55, 70, 71):
        want = np.log10(kl[max(0, t - 29):t + 1].max() / early_median)
        assert got[t][peak_i] == pytest.approx(np.clip(want, -10, 10)), t
    assert got[55][peak_i] > 2.5 and abs(got[55][level_i]) < 10 and abs(got[55][shift_i]) < 10
    assert got[71][peak_i] < 0.5  # 31 steps after: forgotten
    assert len(FEATURE_NAMES) == 2 * len(FEATURE_METRICS) + len(PEAK_METRICS)


def test_learned_risk_batch_equals_online(synth_runs):
    import arldiag
    from arldiag.detectors import evaluate_run
    from arldiag.detectors.batch import steps_frame

    model = {"features": list(FEATURE_NAMES), "weights": [0.1] * len(FEATURE_NAMES), "bias": -1.0}
    lr = LearnedRisk(model)
    assert lr.w.shape == (len(FEATURE_NAMES),)
    with pytest.raises(ValueError, match="features"):
        LearnedRisk({"features": ["x"], "weights": [1.0], "bias": 0.0})
    # the shipped model (calibrated.json): the same replay in batch and through the Monitor
    run = arldiag.open_run(str(synth_runs["collapse"][0]))
    name = run.names[0]
    re = evaluate_run(run, name, risk_model="learned")
    mon = arldiag.Monitor(sinks=[], risk_model="learned")
    frame = steps_frame(run, name)
    cols = [c for c in mon.evaluator.window.columns if c in frame.columns]
    online = [mon.on_step(int(r["step"]), r) for r in frame[["step"] + cols].to_dict("records")]
    assert [(s, rk, st) for s, rk, st, _ in re.timeline] == [(r.step, r.risk, r.state) for r in online]
    assert 0 <= min(r.risk for r in online) and max(r.risk for r in online) <= 1
    with pytest.raises(ValueError, match="risk_model"):
        Evaluator(risk_model="magic")


# --- calibration v2: demotion, objective, default model, replay == Evaluator ---------------------------------------

def _synthetic_runs():
    """Two stable runs where a 'noisy' detector warns for 5 steps, one run collapsing at step 45 that a 'good'
    detector warns from step 30 (lead 15) and 'noisy' warns early (10-14, build-up before the window)."""
    def levels(n, spans):
        return [{d: 2 for d, (a, b) in spans if a <= s <= b} for s in range(n)]

    def run(name, spans, collapse):
        return {"name": name, "split": "dev", "steps": list(range(60)), "levels": levels(60, spans),
                "tops": [None] * 60, "collapse": collapse, "dips": [], "faults": {}, "X": np.zeros((60, 2))}

    return [run("a", [("noisy", (20, 24))], None), run("b", [("noisy", (40, 44))], None),
            run("c", [("noisy", (10, 14)), ("good", (30, 59))], 45)]


def test_fit_rules_demotes_the_false_alarm_source_deterministically():
    runs = _synthetic_runs()
    chosen, s = calibrate.fit_rules(runs)
    assert calibrate.fit_rules(runs) == (chosen, s)  # same input, same choice
    # 'noisy' alone caused both stable runs' false alarms; demoted, its warning-level counts as watch (0.22 < 0.25).
    # 'good' (one warning-level detector, risk 0.55) must keep warning: threshold 0.5, not 0.6/0.75
    assert chosen["demote"] == ["noisy"] and chosen["warning"] == 0.5
    assert chosen["enter_steps"] == 1 and chosen["exit_steps"] == 3  # ties go to the fewest steps
    assert chosen["critical_steps"] == 1
    assert (s["false_alarm_episodes"], s["stable_runs_with_warning"], s["healthy_warning_share"]) == (0, 0, 0.0)
    assert (s["recall_at_10"], s["alarmed_share"], s["median_lead"]) == (1.0, 1.0, 15)
    assert s["objective"] == pytest.approx(2.0)  # J = R10 + R0 - F - 5H = 1 + 1 - 0 - 0


def test_objective_hand_worked():
    s = {"recall_at_10": 0.5, "alarmed_share": 1.0, "stable_runs_with_warning": 1, "stable": 4,
         "healthy_warning_share": 0.02}
    assert calibrate.objective(s) == pytest.approx(0.5 + 1.0 - 0.25 - 0.1)
    # no collapse: false alarms alone
    s = {"recall_at_10": None, "alarmed_share": None, "stable_runs_with_warning": 0, "stable": 3,
         "healthy_warning_share": 0.0}
    assert calibrate.objective(s) == 0.0


def test_fit_learned_is_deterministic_and_thresholded_on_dev():
    rng = np.random.default_rng(1)
    runs = _synthetic_runs()
    for r in runs:
        r["X"] = rng.normal(size=(60, len(FEATURE_NAMES)))
    runs[2]["X"][15:46, 0] += 4.0  # the 30 steps up to the collapse stand out on one feature
    m1, s1 = calibrate.fit_learned(runs)
    m2, s2 = calibrate.fit_learned(runs)
    assert m1 == m2 and s1 == s2
    assert m1["threshold"] in calibrate.THRESHOLDS and (m1["positives"], m1["negatives"]) == (31, 125)
    assert m1["l2"] in calibrate.L2_GRID
    # leave-one-run-out: the fold without the only collapse has no positive to learn from, so out of sample the
    # model alarms at no collapse (what choose_default's eligibility reads), while in sample it does
    assert m1["cv_alarmed_share"] == 0.0 and s1["alarmed_share"] == 1.0
    assert m1["weights"][0] == max(m1["weights"])
    # the shipped weights are the full-dev refit with the chosen L2 (the fold models only choose it)
    X, y = calibrate.training_set([r for r in runs if not r["faults"]])
    w, _ = calibrate.fit_logistic(X, y, m1["l2"])
    assert np.allclose(m1["weights"], w)


def test_a_declining_run_is_neither_class_near_its_decline():
    """Run 'a' declined at step 50 (window 40): its steps from 10 on are neither negatives nor positives, and
    its warnings there (the 'noisy' episode 20-24) are not false alarms, so J no longer charges them."""
    runs = _synthetic_runs()
    X, y = calibrate.training_set(runs)
    runs[0]["decline"] = 50
    X2, y2 = calibrate.training_set(runs)
    assert (len(y) - len(y2), y.sum() - y2.sum()) == (50, 0)  # steps 10..59 of 'a' left out, positives kept
    rc = calibrate.risk_config(1, 0.5, 3)
    before = calibrate.score_states(_synthetic_runs(), calibrate.rule_states(runs, rc))
    after = calibrate.score_states(runs, calibrate.rule_states(runs, rc))
    assert (before["stable"], before["stable_runs_with_warning"]) == (2, 2)
    assert (after["stable"], after["stable_runs_with_warning"], after["declines"], after["declines_warned"]) == (
        1, 1, 1, 1)


def test_demoted_detector_counts_one_level_lower():
    from arldiag.detectors.risk import combine_risk, detector_levels, risk_series

    rc = RiskConfig(demote=("kl_ref_drift",))
    assert detector_levels({"kl_ref_drift": 3, "ppo_kl_spike": 2, "entropy_collapse": 1}, rc) == [2, 2, 1]
    assert detector_levels({"kl_ref_drift": 1}, rc) == [0]
    # alone at warning: 0.22, below watch (0.25); with a second warning-level signal 1 - 0.78 * 0.45 = 0.649:
    # warning once held for enter_steps = 2 steps
    assert combine_risk(detector_levels({"kl_ref_drift": 2}, rc), rc) == pytest.approx(0.22)
    assert [st for _, st in risk_series([{"kl_ref_drift": 2, "ppo_kl_spike": 2}] * 2, rc)] == ["ok", "warning"]
    assert [st for _, st in risk_series([{"kl_ref_drift": 2}] * 4, rc)] == ["ok"] * 4
    assert [st for _, st in risk_series([{"kl_ref_drift": 2}] * 4, RiskConfig())] == ["ok", "warning", "warning",
                                                                                      "warning"]


def test_calibrated_model_default(tmp_path):
    from arldiag.detectors.risk import calibrated_model

    f = tmp_path / "c.json"
    f.write_text(json.dumps({"apply": True, "default_model": "learned"}))
    assert calibrated_model(f) == "learned"
    f.write_text(json.dumps({"apply": False, "default_model": "learned"}))
    assert calibrated_model(f) == "rules"
    assert calibrated_model(tmp_path / "missing.json") == "rules"
    rules = {"objective": 0.5}
    assert calibrate.choose_default(rules, {"objective": 0.5}) == "rules"  # a tie keeps the simpler model
    assert calibrate.choose_default(rules, {"objective": 0.6}) == "learned"
    # a learned model that alarms at no collapse (dev or held out) is not eligible, however quiet elsewhere
    quiet, alarming = {"objective": 0.6, "alarmed_share": 0.0}, {"objective": 0.6, "alarmed_share": 0.5}
    assert calibrate.choose_default(rules, quiet, {"alarmed_share": 0.0}) == "rules"
    assert calibrate.choose_default(rules, quiet, {"alarmed_share": 0.5}) == "learned"
    assert calibrate.choose_default(rules, alarming, {"alarmed_share": 0.0}) == "learned"
    # nor one that misses the constructed collapse the rules warn ahead of; when both miss it (or both catch it),
    # the held-out J decides
    assert calibrate.choose_default(rules, alarming, None, {"rules": True, "learned": False}) == "rules"
    assert calibrate.choose_default(rules, alarming, None, {"rules": True, "learned": True}) == "learned"
    assert calibrate.choose_default(rules, alarming, None, {"rules": False, "learned": False}) == "learned"


def test_synthetic_check_replays_the_constructed_collapse(tmp_path):
    """The shipped rules warn >= 10 steps ahead of `arldiag synth --collapse-at 70`; a learned model whose score
    is a constant below its threshold never warns."""
    from arldiag.detectors.risk import calibrated_risk

    wv = np.zeros(len(FEATURE_NAMES))
    got = calibrate.synthetic_check(calibrated_risk(), wv, -5.0, tmp=tmp_path)
    assert got == {"rules": True, "learned": False}
    assert (tmp_path / "synthetic_collapse" / "run.json").exists()
    # a score pinned above the critical threshold alarms from the first steps: "warned ahead" as well
    assert calibrate.synthetic_check(calibrated_risk(), wv, 5.0, tmp=tmp_path / "hi")["learned"] is True


def test_replay_states_equal_the_evaluator(synth_runs):
    """What calibrate scores (replayed levels + rule_states) is what the Evaluator does with that RiskConfig."""
    import arldiag
    from arldiag.detectors import evaluate_run

    run = arldiag.open_run(str(synth_runs["collapse"][0]))
    name = run.names[0]
    r = calibrate.replay(run, name)
    for rc in (RiskConfig(), calibrate.risk_config(1, 0.75, 5, demote=("kl_ref_drift", "entropy_collapse"))):
        re = evaluate_run(run, name, risk=rc, risk_model="rules")  # the shipped default may be the learned one
        assert [st for _, _, st, _ in re.timeline] == calibrate.rule_states([r], rc)[0]


def test_demotion_may_trade_one_collapse_alarm_for_many_stable_runs():
    """J decides alone: 'noisy' warns on four of five stable runs and is the only alarm of one of two collapses.
    Demoting it loses that alarm (R0 1 -> 0.5: -0.5) and clears the four runs (F 0.8 -> 0: +0.8, H falls too):
    J rises, so it is demoted, which a "never lose a collapse's alarm" rule would have refused."""
    def levels(n, spans):
        return [{d: 2 for d, (a, b) in spans if a <= s <= b} for s in range(n)]

    def run(name, spans, collapse):
        return {"name": name, "split": "dev", "steps": list(range(60)), "levels": levels(60, spans),
                "tops": [None] * 60, "collapse": collapse, "dips": [], "faults": {}, "X": np.zeros((60, 2))}

    runs = [run(f"s{i}", [("noisy", (20 + i, 24 + i))], None) for i in range(4)] + [run("s4", [], None)]
    runs += [run("c1", [("noisy", (40, 59))], 45), run("c2", [("good", (30, 59))], 45)]
    chosen, s = calibrate.fit_rules(runs)
    assert chosen["demote"] == ["noisy"]
    assert s["stable_runs_with_warning"] == 0 and s["alarmed_share"] == 0.5 and s["recall_at_10"] == 0.5
    assert s["objective"] == pytest.approx(0.5 + 0.5)  # J = R10 + R0 - F - 5H


def test_cli_token_profile_is_the_benchmark_fit(synth_runs, tmp_path, capsys):
    """`arldiag calibrate --profile token` runs the fit of `python benchmarks/calibrate.py` (one code path,
    arldiag.evaluation.calibrate_token): the same JSON printed; without --write it stores nothing, the script
    always writes its --out; the step-scalar profile needs --labels."""
    from arldiag.cli import main as cli

    runs = [str(synth_runs[k][0]) for k in ("healthy", "collapse")]
    cal = tmp_path / "calibrated.json"
    assert cli(["calibrate", "--profile", "token", *runs, "--stand-in-heldout", "healthy",
                "--calibrated", str(cal)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert not cal.exists()
    out = tmp_path / "bench.json"
    assert calibrate.main([*runs, "--stand-in-heldout", "healthy", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out) == printed
    stored = json.loads(out.read_text())
    assert stored["dev_runs"] == ["collapse"] and stored["heldout_runs"] == ["healthy"]
    assert {k: v for k, v in stored.items() if k != "learned"} == printed
    assert cli(["calibrate", *runs]) == 2
    assert "--labels" in capsys.readouterr().err

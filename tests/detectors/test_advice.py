"""Alerts explain themselves, and advice fits the run's config (no advice to add what the run already has)."""
import pytest
from _detect_cases import FIRING, healthy

from arldiag.detectors import REGISTRY
from arldiag.detectors.advice import settings_of
from arldiag.detectors.registry import advise
from arldiag.findings import Finding
from arldiag.monitor import Monitor
from arldiag.report.recommend import recommendations

BARE = {"algo": "grpo", "max_grad_norm": 0.0, "loss_agg": "seq-mean-token-sum", "nalis_mask": False,
        "kl_coef": 0.0}
FULL = {"algo": "cispo", "max_grad_norm": 1.0, "loss_agg": "token-mean", "nalis_mask": True, "nalis_delta": 0.223,
        "kl_coef": 0.01}


def test_no_advice_to_add_what_the_run_has():
    bare, full = advise("ppo_kl_spike", BARE), advise("ppo_kl_spike", FULL)
    assert "add gradient clipping" in bare and "mask negative-advantage" in bare
    assert "add gradient clipping" not in full and "lower the gradient-norm clip (max_grad_norm 1)" in full
    assert "tighten the negative-advantage low-IS mask" in full and "nalis_mask on" in full
    assert "token-mean" in advise("length_growth", BARE)
    assert "token-mean loss aggregation" not in advise("length_growth", FULL)
    assert "Add a k3 KL loss" in advise("kl_ref_drift", BARE)
    assert "Raise the KL coefficient (kl_coef 0.01)" in advise("kl_ref_drift", FULL)
    assert "mask negative-advantage" not in advise("clip_pressure", FULL)
    # GSPO already clips at sequence level
    assert "sequence-level clipping" not in advise("neg_adv_low_is", {"algo": "gspo"}).split("(Already")[0]
    # unknown config: the detector's generic text
    assert advise("ppo_kl_spike", None, "generic") == "generic" == advise("ppo_kl_spike", {}, "generic")


def test_every_detector_has_remedies():
    assert all(d.remedies for d in REGISTRY.values())  # every detector declares its remedies


def test_settings_of_reads_config_and_algorithm():
    assert settings_of({"algorithm": "gspo", "config": {"lr": 1e-4}}) == {"lr": 1e-4, "algo": "gspo"}
    assert settings_of(None) == {}


def test_state_change_names_signals_values_and_fitting_advice():
    got = []
    mon = Monitor(["kl_ref_drift", "grad_norm_spike"], sinks=[got.append], config=FULL, risk_model="rules")
    rows = FIRING["kl_ref_drift"](healthy())
    for r in rows:
        r["grad_norm"] = 10.0 if 77 <= r["step"] < 90 else 1.0  # kl_ref_drift fires from step 77
        mon.on_step(r["step"], r)
    change = [a for a in got if a.title.startswith("alert state ok ->")]
    assert change, [a.title for a in got]
    a = change[0]
    sig = a.evidence["signals"]
    assert set(sig) == {"kl_ref_drift", "grad_norm_spike"}
    assert sig["grad_norm_spike"]["value"] == 10.0 and "grad_norm = 10 (" in a.message
    v = sig["kl_ref_drift"]["value"]
    # kl_ref_drift's value is the 3-step mean of the KL, computed here from the rows
    assert v == pytest.approx(sum(r["kl_ref_k3"] for r in rows[a.step - 2:a.step + 1]) / 3)
    assert f"kl_ref_k3 = {v:.4g}" in a.message
    assert "success_rate 0.4" in a.message  # the outcome context
    # kl_ref_drift leads (warning or higher): its advice fits the config (the run has a KL loss already)
    assert "Raise the KL coefficient (kl_coef 0.01)" in a.message and "Add a k3 KL loss" not in a.message
    assert a.evidence["recommendation"] in a.message


def test_learned_state_change_names_the_features_that_raised_it():
    """With the learned risk model the state follows the logit: the explanation lists the largest positive terms
    w_i f_i of the latest step (recomputed here from the model's weights and features)."""
    import numpy as np

    from arldiag.detectors.learned import FEATURE_NAMES

    mon = Monitor(["kl_ref_drift"], sinks=[], config=FULL, risk_model="learned")
    res = [mon.on_step(r["step"], r) for r in FIRING["kl_ref_drift"](healthy())]
    lr = mon.evaluator.learned
    terms = lr.w * lr.last
    top = [FEATURE_NAMES[i] for i in np.argsort(-terms)[:3] if terms[i] > 0]
    msg, ev = mon.explain(res[-1])
    assert [x["feature"] for x in ev["learned"]] == top and top
    assert ev["learned"][0]["logit_term"] == pytest.approx(float(terms.max()))
    assert f"learned score from {top[0]} z " in msg
    # hand-made weights: only the positive terms, largest first
    lr.w, lr.last = np.zeros(len(FEATURE_NAMES)), np.zeros(len(FEATURE_NAMES))
    lr.w[[0, 1, 2]], lr.last[[0, 1, 2]] = (1.0, 2.0, -1.0), (3.0, 2.0, 5.0)
    assert lr.contributions() == [(FEATURE_NAMES[0], 3.0, 3.0), (FEATURE_NAMES[1], 2.0, 4.0)][::-1]


def test_report_recommendations_fit_the_config():
    f = Finding(detector="grad_norm_spike", status="fired", severity="warning", first_step=3,
                recommendation=REGISTRY["grad_norm_spike"].recommendation)
    (bare,) = recommendations([f], BARE)
    (full,) = recommendations([f], FULL)
    assert "add gradient clipping" in bare.text and "add gradient clipping" not in full.text
    assert recommendations([f])[0].text == REGISTRY["grad_norm_spike"].recommendation


def test_advice_fits_the_settings_after_the_loops_actions():
    """with_actions: run.json's config plus each action's ``after`` values, in order; a rollback (no ``after``) and a
    malformed outcome change nothing; the mask the loop switched on is not recommended again."""
    from arldiag.detectors.advice import with_actions

    outcomes = ['{"to_step": 35}', '{"before": {"nalis_mask": false}, "after": {"nalis_mask": true, "nalis_delta": 0.003}}',
                "not json", {"after": {"clip_low": 0.5, "clip_high": 0.1}},
                '{"after": {"clip_low": 0.25, "clip_high": 0.05}}']
    start = dict(BARE, clip_low=1.0, clip_high=0.2)
    end = with_actions(start, outcomes)
    assert end == dict(BARE, nalis_mask=True, nalis_delta=0.003, clip_low=0.25, clip_high=0.05)
    assert start["nalis_mask"] is False  # the run's own config is not modified
    assert "mask negative-advantage" not in advise("clip_pressure", end)
    assert "mask negative-advantage" in advise("clip_pressure", start)


def test_online_and_replayed_advice_follow_the_loops_actions(tmp_path):
    """An action recorded at step 2 (mask on) changes the settings the advice reads from then on, online
    (Collector.record_action -> Monitor.note_action) and in a replay of the store (batch.evaluate_run)."""
    import arldiag
    from arldiag.detectors.batch import actions_of, evaluate_run

    mon = Monitor(sinks=[])
    col = arldiag.Collector(tmp_path / "run", config=dict(BARE), monitor=mon, strict=True)
    seen = []
    for step in range(5):
        col.record_step(step, {"success_rate": 0.5})
        seen.append(mon.evaluator.config.get("nalis_mask"))
        if step == 2:
            col.record_action(step, "mask", {"delta": 0.003}, detector="neg_adv_low_is",
                              outcome={"before": {"nalis_mask": False}, "after": {"nalis_mask": True,
                                                                                  "nalis_delta": 0.003}})
    col.close()
    assert seen == [False, False, False, True, True]
    assert "mask negative-advantage" not in advise("clip_pressure", mon.evaluator.config)

    run = arldiag.open_run(str(tmp_path / "run"))
    try:
        name = run.names[0]
        assert [s for s, _ in actions_of(run, name)] == [2]
        replayed = evaluate_run(run, name)
    finally:
        run.close()
    assert replayed.evaluator.config["nalis_mask"] is True and replayed.evaluator.config["nalis_delta"] == 0.003


def test_off_policy_findings_recommend_an_always_on_correction_first():
    """The lag set's comparison (sample_runs/README.md): corrections on from step 0 ended higher than the closed loop,
    so off-policy findings recommend one first, naming each trainer's own setting and its value, and say what the
    loop adds; a run that already has one is not told to add it."""
    plain = {"algo": "cispo", "nalis_mask": False, "max_grad_norm": 1.0}
    for detector in ("neg_adv_low_is", "ppo_kl_spike", "mismatch_drift"):
        text = advise(detector, plain)
        first = text.split("; ")[0] if detector != "ppo_kl_spike" else text.split("; ")[1]
        assert first.lower().startswith("switch on an off-policy correction from step 0"), (detector, text)
        for setting in ("algorithm.rollout_correction.rollout_is=token", "rollout_is_threshold=2.0",
                        "vllm_importance_sampling_correction=True", "vllm_importance_sampling_cap=2.0",
                        "--tis-cap 2", "off_policy_sequence_mask_delta", "--opsm-delta 0.03",
                        "--auto-stabilize default"):
            assert setting in text, (detector, setting)
    for has, phrase in (({"tis_cap": 2.0}, "truncated IS (cap 2)"),
                        ({"rollout_is": "token", "rollout_is_threshold": 3.0}, "truncated IS (cap 3)"),
                        ({"vllm_importance_sampling_correction": True, "vllm_importance_sampling_cap": 2.0},
                         "truncated IS (cap 2)"),
                        ({"opsm_delta": 0.03}, "off-policy sequence mask (delta 0.03)")):
        text = advise("neg_adv_low_is", {**plain, **has})
        assert "from step 0" not in text and f"Already in this run's config: {phrase}" in text, (has, text)
    # TRL with the correction switched off keeps the recommendation (its cap alone does nothing)
    off = {**plain, "vllm_importance_sampling_correction": False, "vllm_importance_sampling_cap": 2.0}
    assert "from step 0" in advise("neg_adv_low_is", off)
    # the report's recommendations carry it for a fired finding of the run
    f = Finding(detector="neg_adv_low_is", status="fired", severity="warning", first_step=30, steps=[30], title="t")
    recs = recommendations([f], plain)
    assert recs and "--tis-cap 2" in recs[0].text


def test_entropy_and_length_findings_name_each_trainers_setting_unless_the_run_has_it():
    """Issue 29's levers as advice: the entropy bonus off, clip-high back to clip-low, truncated responses masked,
    each with verl's / TRL's / the reference trainer's setting and value, left out when the run already has it (also
    after the loop's action: TRL's key in the outcome)."""
    from arldiag.detectors.advice import with_actions

    dapo = {"algo": "dapo", "clip_high": 0.28, "ent_coef": 0.01, "mask_truncated": False}
    a = advise("entropy_blowup", dapo)
    assert "actor_rollout_ref.actor.entropy_coeff=0" in a and "TRL entropy_coef=0.0" in a and "--ent-coef 0" in a
    assert "clip_ratio_high=0.2" in a and "epsilon_high=0.2" in a
    plain = advise("entropy_blowup", {"algo": "grpo", "clip_high": 0.2, "entropy_coeff": 0.0})
    assert "entropy bonus off" not in plain and "clip-high back" not in plain and "Lower the learning rate" in plain
    assert "clip-high back" not in advise("entropy_blowup", {"algo": "cispo", "clip_high": 0.28})
    assert "mask_truncated_completions=True" in advise("length_growth", BARE)
    after = with_actions(BARE, [{"after": {"mask_truncated_completions": True}}])
    assert "mask_truncated_completions" not in advise("length_growth", after)

"""Every registered detector fires on a constructed case and stays quiet on a healthy run."""
import math

import pytest
from _detect_cases import FIRE_AT, FIRING, healthy, nan_cols

from arldiag.detectors import REGISTRY, Evaluator
from arldiag.detectors.risk import RiskConfig


def run_rows(detectors, rows):
    ev = Evaluator(detectors, risk=RiskConfig())  # the class defaults, worked by hand below
    results = [ev.update(r["step"], r) for r in rows]
    return ev, results


def test_every_registered_detector_has_a_fire_and_quiet_case():
    missing = sorted(set(REGISTRY) - set(FIRING))
    assert not missing, f"registered detectors without a constructed firing/healthy pair: {missing}"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_quiet_on_healthy(name):
    for seed in range(3):
        ev, _ = run_rows([name], healthy(seed=seed))
        (f,) = ev.findings()
        assert f.status == "quiet", (name, seed, f.evidence)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_fires_on_constructed_case(name):
    rows = FIRING[name](healthy())
    ev, _ = run_rows([name], rows)
    (f,) = ev.findings()
    assert f.status == "fired", name
    assert f.severity in ("warning", "critical"), (name, f.severity, f.evidence)
    assert FIRE_AT <= f.first_step <= FIRE_AT + 25, (name, f.first_step)
    assert f.steps[0] == f.first_step and all(s >= FIRE_AT for s in f.steps)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_skipped_when_inputs_missing(name):
    d = REGISTRY[name]
    rows = nan_cols(FIRING[name](healthy()), *d.inputs)
    ev, _ = run_rows([name], rows)
    (f,) = ev.findings()
    assert f.status == "skipped" and all(c in f.skipped_reason for c in d.inputs)


def test_healthy_run_stays_ok_with_all_detectors():
    ev, results = run_rows(None, healthy(seed=1))
    assert {r.state for r in results} == {"ok"}
    assert all(f.status == "quiet" for f in ev.findings())


def test_grad_norm_spike_hand_worked():
    # 20 steps at 2.0 then one at 20.0: ratio to the prior median is exactly 10 -> warning (6 <= 10 < 15)
    rows = [{"step": t, "grad_norm": 2.0} for t in range(20)] + [{"step": 20, "grad_norm": 20.0}]
    ev, res = run_rows(["grad_norm_spike"], rows)
    (f,) = ev.findings()
    assert (f.status, f.severity, f.first_step, f.steps) == ("fired", "warning", 20, [20])
    assert res[-1].signals["grad_norm_spike"].value == 20.0
    # the noisy-OR risk of one warning-level detector is its score 0.55; the state enters warning only when that
    # risk holds on enter_steps = 2 steps in a row (the detector's own escalation still raises an alert at once)
    assert math.isclose(res[-1].risk, 0.55) and res[-1].state == "ok" and res[-1].escalated == ["grad_norm_spike"]
    ev, res = run_rows(["grad_norm_spike"], rows + [{"step": 21, "grad_norm": 24.0}])  # 12x: warning again
    assert res[-1].signals["grad_norm_spike"].level == 2 and res[-1].state == "warning"


def test_nonfinite_nan_grad_norm_after_finite():
    rows = [{"step": 0, "grad_norm": math.nan}, {"step": 1, "grad_norm": 1.0}, {"step": 2, "grad_norm": math.nan}]
    ev, res = run_rows(["nonfinite"], rows)
    (f,) = ev.findings()
    # step 0: NaN before any finite value means "not logged"; step 2: NaN after finite -> critical
    assert (f.status, f.severity, f.steps) == ("fired", "critical", [2])


def test_with_params_and_unknown_param():
    d = REGISTRY["grad_norm_spike"].with_params(ratio_levels=(20.0, 30.0, 40.0))
    rows = [{"step": t, "grad_norm": 2.0} for t in range(20)] + [{"step": 20, "grad_norm": 20.0}]
    ev, _ = run_rows([d], rows)
    assert ev.findings()[0].status == "quiet"
    with pytest.raises(ValueError, match="ratio_levelz"):
        REGISTRY["grad_norm_spike"].with_params(ratio_levelz=1)


def test_unknown_detector_name():
    with pytest.raises(ValueError, match="names"):
        Evaluator(["nope"])


def test_step_must_increase():
    ev = Evaluator(["grad_norm_spike"])
    ev.update(3, {})
    with pytest.raises(ValueError, match="step"):
        ev.update(3, {})


def test_neg_adv_low_is_uses_delta_set_when_band_is_empty():
    # CISPO: eps_low = 1, so the band set is always empty (0.0); the mask's delta set accumulates instead
    rows = [{"step": t, "neg_adv_low_is_frac": 0.0, "neg_adv_low_is_delta_frac": 0.01 if t < 30 else 0.01 * (t - 28)}
            for t in range(60)]
    ev, _ = run_rows(["neg_adv_low_is"], rows)
    (f,) = ev.findings()
    assert f.fired and f.evidence["metric"] == "neg_adv_low_is_delta_frac" and f.first_step >= 30

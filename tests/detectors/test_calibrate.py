"""benchmarks/calibrate.py and the learned risk: fit on dev only, the logistic fit against a numpy check,
calibrated defaults loaded by the Evaluator, and risk_model="learned" in batch and online alike."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import calibrate  # noqa: E402

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

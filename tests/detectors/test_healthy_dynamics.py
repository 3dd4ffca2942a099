"""Healthy dynamics that look like precursors: responses that grow as reasoning grows, responses that get concise
while the score climbs, entropy that rises with exploration while the score climbs. Each case takes a real stable
development run (../shared/real_runs), changes one logged series the way such runs move, and checks that the alert
state stays below warning; the same change with the score falling instead still warns."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest

import arldiag
from arldiag.cli import main
from arldiag.detectors.batch import evaluate_run
from arldiag.detectors.risk import calibrated_risk

REAL = Path(__file__).resolve().parents[3] / "shared" / "real_runs"
pytestmark = pytest.mark.skipif(not (REAL / "labels.json").exists(), reason="shared/real_runs not beside the repo")


def _states(tmp_path, frame, name):
    path = tmp_path / f"{name}.csv"
    frame.to_csv(path, index=False)
    assert main(["import", "csv", str(path), "--out", str(tmp_path / name)]) == 0
    re = evaluate_run(arldiag.open_run(tmp_path / name), name)
    return {s: st for s, _, st, _ in re.timeline}


def _warned(states):
    return [s for s, st in states.items() if st in ("warning", "critical")]


def _ramp(n, start, end, frm):
    """1 until row ``frm``, then a linear ramp from ``start`` to ``end`` over the remaining rows."""
    r = np.ones(n)
    r[frm:] = np.linspace(start, end, n - frm)
    return r


def _falling(score, frm):
    """The score as logged until row ``frm``, then falling linearly to 10 % of its level there."""
    s = score.to_numpy(float).copy()
    s[frm:] = s[frm] * np.linspace(1.0, 0.1, s.size - frm)
    return s


def test_length_growth_while_the_score_holds_is_learning(tmp_path):
    import pandas as pd

    # TRL GRPO, Qwen2.5-7B, stable (reward 0.89 -> 0.94), logged every 5 steps: mean length x1 -> x3 from step 50
    d = pd.read_csv(REAL / "trl_grpo_lora_qwen25-7b_gsm8k_vanilla_s42.csv")
    grow = d.copy()
    grow["completions/mean_length"] = d["completions/mean_length"] * _ramp(len(d), 1.0, 3.0, 10)
    assert _warned(_states(tmp_path, grow, "grow")) == []
    # the same growth while the score falls: the alert state warns, before the score has fallen to a third
    fall = grow.copy()
    fall["reward"] = _falling(d["reward"], 10)
    warned = _warned(_states(tmp_path, fall, "grow_fall"))
    assert warned and warned[0] < int(d["step"].iloc[-1])


def test_concise_answers_while_the_score_climbs_are_learning(tmp_path):
    import pandas as pd

    # verl PPO, Qwen2.5-0.5B, stable: score 0.01 -> 0.6 over 60 steps; its length 234 -> 155. Shrink it to 40 %
    d = pd.read_csv(REAL / "verl_ppo_qwen25-0.5b_gsm8k_notebook.csv")
    short = d.copy()
    short["response_length/mean"] = d["response_length/mean"] * _ramp(len(d), 1.0, 0.4 / 0.66, 10)
    assert _warned(_states(tmp_path, short, "short")) == []


def test_entropy_rise_while_the_score_climbs_is_exploration(tmp_path):
    import pandas as pd

    # TRL GRPO, Qwen3.5-9B, stable: reward 0.09 (step 5) -> 0.94 (step 35), then 0.6-0.96. Its logged entropy
    # drifts between 0.1 and 0.27; here it is 0.2 x a multiplier: x1 -> x2.5 during that climb (steps 10-35,
    # clip-higher's exploration), staying there for the rest of the run
    d = pd.read_csv(REAL / "trl_grpo_lora_qwen35-9b_gsm8k_rho1.00_s43.csv")
    up = d.copy()
    mult = np.full(len(d), 2.5)
    mult[:7] = np.linspace(1.0, 2.5, 7)
    up["entropy"] = 0.2 * mult
    assert _warned(_states(tmp_path, up, "explore")) == []
    # the same rise once the score has stopped climbing (from step 100) is a blow-up, but one family while the score
    # holds: a watch (the corroboration gate); with the score falling from there as well, it warns
    late = d.copy()
    late["entropy"] = 0.2 * _ramp(len(d), 1.0, 2.5, 19)
    states = _states(tmp_path, late, "late")
    assert _warned(states) == [] and any(st == "watch" and s > 100 for s, st in states.items())
    late["reward"] = _falling(d["reward"], 19)
    warned = _warned(_states(tmp_path, late, "late_fall"))
    assert warned and warned[0] > 100


def test_length_cap_reached_early_while_the_score_climbs_stays_a_watch(tmp_path):
    import pandas as pd

    # the held-out case of the issue: responses reach the length cap early (31 % truncated at step 50, a warning-
    # level truncation share) while the score climbs. One precursor family while the score holds: at most a watch
    d = pd.read_csv(REAL / "trl_grpo_lora_qwen25-7b_gsm8k_vanilla_s42.csv")
    cap = d.copy()
    cap["completions/clipped_ratio"] = np.clip((d["step"] - 10) / 130, 0.0, 0.35)   # 0.31 at step 50, then 0.35
    states = _states(tmp_path, cap, "cap")
    assert _warned(states) == [] and "watch" in states.values()
    # the corroboration gate is what keeps it a watch: without it the same run warns (length_growth at warning)
    off = dataclasses.replace(calibrated_risk(profile="steps"), corroborate=False)
    assert any(st in ("warning", "critical") for _, _, st, _ in
               evaluate_run(arldiag.open_run(tmp_path / "cap"), "cap", risk=off).timeline)
    # its twin with the score falling from row 10: the score no longer holds, the same truncation warns
    fall = cap.copy()
    fall["reward"] = _falling(d["reward"], 10)
    assert _warned(_states(tmp_path, fall, "cap_fall"))
    # and truncation at the critical share (0.6) for 10 steps warns alone, the score holding
    crit = d.copy()
    crit["completions/clipped_ratio"] = np.clip((d["step"] - 10) / 100, 0.0, 0.7)
    assert _warned(_states(tmp_path, crit, "cap_crit"))


def test_kl_drift_with_grad_spikes_while_the_score_holds_stays_quiet(tmp_path):
    import pandas as pd

    # the other held-out case: the KL to the reference grows 34x and grad-norm spikes reach 27x their median while
    # the score stays at its peak: no warning (one family, the size of the update; kl_ref_drift discounts a drift
    # while the outcome holds, and the step profile demotes both, so this one stays quiet even without the gate)
    d = pd.read_csv(REAL / "verl_ppo_qwen25-0.5b_gsm8k_notebook.csv")
    n = len(d)
    drift = d.copy()
    drift["actor/kl_loss"] = np.geomspace(0.002, 0.068, n)                      # x34 over the run
    g = d["actor/grad_norm"].to_numpy(float).copy()
    med = float(np.nanmedian(g))
    for i in (20, 35, 50):
        g[i] = 27 * med
    drift["actor/grad_norm"] = g
    assert _warned(_states(tmp_path, drift, "drift")) == []
    # the twin with the score falling from row 20: warned
    fall = drift.copy()
    fall["critic/score/mean"] = _falling(d["critic/score/mean"], 20)
    assert _warned(_states(tmp_path, fall, "drift_fall"))

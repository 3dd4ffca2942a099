"""Healthy dynamics that look like precursors: responses that grow as reasoning grows, responses that get concise
while the score climbs, entropy that rises with exploration while the score climbs. Each case takes a real stable
development run (../shared/real_runs), changes one logged series the way such runs move, and checks that the alert
state stays below warning; the same change with the score falling instead still warns."""
from pathlib import Path

import numpy as np
import pytest

import arldiag
from arldiag.cli import main
from arldiag.detectors.batch import evaluate_run

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
    # the same rise once the score has stopped climbing (from step 100) is a blow-up: it warns
    late = d.copy()
    late["entropy"] = 0.2 * _ramp(len(d), 1.0, 2.5, 19)
    warned = _warned(_states(tmp_path, late, "late"))
    assert warned and warned[0] > 100

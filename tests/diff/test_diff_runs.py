"""`arldiag diff` on run stores: a planted divergence, stationary seeds, different log intervals, the reference
trainer's plain run and its closed-loop twin, and two real development runs of one sweep."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import arldiag
from arldiag.cli import main
from arldiag.diff.compare import diff_runs
from diff_runs import write_steps_run

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_runs"
# beside the repository, or where ARLDIAG_REAL_RUNS says (a git worktree elsewhere), as tests/detectors does
REAL = Path(os.environ.get("ARLDIAG_REAL_RUNS") or ROOT.parent / "shared" / "real_runs")
needs_real = pytest.mark.skipif(not (REAL / "labels.json").exists(), reason="shared/real_runs not beside the repo")


def _planted(metric: str, at: int, shift: float):
    return lambda m, step: shift if m == metric and step >= at else 0.0


def test_a_planted_divergence_is_named_first_and_leads_the_outcome(tmp_path):
    # B's entropy rises by 10 noise sd from step 60, its success falls by 0.4 (5 sd) from step 90
    def planted(m, step):
        return (0.5 if m == "entropy" and step >= 60 else 0.0) + (-0.4 if m == "success_rate" and step >= 90 else 0.0)

    a = write_steps_run(tmp_path / "a", range(150), seed=1)
    b = write_steps_run(tmp_path / "b", range(150), seed=2, planted=planted)
    d = diff_runs(arldiag.open_run(a), arldiag.open_run(b))
    assert d.first.metric == "entropy" and 60 <= d.first.step < 60 + d.rule.window
    assert d.outcome == "success_rate" and 90 <= d.outcome_step < 90 + d.rule.window
    assert d.lead == d.outcome_step - d.first.step
    assert {p.metric for p in d.partings} == {"entropy", "success_rate"}   # grad_norm, length: same process
    assert d.settings == [("config.seed", 1, 2)]
    assert d.tokens is None   # step-only runs: no token window


@pytest.mark.parametrize("seeds", [(3, 4), (5, 6), (7, 8)])
def test_two_seeds_of_one_stationary_run_do_not_part(tmp_path, capsys, seeds):
    a = write_steps_run(tmp_path / "a", range(200), seed=seeds[0], config={"synthetic": True})
    b = write_steps_run(tmp_path / "b", range(200), seed=seeds[1], config={"synthetic": True})
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "no parting found" in out and "settings that differ (run.json): none" in out


def test_runs_logged_at_different_intervals(tmp_path):
    # A logs every step over 0..299, B every 5 steps over 0..200 (B is shorter: it bounds the comparison); the
    # grad norm of B doubles from step 120 (B's point 24)
    a = write_steps_run(tmp_path / "a", range(300), seed=11)
    b = write_steps_run(tmp_path / "b", range(0, 201, 5), seed=12, planted=_planted("grad_norm", 120, 2.0))
    d = diff_runs(arldiag.open_run(a), arldiag.open_run(b))
    assert d.steps == (0, 200)
    first = d.first
    assert first.metric == "grad_norm" and 120 <= first.step < 120 + 5 * d.rule.window
    assert first.points == 41   # B's grid: 0, 5, ..., 200
    assert [p.metric for p in d.partings] == ["grad_norm"]


def test_the_closed_loop_twin_parts_at_the_loops_first_action():
    """The tour pair, cispo_lag1_lr4_s78 and its closed-loop twin, is the same pinned run until the loop acts (its
    actions table: rollback, nalis_mask and lr_scale at step 13); they part at the first step the actions act on."""
    plain, auto = arldiag.open_run(SAMPLES / "cispo_lag1_lr4_s78"), arldiag.open_run(SAMPLES / "cispo_lag1_lr4_auto_s78")
    acted = auto.df("select min(step) as s from actions")["s"].iloc[0]
    d = diff_runs(plain, auto)
    assert d.settings == [("config.auto_stabilize", None, "default")]
    assert d.actions["cispo_lag1_lr4_auto_s78"][0][0] == acted and d.actions["cispo_lag1_lr4_s78"] == []
    assert d.first.step == acted + 1                    # an action acts from the next step on
    assert min(p.step for p in d.partings) == acted + 1
    assert "lr" in {p.metric for p in d.partings if p.step == acted + 1}   # the loop's lr_scale
    assert d.outcome == "eval_success" and d.outcome_step > d.first.step and d.lead == d.outcome_step - acted - 1
    # the token window: both runs have token rows; the plain run's negative-advantage low-IS tokens carry the KL
    lo, hi = d.token_window
    assert lo == d.first.step and hi == d.outcome_step - 1
    t_plain, t_auto = d.tokens["cispo_lag1_lr4_s78"], d.tokens["cispo_lag1_lr4_auto_s78"]
    n = plain.df(f"select count(*) as n from tokens where step between {lo} and {hi} and sampled")["n"].iloc[0]
    assert t_plain["tokens"] == n and t_auto["tokens"] > 0
    assert t_plain["low_neg_kl_share"] > t_auto["low_neg_kl_share"]
    assert t_plain["ratio_q001"] < t_auto["ratio_q001"]


def _token_share(run, lo, hi, clip_low):
    """The negative-advantage low-IS share and its k3 KL share over steps lo..hi, from the raw rows in pandas."""
    import numpy as np

    t = run.df(f"select advantage, log_ratio from tokens where step between {lo} and {hi} and sampled")
    x, a = t["log_ratio"].to_numpy(float), t["advantage"].to_numpy(float)
    low = (a < 0) & (x < np.log(1 - clip_low))
    k3 = np.exp(x) - x - 1
    return low.mean(), k3[low].sum() / k3.sum()


def test_token_window_statistics_match_an_independent_computation():
    plain, auto = arldiag.open_run(SAMPLES / "cispo_lag1_lr4_s78"), arldiag.open_run(SAMPLES / "cispo_lag1_lr4_auto_s78")
    d = diff_runs(plain, auto)
    share, kl = _token_share(plain, *d.token_window, plain.manifest["clip"][0])
    assert d.tokens["cispo_lag1_lr4_s78"]["low_neg_share"] == pytest.approx(share)
    assert d.tokens["cispo_lag1_lr4_s78"]["low_neg_kl_share"] == pytest.approx(kl)


@needs_real
def test_two_real_runs_of_one_sweep(tmp_path):
    """rho 0.30 and rho 0.50 of one TRL GRPO sweep (seed 43): rho 0.50's answers shrink from step 15 (230 -> 110
    tokens) and its reward collapses at 40 (labels.json); the runs part first in response length, then in the task
    score, and the length leads."""
    dirs = []
    for rho in ("0.30", "0.50"):
        csv = REAL / f"trl_grpo_lora_qwen25-7b_gsm8k_rho{rho}_s43.csv"
        out = tmp_path / f"rho{rho}"
        assert main(["import", "csv", str(csv), "--out", str(out)]) == 0
        dirs.append(out)
    d = diff_runs(*(arldiag.open_run(p) for p in dirs))
    assert d.first.metric.startswith("response_length") and 15 <= d.first.step <= 35
    assert d.first.mean_a > d.first.mean_b                    # rho 0.50's answers are the short ones
    assert d.outcome == "task_score" and 40 <= d.outcome_step <= 50
    assert d.lead >= 10


def test_the_closed_loop_pair_at_different_log_intervals(tmp_path):
    """The plain run logged every 5th step (exported to CSV, imported with `arldiag import csv`) against the twin
    logged every step: the grid is the plain run's, the twin's steps are averaged over each 5-step interval; they
    part within one interval of the loop's first action, never before it."""
    plain = arldiag.open_run(SAMPLES / "cispo_lag1_lr4_s78")
    frame = plain.df("select * exclude (run, time) from steps where step % 5 = 0 order by step")
    frame.to_csv(tmp_path / "plain5.csv", index=False)
    assert main(["import", "csv", str(tmp_path / "plain5.csv"), "--out", str(tmp_path / "plain5")]) == 0
    auto = arldiag.open_run(SAMPLES / "cispo_lag1_lr4_auto_s78")
    acted = int(auto.df("select min(step) as s from actions")["s"].iloc[0])
    d = diff_runs(arldiag.open_run(tmp_path / "plain5"), auto)
    assert d.steps == (0, 195)                           # the coarse run's last logged step bounds it
    assert acted + 1 <= d.first.step <= acted + 1 + 5
    assert all(p.points <= 40 for p in d.partings)       # on the coarse grid
    assert d.outcome == "eval_success" and d.outcome_step >= d.first.step

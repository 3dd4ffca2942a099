"""The task score is read from ONE column per run: chosen once at import (over the whole file) and at the first live
``record_step`` with a candidate; a row without that column has no score (no other column fills in); a count, a
total of several reward terms or a rate-named column outside [-1, 1] is never the score (arldiag/aliases.py)."""
import csv
import json
import math
from pathlib import Path

import pytest

from arldiag.aliases import LiveResolver, admissible, task_score_source, val_score_source
from arldiag.detectors.batch import evaluate_run, steps_frame
from arldiag.evaluation.evaluate import score_evaluation
from arldiag.evaluation.scoring import ScoreConfig
from arldiag.store.reader import open_run
from integrations.logfiles import REAL, import_log, write_csv

needs_real = pytest.mark.skipif(not (REAL / "labels.json").exists(), reason="shared/real_runs not beside the repo")


# ------------------------------------------------------------------------------------------------ the chooser
def test_counts_never_the_score():
    # verl's multi-turn agent line: a mean count of successful tool calls beside the score, turn counts, num_*
    names = ["rollout/tool_success_avg", "num_turns/mean", "rollout/num_correct", "response_length/mean"]
    assert task_score_source(names) is None
    assert task_score_source(names + ["critic/score/mean"]) == "critic/score/mean"
    # a hand-written loop's success rate is a candidate; its tool-call count is not
    assert task_score_source(["episode/tool_calls_mean", "episode/success"]) == "episode/success"
    assert val_score_source(["val/tool_success_avg", "val/accuracy"]) == "val/accuracy"


def test_rate_named_column_outside_its_scale_is_not_a_rate():
    vals = {"train/success_mean": [1.79, 4.11, 2.0], "train/reward_mean": [0.2, 0.4, 0.5]}
    assert task_score_source(list(vals), values=vals) == "train/reward_mean"
    assert task_score_source(list(vals)) == "train/success_mean"  # without values the name alone decides
    assert admissible("acc", [0.0, 1.0]) and admissible("acc", [-1.0, 1.0]) and not admissible("acc", [0.5, 1.5])
    assert admissible("critic/score/mean", [3.0, 7.5])  # a reward model's score keeps its own scale
    # Unsloth's correctness reward gives 2.0 for a correct answer: a reward function, not a rate
    unsloth = {"reward": [0.5, 2.5], "rewards/correctness_reward_func": [0.0, 2.0],
               "rewards/strict_format_reward_func": [0.0, 0.5], "rewards/xmlcount_reward_func": [0.1, 0.4]}
    assert task_score_source(list(unsloth), values=unsloth) == "rewards/correctness_reward_func"
    assert admissible("acc", [math.nan, 0.5])            # missing values do not count against it
    vv = {"val/accuracy": [12.0], "val/score": [0.3]}
    assert val_score_source(list(vv), vv) == "val/score"


def test_total_of_several_reward_terms_never_the_score():
    # two plain reward functions and TRL's weighted total: the total is their sum, not the score
    assert task_score_source(["reward", "rewards/helpful/mean", "rewards/concise/mean"]) is None
    # one reward function: the total is that function, and a task-like term wins over the total
    assert task_score_source(["reward", "rewards/reward_fn/mean"]) == "reward"
    assert task_score_source(["reward", "rewards/accuracy_reward/mean", "rewards/format_reward/mean"]) == \
        "rewards/accuracy_reward/mean"
    # a user-logged total beside its terms (the A-OKVQA development run) and EasyR1's overall
    aok = ["reward", "rewards/mc_idx_reward/mean", "rewards/think_format_reward/mean", "rewards/total_reward"]
    assert task_score_source(aok) == "rewards/mc_idx_reward/mean"
    assert task_score_source(["reward/overall", "reward/format", "reward/style"]) is None
    assert task_score_source(["reward/overall"]) == "reward/overall"  # no terms beside it: it is the reward


# ------------------------------------------------------------------------------------------------ live
def test_live_resolver_keeps_its_first_choice():
    r = LiveResolver()
    assert r({"critic/score/mean": 0.5, "actor/entropy": 1.0})["task_score"] == 0.5
    assert r.sources["task_score"] == "critic/score/mean"
    # a validation line without the score but with a tool-count column and a success-named count
    out = r({"rollout/tool_success_avg": 1.79, "reward": 3.0, "val-core/x/acc/mean@1": 0.4})
    assert "task_score" not in out and out["val_score"] == 0.4
    assert r.sources == {"task_score": "critic/score/mean", "val_score": "val-core/x/acc/mean@1"}
    assert r({"critic/score/mean": -0.25})["task_score"] == -0.25


def test_live_resolver_rate_value_outside_scale_left_empty():
    r = LiveResolver()
    assert r({"success_rate": 0.5})["task_score"] == 0.5
    assert "task_score" not in r({"success_rate": 3.0})  # no rate: the step has no score


def test_collector_record_step_one_column_and_resume(tmp_path):
    from arldiag.collectors.collector import Collector

    root = tmp_path / "run"
    with Collector(root, strict=True) as col:
        col.record_step(0, metrics={"val-core/gsm8k/acc/mean@1": 0.3})  # verl's validation before training
        col.record_step(1, metrics={"critic/score/mean": 0.25, "rollout/tool_success_avg": 1.79})
        col.record_step(2, metrics={"rollout/tool_success_avg": 4.11, "train/accuracy": 0.9})
        col.record_step(3, metrics={"critic/score/mean": 0.5})
    manifest = json.loads((root / "run.json").read_text())
    assert manifest["score_sources"] == {"task_score": "critic/score/mean", "val_score": "val-core/gsm8k/acc/mean@1"}
    with Collector(root, strict=True) as col:  # resumed: the same column, though step 4 logs only another candidate
        col.record_step(4, metrics={"train/accuracy": 0.7})
        col.record_step(5, metrics={"critic/score/mean": 0.75})
    run = open_run(str(root))
    df = steps_frame(run, run.names[0]).sort_values("step")
    got = dict(zip(df["step"], df["task_score"]))
    assert got[1] == 0.25 and got[3] == 0.5 and got[5] == 0.75
    assert all(math.isnan(got[s]) for s in (0, 2, 4))
    assert dict(zip(df["step"], df["val_score"]))[0] == pytest.approx(0.3)


# ------------------------------------------------------------------------------------------------ import
def _relog_verl_console(src: Path, dst: Path) -> int:
    """``src`` re-logged as verl's console log of a multi-turn tool agent: every 10th row is a validation line that
    lacks the score and every other reward column (critic/score/*, critic/rewards/*, TRL's reward, rewards/*) and
    carries rollout/tool_success_avg (mean successful tool calls, 1 to 5)."""
    rows = list(csv.DictReader(src.open()))
    n = 0
    for i, r in enumerate(rows):
        if i % 10 == 9:
            for k in [k for k in r if "reward" in k or "score" in k]:
                r.pop(k)
            r["rollout/tool_success_avg"] = f"{1 + (i * 7919 % 400) / 100:.2f}"  # 1.00 .. 4.99
            n += 1
    write_csv(dst, rows)
    return n


def _detection(out: Path, name: str, label: dict):
    re_ = evaluate_run(open_run(str(out)), name)
    row = score_evaluation(name, re_.timeline, label["collapse_step"], [], {}, re_.evaluator.tracks, ScoreConfig(),
                           None, interval=label.get("log_interval_steps") or 1, ambiguous=bool(label["ambiguous"]))
    first = next((s for s, _, state, _ in re_.timeline if state not in ("ok", "watch")), None)
    return first, row["episodes"], row["kind"], re_.frame


@needs_real
@pytest.mark.parametrize("run, score", [("verl_ppo_qwen25-7b_gsm8k_dstack", "critic/score/mean"),
                                        ("trl_grpo_lora_qwen25-7b_gsm8k_rho0.50_s43", "reward"),
                                        ("trl_grpo_lora_qwen25-7b_gsm8k_rho0.10_s43", "reward")])
def test_verl_console_relog_detects_as_logged(tmp_path, run, score):
    label = json.loads((REAL / "labels.json").read_text())[run]
    relog = tmp_path / f"{run}.csv"
    n_drop = _relog_verl_console(REAL / f"{run}.csv", relog)
    import_log(REAL / f"{run}.csv", tmp_path / "orig" / run)
    msg = import_log(relog, tmp_path / "relog" / run)
    n_rows = sum(1 for _ in csv.DictReader(relog.open()))
    assert f"task score = {score} ({n_rows - n_drop} of {n_rows} rows; {n_drop} without it stay empty;" in msg
    a, b = (_detection(tmp_path / d / run, run, label) for d in ("orig", "relog"))
    # the dropped rows have no score: never a tool count (the old per-row fill-in put 1.0-4.99 there)
    ts = b[3].set_index("step")["task_score"]
    assert ts.isna().sum() == n_drop and ts.max() <= 1.0
    assert b[:3] == a[:3], (a[:3], b[:3])

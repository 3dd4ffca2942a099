"""Real logs: names resolved, the task score found on any scale, windows in optimizer steps, the label rule of
the real development runs, and fire/quiet pairs of the step-scalar rules built from those runs
(../shared/real_runs, imported with plain `arldiag import csv`)."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

import arldiag
from arldiag.aliases import LiveResolver, alias_table, resolve_name, score_bounds, task_score_source, val_score_source
from arldiag.cli import main
from arldiag.detectors import Evaluator, REGISTRY
from arldiag.detectors.risk import RiskConfig
from arldiag.label import score_collapse_index, unit_score

# beside the repository, or where ARLDIAG_REAL_RUNS says (a git worktree elsewhere)
REAL = Path(os.environ.get("ARLDIAG_REAL_RUNS") or Path(__file__).resolve().parents[3] / "shared" / "real_runs")
needs_real = pytest.mark.skipif(not (REAL / "labels.json").exists(), reason="shared/real_runs not beside the repo")


# ------------------------------------------------------------------------------------------- names and scores
def test_task_score_source_per_trainer():
    verl = ["actor/entropy", "critic/score/mean", "critic/rewards/mean", "val-core/openai/gsm8k/acc/mean@1"]
    assert task_score_source(verl) == "critic/score/mean"
    assert val_score_source(verl) == "val-core/openai/gsm8k/acc/mean@1"
    # TRL with several reward functions: the accuracy-like one, not the format term nor the weighted total
    trl = ["reward", "rewards/think_format_reward/mean", "rewards/mc_idx_reward/mean", "rewards/mdi_reward/mean"]
    assert task_score_source(trl) == "rewards/mc_idx_reward/mean"
    # one reward function: TRL's total is that function (weight 1), the total is kept
    assert task_score_source(["reward", "rewards/reward_fn/mean"]) == "reward"
    assert task_score_source(["rewards/correctness/mean", "rewards/format/mean"]) == "rewards/correctness/mean"
    assert task_score_source(["loss", "rollout/reward"]) == "rollout/reward"
    assert task_score_source(["loss", "grad_norm"]) is None
    assert task_score_source(["loss", "eval/answer_accuracy"]) == "eval/answer_accuracy"  # scored at evaluation only
    assert val_score_source(["eval/answer_accuracy", "eval/reward", "eval/answer_accuracy_std"]) == \
        "eval/answer_accuracy"
    # TRL before 0.16 and Unsloth's GRPO notebooks: rewards/<fn> without /mean; the correctness term, not the total
    # (which adds four format terms) nor a format term
    unsloth = ["reward", "reward_std", "rewards/correctness_reward_func", "rewards/int_reward_func",
               "rewards/strict_format_reward_func", "rewards/soft_format_reward_func", "rewards/xmlcount_reward_func",
               "completion_length", "kl"]
    assert task_score_source(unsloth) == "rewards/correctness_reward_func"
    assert task_score_source(["reward", "rewards/mean", "rewards/std"]) == "reward"  # summary columns, no function
    # verl before val-core: one validation score per data source, val/test_score/<source>; MLflow's mean_at_1
    assert val_score_source(["val/test_score/openai/gsm8k", "actor/entropy"]) == "val/test_score/openai/gsm8k"
    assert val_score_source(["val-core/openai/gsm8k/acc/mean_at_1"]) == "val-core/openai/gsm8k/acc/mean_at_1"
    # EasyR1: its accuracy term, not critic/score/mean (= reward/overall, with the format term)
    assert task_score_source(["critic/score/mean", "reward/overall", "reward/format", "reward/accuracy"]) == \
        "reward/accuracy"
    # slime: the raw reward, not rollout/rewards (group-normalised, about 0)
    assert task_score_source(["rollout/rewards", "rollout/raw_reward", "train/pg_loss"]) == "rollout/raw_reward"


def test_other_trainers_names():
    # the names verl <= 0.4.0, EasyR1, OpenRLHF (wandb's train/ prefix), slime, SkyRL and NeMo-RL log, read in their
    # sources (docs/integrations/importers.md "Metric names")
    t = alias_table()
    expect = {"actor/entropy_loss": "entropy", "train/entropy_loss": "entropy", "policy/policy_entropy": "entropy",
              "train/approx_entropy": "entropy", "entropy/mean": "entropy",
              "train/ppo_clip_ratio": "pg_clipfrac", "actor/pg_clipfrac_higher": "pg_clipfrac",
              "train/truncated": "truncated_frac", "rollout/truncated": "truncated_frac",
              "train/truncation_rate": "truncated_frac",
              "rollout/response_lengths": "response_length_mean", "policy/response_length": "response_length_mean",
              "train/mean_gen_tokens_per_sample": "response_length_mean", "train/actor_lr": "lr",
              "train/policy_loss": "pg_loss", "train/ppo_kl": "ppo_kl", "train/pg_clipfrac": "pg_clipfrac"}
    assert {n: resolve_name(n, t) for n in expect} == expect


def test_alias_table_and_prefixes():
    t = alias_table({"my_ent": "entropy"})
    assert resolve_name("actor/entropy", t) == "entropy"
    assert resolve_name("train/entropy", t) == "entropy"            # prefix stripped
    assert resolve_name("completions/clipped_ratio", t) == "truncated_frac"
    assert resolve_name("my_ent", t) == "entropy"                   # user extension
    assert resolve_name("perf/mfu/actor", t) is None


def test_score_bounds_and_unit_score():
    assert score_bounds([0.0, 0.5, 1.0]) == (0.0, 1.0)
    assert score_bounds([-1.0, 1.0, 0.2]) == (-1.0, 1.0)
    assert score_bounds([0.0, 2.5]) is None
    np.testing.assert_allclose(unit_score([-1.0, 0.0, 1.0]), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(unit_score([2.0, 4.0, 3.0]), [2.0, 4.0, 3.0])  # non-negative: ratios, as logged
    np.testing.assert_allclose(unit_score([-3.0, 1.0, -1.0]), [0.0, 1.0, 0.5])  # negatives beyond -1: min-max


def test_live_resolver_copies_and_skips_own_outcomes():
    r = LiveResolver(skip_sources=("success_rate",))
    out = r({"critic/score/mean": 0.4, "actor/entropy": 0.3})
    assert out["task_score"] == 0.4 and out["entropy"] == 0.3 and out["actor/entropy"] == 0.3
    assert "task_score" not in r({"success_rate": 0.5})
    assert r({"entropy": 0.2, "actor/entropy": 0.9})["entropy"] == 0.2  # the trainer's own name wins
    # verl's validation before training (step 0): a validation score, never the training score
    val0 = r({"val-core/openai/gsm8k/acc/mean@1": 0.55})
    assert val0["val_score"] == 0.55 and "task_score" not in val0


def test_collector_resolves_trl_names_live(tmp_path):
    with arldiag.Collector(tmp_path / "r") as col:
        for t in range(30):
            col.record_step(t, metrics={"reward": 0.9 if t < 20 else 0.0, "completions/clipped_ratio": 0.1})
    run = arldiag.open_run(tmp_path / "r")
    df = run.sql("select step, task_score, truncated_frac from steps order by step").df()
    assert df["task_score"].tolist()[:2] == [0.9, 0.9] and df["truncated_frac"].iloc[0] == pytest.approx(0.1)
    fired = {f.detector: f for f in arldiag.detect(run) if f.status == "fired"}
    # peak 0.9, two points at 0 from step 20: the fall is complete at step 21 (confirm = 2 points)
    assert fired["score_collapse"].first_step == 20 and fired["score_collapse"].severity == "critical"


# -------------------------------------------------------------------------------- score_collapse by hand
def _run_score(values, interval=1):
    ev = Evaluator(["score_collapse"], risk=RiskConfig(), interval=interval)
    return [ev.update(i * interval, {"task_score": v}) for i, v in enumerate(values)]


def test_score_collapse_hand_worked_plus_minus_one():
    # +1/-1 scale: the floor is -1. Points 0.6, 0.8, 0.7, 0.8, 0.6, 0.7: the best 3-point mean is 0.7667
    # (0.8, 0.7, 0.8). At index 6 (-0.9) the 2-point mean is -0.1, (−0.1 + 1) / (0.7667 + 1) = 0.509 of the way
    # from the floor: <= 0.6 (warning) but > 0.45, and the last point (0.057) is under both: warning. At index 7
    # the mean is -0.9: 0.057 <= 0.45 on the mean and the last point: critical.
    vals = [0.6, 0.8, 0.7, 0.8, 0.6, 0.7, -0.9, -0.9]
    res = _run_score(vals)
    peak = (0.8 + 0.7 + 0.8) / 3
    frac6 = ((0.7 - 0.9) / 2 + 1) / (peak + 1)
    assert 0.45 < frac6 <= 0.6
    assert res[6].signals["score_collapse"].level == 2
    assert res[7].signals["score_collapse"].level == 3
    assert all("score_collapse" not in r.signals for r in res[:6])


def test_score_collapse_needs_a_fall_beyond_noise():
    # a noisy run at a low level on [0, 1]: 0.1, 0.3, 0.1, ... The changes are +-0.2, so the noise sd is
    # sqrt(mean(0.04) / 2) = 0.1414 over 19 changes (t of z = 3 for 19: 3.44); the best 3-point mean is 0.2333 of
    # N = 20 means (running-max bias sqrt(2 ln 20 / 3) = 1.41). Two batches at 0.02 are 9 % of the peak (under
    # 0.45), but the fall 0.2133 is less than 0.1414 (3.44 sqrt(1/3 + 1/2) + 1.41) = 0.64: no collapse. The same fall
    # from a steady 0.2333 (noise 0) is one.
    vals = [0.1, 0.3] * 10 + [0.02, 0.02]
    s = np.sqrt(np.mean(np.diff(vals[:-2]) ** 2) / 2)
    t = 3 + (27 + 3) / (4 * 19) + (5 * 243 + 16 * 27 + 9) / (96 * 19 ** 2)
    assert s == pytest.approx(0.1414, abs=1e-4) and 0.2333 - 0.02 < s * (t * np.sqrt(1 / 3 + 1 / 2) +
                                                                        np.sqrt(2 * np.log(20) / 3))
    assert "score_collapse" not in _run_score(vals)[-1].signals
    steady = [0.7 / 3] * 20 + [0.02, 0.02]
    assert _run_score(steady)[-1].signals["score_collapse"].level == 3


def test_windows_in_optimizer_steps():
    d = REGISTRY["entropy_blowup"]  # smooth=3, baseline_steps=10
    assert d.at_interval(1) is d
    d5 = d.at_interval(5)
    assert d5.params["smooth"] == 2 and d5.params["baseline_steps"] == 3  # ceil(10 / 5) = 2, at least 3 points
    assert REGISTRY["grad_norm_spike"].at_interval(2).params["baseline_steps"] == 10  # ceil(20 / 2)
    cfg = RiskConfig(enter_steps=5, exit_steps=40, critical_steps=2).at_interval(5)
    assert (cfg.enter_steps, cfg.exit_steps, cfg.critical_steps) == (1, 8, 1)
    ev = Evaluator(["entropy_blowup"], risk=RiskConfig(enter_steps=4))
    ev.update(0, {"entropy": 1.0})
    ev.update(5, {"entropy": 1.0})  # the interval is read off the first two steps
    assert ev.interval == 5 and ev.alert.cfg.enter_steps == 1


def test_validation_only_row_joins_the_next_step():
    ev = Evaluator(["entropy_blowup"], risk=RiskConfig())
    for t in range(5):
        ev.update(t, {"entropy": 1.0})
    r = ev.update(5, {"val_score": 0.7})            # a validation step alone
    assert r.signals == {} and ev.window.n_steps == 5  # no row of NaN entered the rules' window
    ev.update(6, {"entropy": 1.0})
    assert ev.window.last("val_score") == 0.7 and ev.window.last("entropy") == 1.0


# ------------------------------------------------------------------------------------- the real dev runs
@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    if not (REAL / "labels.json").exists():
        pytest.skip("shared/real_runs not beside the repo")
    root = tmp_path_factory.mktemp("real")
    for f in sorted(REAL.glob("*.csv")):
        assert main(["import", "csv", str(f), "--out", str(root / f.stem)]) == 0
    return root, json.loads((REAL / "labels.json").read_text())


@needs_real
def test_label_rule_reproduces_the_dev_labels():
    import pandas as pd

    labels = json.loads((REAL / "labels.json").read_text())
    for name, lab in labels.items():
        if lab["ambiguous"]:
            continue
        d = pd.read_csv(REAL / f"{name}.csv")[["step", lab["score_metric"]]].dropna()
        i = score_collapse_index(d[lab["score_metric"]].to_numpy(float))
        assert (None if i is None else int(d["step"].iloc[i])) == lab["collapse_step"], name


def _levels(root, name):
    from arldiag.detectors.batch import evaluate_run

    lv: list = []
    re = evaluate_run(arldiag.open_run(root / name), name, levels_out=lv)
    return dict(zip(re.steps, lv))


def _first(levels, det, at_least=2):
    return next((s for s, lv in levels.items() if lv.get(det, 0) >= at_least), None)


@needs_real
def test_import_keeps_the_interval_and_finds_the_score(real_runs):
    root, _ = real_runs
    run = arldiag.open_run(root / "trl_grpo_qwen25vl-3b_aokvqa_format")
    cfg = run.manifests[run.names[0]]["config"]
    assert cfg["log_interval_steps"] == 10 and cfg["task_score_from"] == "rewards/mc_idx_reward/mean"
    run = arldiag.open_run(root / "verl_ppo_qwen3-0.6b_gsm8k_slurm")
    cfg = run.manifests[run.names[0]]["config"]
    assert cfg["task_score_from"] == "critic/score/mean"
    assert cfg["val_score_from"] == "val-core/openai/gsm8k/acc/mean@1"


@needs_real
@pytest.mark.parametrize("det, fire, by, quiet", [
    # answers shrink 230 -> 110 tokens from step 15, collapse at 40 / a run that starts at the cap and learns to stop
    ("length_shrink", "trl_grpo_lora_qwen25-7b_gsm8k_rho0.50_s43", 30, "verl_ppo_qwen3-0.6b_gsm8k_slurm"),
    # responses hit the 512 cap from step 70, collapse at 110 / a run at the cap from its first step
    ("length_growth", "trl_grpo_lora_qwen25-7b_gsm8k_rho0.10_s43", 75, "trl_grpo_lora_qwen35-9b_gsm8k_rho1.00_s43"),
    # entropy 0.07 -> 0.37 with the score still at 0.8, collapse at 160 / entropy 0.24 -> 0.41 on a stable run
    ("entropy_blowup", "trl_grpo_lora_qwen35-9b_gsm8k_rho0.70_s44", 90, "trl_grpo_lora_qwen35-9b_gsm8k_dapo_rho1.0_s42"),
])
def test_step_scalar_rules_fire_and_stay_quiet_on_dev_runs(real_runs, det, fire, by, quiet):
    root, labels = real_runs
    first = _first(_levels(root, fire), det)
    assert first is not None and first <= by < labels[fire]["collapse_step"], (det, fire, first)
    assert _first(_levels(root, quiet), det) is None, (det, quiet)


@needs_real
def test_score_collapse_within_three_points_and_quiet_on_stable_dev_runs(real_runs):
    root, labels = real_runs
    for name, lab in labels.items():
        lv = _levels(root, name)
        first = _first(lv, "score_collapse", 3)
        if lab["collapse_step"] is not None:
            c = lab["collapse_step"]
            # the issue's measure: by the collapse + 3 logged points (rho0.10_s43, whose score dipped and recovered
            # early and so has a noisy history, needs all three)
            late = [s for s in lv if c <= s <= c + 3 * lab["log_interval_steps"]]
            assert any(lv[s].get("score_collapse", 0) == 3 for s in late), name
        elif not lab["ambiguous"]:
            assert first is None, (name, first)


@needs_real
def test_eval_detect_with_labels_on_dev_runs(real_runs, capsys):
    root, _ = real_runs
    assert main(["eval-detect", str(root), "--labels", str(REAL / "labels.json"), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    s = res["summary"]
    assert (s["collapsing"], s["stable"], s["ambiguous"]) == (6, 9, 2)
    by_run = {r["run"]: r for r in res["runs"]}
    # recomputed from the per-run rows: the summary counts what the rows say
    assert s["alarmed_by_late_points"] == sum(r["alarmed_by_late_points"] for r in by_run.values()
                                              if r["kind"] == "collapse")
    assert s["stable_runs_without_warning"] == sum(1 for r in by_run.values()
                                                   if r["kind"] == "stable" and not r["episodes"])
    # the development figures of docs/detectors.md (fitted on these runs: optimistic)
    assert (s["warned_ahead"], s["alarmed_by_late_points"], s["stable_runs_without_warning"]) == (3, 6, 9)


def test_labels_file_errors(tmp_path):
    from arldiag.commands.eval_detect import load_labels

    bad = tmp_path / "l.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="l.json is not valid JSON"):
        load_labels(str(bad))
    bad.write_text(json.dumps({"r": {"ambiguous": False}}))
    with pytest.raises(ValueError, match="entry 'r'.*collapse_step"):
        load_labels(str(bad))
    bad.write_text(json.dumps({"r": {"collapse_step": "x"}}))
    with pytest.raises(ValueError, match="integer step or null"):
        load_labels(str(bad))
    with pytest.raises(ValueError, match="does not exist"):
        load_labels(str(tmp_path / "none.json"))
    bad.write_text(json.dumps({"r": {"collapse_step": 40, "ambiguous": True, "log_interval_steps": 5}}))
    assert load_labels(str(bad)) == {"r": {"collapse_step": 40, "ambiguous": True, "log_interval_steps": 5}}


SUBSET = ("trl_grpo_lora_qwen25-7b_gsm8k_rho0.30_s43", "trl_grpo_lora_qwen25-7b_gsm8k_rho0.50_s43",
          "trl_grpo_lora_qwen25-7b_gsm8k_rho3.00_s44", "trl_grpo_lora_qwen35-9b_gsm8k_rho1.00_s43",
          "verl_ppo_qwen3-0.6b_gsm8k_slurm")


def _variant(d, lab, kind):
    """The same run as another trainer would log it: +1/-1 score, a sum-of-rewards scale, a hand-written loop's
    names, or every second step only."""
    d, lab, sm = d.copy(), dict(lab), lab["score_metric"]
    if kind == "plus_minus_one":
        d[sm] = 2 * d[sm] - 1
    elif kind == "own_scale":
        d[sm] = 3 * d[sm] + 0.5
    elif kind == "hand_names":
        ren = {sm: "train/reward_mean"}
        for a, b in (("entropy", "train/entropy"), ("actor/entropy", "train/entropy"),
                     ("completions/mean_length", "train/response_length"), ("response_length/mean",
                     "train/response_length"), ("completions/clipped_ratio", "train/truncated_ratio"),
                     ("response_length/clip_ratio", "train/truncated_ratio")):
            if a in d.columns and a != sm:
                ren[a] = b
        d = d[["step", *ren]].rename(columns=ren)
    elif kind == "every_second_step" and lab["log_interval_steps"] == 1:
        d, lab["log_interval_steps"] = d[d["step"] % 2 == 0], 2
    elif kind in TRAINER_NAMES:
        # the same series under the names another trainer logs (read in its source: docs/integrations/importers.md)
        names = TRAINER_NAMES[kind]
        ren = {a: names[k] for k, cands in SERIES.items() for a in cands if a in d.columns and a != sm and k in names}
        out = d[["step", *ren]].rename(columns=ren)
        score = d[sm]
        if kind == "unsloth":  # the GRPO notebook's reward functions: correctness 2.0 per right answer and four
            # format terms of 0.5 that a broken policy keeps earning; `reward` is their sum, which falls by half only
            out["rewards/correctness_reward_func"] = 2 * score
            for fn in ("int", "strict_format", "soft_format", "xmlcount"):
                out[f"rewards/{fn}_reward_func"] = 0.5
            out["reward"] = 2 * score + 2.0
        elif kind == "easyr1":  # reward/overall = 0.9 accuracy + 0.1 format, which critic/score/mean repeats
            out["reward/accuracy"], out["reward/format"] = score, 1.0
            out["reward/overall"] = out["critic/score/mean"] = 0.9 * score + 0.1
        else:  # OpenRLHF through wandb: train/ prefix, train/global_step
            out["train/reward"] = score
            out = out.rename(columns={"step": "train/global_step"})
        d = out
    return d, lab


# series of the dev logs -> their names in each dev log
SERIES = {"entropy": ("entropy", "actor/entropy"), "length": ("completions/mean_length", "response_length/mean"),
          "trunc": ("completions/clipped_ratio", "response_length/clip_ratio")}
TRAINER_NAMES = {
    "unsloth": {"entropy": "entropy", "length": "completion_length", "trunc": "completions/clipped_ratio"},
    "easyr1": {"entropy": "actor/entropy_loss", "length": "response_length/mean", "trunc": "response_length/clip_ratio"},
    "openrlhf": {"entropy": "train/entropy_loss", "length": "train/response_length", "trunc": "train/truncated"},
}


@needs_real
@pytest.mark.parametrize("kind", ["plus_minus_one", "own_scale", "hand_names", "every_second_step", "unsloth",
                                  "easyr1", "openrlhf"])
def test_detection_does_not_depend_on_how_the_run_was_logged(tmp_path, capsys, kind):
    import pandas as pd

    labels = json.loads((REAL / "labels.json").read_text())

    def outcomes(folder, labs):
        assert main(["eval-detect", str(folder), "--labels", str(folder / "labels.json"), "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)["runs"]
        return {r["run"]: (r["alarmed_by_late_points"], r["caught_at_10"], bool(r["episodes"])) for r in rows}

    got = {}
    for tag in ("as_logged", kind):
        folder = tmp_path / tag
        labs = {}
        for name in SUBSET:
            d = pd.read_csv(REAL / f"{name}.csv")
            d, labs[name] = (d, labels[name]) if tag == "as_logged" else _variant(d, labels[name], kind)
            d.to_csv(tmp_path / f"{name}.csv", index=False)
            assert main(["import", "csv", str(tmp_path / f"{name}.csv"), "--out", str(folder / name)]) == 0
        (folder / "labels.json").write_text(json.dumps(labs))
        capsys.readouterr()
        got[tag] = outcomes(folder, labs)
    assert got[kind] == got["as_logged"]
    assert got["as_logged"]["trl_grpo_lora_qwen25-7b_gsm8k_rho0.30_s43"] == (True, True, True)
    assert got["as_logged"]["verl_ppo_qwen3-0.6b_gsm8k_slurm"][2] is False


def test_a_loop_that_scores_only_at_evaluation(tmp_path, capsys):
    # accuracy on a fixed evaluation set every 10 steps: 0.34, 0.38, ..., 0.74 at step 110, then 0.02 from step 120;
    # the score is that validation series, its label the first low point (120), and one low evaluation is enough
    rows = ["step,loss,entropy,eval/answer_accuracy"]
    for s in range(1, 201):
        acc = "" if s % 10 else f"{(0.3 + 0.004 * s) if s < 120 else 0.02:.3f}"
        rows.append(f"{s},0.5,{0.4 - 0.001 * s:.4f},{acc}")
    (tmp_path / "e.csv").write_text("\n".join(rows) + "\n")
    assert main(["import", "csv", str(tmp_path / "e.csv"), "--out", str(tmp_path / "runs" / "e")]) == 0
    assert "task score = eval/answer_accuracy (20 of 200 rows; 180 without it stay empty; on [0, 1])" in \
        capsys.readouterr().err
    assert main(["eval-detect", str(tmp_path / "runs"), "--json"]) == 0
    (r,) = json.loads(capsys.readouterr().out)["runs"]
    # the state asks two logged rows of evidence (enter_points); the verdict of the evaluation at 120 holds on the
    # rows after it, so one low evaluation warns at the next row
    assert r["collapse_step"] == 120 and r["episodes"][0][0] == 121 and r["alarmed_by_late_points"]


def test_aliases_from_arldiag_toml(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ARLDIAG_CONFIG", raising=False)
    (tmp_path / "arldiag.toml").write_text('[aliases]\n"my/ent" = "entropy"\n"eval/pass1" = "task_score"\n')
    (tmp_path / "m.csv").write_text("step,my/ent,eval/pass1\n0,0.5,0.2\n1,0.4,0.3\n")
    assert main(["import", "csv", "m.csv", "--out", "r"]) == 0
    assert "my/ent -> entropy" in capsys.readouterr().err
    df = arldiag.open_run(tmp_path / "r").sql("select step, entropy, task_score from steps order by step").df()
    assert df.values.tolist() == [[0, 0.5, 0.2], [1, 0.4, 0.3]]
    with arldiag.Collector(tmp_path / "live") as col:  # the same table for a trainer logging live
        col.record_step(0, metrics={"my/ent": 0.7})
    assert arldiag.open_run(tmp_path / "live").sql("select entropy from steps").fetchall()[0][0] == 0.7
    (tmp_path / "arldiag.toml").write_text('[aliases]\n"x" = 3\n')
    with pytest.raises(ValueError, match="aliases.x must be an arldiag metric name"):
        from arldiag.settings import load

        load()


def test_import_finds_the_step_column(tmp_path, capsys):
    (tmp_path / "m.csv").write_text("global_step,reward\n0,0.5\n5,0.6\n10,0.7\n")
    assert main(["import", "csv", str(tmp_path / "m.csv"), "--out", str(tmp_path / "r")]) == 0
    assert "step column = global_step" in capsys.readouterr().err
    run = arldiag.open_run(tmp_path / "r")
    assert run.sql("select step from steps order by step").df()["step"].tolist() == [0, 5, 10]
    assert run.manifests[run.names[0]]["config"]["log_interval_steps"] == 5
    # no step column: the row index is the step, and the message names the option that picks one
    (tmp_path / "n.csv").write_text("when,reward\n7,0.5\n9,0.6\n")
    assert main(["import", "csv", str(tmp_path / "n.csv"), "--out", str(tmp_path / "n")]) == 0
    assert "--step-column" in capsys.readouterr().err
    assert arldiag.open_run(tmp_path / "n").sql("select step from steps order by step").df()["step"].tolist() == [0, 1]


def test_importers_doc_lists_every_alias():
    # docs/integrations/importers.md "Metric names" is the glossary of the alias table: every entry, under its target
    from arldiag.aliases import ALIASES, PREFIXES

    text = (Path(__file__).resolve().parents[2] / "docs" / "integrations" / "importers.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = {n.strip().strip("`") for n in cells[1].split(",")}
    missing = [f"{k} -> {v}" for k, v in ALIASES.items() if k != v and k not in rows.get(v, set())]
    assert not missing, f"docs/integrations/importers.md lacks: {missing}"
    assert all(f"`{p}`" in text for p in PREFIXES)

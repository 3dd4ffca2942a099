"""Metric names placed by their words (arldiag/names.py, aliases.MetricResolver): the corpus of names read in the
trainers' sources (tests/fixtures/metric_names.tsv, each with the placement its meaning in that source calls for),
the tokeniser, ambiguous names, arldiag.toml [aliases] overrides, and what `arldiag import` prints."""
import csv
from pathlib import Path

import pytest

from arldiag.collectors.collector import Collector
from arldiag.aliases import NOT_PLACED, TASK_SCORE, LiveResolver, MetricResolver, task_score_source
from arldiag.detectors.batch import steps_frame
from arldiag.importers.steps import name_plan, plan_names
from arldiag.names import HOW_TABLE, HOW_TOML, HOW_WORDS, NEVER_BY_WORDS, read_words, tokens
from arldiag.schema import STEP_METRIC_NAMES
from arldiag.settings import load
from arldiag.store.reader import open_run
from integrations.logfiles import import_log, write_csv

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "metric_names.tsv"
# the names issue 42 saw listed as "not read by any detector" on held-out imports, with the placement each has in
# its trainer's source (module doc of arldiag/names.py and docs/integrations/importers.md say why)
ISSUE_NAMES = {
    "entropy_avg": "entropy", "avg_response_len": "response_length_mean", "kl_loss": "kl_ref_k3",
    "adv_avg": "adv_mean", "policy_ratio": "ratio_mean",
    "rollout/avg_response_token_length": "response_length_mean", "rollout/format_accuracy": "format_valid_frac",
    # verl's older mismatch metrics (verl/utils/debug/metrics.py): |p_old - p_roll| statistics; arldiag keeps their
    # mean and max; the std and the 0/1 validity flag have no column
    "training/rollout_probs_diff_valid": None, "training/rollout_probs_diff_std": None,
    "training/rollout_actor_probs_pearson_corr": "mismatch_prob_corr",
    # TRL: the extreme over processes of each process's clip fraction; clip_ratio/*_mean beside it is kept
    "clip_ratio/low_min": None, "clip_ratio/high_max": None,
    "kl_div": "kl_ref_k3", "actor/reward_kl_penalty": "kl_ref_k1",
    "completions/mean_terminated_length": None,  # terminated completions only, not all responses
    "train_clip_fraction": "pg_clipfrac",
}


def corpus() -> list[dict]:
    with CORPUS.open(newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


@pytest.fixture
def no_toml(monkeypatch, tmp_path):
    """No arldiag.toml in force (the working directory may hold one)."""
    monkeypatch.delenv("ARLDIAG_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)


def _toml(tmp_path, monkeypatch, body: str) -> None:
    path = tmp_path / "arldiag.toml"
    path.write_text(body, encoding="utf-8")
    monkeypatch.setenv("ARLDIAG_CONFIG", str(path))


# ------------------------------------------------------------------------------------------------ the corpus
def test_corpus_is_large_and_covers_every_trainer():
    rows = corpus()
    assert len(rows) >= 150 and len({r["name"] for r in rows}) == len(rows)
    sources = " ".join(r["source"] for r in rows)
    for repo in ("volcengine/verl", "huggingface/trl", "OpenRLHF/OpenRLHF", "modelscope/ms-swift",
                 "thinking-machines-lab/tinker-cookbook", "THUDM/slime", "NovaSky-AI/SkyRL", "alibaba/ROLL",
                 "inclusionAI/AReaL", "CS336"):
        assert repo in sources, repo
    assert all(r["expected"] == "-" or r["expected"] in _columns() for r in rows)


def _columns() -> set[str]:
    return set(STEP_METRIC_NAMES) | {"grad_norm", "lr", "loss", "pg_loss"}


def test_corpus_placed_as_expected(no_toml):
    r = MetricResolver()
    rows = corpus()
    wrong = [(x["name"], x["expected"], r.resolve(x["name"]) or "-") for x in rows
             if (r.resolve(x["name"]) or "-") != x["expected"]]
    share = 1 - len(wrong) / len(rows)
    assert share >= 0.95, f"{share:.1%} placed as expected; differing: {wrong}"
    # a wrong column (not merely left unplaced) is rarer still
    misplaced = [w for w in wrong if w[2] != "-"]
    assert len(misplaced) <= 0.02 * len(rows), misplaced


def test_no_corpus_name_becomes_the_task_score_by_words(no_toml):
    r = MetricResolver()
    for x in corpus():
        got = r.read(x["name"])
        assert got.metric != TASK_SCORE and (got.how != HOW_WORDS or got.metric not in NEVER_BY_WORDS), x["name"]
    # the score-like names of the corpus are left to task_score_source, which still picks one of them
    for name in ("critic/score/mean", "env/all/correct", "rewards/accuracy_reward/mean", "accuracy",
                 "objective/verifiable_correct_rate", "reward/accuracy", "train/reward_answer_mean"):
        assert read_words(name).metric is None, name
    assert task_score_source(["critic/score/mean", "actor/entropy", "entropy_avg"]) == "critic/score/mean"


def test_issue_names_placed_as_expected(no_toml):
    r = MetricResolver()
    assert {n: r.resolve(n) for n in ISSUE_NAMES} == ISSUE_NAMES
    expected = {x["name"]: x["expected"] for x in corpus()}
    assert {n: expected[n] for n in ISSUE_NAMES} == {n: v or "-" for n, v in ISSUE_NAMES.items()}
    # every one of them is read (placed, or said why not), none is "not understood"
    assert all(r.read(n).why != "no quantity arldiag keeps" for n in ISSUE_NAMES)


# ------------------------------------------------------------------------------------------------ tokenising
def test_tokens_split_and_normalise():
    assert tokens("rollout/avg_response_token_length") == ["rollout", "mean", "response", "token", "length"]
    assert tokens("actor/pg_clipfrac") == ["actor", "pg", "clip", "frac"]
    assert tokens("avg_response_len") == ["mean", "response", "length"]
    assert tokens("response-length.Mean") == ["response", "length", "mean"]
    assert tokens("rewards/MultiModalAccuracyORM/mean") == ["reward", "multi", "modal", "accuracy", "orm", "mean"]
    assert tokens("tokens/non_prompt_length/mean") == ["token", "response", "length", "mean"]  # ROLL
    assert tokens("policy_ratio") == ["isratio"] and tokens("clip_ratio") == ["clip", "frac"]
    assert tokens("ppo/learning_rate") == ["ppo", "lr"]
    assert tokens("val-core/gsm8k/acc/mean@1") == ["val", "core", "gsm8k", "accuracy", "mean", "1"]
    assert tokens("entropyAvg") == ["entropy", "mean"] and tokens("global_seqlen") == ["global", "seq", "length"]


def test_statistics_and_which_kl():
    # the statistic decides the column; one the schema lacks leaves the name unplaced, with the reason
    assert [read_words(n).metric for n in ("resp_len_max", "completion_length_min", "response_length_std")] == \
        ["response_length_max", "response_length_min", None]
    assert "no column for this statistic" in read_words("response_length_std").why
    # KL to the reference, PPO's old/new KL, the KL in the reward, the rollout engine against the trainer
    assert read_words("ref_kl_k1").metric == "kl_ref_k1" and read_words("kl_low_var").metric == "kl_ref_k3"
    assert read_words("ppo_kl_k3").metric == "ppo_kl_k3" and read_words("approx_kl_avg").metric == "ppo_kl"
    assert read_words("train/reward_kl_penalty").metric == "kl_ref_k1"
    assert read_words("vllm_k3_kl").metric == "mismatch_k3" and read_words("rollout_corr/kl").metric == "mismatch_k1"
    assert read_words("kl_coef").metric is None and read_words("kl_sum").metric is None
    # which bound of the clip
    assert [read_words(n).metric for n in ("clip_frac", "clip_ratio_low", "clip_ratio_higher", "dual_clip_ratio",
                                           "clip_ratio/region")] == \
        ["pg_clipfrac", "clip_ratio_low_mean", "clip_ratio_high_mean", "pg_clipfrac_lower", "clip_ratio_region_mean"]
    assert read_words("critic/vf_clipfrac").metric is None and read_words("grad_clip_frac").metric is None


def test_words_never_place_outside_their_meaning():
    for name in ("timing_s/agent_loop/slowest/response_length", "prompt_length/mean", "timing_per_token_ms/gen",
                 "critic/grad_norm", "critic/lr", "num_tokens", "teacher_kl", "val/response_length/mean",
                 "eval/entropy", "rewards/soft_format_reward_func", "train/format_error_frac"):
        assert read_words(name).metric is None, name


# ------------------------------------------------------------------------------------------------ ambiguity
def test_ambiguous_names_are_left_unplaced_and_say_why():
    for name, say in (("global_seqlen/mean", "prompt + response"), ("actor/kl_penalty", "coefficient"),
                      ("mismatch_chi2", "token or sequence"), ("seq_len_mean", "prompt + response"),
                      ("avg_len", "too few words"), ("rollout_train_logprob_diff", "signed or absolute"),
                      ("gen_tokens", "a total or a mean")):
        got = read_words(name)
        assert got.metric is None and got.ambiguous and say in got.why, (name, got)
    assert not read_words("clip_ratio/low_min").ambiguous  # understood, merely no column


# ------------------------------------------------------------------------------------------------ arldiag.toml
def test_toml_aliases_come_first_and_ignore_unplaces(tmp_path, monkeypatch):
    _toml(tmp_path, monkeypatch, '[aliases]\n"kl_loss" = "kl_ref_k1"\n"entropy_avg" = "ignore"\n'
                                 '"actor/entropy" = ""\n"my_h" = "entropy"\n')
    load()  # the file is valid: "" and "ignore" are accepted
    r = MetricResolver()
    assert r.read("kl_loss").metric == "kl_ref_k1" and r.read("kl_loss").how == HOW_TOML  # over the words
    assert r.read("actor/entropy").metric is None and r.read("actor/entropy").how == HOW_TOML  # over the table
    assert r.read("entropy_avg").metric is None and r.read("my_h").metric == "entropy"
    assert r.read("avg_response_len").how == HOW_WORDS and r.read("actor/pg_loss").how == HOW_TABLE
    # the live path reads the same file
    out = LiveResolver()({"entropy_avg": 0.5, "my_h": 0.7, "kl_loss": 0.01})
    assert out["entropy"] == 0.7 and out["kl_ref_k1"] == 0.01 and "kl_ref_k3" not in out


def test_toml_alias_must_be_a_string(tmp_path, monkeypatch):
    _toml(tmp_path, monkeypatch, '[aliases]\n"kl_loss" = 3\n')
    with pytest.raises(ValueError, match="aliases.kl_loss"):
        load()


def test_not_placed_table_wins_over_words(no_toml):
    r = MetricResolver()
    for name, why in NOT_PLACED.items():
        got = r.read(name)
        assert got.metric is None and got.how == HOW_TABLE and got.why == why
    assert read_words("objective/kl").metric == "kl_ref_k3"  # what the words alone would do: the table corrects it


# ------------------------------------------------------------------------------------------------ live = import
def test_live_and_import_agree(no_toml):
    cols = [x["name"] for x in corpus()]
    rename, _ = name_plan(cols, {}, keep_names=False)
    live = LiveResolver()({c: float(i) for i, c in enumerate(cols)})
    for c, to in rename.items():
        assert live[to] == float(cols.index(c)), c
    placed_live = {k for k in live if k not in cols and k not in ("task_score", "val_score")}
    assert placed_live == set(rename.values())


def test_collector_stores_word_placed_metrics(tmp_path, no_toml):
    """A hand-written loop's names reach the detectors' columns through ``Collector.record_step`` as they do at
    import: the stored columns hold the logged values."""
    logged = {1: {"entropy_avg": 1.2, "avg_response_len": 310.0, "kl_loss": 0.004, "adv_avg": 0.0, "reward": 0.25},
              2: {"entropy_avg": 1.1, "avg_response_len": 322.0, "kl_loss": 0.006, "adv_avg": 0.0, "reward": 0.5}}
    with Collector(tmp_path / "run", strict=True) as col:
        for step, m in logged.items():
            col.record_step(step, metrics=m)
    run = open_run(str(tmp_path / "run"))
    df = steps_frame(run, run.names[0]).set_index("step")
    for step, m in logged.items():
        assert df.loc[step, "entropy"] == pytest.approx(m["entropy_avg"])
        assert df.loc[step, "response_length_mean"] == pytest.approx(m["avg_response_len"])
        assert df.loc[step, "kl_ref_k3"] == pytest.approx(m["kl_loss"])
        assert df.loc[step, "task_score"] == pytest.approx(m["reward"])


# ------------------------------------------------------------------------------------------------ the printout
def test_import_prints_every_placement_by_group(tmp_path, no_toml):
    rows = [{"step": s, "critic/score/mean": 0.1 * s, "actor/entropy": 1.0 - 0.01 * s, "entropy_avg": 0.9 - 0.02 * s,
             "avg_response_len": 100.0 + s, "kl_loss": 0.001 * s, "global_seqlen/mean": 900.0,
             "clip_ratio/low_min": 0.0, "clip_ratio/high_max": 0.01, "actor/pg_clipfrac": 0.02,
             "mystery_thing": 5.0} for s in range(1, 6)]
    write_csv(tmp_path / "log.csv", rows)
    msg = import_log(tmp_path / "log.csv", tmp_path / "run")
    lines = [ln.removeprefix("arldiag import: ") for ln in msg.splitlines()]
    table = next(ln for ln in lines if ln.startswith("mapped exact table: "))
    words = next(ln for ln in lines if ln.startswith("mapped by words: "))
    assert "actor/entropy -> entropy" in table and "actor/pg_clipfrac -> pg_clipfrac" in table
    assert "avg_response_len -> response_length_mean (response length, mean)" in words
    assert "kl_loss -> kl_ref_k3 (KL to the reference" in words
    amb = next(ln for ln in lines if ln.startswith("ambiguous, left unplaced"))
    assert "global_seqlen/mean" in amb
    unplaced = next(ln for ln in lines if ln.startswith("read but not placed: "))
    # one entry per reason: both clip extremes share it; entropy_avg is entropy, which actor/entropy fills first
    assert "clip_ratio/low_min, clip_ratio/high_max (a clip fraction's extreme" in unplaced
    assert "entropy_avg (entropy: already read from another column)" in unplaced
    kept = next(ln for ln in lines if ln.startswith("kept under their own names"))
    assert "mystery_thing" in kept and "clip_ratio/low_min" not in kept
    assert "task score = critic/score/mean" in msg
    run = open_run(str(tmp_path / "run"))
    df = steps_frame(run, run.names[0]).set_index("step")
    for r in rows:  # the placed columns hold the logged values
        assert df.loc[r["step"], "response_length_mean"] == pytest.approx(r["avg_response_len"])
        assert df.loc[r["step"], "kl_ref_k3"] == pytest.approx(r["kl_loss"])
        assert df.loc[r["step"], "task_score"] == pytest.approx(r["critic/score/mean"])


def test_plan_names_records_how(no_toml):
    p = plan_names(["my_col", "actor/entropy", "entropy_avg", "token_entropy_mean"], {"my_col": "lr"}, False)
    assert p.readings["my_col"].how == "--rename" and p.rename["my_col"] == "lr"
    assert p.rename["actor/entropy"] == "entropy" and p.clashes == {"entropy_avg": "entropy",
                                                                    "token_entropy_mean": "entropy"}
    assert plan_names(["entropy_avg"], {}, keep_names=True).rename == {}

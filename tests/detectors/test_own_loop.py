"""sample_runs/own_loop: an independently written multi-turn GRPO loop that records through arldiag.Collector.

One tiny healthy run and one tiny unhealthy run (an entropy bonus far too large), each trained in-process. Checked
against what the trainer itself generated (its masks, turn counts, outcomes), not against arldiag's own numbers:
the run store verifies; the token, sequence, turn and group tables have the glossary's columns and exactly the
rows the trainer's batches imply; the collapse label (``arldiag ls``) sees the unhealthy run collapse and the
healthy one not. Detector quietness is not asserted here.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import arldiag

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_runs" / "own_loop"))
import own_loop  # noqa: E402

# small enough for a test (B = 8 x 4 episodes, 2 epochs x 2 mini-batches), every token row kept
TINY = ["--n-tasks", "8", "--group-size", "4", "--ppo-epochs", "2", "--n-minibatches", "2",
        "--token-sample-rate", "1.0", "--log-every", "0", "--steps", "30"]
RUNS = {"healthy": ["--seed", "1"],
        "entropy": ["--seed", "2", "--failure", "entropy_bonus", "--ent-coef", "0.3", "--ent-coef-end", "0.3"]}

# the glossary's columns (docs/schema.md), as a reader outside arldiag would expect them
TOKEN_COLUMNS = {"step", "update", "rank", "sample_id", "pos", "turn", "token_id", "logp", "logp_old",
                 "logp_rollout", "logp_ref", "entropy", "advantage", "log_ratio", "sampled"}
SEQUENCE_COLUMNS = {"step", "update", "sample_id", "group_id", "n_tokens", "advantage", "seq_ratio", "kl_ref_k3",
                    "entropy_mean", "n_turns", "reward", "format_valid", "success", "response_length"}
TURN_COLUMNS = {"step", "update", "sample_id", "turn", "n_tokens", "advantage", "turn_ratio"}


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arldiag.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=240)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """{name: (run dir, the trainer's summary)} for the two tiny runs."""
    root = tmp_path_factory.mktemp("own_loop")
    out = {}
    for name, flags in RUNS.items():
        cfg = own_loop.make_config([*TINY, *flags, "--out", str(root / name)])
        out[name] = (root / name, own_loop.train(cfg))
    return out


def test_run_store_is_valid(trained) -> None:
    for run, _ in trained.values():
        res = cli("verify", run)
        assert res.returncode == 0, res.stdout + res.stderr
        assert json.loads((run / "run.json").read_text())["status"] == "finished"


def test_tables_have_the_rows_the_trainer_generated(trained) -> None:
    run, summary = trained["healthy"]
    hist, cfg = summary["history"], summary["config"]
    epochs, B = cfg["ppo_epochs"], cfg["n_tasks"] * cfg["group_size"]
    r = arldiag.open_run(run)
    tokens = r.sql("select * from tokens").df()
    seqs = r.sql("select * from sequences").df()
    turns = r.sql("select * from turns").df()
    assert TOKEN_COLUMNS <= set(tokens.columns)
    assert SEQUENCE_COLUMNS <= set(seqs.columns)
    assert TURN_COLUMNS <= set(turns.columns)
    # each epoch visits every episode once: its policy tokens, its episode row and its turns, once per epoch
    assert len(tokens) == epochs * sum(h["masked_tokens"] for h in hist)
    assert len(seqs) == epochs * B * len(hist)
    assert len(turns) == epochs * sum(sum(h["turns"]) for h in hist)
    per_step = tokens.groupby("step").size()
    assert [int(per_step[h["step"]]) for h in hist] == [epochs * h["masked_tokens"] for h in hist]
    assert tokens["turn"].between(0, cfg["max_turns"] - 1).all()
    assert tokens["sampled"].all()
    assert set(seqs["update"]) == set(range(epochs * cfg["n_minibatches"]))
    # a sample's rows agree with its episode: n_turns in sequences (first epoch: updates 0 .. n_minibatches - 1,
    # each episode once) = the turns the trainer counted
    nt = seqs[seqs["update"] < cfg["n_minibatches"]].sort_values("sample_id")["n_turns"].to_numpy()
    assert nt.tolist() == [t for h in hist for t in h["turns"]]
    groups = r.sql("select step, count(*) as n from groups group by step order by step").df()
    assert groups["n"].tolist() == [cfg["n_tasks"]] * len(hist)


def test_step_metrics_are_the_trainers(trained) -> None:
    run, summary = trained["healthy"]
    hist, cfg = summary["history"], summary["config"]
    steps = arldiag.open_run(run).sql("select * from steps order by step").df()
    assert steps["step"].tolist() == [h["step"] for h in hist]
    np.testing.assert_allclose(steps["success_rate"], [h["success_rate"] for h in hist])
    # the rollout's per-episode format flags (format_valid_frac) against the trainer's episode_format_ok
    np.testing.assert_allclose(steps["format_valid_frac"], [h["episode_format_ok"] for h in hist])
    assert (steps["n_updates"] == cfg["ppo_epochs"] * cfg["n_minibatches"]).all()
    # the trainer's reward is the success minus the format penalty per malformed turn: never above the success
    assert (steps["reward_mean"] <= steps["success_rate"] + 1e-9).all()


def test_collapse_label_tells_the_runs_apart(trained) -> None:
    root = next(iter(trained.values()))[0].parent
    res = cli("ls", root, "--json")
    assert res.returncode == 0, res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert rows["healthy"]["collapse_step"] is None, rows["healthy"]
    assert rows["entropy"]["collapse_step"] is not None, rows["entropy"]
    assert rows["entropy"]["verdict"] == "collapsed"
    # the unhealthy run really lost what it had: its last steps' success is a fraction of its first steps'
    hist = trained["entropy"][1]["history"]
    first = np.mean([h["success_rate"] for h in hist[:3]])
    last = np.mean([h["success_rate"] for h in hist[-10:]])
    assert last < 0.5 * first

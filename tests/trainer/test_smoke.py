"""3-step smoke runs of every algorithm on the tiny config, written through the real Collector and read back."""
from __future__ import annotations

import math

import pytest

from arldiag.trainer.config import ALGOS, make_config
from arldiag.trainer.loop import train

TINY = dict(steps=3, n_tasks=2, group_size=4, hidden_size=32, n_layers=1, max_new_tokens=4, token_sample_rate=0.5)


def read_steps(out):
    import arldiag

    run = arldiag.open_run(out)
    try:
        return run.count("steps"), run.count("sequences"), run.df("select * from steps order by step")
    finally:
        run.close()


@pytest.mark.parametrize("algo", ALGOS)
def test_every_algorithm_runs_three_steps(algo, tmp_path, toy_factory):
    cfg = make_config(algo, env="toy", out=str(tmp_path / algo), init="scratch", cold_start_steps=1, **TINY)
    result = train(cfg, env_factory=toy_factory, log=lambda s: None)
    hist = result["history"]
    assert len(hist) == 3
    assert all(math.isfinite(h["success_rate"]) for h in hist)
    # the toy reward varies within groups, so the policy is actually updated
    assert any(h["n_updates"] > 0 and h["grad_norm"] > 0 for h in hist)
    n_steps, n_seq, df = read_steps(str(tmp_path / algo))
    assert n_steps == 3 and 0 < n_seq <= sum(h["n_samples"] for h in hist)
    assert "success_rate" in "".join(df.columns)


def test_sokoban_sampo_with_bc_warm_start(tmp_path):
    cfg = make_config("sampo", env="sokoban", out=str(tmp_path / "sok"), init="bc", bc_episodes=6, bc_steps=3,
                      bc_cache=str(tmp_path / "bc"), max_turns=3, **TINY)
    hist = train(cfg, log=lambda s: None)["history"]
    assert len(hist) == 3 and all(h["episode_length"] <= 3 for h in hist)
    assert list((tmp_path / "bc").glob("sokoban-*.pt"))  # the warm start is cached


def test_calculator_trajectory_retokenize_bf16(tmp_path):
    cfg = make_config("atpo", env="calculator", out=str(tmp_path / "calc"), init="scratch", retokenize=True,
                      rollout_dtype="bfloat16", **TINY)
    result = train(cfg, log=lambda s: None)
    assert result["layout"] == "trajectory" and len(result["history"]) == 3


def test_saved_policy_loads_from_a_local_path(tmp_path, toy_factory):
    """--save-model writes a HF folder; --init PATH and --model PATH load it back (local files only)."""
    import torch
    from arldiag.trainer.loop import NullCollector
    from arldiag.trainer.policy import load_pretrained

    cfg = make_config("grpo", env="toy", out=str(tmp_path / "a"), init="scratch", save_model=True, **TINY)
    train(cfg, env_factory=toy_factory, collector=NullCollector(), log=lambda s: None)
    folder = tmp_path / "a" / "model"
    model, codec = load_pretrained(str(folder))
    assert codec.encode("say yes") and codec.eos_id is not None
    cfg2 = make_config("grpo", env="toy", out=str(tmp_path / "b"), init=str(folder), **dict(TINY, steps=1))
    hist = train(cfg2, env_factory=toy_factory, collector=NullCollector(), log=lambda s: None)["history"]
    assert len(hist) == 1
    cfg3 = make_config("grpo", env="toy", out=str(tmp_path / "c"), model=str(folder), init="scratch",
                       **dict(TINY, steps=1))
    assert len(train(cfg3, env_factory=toy_factory, collector=NullCollector(), log=lambda s: None)["history"]) == 1
    assert isinstance(next(model.parameters()), torch.Tensor)


@pytest.mark.parametrize("mode,stop_on", [("off", "none"), ("alert", None), ("stop", "critical")])
def test_monitor_knob_attaches_the_online_monitor(mode, stop_on, tmp_path):
    from arldiag.trainer.loop import open_collector

    cfg = make_config("cispo", env="toy", out=str(tmp_path / mode), init="scratch", monitor=mode, **TINY)
    col = open_collector(cfg)
    try:
        if mode == "off":
            assert col.monitor is None
        else:
            assert col.monitor.stop_on == stop_on and col.monitor.collector is col
    finally:
        col.close()


def test_auto_stabilize_monitor_runs_on_the_rule_based_state(tmp_path, monkeypatch):
    """The closed loop acts on the rule-based state whatever risk model calibrated.json ships (its policies pick
    actions by detector); a plain --monitor alert gets the shipped default. The shipped default is made "learned"
    here, so that the two cases differ."""
    import arldiag.detectors.engine as engine
    from arldiag.trainer.loop import open_collector

    monkeypatch.setattr(engine, "calibrated_model", lambda: "learned")
    for name, extra, model in (("s", dict(auto_stabilize="default"), "rules"),
                               ("a", dict(monitor="alert", auto_stabilize="off"), "learned")):
        col = open_collector(make_config("cispo", env="toy", out=str(tmp_path / name), init="scratch",
                                         **extra, **TINY))
        try:
            assert col.monitor.evaluator.risk_model == model
        finally:
            col.close()


def test_training_with_the_monitor_on(tmp_path, toy_factory):
    cfg = make_config("cispo", env="toy", out=str(tmp_path / "m"), init="scratch", monitor="stop", **TINY)
    result = train(cfg, env_factory=toy_factory, log=lambda s: None)
    assert len(result["history"]) == 3  # three quiet steps: nothing reaches critical, so no stop
    import arldiag

    run = arldiag.open_run(str(tmp_path / "m"))
    assert run.count("steps") == 3 and "severity" in run.columns("alerts")

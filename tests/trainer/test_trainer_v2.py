"""Reference trainer v2: env options and the short layout, one reward definition, skipped empty updates, the rollout
lag and logp_old source, the fixed evaluation set, the diagnostic bands, split and tokenizer in the run store, noisy
behaviour cloning and greedy sampling."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch

from arldiag.trainer.bc import progress_line, solver_texts
from arldiag.trainer.config import add_config_arguments, config_from_args, make_config
from arldiag.trainer.envs.base import StepResult
from arldiag.trainer.envs.sokoban import Level, SokobanEnv, parse_action, solve
from arldiag.trainer.loop import (LaggedSampler, NullCollector, diagnostic_bands, episode_advantages,
                                  make_env_factory, resolve_logp_old_source, train, turn_rewards)
from arldiag.trainer.rollout import Episode, Turn, sample_responses
from arldiag.trainer.policy import TokenCodec, build_tiny_model, build_word_tokenizer

TINY = dict(n_tasks=2, group_size=4, hidden_size=32, n_layers=1, max_new_tokens=4, token_sample_rate=0.5,
            init="scratch", eval_every=0)
QUIET = dict(log=lambda s: None)


# --- environment options and the short layout ---------------------------------------------------------------------
def test_short_observation_is_the_interior_grid():
    rows = ["######", "#P_XO#", "#____#", "#_#__#", "#____#", "######"]
    env = SokobanEnv(obs_layout="short")
    env.reset_level(Level.parse(rows))
    words = [w for w in env.observation().split(" ") if w]
    # 4 interior rows of 4 cells, each row followed by the newline word
    expected = []
    for r in rows[1:-1]:
        expected += list(r[1:-1]) + ["\n"]
    assert words == expected
    full = SokobanEnv(obs_layout="full")
    full.reset_level(Level.parse(rows))
    assert len(full.observation().split(" ")) > 3 * len(words)  # instruction + turn + grid with walls


def test_env_options_reach_the_env_and_bad_ones_are_named():
    cfg = make_config("grpo", env="sokoban", obs_layout="short", room_size=5, max_moves=3, max_turns=7)
    env = make_env_factory(cfg)()
    assert (env.obs_layout, env.room_size, env.max_moves, env.max_turns) == ("short", 5, 3, 7)
    env.reset(11)
    assert env.level.height == 5
    with pytest.raises(ValueError, match="calculator.*obs_layout"):
        make_env_factory(make_config("grpo", env="calculator", obs_layout="short"))
    with pytest.raises(ValueError, match="obs_layout"):
        make_config("grpo", obs_layout="tiny")


def test_cli_exposes_the_new_knobs():
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    args = parser.parse_args(["--algo", "cispo", "--obs-layout", "short", "--rollout-lag", "2", "--logp-old-source",
                              "sampler", "--eval-every", "5", "--bc-noise", "0.3", "--room-size", "5",
                              "--history-length", "1", "--weight-decay", "0.01"])
    cfg = config_from_args(args)
    assert (cfg.obs_layout, cfg.rollout_lag, cfg.logp_old_source, cfg.eval_every, cfg.bc_noise, cfg.room_size,
            cfg.history_length, cfg.weight_decay) == ("short", 2, "sampler", 5, 0.3, 5, 1, 0.01)


# --- one reward definition ----------------------------------------------------------------------------------------
def _turn(reward, valid):
    return Turn(prompt_ids=[], sampled_ids=[1], trained_ids=[1], logp_rollout=[0.0], inserted_ids=[], reward=reward,
                valid=valid, truncated=False, anchor="a")


@pytest.mark.parametrize("algo", ["grpo", "cispo", "gspo", "sapo", "sampo"])
def test_every_algorithm_penalises_an_invalid_format(algo):
    cfg = make_config(algo)
    ep = Episode(task_id=0, group_index=0, prompt_ids=[], turns=[_turn(-0.1, True), _turn(-0.1, False)])
    # Sokoban gives -0.1 for both; the format penalty 0.1 makes the invalid turn -0.2 for every algorithm
    np.testing.assert_allclose(turn_rewards(ep, cfg.format_penalty), [-0.1, -0.2])
    # so two episodes that differ only in format validity get different advantages (no A = 0 dead end)
    good = Episode(task_id=0, group_index=0, prompt_ids=[], turns=[_turn(-0.1, True), _turn(-0.1, True)])
    adv, returns = episode_advantages([ep, good], make_config(algo, adv_estimator="grpo"))
    assert returns[0] < returns[1] and adv[0][0] < 0 < adv[1][0]


# --- updates without advantage are not stepped ---------------------------------------------------------------------
class ConstantEnv:
    """Every response earns the same reward: every group has zero reward variance, so every advantage is 0."""
    name, max_turns = "const", 1

    def reset(self, seed):
        pass

    def observation(self):
        return "say yes"

    def anchor(self):
        return "a"

    def step(self, response):
        return StepResult(reward=1.0, done=True, valid=True, success=True)

    def solver_response(self):
        return "yes"

    @staticmethod
    def vocabulary():
        return ["say", "yes", "no"]


def test_minibatches_without_advantage_leave_the_weights_unchanged(tmp_path):
    cfg = make_config("sampo", env="const", steps=2, out=str(tmp_path / "r"), cold_start_steps=5, kl_coef=0.5, **TINY)
    captured = {}

    class Capture(NullCollector):
        def record_update(self, step, **kw):
            captured.setdefault("n", 0)
            captured["n"] += 1

    torch.manual_seed(0)
    result = train(cfg, env_factory=ConstantEnv, collector=Capture(), **QUIET)
    h = result["history"]
    assert captured["n"] > 0  # updates were recorded ...
    assert all(x["skipped_updates"] == x["n_updates"] > 0 for x in h)  # ... but none was stepped
    # and the policy never moved: KL to the (frozen) reference stays exactly 0 in both steps
    assert all(x["kl_ref_k3"] == 0.0 for x in h)


# --- rollout lag and the logp_old source ---------------------------------------------------------------------------
def test_lagged_sampler_plays_the_weights_of_lag_steps_ago():
    policy = torch.nn.Linear(2, 1, bias=False)
    sampler = LaggedSampler(policy, "float32", rollout_lag=2)
    assert sampler.model is not policy and not sampler.is_policy
    seen = []
    for step in range(5):
        with torch.no_grad():
            policy.weight.fill_(float(step))
        sampler.sync(policy)
        seen.append(float(sampler.model.weight[0, 0]))
    assert seen == [0.0, 0.0, 0.0, 1.0, 2.0]  # step s plays with the weights of step max(0, s - 2)
    same = LaggedSampler(policy, "float32", 0)
    assert same.model is policy and same.is_policy
    half = LaggedSampler(policy, "bfloat16", 0)
    half.sync(policy)
    assert half.model.weight.dtype == torch.bfloat16 and float(half.model.weight[0, 0]) == 4.0


def test_logp_old_source_resolution():
    assert resolve_logp_old_source(make_config("grpo"), sampler_is_policy=True) == "sampler"
    assert resolve_logp_old_source(make_config("grpo"), sampler_is_policy=False) == "recompute"
    assert resolve_logp_old_source(make_config("grpo", retokenize=True), True) == "recompute"
    assert resolve_logp_old_source(make_config("grpo", logp_old_source="recompute"), True) == "recompute"
    assert resolve_logp_old_source(make_config("grpo", logp_old_source="sampler"), False) == "sampler"


class UpdateCapture(NullCollector):
    def __init__(self):
        self.rollouts, self.updates = [], []

    def record_rollout(self, step, **kw):
        self.rollouts.append(kw)

    def record_update(self, step, **kw):
        self.updates.append(kw)


@pytest.mark.parametrize("source", ["sampler", "recompute"])
def test_logp_old_is_the_sampler_logp_or_the_recompute(tmp_path, toy_factory, source):
    cfg = make_config("grpo", env="toy", steps=1, out=str(tmp_path / "r"), logp_old_source=source, n_minibatches=1,
                      **TINY)
    cap = UpdateCapture()
    train(cfg, env_factory=toy_factory, collector=cap, **QUIET)
    (u,) = cap.updates  # one update, on every sample of the step
    mask = u["response_mask"].bool()
    old, roll = u["logp_old"][mask], u["logp_rollout"][mask]
    if source == "sampler":
        assert torch.equal(old, roll)
    else:  # the same float32 policy: equal up to float rounding, but computed by another pass
        assert torch.allclose(old, roll, atol=1e-4)
    # before any optimizer step, the first update's logp is the current policy: ratio 1 up to rounding
    assert torch.allclose(u["logp"][mask], old, atol=1e-4)


def test_rollout_lag_with_sampler_logp_makes_the_ratio_off_policy(tmp_path, toy_factory):
    cfg = make_config("grpo", env="toy", steps=4, out=str(tmp_path / "r"), rollout_lag=2, logp_old_source="sampler",
                      n_minibatches=1, lr=3e-2, **TINY)
    cap = UpdateCapture()
    train(cfg, env_factory=toy_factory, collector=cap, **QUIET)
    drift = []
    for u in cap.updates:
        m = u["response_mask"].bool()
        drift.append(float((u["logp"][m] - u["logp_old"][m]).abs().max()))
    assert drift[0] < 1e-4  # step 0: the sampler still is the initial policy, which is also the current one
    assert max(drift[1:]) > 1e-3  # later steps sample with weights 2 steps old: ratios move off 1 at the first update


# --- evaluation, run store contents ----------------------------------------------------------------------------------
def test_eval_metrics_on_eval_steps_and_run_store_contents(tmp_path, toy_factory):
    import arldiag

    out = tmp_path / "run"
    cfg = make_config("cispo", env="toy", steps=5, out=str(out), seed=3,
                      **{**TINY, "eval_every": 2, "eval_tasks": 6})
    hist = train(cfg, env_factory=toy_factory, **QUIET)["history"]
    eval_steps = [i for i, h in enumerate(hist) if "eval_success" in h]
    assert eval_steps == [0, 2, 4]  # every 2 steps and the last
    assert all(0.0 <= hist[i]["eval_success"] <= 1.0 for i in eval_steps)
    meta = json.loads((out / "run.json").read_text())
    assert meta["config"]["split"] == "heldout"  # seed 3
    assert meta["config"]["diagnostic_bands"]["token"] == [0.2, 0.2]  # CISPO eps_low 1.0 is diagnosed at 0.2
    assert meta["config"]["logp_old_source"] == "sampler"
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.decode(tok.encode("say yes").ids) == "say yes"
    run = arldiag.open_run(str(out))
    try:
        df = run.df("select step, eval_success from steps order by step")
    finally:
        run.close()
    assert df["eval_success"].notna().tolist() == [True, False, True, False, True]


def test_diagnostic_bands():
    assert diagnostic_bands(make_config("cispo")) == ((0.2, 0.2), (0.2, 0.2))
    assert diagnostic_bands(make_config("sapo")) == ((0.2, 0.2), (0.2, 0.2))
    assert diagnostic_bands(make_config("dapo")) == ((0.2, 0.28), (0.2, 0.28))
    assert diagnostic_bands(make_config("gspo")) == ((3e-3, 4e-3), (3e-3, 4e-3))


def test_split_follows_the_seed_unless_given():
    assert [make_config("grpo", seed=s).resolved_split() for s in range(5)] == ["dev"] * 3 + ["heldout"] * 2
    assert make_config("grpo", seed=4, split="dev").resolved_split() == "dev"


# --- behaviour cloning and sampling ----------------------------------------------------------------------------------
def _share_off_solver(demos) -> float:
    """Share of demo turns whose action is not the solver's first move in the same state (replayed from the anchor,
    which is the full grid)."""
    off = total = 0
    for ep in demos:
        for _, response, _, anchor in ep:
            rows = ["".join(row.split(" ")) for row in anchor.split(" \n ")]
            path = solve(Level.parse(rows))
            if not path:
                continue
            total += 1
            off += parse_action(response) != path[0]
    return off / total


def test_noisy_demonstrations_replace_that_share_of_solver_moves():
    factory = lambda: SokobanEnv(obs_layout="short")  # noqa: E731
    clean = solver_texts(factory, 40, seed=1, max_turns=10, noise=0.0)
    noisy = solver_texts(factory, 40, seed=1, max_turns=10, noise=0.5)
    assert _share_off_solver(clean) == 0.0 and all(ep[-1][2].success for ep in clean)
    # half the turns draw one of 4 directions uniformly: 3/4 of those differ from the solver, 0.375 expected
    assert 0.28 < _share_off_solver(noisy) < 0.47
    assert all(parse_action(r) is not None for ep in noisy for _, r, _, _ in ep)  # noisy moves are well formed


def test_progress_line():
    line = progress_line("bc", 150, 300, 30.0, "nll 0.5")
    assert line == "bc [##########..........] 150/300 50% 30s elapsed, ~30s left nll 0.5"


def test_greedy_sampling_takes_the_argmax():
    tokenizer = build_word_tokenizer(["a", "b", "c"])
    codec = TokenCodec.from_tokenizer(tokenizer)
    model = build_tiny_model("tiny-qwen3", len(tokenizer), 32, 1, codec, seed=0).eval()
    ctx = [[codec.bos_id] + codec.encode("a b")] * 3
    g = torch.Generator().manual_seed(0)
    ids, logps, _ = sample_responses(model, ctx, codec, 3, 0.0, g, "cpu")
    assert ids[0] == ids[1] == ids[2]  # deterministic
    with torch.no_grad():
        first = model(input_ids=torch.tensor([ctx[0]])).logits[0, -1]
    assert ids[0][0] == int(first.argmax())
    assert logps[0][0] == pytest.approx(float(torch.log_softmax(first, -1).max()), abs=1e-5)

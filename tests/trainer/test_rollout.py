"""Tokenizer, rollouts (token-in-token-out, tool tokens masked, retokenization drift, reduced-precision sampler) and
the batch layout, on the toy environment."""
from __future__ import annotations

import numpy as np
import torch

from arldiag.trainer.batch import build_batch
from arldiag.trainer.config import make_config
from arldiag.trainer.loop import recompute_logp
from arldiag.trainer.policy import TokenCodec, build_policy, build_word_tokenizer, merge_pairs
from arldiag.trainer.rollout import retokenize, run_episodes

VOCAB = ["say", "yes", "no", "\n", "turn", "0", "1", "2", "3", "ok"]


def make_policy(merges=("yes no",), hidden=32):
    cfg = make_config("grpo", hidden_size=hidden, n_layers=1, init="scratch")
    return build_policy(cfg, VOCAB, ["yes no"] * 3 if merges else []) + (cfg,)


def test_word_tokenizer_keeps_newline_and_merges():
    tok = build_word_tokenizer(VOCAB, ["yes no"])
    codec = TokenCodec.from_tokenizer(tok)
    text = "say yes \n turn 1"
    ids = codec.encode(text)
    assert len(ids) == 5 and codec.decode(ids) == text  # "\n" is a word of its own
    assert tok.convert_ids_to_tokens(codec.encode("yes no no")) == ["yes no", "no"]  # merged like BPE
    assert merge_pairs(["a b c", "a b"], min_count=2) == ["a b"]


def test_retokenize_changes_ids_and_carries_logps_positionally():
    codec = TokenCodec.from_tokenizer(build_word_tokenizer(VOCAB, ["yes no"]))
    yes, no = codec.encode("yes")[0], codec.encode("no")[0]
    merged = codec.encode("yes no")
    assert len(merged) == 1
    ids, lp = retokenize([yes, no, codec.eos_id], [-0.1, -0.2, -0.3], codec)
    assert ids == [merged[0], codec.eos_id]  # the sampled split pair became the merged token
    assert lp == [-0.1, -0.2]  # positional carry-over: the drift signature
    same, lp2 = retokenize([no, codec.eos_id], [-1.0, -2.0], codec)
    assert same == [no, codec.eos_id] and lp2 == [-1.0, -2.0]


def play(factory, layout, retok=False, dtype=torch.float32, n=4, seed=0):
    model, codec, cfg = make_policy()
    sampler = model if dtype == torch.float32 else __import__("copy").deepcopy(model).to(dtype)
    envs = [factory() for _ in range(n)]
    eps = run_episodes(sampler, envs, [0, 0, 1, 1][:n], [0, 0, 1, 1][:n], codec, layout=layout, max_turns=2,
                       max_new_tokens=4, temperature=1.0, retokenize_between_turns=retok,
                       generator=torch.Generator().manual_seed(seed), device="cpu")
    return model, codec, cfg, eps


def test_turn_layout_is_token_in_token_out(toy_factory):
    model, codec, cfg, eps = play(toy_factory, "turn")
    assert all(len(ep.turns) == 2 for ep in eps)
    batch = build_batch(eps, layout="turn", codec=codec)
    assert batch.input_ids.shape[0] == 8  # one sample per turn
    assert torch.equal(batch.token_ids, batch.rollout_ids)  # trained ids are the sampled ids
    # window columns hold exactly the sampled reply of each turn
    for b in range(8):
        t = eps[batch.episode_index[b]].turns[batch.sample_turn[b]]
        n = len(t.sampled_ids)
        assert batch.token_ids[b, :n].tolist() == t.sampled_ids and batch.response_mask[b, :n].sum() == n
        assert batch.response_mask[b, n:].sum() == 0
        # the prompt is left-padded so the reply starts at column `start`
        assert batch.input_ids[b, batch.start - len(t.prompt_ids):batch.start].tolist() == t.prompt_ids
    # a float32 sampler reports the trainer's log-probs (up to batching noise)
    logp_old = recompute_logp(model, batch, np.arange(8), cfg)
    m = batch.response_mask > 0
    assert torch.allclose(logp_old[m], batch.logp_rollout[m], atol=1e-4)


def test_reduced_precision_sampler_creates_mismatch(toy_factory):
    model, codec, cfg, eps = play(toy_factory, "turn", dtype=torch.bfloat16)
    batch = build_batch(eps, layout="turn", codec=codec)
    logp_old = recompute_logp(model, batch, np.arange(len(batch.episode_index)), cfg)
    m = batch.response_mask > 0
    assert (logp_old[m] - batch.logp_rollout[m]).abs().mean() > 1e-4


def test_trajectory_layout_masks_tool_tokens(toy_tool_factory):
    model, codec, cfg, eps = play(toy_tool_factory, "trajectory")
    batch = build_batch(eps, layout="trajectory", codec=codec)
    ok = codec.encode("ok")
    assert batch.input_ids.shape[0] == 4  # one sample per episode
    for b, ep in enumerate(eps):
        t0, t1 = ep.turns
        assert t0.inserted_ids == ok and t1.inserted_ids == []  # tool output after turn 0 only
        n0 = len(t0.trained_ids)
        window = batch.token_ids[b].tolist()
        assert window[:n0] == t0.trained_ids and window[n0:n0 + 1] == ok
        assert batch.response_mask[b, :n0].tolist() == [1.0] * n0 and batch.response_mask[b, n0].item() == 0.0
        assert batch.turn_ids[b, :n0].tolist() == [0] * n0 and batch.turn_ids[b, n0 + 1].item() == 1


def test_retokenize_rollout_produces_id_mismatches(toy_factory):
    # a random policy often samples "yes" "no" separately; re-encoding merges them
    found = False
    for seed in range(10):
        _, codec, _, eps = play(toy_factory, "turn", retok=True, seed=seed)
        batch = build_batch(eps, layout="turn", codec=codec)
        if not torch.equal(batch.token_ids, batch.rollout_ids):
            found = True
            break
    assert found

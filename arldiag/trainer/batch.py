"""Episodes -> one padded training batch (the verl layout).

Prompts are left-padded to a common width P and the response window (replies, plus inserted environment text in the
trajectory layout) is right-padded to width W, so every sample's window starts at column ``start = P`` and the
trainer computes log-probs for columns P .. P+W-1 only. Window tensors are [B, W].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from arldiag.trainer.policy import TokenCodec
from arldiag.trainer.rollout import Episode


@dataclass
class Batch:
    input_ids: torch.Tensor       # [B, P+W] trained ids: left-padded prompt, then the window
    attention_mask: torch.Tensor  # [B, P+W]
    start: int                    # P: first window column
    token_ids: torch.Tensor       # [B, W] trained ids of the window (pad where no token)
    rollout_ids: torch.Tensor     # [B, W] ids the sampler drew, aligned position-wise (differ only with retokenize)
    response_mask: torch.Tensor   # [B, W] 1 on policy-generated tokens
    logp_rollout: torch.Tensor    # [B, W] sampler log-probs (0 off the mask)
    turn_ids: torch.Tensor        # [B, W] turn index of each window token
    episode_index: np.ndarray     # [B] which episode the sample belongs to
    sample_turn: np.ndarray       # [B] turn index of a per-turn sample; -1 for a whole-trajectory sample


def build_batch(episodes: Sequence[Episode], *, layout: str, codec: TokenCodec) -> Batch:
    rows = []  # (prompt, trained, rollout, mask, logp, turn_of_token, episode, sample_turn)
    for e, ep in enumerate(episodes):
        if layout == "turn":
            for k, t in enumerate(ep.turns):
                n = len(t.trained_ids)
                rollout = (list(t.sampled_ids) + [codec.pad_id] * n)[:n]
                rows.append((t.prompt_ids, list(t.trained_ids), rollout, [1] * n, list(t.logp_rollout), [k] * n, e, k))
        elif layout == "trajectory":
            trained, rollout, mask, logp, turns = [], [], [], [], []
            for k, t in enumerate(ep.turns):
                n, m = len(t.trained_ids), len(t.inserted_ids)
                trained += list(t.trained_ids) + list(t.inserted_ids)
                rollout += (list(t.sampled_ids) + [codec.pad_id] * n)[:n] + list(t.inserted_ids)
                mask += [1] * n + [0] * m
                logp += list(t.logp_rollout) + [0.0] * m
                turns += [k] * (n + m)
            rows.append((ep.prompt_ids, trained, rollout, mask, logp, turns, e, -1))
        else:
            raise ValueError(f"layout={layout!r}: choose turn or trajectory")
    if not rows:
        raise ValueError("episodes: nothing to batch (no turns)")
    P = max(len(r[0]) for r in rows)
    W = max(1, max(len(r[1]) for r in rows))
    B = len(rows)
    # Filled as numpy arrays (one slice assignment per row) and wrapped once: torch.as_tensor per row was most of
    # the batch build's time.
    input_ids = np.full((B, P + W), codec.pad_id, dtype=np.int64)
    attention_mask = np.zeros((B, P + W), dtype=np.int64)
    rollout_ids = np.full((B, W), codec.pad_id, dtype=np.int64)
    response_mask = np.zeros((B, W), dtype=np.float32)
    logp_rollout = np.zeros((B, W), dtype=np.float32)
    turn_ids = np.zeros((B, W), dtype=np.int64)
    for b, (prompt, trained, rollout, mask, logp, turns, _, _) in enumerate(rows):
        p, w = len(prompt), len(trained)
        input_ids[b, P - p:P] = prompt
        attention_mask[b, P - p:P + w] = 1
        if w:
            input_ids[b, P:P + w] = trained
            rollout_ids[b, :w] = rollout
            response_mask[b, :w] = mask
            logp_rollout[b, :w] = logp
            turn_ids[b, :w] = turns
            turn_ids[b, w:] = turns[-1]
    input_ids_t = torch.from_numpy(input_ids)
    return Batch(input_ids=input_ids_t, attention_mask=torch.from_numpy(attention_mask), start=P,
                 token_ids=input_ids_t[:, P:].clone(), rollout_ids=torch.from_numpy(rollout_ids),
                 response_mask=torch.from_numpy(response_mask), logp_rollout=torch.from_numpy(logp_rollout),
                 turn_ids=torch.from_numpy(turn_ids),
                 episode_index=np.array([r[6] for r in rows], dtype=np.int64),
                 sample_turn=np.array([r[7] for r in rows], dtype=np.int64))

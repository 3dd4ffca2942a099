"""Synthetic runs for the dashboard tests, written through the public Collector API. A module of its own (not
conftest.py) so that test modules import it by a name no other folder's conftest shadows when pytest is given
several test folders at once."""
from __future__ import annotations

from pathlib import Path

import numpy as np

B, T, G = 16, 24, 4  # samples per step, padded length, groups


def write_steps(path: Path, steps, seed: int = 0, token_sample_rate: float = 0.25, drift: float = 0.0) -> None:
    """Append ``steps`` to the run at ``path`` (created if absent): 2 updates per step, 3 turns per sample,
    logp_ref/logp_rollout/entropy/token ids given. ``drift`` grows the policy-update log ratios with the step."""
    import arldiag

    rng = np.random.default_rng(seed)
    with arldiag.Collector(path, config={"synthetic": True}, clip=(0.2, 0.28), algorithm="grpo",
                           token_sample_rate=token_sample_rate, flush_every=1) as col:
        for step in steps:
            sid = np.arange(B, dtype=np.int64) + 1000 * step
            lengths = rng.integers(T // 2, T + 1, size=B)
            mask = np.arange(T)[None, :] < lengths[:, None]                        # [B, T]
            tok = rng.integers(0, 500, size=(B, T))                                 # [B, T]
            turn = np.minimum(np.arange(T)[None, :] // (T // 3), 2).repeat(B, 0)  # [B, T]
            rewards = rng.integers(0, 2, size=B).astype(float)
            lp_roll = (-rng.gamma(2.0, 0.5, size=(B, T))).astype(np.float32)
            col.record_rollout(step, sid, group_ids=sid // 4, turn_ids=turn, token_ids=tok, response_mask=mask,
                               logp_rollout=lp_roll, rewards=rewards, format_valid=rewards >= 0,
                               success=rewards > 0)
            grp = rewards.reshape(G, -1)
            adv = ((grp - grp.mean(1, keepdims=True)) / (grp.std(1, keepdims=True) + 1e-6)).reshape(-1)
            lp_old = lp_roll + rng.normal(0, 0.01, size=(B, T)).astype(np.float32)
            for upd in range(2):
                scale = 0.05 + drift * step
                lp = lp_old + rng.normal(0, scale, size=(B, T)).astype(np.float32)
                col.record_update(step, upd, logp=lp, logp_old=lp_old, advantages=adv, response_mask=mask,
                                  logp_ref=lp_old - 0.02, logp_rollout=lp_roll,
                                  entropy=np.full((B, T), 1.5 - 0.01 * step, np.float32), sample_ids=sid,
                                  turn_ids=turn, token_ids=tok)
            col.record_step(step, metrics={"success_rate": float(rewards.mean()), "grad_norm": 1.0 + 0.1 * step})

"""Synthetic runs for the report tests, written through the public Collector API.

``collapsing``: success and valid-format ratio rise, then fall to ~0 from step ``collapse_at``; from step
``drift_at`` on, a growing share of negative-advantage samples drifts to a sequence ratio ~0.6 (ARLArena's
collapse driver), the grad norm explodes and entropy falls. ``stable``: the same batch shapes with small, steady
ratios and a rising success rate. Samples carry token ids and whitespace-aligned texts ("w<id> w<id> ..."), and
the collapsing run has two turns per sample so its turns table has rows.
"""
from __future__ import annotations

import numpy as np


def make_run(root, collapsing: bool, steps: int = 60, n_groups: int = 8, group_size: int = 4, T: int = 12,
             seed: int = 0, drift_at: int = 25, collapse_at: int = 42, name: str | None = None) -> str:
    import arldiag

    rng = np.random.default_rng(seed)
    B = n_groups * group_size
    algo = "cispo" if collapsing else "grpo"
    clip = (1.0, 0.2) if collapsing else (0.2, 0.2)
    config = {"algo": algo, "loss_agg": "token-mean" if collapsing else "seq-mean-token-mean",
              "adv_estimator": "grpo", "dynamic_filter": False, "n_minibatches": 2, "ppo_epochs": 1,
              "nalis_mask": False, "kl_coef": 0.01}
    with arldiag.Collector(str(root), config=config, clip=clip, seq_clip=(0.2, 0.2), algorithm=algo,
                           name=name, token_sample_rate=0.25, flush_every=20) as col:
        for s in range(steps):
            if collapsing:
                p_succ = min(0.75, 0.2 + 0.02 * s) if s < collapse_at else 0.02
                p_fmt = 0.95 if s < collapse_at else 0.05
            else:
                p_succ, p_fmt = min(0.8, 0.2 + 0.01 * s), 0.95
            success = rng.random(B) < p_succ
            fmt = rng.random(B) < p_fmt
            reward = success.astype(np.float64) + 0.05 * rng.standard_normal(B)
            g = np.repeat(np.arange(n_groups), group_size)                       # [B]
            r = reward.reshape(n_groups, group_size)
            adv = ((r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-6)).reshape(-1)  # [B]
            sid = s * 1000 + np.arange(B)
            lengths = rng.integers(T // 2, T + 1, B)
            mask = np.arange(T)[None, :] < lengths[:, None]                      # [B, T]
            tok = rng.integers(0, 500, (B, T))                                   # [B, T]
            texts = [" ".join(f"w{t}" for t in tok[i, :lengths[i]]) for i in range(B)]
            lp_old = -rng.uniform(0.2, 3.0, (B, T)).astype(np.float32)           # [B, T]
            lp_roll = lp_old + 0.01 * rng.standard_normal((B, T)).astype(np.float32)
            turn = (np.arange(T)[None, :] >= T // 2).astype(np.int64).repeat(B, 0) if collapsing else None
            col.record_rollout(s, sid, group_ids=s * 100 + g, token_ids=tok, response_mask=mask,
                               logp_rollout=lp_roll, rewards=reward, format_valid=fmt, success=success,
                               texts=texts, turn_ids=turn)
            drift = np.zeros(B, np.float32)
            if collapsing and s >= drift_at:
                share = min(0.9, 0.1 + 0.05 * (s - drift_at))
                hit = (adv < 0) & (rng.random(B) < share)
                drift[hit] = -0.5                                                # s_i ~ 0.6
            entropy_level = 1.5 if not collapsing or s < drift_at else max(0.1, 1.5 - 0.06 * (s - drift_at))
            for u in range(2):
                noise = 0.02 * rng.standard_normal((B, T)).astype(np.float32)
                lp = lp_old + drift[:, None] + noise                              # [B, T]
                lp_ref = lp_old - 0.01 * (1 + (s if collapsing else 0) / 10)
                ent = np.full((B, T), entropy_level, np.float32) + 0.05 * rng.standard_normal((B, T)).astype(
                    np.float32)
                col.record_update(s, update=u, logp=lp, logp_old=lp_old, advantages=adv, response_mask=mask,
                                  logp_ref=lp_ref, logp_rollout=lp_roll, entropy=ent, sample_ids=sid,
                                  token_ids=tok, turn_ids=turn)
            if collapsing and s == drift_at + 3:  # what an online monitor would have written
                col.record_alert(step=s, detector="neg_adv_low_is", severity="warning", state="warning", risk=0.6,
                                 title="Negative-advantage low-IS sequences accumulate", source="online")
            grad = 1.0 + 0.1 * rng.standard_normal()
            if collapsing and s >= collapse_at - 4:
                grad *= 20.0
            col.record_step(s, metrics={"success_rate": float(success.mean()), "grad_norm": float(grad),
                                        "lr": 1e-6})
    return str(root)


def make_steps_csv(path, steps: int = 50, collapsing: bool = True) -> str:
    """A step-metrics CSV like a verl console log export (verl-style names included)."""
    rng = np.random.default_rng(1)
    rows = ["step,success_rate,actor/entropy,actor/grad_norm,actor/ppo_kl,actor/pg_clipfrac,note"]
    for s in range(steps):
        succ = (0.2 + 0.012 * s if s < 35 else 0.02) if collapsing else 0.2 + 0.01 * s
        rows.append(f"{s},{succ + 0.01 * rng.standard_normal():.4f},{1.2 - 0.01 * s:.4f},"
                    f"{(1.0 if s < 30 or not collapsing else 15.0):.3f},{0.001 * (1 + s):.5f},{0.01:.3f},ok")
    with open(path, "w") as fh:
        fh.write("\n".join(rows) + "\n")
    return str(path)

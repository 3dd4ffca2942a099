"""Synthetic runs written through the public Collector API (healthy vs collapsing).

Collapsing run (ARLArena-like): negative-advantage low-IS sequences accumulate from step 40, the policy-update KL
and the grad norm spike from step 80, success and the valid-format ratio fall from step 100, entropy blows up.
"""
from __future__ import annotations

import numpy as np

import arldiag

G, PER_GROUP, T = 4, 8, 24
B = G * PER_GROUP


def write_run(root, kind: str = "healthy", n_steps: int = 130, seed: int = 0, monitor=None, name=None,
              nalis_from: int = 40, spike_at: int = 80, fall_from: int = 100, stop_when_asked: bool = False,
              only_steps=None):
    if kind not in ("healthy", "collapse"):
        raise ValueError(kind)
    rng = np.random.default_rng(seed)
    col = arldiag.Collector(root, config={"kind": kind, "seed": seed}, clip=(0.2, 0.28), name=name,
                            algorithm="cispo" if kind == "collapse" else "sampo", monitor=monitor,
                            token_sample_rate=0.1, flush_every=5, strict=True)
    collapse = kind == "collapse"
    with col:
        for step in range(n_steps):
            u = step / n_steps
            p_succ = 0.15 + 0.6 * u
            p_fmt = 0.7 + 0.25 * u
            if collapse and step >= fall_from:
                k = step - fall_from
                p_succ = max(0.0, (0.15 + 0.6 * fall_from / n_steps) * (1 - k / 8))
                p_fmt = max(0.02, (0.7 + 0.25 * fall_from / n_steps) * (1 - k / 10))
            fmt = rng.random(B) < p_fmt
            succ = (rng.random(B) < p_succ) & fmt
            rewards = succ * 1.0 - (~fmt) * 0.1
            r = rewards.reshape(G, PER_GROUP)
            adv = ((r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-6)).reshape(B)  # [B]
            lengths = rng.integers(12, T + 1, size=B)
            mask = np.arange(T)[None, :] < lengths[:, None]                                    # [B, T]
            logp_old = -np.abs(rng.normal(1.0, 0.3, size=(B, T)))                                # [B, T]
            seq_shift = rng.normal(0, 0.01, size=(B, 1))
            tok_noise = 0.02
            if collapse and step >= nalis_from:
                q = min(0.9, 0.025 * (step - nalis_from + 1))
                low = (adv < 0) & (rng.random(B) < q)
                seq_shift[low, 0] -= 0.45                                # s_i ~ 0.64 < 1 - eps_low
            if collapse and step >= spike_at:
                tok_noise = 0.35 if step == spike_at else 0.15
            logp = logp_old + seq_shift + rng.normal(0, tok_noise, size=(B, T))
            logp_ref = logp_old + rng.normal(0, 0.05, size=(B, T))
            logp_roll = logp_old + rng.normal(0, 0.01, size=(B, T))
            h = 1.0 - 0.2 * u
            if collapse and step >= fall_from:
                h = (1.0 - 0.2 * fall_from / n_steps) * (1 + 0.15 * (step - fall_from))
            entropy = np.full((B, T), h) + rng.normal(0, 0.02, size=(B, T))
            gn = 1.0 + rng.normal(0, 0.1)
            if collapse and step >= spike_at:
                gn *= 12.0 if step == spike_at else 4.0
            sids = step * 1000 + np.arange(B)
            if only_steps is not None and step not in only_steps:
                continue  # the random draws above keep the run identical to a full one
            col.record_rollout(step, sids, group_ids=np.repeat(np.arange(G), PER_GROUP) + step * 100,
                               response_mask=mask, logp_rollout=logp_roll, rewards=rewards, format_valid=fmt,
                               success=succ, truncated=lengths >= T)
            col.record_update(step, 0, logp=logp, logp_old=logp_old, advantages=adv, response_mask=mask,
                              logp_ref=logp_ref, logp_rollout=logp_roll, entropy=entropy, sample_ids=sids)
            col.record_step(step, {"success_rate": float(succ.mean()), "grad_norm": gn, "loss": 0.1})
            if stop_when_asked and col.should_stop:
                break
    return col

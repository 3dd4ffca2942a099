"""Synthetic runs at any size, written through the public Collector API (``arldiag synth``).

Shapes follow the sample suite of the reference trainer (sample_runs/): groups of 4 rollouts per task, one training
sample per turn, responses filling about 74 % of the length budget (sample runs: mean 11.8 of 16 tokens), 8
mini-batches per step (off-policy drift growing with the mini-batch index), confident policies (token log-prob
about -0.23, entropy about 0.22), sequence log-ratios of a few 1e-3 to 1e-2.

``collapse_at=c`` injects the ARLArena collapse pattern the detectors look for: negative-advantage low-IS sequences
pile up from c - 40 steps (their sequence ratio drops to about 0.64), the KL to the reference rises from c - 20 and
the policy-update KL spikes at c - 10, then at c the valid-format ratio and success break, responses run to the
length limit and entropy climbs.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from arldiag.collectors.collector import Collector

# the share of the break (success, valid format, length, entropy) already there at the collapse step
BREAK_AT_C = 0.6
GROUP = 4           # rollouts per task (sample suite: 4 tasks x 4 rollouts)
MINIBATCHES = 8     # updates per step (sample suite: 8 mini-batches, 1 epoch)
FILL = 0.74         # mean response length / budget in the sample suite


def parse_count(text: str) -> int:
    """'100M', '2.5k', '1e6', '300000' -> int; ValueError naming the value otherwise."""
    s = str(text).strip().lower().replace("_", "")
    mult = {"k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9}.get(s[-1:], 1)
    try:
        n = float(s[:-1] if mult > 1 else s) * mult
    except ValueError:
        raise ValueError(f"--tokens: cannot read {text!r} as a count (e.g. 100M, 250k, 1000000)") from None
    if not math.isfinite(n) or n < 1:
        raise ValueError(f"--tokens must be at least 1, got {text!r}")
    return int(n)


def write_synth(out, tokens: int, steps: int = 100, collapse_at: int | None = None, ranks: int = 1,
                max_len: int = 256, seed: int = 0, token_sample_rate: float = 1.0, flush_every: int = 10) -> dict:
    """Write a synthetic run of about ``tokens`` token rows under ``out`` (each rank its own Collector, one after
    the other). Returns a summary: tokens written, samples, steps."""
    if steps < 1 or ranks < 1 or max_len < 2:
        raise ValueError("steps, ranks must be >= 1 and max_len >= 2")
    if collapse_at is not None and not 0 <= collapse_at < steps:
        raise ValueError(f"--collapse-at must be a step in [0, {steps}), got {collapse_at}")
    per_update = tokens / (steps * ranks * MINIBATCHES)
    b = max(GROUP, int(round(per_update / (FILL * max_len) / GROUP)) * GROUP)   # samples per update, whole groups
    total = 0
    cfg: dict[str, Any] = {"synthetic": True, "tokens": tokens, "steps": steps, "collapse_at": collapse_at,
                           "ranks": ranks, "max_len": max_len, "seed": seed}
    for rank in range(ranks):
        rng = np.random.default_rng([seed, rank])
        with Collector(out, config=cfg, clip=(0.2, 0.28), algorithm="synthetic", rank=rank,
                               world_size=ranks, token_sample_rate=token_sample_rate, flush_every=flush_every,
                               name=None) as col:
            for step in range(steps):
                total += _write_step(col, rng, step, rank, b, max_len, collapse_at)
    return {"tokens": total, "samples_per_update": b, "steps": steps, "ranks": ranks}


def _phase(step: int, c: int | None) -> dict[str, float]:
    """Collapse intensities at ``step`` (all 0 for a healthy run)."""
    if c is None:
        return {"nalis": 0.0, "kl": 0.0, "spike": 0.0, "brk": 0.0}
    return {"nalis": min(0.9, max(0.0, 0.025 * (step - (c - 40) + 1))) if step >= c - 40 else 0.0,
            "kl": max(0.0, (step - (c - 20)) / 20.0) if step >= c - 20 else 0.0,
            "spike": 1.0 if step == c - 10 else (0.4 if step > c - 10 else 0.0),
            # the break: at c itself success falls under half its level (the collapse label's rule, docs/detectors.md),
            # the rest within 4 steps; a ramp from 1/8 at c put the label at c + 1
            "brk": min(1.0, BREAK_AT_C + (1.0 - BREAK_AT_C) * (step - c) / 4.0) if step >= c else 0.0}


def _write_step(col, rng, step: int, rank: int, b: int, T: int, c: int | None) -> int:
    ph = _phase(step, c)
    B = b * MINIBATCHES
    n_groups = B // GROUP
    p_fmt = 0.97 * (1 - ph["brk"]) + 0.02
    p_succ = (0.35 + 0.1 * rng.random()) * (1 - ph["brk"])
    fmt = rng.random(B) < p_fmt
    succ = (rng.random(B) < p_succ) & fmt
    rewards = succ * 1.0 - (~fmt) * 0.1
    r = rewards.reshape(n_groups, GROUP)
    adv = ((r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-6)).reshape(B).astype(np.float32)
    frac = np.clip(rng.normal(FILL + 0.26 * ph["brk"], 0.2, B), 1.0 / T, 1.0)
    lengths = np.maximum(1, np.round(frac * T)).astype(np.int64)
    sids = (np.int64(step) << 40) + (np.int64(rank) << 32) + np.arange(B, dtype=np.int64)
    gid = (np.int64(step) << 32) + rank * n_groups + np.arange(B) // GROUP
    turn = rng.integers(0, 15, B)
    col.record_rollout(step, sids, group_ids=gid, turn_ids=turn, rewards=rewards, format_valid=fmt, success=succ,
                       truncated=lengths >= T)
    n = 0
    for u in range(MINIBATCHES):
        sl = slice(u * b, (u + 1) * b)
        L = lengths[sl]
        mask = np.arange(T)[None, :] < L[:, None]
        shape = (b, T)
        lpo = -np.abs(rng.normal(0.23, 0.27, shape)).astype(np.float32)
        shift = rng.normal(0, 0.004 * (1 + u), (b, 1))              # off-policy drift grows per mini-batch
        a = adv[sl]
        if ph["nalis"]:
            low = (a < 0) & (rng.random(b) < ph["nalis"])
            shift[low, 0] -= 0.45                                      # s_i ~ 0.64 < 1 - eps
        noise = 0.02 + 0.3 * ph["spike"]
        lp = (lpo + shift + rng.normal(0, noise, shape)).astype(np.float32)
        ref = (lpo + rng.normal(0, 0.05 + 0.6 * ph["kl"], shape)).astype(np.float32)
        roll = (lpo + rng.normal(0, 0.005, shape)).astype(np.float32)
        ent = (0.22 * (1 + 3 * ph["brk"]) + rng.normal(0, 0.05, shape)).astype(np.float32).clip(0)
        col.record_update(step, u, logp=lp, logp_old=lpo, advantages=a, response_mask=mask, logp_ref=ref,
                          logp_rollout=roll, entropy=ent, sample_ids=sids[sl])
        n += int(L.sum())
    gn = (1.0 + rng.normal(0, 0.1)) * (1 + 8 * ph["spike"])
    col.record_step(step, {"success_rate": float(succ.mean()), "grad_norm": gn})
    return n

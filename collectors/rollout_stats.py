"""Statistics of recorded rollouts: the step aggregates of each ``record_rollout`` call (sample counts, rewards,
format, truncation, response lengths, trajectory success) and its GRPO group rows, for many calls at once.

Each call is its own unit, as when it was computed on its own: a group that two calls of one step both mention
is two group rows. Calls are segments of the concatenated samples (``cid``: the call of each sample), so a batch
of small steps (Collector ``batch_s``) costs about one call's numpy operations; one call is the same code with one
segment. All calls of one invocation give the same per-sample columns (the caller groups them).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


# the stored step aggregates (schema.STEP_AGGS) these statistics produce (collector.check_aggregates)
ROLLOUT_AGGS = ("n_roll", "n_roll_reward", "sum_reward", "sum_reward_sq", "n_format_known", "n_format_valid",
                "n_trunc_known", "n_truncated", "n_resp_len", "sum_resp_len", "max_resp_len", "min_resp_len", "n_traj",
                "n_traj_success", "n_groups", "n_groups_zero_std", "sum_group_reward_std")


class RolloutCall(NamedTuple):
    step: int
    sid: np.ndarray                 # [B] sample ids
    per_sample: dict[str, np.ndarray]  # [B] columns: group_id, trajectory_id, reward, format_valid, truncated, success
    lengths: np.ndarray | None      # [B] response lengths (None: no response mask given)


def rollout_stats(calls: list[RolloutCall], rank: int) -> tuple[list[dict[str, float]], dict[str, Any] | None]:
    """(aggregates of each call, the group rows of all calls as columns or None)."""
    C = len(calls)
    sizes = np.array([c.sid.shape[0] for c in calls], np.int64)
    cid = np.repeat(np.arange(C), sizes)                                   # [n] call of each sample
    first = calls[0].per_sample

    def col(name):
        return None if name not in first else np.concatenate([c.per_sample[name] for c in calls])

    out: list[dict[str, float]] = [{"n_roll": int(b)} for b in sizes]

    def put(name, values, cast=float):
        for a, v in zip(out, values.tolist()):
            a[name] = cast(v)

    r = col("reward")
    if r is not None:
        fin = np.isfinite(r)
        rf = np.where(fin, r, 0.0)
        put("n_roll_reward", np.bincount(cid, fin, C), int)
        put("sum_reward", np.bincount(cid, rf, C))
        put("sum_reward_sq", np.bincount(cid, rf * rf, C))
    fv = col("format_valid")
    if fv is not None:
        put("n_format_known", sizes, int)
        put("n_format_valid", np.bincount(cid, fv, C), int)
    tr = col("truncated")
    if tr is not None:
        put("n_trunc_known", sizes, int)
        put("n_truncated", np.bincount(cid, tr, C), int)
    if calls[0].lengths is not None:
        lengths = np.concatenate([c.lengths for c in calls]).astype(np.float64)
        nz = sizes > 0
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))[nz]
        mx, mn = np.full(C, np.nan), np.full(C, np.nan)
        if nz.any():
            mx[nz], mn[nz] = np.maximum.reduceat(lengths, starts), np.minimum.reduceat(lengths, starts)
        sums = np.bincount(cid, lengths, C)
        for i, a in enumerate(out):
            if nz[i]:  # as before: no length statistics for a call without samples
                a.update(n_resp_len=int(sizes[i]), sum_resp_len=float(sums[i]), max_resp_len=float(mx[i]),
                         min_resp_len=float(mn[i]))
    sid = np.concatenate([c.sid for c in calls])
    traj = col("trajectory_id")
    traj = sid if traj is None else traj
    succ = col("success")
    if succ is not None:  # a trajectory succeeds when any of its samples does
        (tcall, _), tinv = _unique_keys(cid, traj)
        s_traj = np.zeros(tcall.size, bool)
        np.logical_or.at(s_traj, tinv, succ)
        put("n_traj", np.bincount(tcall, None, C), int)
        put("n_traj_success", np.bincount(tcall, s_traj, C), int)
    g = col("group_id")
    groups = None
    if g is not None and r is not None:
        groups = _groups(calls, cid, g, traj, r, succ, fv, out, rank)
    return out, groups


def _unique_keys(*keys: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Distinct tuples of ``keys`` (sorted by the first key, then the next): (each key's value per tuple, each
    row's tuple index), as ``np.unique`` of the stacked rows gives, without its slower structured-dtype sort."""
    order = np.lexsort(keys[::-1])  # lexsort sorts by its last key first
    new = np.zeros(order.size, bool)
    new[:1] = True
    for k in keys:
        sk = k[order]
        new[1:] |= sk[1:] != sk[:-1]
    inv = np.empty(order.size, np.int64)
    inv[order] = np.cumsum(new) - 1
    return [k[order][new] for k in keys], inv


def _groups(calls, cid, g, traj, r, succ, fv, out, rank) -> dict[str, Any]:
    """GRPO group statistics over trajectory returns (sum of the trajectory's sample rewards), per (call, group)."""
    C = len(calls)
    (tcall, tg, _), inv = _unique_keys(cid, g, traj)                        # [n_traj] call and group of each
    ret = np.bincount(inv, weights=np.nan_to_num(r), minlength=tcall.size)  # [n_traj] returns
    (gcall, ug), ginv = _unique_keys(tcall, tg)                             # [n_groups] call, group id
    n_t = np.bincount(ginv, minlength=gcall.size)
    mean = np.bincount(ginv, weights=ret, minlength=gcall.size) / n_t
    var = np.maximum(np.bincount(ginv, weights=ret * ret, minlength=gcall.size) / n_t - mean**2, 0.0)
    # equal returns exactly -> zero std (avoid float noise from the moment formula)
    rmin = np.full(gcall.size, np.inf)
    rmax = np.full(gcall.size, -np.inf)
    np.minimum.at(rmin, ginv, ret)
    np.maximum.at(rmax, ginv, ret)
    zero = rmax - rmin <= 1e-12 * np.maximum(1.0, np.abs(rmax))
    std = np.where(zero, 0.0, np.sqrt(var))
    sgroup = ginv[inv]                                                      # [n] group of each sample
    n_s = np.bincount(sgroup, minlength=gcall.size)
    steps = np.array([c.step for c in calls], np.int64)
    cols = {"step": steps[gcall], "rank": np.full(gcall.size, rank, np.int32), "group_id": ug,
            "n_samples": n_s.astype(np.int32), "n_trajectories": n_t.astype(np.int32),
            "reward_mean": mean, "reward_std": std, "zero_std": zero}
    if succ is not None:
        s_traj = np.zeros(tcall.size)
        np.maximum.at(s_traj, inv, succ.astype(np.float64))
        cols["success_frac"] = np.bincount(ginv, weights=s_traj, minlength=gcall.size) / n_t
    if fv is not None:
        cols["format_valid_frac"] = np.bincount(sgroup, weights=fv.astype(np.float64), minlength=gcall.size) / n_s
    n_groups = np.bincount(gcall, None, C)
    n_zero = np.bincount(gcall, zero, C)
    sum_std = np.bincount(gcall, std, C)
    for i, a in enumerate(out):
        a.update(n_groups=int(n_groups[i]), n_groups_zero_std=int(n_zero[i]), sum_group_reward_std=float(sum_std[i]))
    return cols

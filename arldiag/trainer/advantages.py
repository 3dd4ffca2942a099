"""Advantage estimators and dynamic filtering as pure numpy functions (ALGORITHMS.md, "Advantages").

Inputs are flat arrays: one entry per episode (``grpo_advantages``, ``dynamic_filter_keep``) or per step-sample
(``gigpo_step_advantages``). The standard deviation is the unbiased one (ddof=1, as torch.std in verl); a group or
anchor cluster with a single member gets advantage 0.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

EPS = 1e-6


def _zscore_within(values: np.ndarray, keys: Sequence) -> np.ndarray:
    """(x - mean_c x) / (std_c x + eps) within each cluster c of equal key; singletons give 0."""
    values = np.asarray(values, dtype=np.float64)
    out = np.zeros_like(values)
    clusters: dict = {}
    for i, k in enumerate(keys):
        clusters.setdefault(k, []).append(i)
    for idx in clusters.values():
        if len(idx) < 2:
            continue
        x = values[idx]
        out[idx] = (x - x.mean()) / (x.std(ddof=1) + EPS)
    return out


def grpo_advantages(returns: np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    """GRPO: A_i = (R_i - mean_g R) / (std_g R + 1e-6) over the episodes of the same task (group), [N]."""
    returns = np.asarray(returns, dtype=np.float64)
    group_ids = np.asarray(group_ids)
    if returns.shape != group_ids.shape:
        raise ValueError(f"returns shape {returns.shape} does not match group_ids shape {group_ids.shape}")
    return _zscore_within(returns, group_ids.tolist())


def discounted_returns(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """G_t = sum_k gamma^k r_{t+k} for the turns of one episode, [K]."""
    out = np.zeros(len(rewards), dtype=np.float64)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def gigpo_step_advantages(step_returns: np.ndarray, group_ids: np.ndarray, anchors: Sequence[str]) -> np.ndarray:
    """GiGPO step advantage: step-samples of the same group that start from an identical anchor observation form a
    cluster; their discounted returns G_t are z-scored within the cluster (a singleton cluster gives 0), [S]."""
    step_returns = np.asarray(step_returns, dtype=np.float64)
    group_ids = np.asarray(group_ids)
    if not (len(step_returns) == len(group_ids) == len(anchors)):
        raise ValueError("step_returns, group_ids and anchors must have the same length")
    keys = list(zip(group_ids.tolist(), list(anchors)))
    return _zscore_within(step_returns, keys)


def gigpo_advantages(episode_advantage_per_step: np.ndarray, step_advantages: np.ndarray, omega: float) -> np.ndarray:
    """Combined GiGPO advantage A' = A_episode + omega * A_step, per step-sample."""
    return np.asarray(episode_advantage_per_step, dtype=np.float64) + omega * np.asarray(step_advantages, dtype=np.float64)


def dynamic_filter_keep(returns: np.ndarray, group_ids: np.ndarray, step: int, cold_start_steps: int) -> np.ndarray:
    """DAPO dynamic filtering: keep an episode iff its group's returns are not all equal; during the first
    ``cold_start_steps`` steps every group is kept (ARLArena). Returns a bool array [N]."""
    returns = np.asarray(returns, dtype=np.float64)
    group_ids = np.asarray(group_ids)
    if step < cold_start_steps:
        return np.ones(len(returns), dtype=bool)
    keep = np.zeros(len(returns), dtype=bool)
    for g in np.unique(group_ids):
        idx = group_ids == g
        keep[idx] = bool(np.ptp(returns[idx]) > 1e-9)
    return keep

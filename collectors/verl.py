"""verl adapter: feed verl's batch dictionaries to a Collector without importing verl.

verl's actor update (``dp_actor.update_policy``) sees, per mini-batch, a TensorDict with ``responses``,
``response_mask``, ``old_log_probs``, ``advantages`` and optionally ``ref_log_prob`` and ``rollout_log_probs``
(when rollout log-probs are recomputed for mismatch correction), and computes ``log_prob`` / ``entropy`` itself.
Group ids live in ``non_tensor_batch["uid"]`` (strings); they are hashed to stable int64 ids here.

    from arldiag.collectors.verl import record_verl_update
    record_verl_update(col, step=global_steps, update=epoch * n_mini + i, data=mini_batch.batch,
                       log_prob=log_prob, entropy=entropy, uids=mini_batch.non_tensor_batch.get("uid"))
"""
from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

import numpy as np

# verl key -> Collector argument
VERL_KEYS = {"old_log_probs": "logp_old", "advantages": "advantages", "response_mask": "response_mask",
             "ref_log_prob": "logp_ref", "rollout_log_probs": "logp_rollout", "responses": "token_ids"}


def stable_ids(values: Sequence[Any]) -> np.ndarray:
    """int64 ids from arbitrary (string) ids, stable across processes (blake2b, not Python's salted hash)."""
    out = np.empty(len(values), np.int64)
    for i, v in enumerate(values):
        out[i] = int.from_bytes(hashlib.blake2b(str(v).encode(), digest_size=8).digest(), "little", signed=True)
    return out


def record_verl_update(col, step: int, update: int, data: Mapping[str, Any], log_prob: Any,
                       entropy: Any = None, uids: Sequence[Any] | None = None,
                       sample_ids: Sequence[Any] | None = None) -> dict:
    """Record one verl mini-batch update. ``data`` is the mini-batch TensorDict (or any mapping of its keys)."""
    missing = [k for k in ("old_log_probs", "advantages", "response_mask") if k not in data]
    if missing:
        raise ValueError(f"data is missing verl keys {missing}; it has {sorted(data.keys())}")
    kw = {arg: data[key] for key, arg in VERL_KEYS.items() if key in data and data[key] is not None}
    if sample_ids is not None:
        kw["sample_ids"] = stable_ids(sample_ids) if not np.issubdtype(np.asarray(sample_ids).dtype, np.integer) \
            else np.asarray(sample_ids)
    return col.record_update(step, update, logp=log_prob, entropy=entropy, **kw)


def record_verl_rollout(col, step: int, data: Mapping[str, Any], uids: Sequence[Any],
                        sample_ids: Sequence[Any], scores: Any = None) -> None:
    """Record a verl rollout batch: group ids from ``uid``, rewards = sum of ``token_level_scores``."""
    mask = data["response_mask"]
    rewards = scores
    if rewards is None and "token_level_scores" in data:
        t = data["token_level_scores"]
        rewards = (t * mask).sum(-1) if hasattr(t, "sum") else np.asarray(t).sum(-1)
    col.record_rollout(step, sample_ids=stable_ids(sample_ids), group_ids=stable_ids(uids),
                       token_ids=data.get("responses"), response_mask=mask,
                       logp_rollout=data.get("rollout_log_probs"), rewards=rewards)

"""Deferred updates: the inputs of several ``record_update(..., defer=True)`` calls of one step, stacked into one
padded batch so that the statistics (arldiag/stats.py) run once per step instead of once per call.

Why: the statistics of an update cost a roughly fixed ~1 ms of numpy/Arrow calls plus a small per-token part. verl
calls the policy loss once per micro-batch (4 to 16 per step is common) and TRL once per gradient-accumulation
micro-batch, so on small micro-batches the fixed part dominated the hooks' cost (docs/integrations/overhead.md).

Every statistic arldiag records is per token, per row (sample) or a mergeable sum/count/extremum over them, so one
pass over the stacked rows gives the same values as one pass per call (float64 sums up to summation order). Rows
keep their update index (the ``update`` column) and the token-row selection stays per update
(Collector._put_tokens). Right padding with ``mask = False`` adds no token: positions are unchanged.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from arldiag.backends import HostCopy, is_torch
from arldiag.stats import UpdateInputs

# the inputs a caller hands to record_update; the rollout_* / retok fields are filled later, on the stacked batch
_CALLER_FIELDS = ("logp", "logp_old", "advantages", "mask", "logp_ref", "logp_rollout", "entropy", "turn_ids",
                  "token_ids")


def _copy(x: Any) -> Any:
    return x.clone() if is_torch(x) else np.array(x)


def owned(inp: UpdateInputs) -> UpdateInputs:
    """A copy of the caller's inputs: a trainer may write into its buffers again before the step ends (CPU arrays
    are zero-copy views of its tensors, device tensors are its own)."""
    return UpdateInputs(**{f: None if getattr(inp, f) is None else _copy(getattr(inp, f)) for f in _CALLER_FIELDS})


def on_host(staged: list[tuple[int, UpdateInputs, Any]]) -> list[tuple[int, UpdateInputs, Any]]:
    """Staged updates (update, inputs, sample ids) with their device tensors brought to the host in one copy
    (backends.HostCopy), for the statistics to run in numpy: the alternative to running them on the device
    (StepEngine.stats_on = "host"), which benchmarks/gpu_overhead.py measures against it."""
    named = {}
    for i, (_, inp, sid) in enumerate(staged):
        named.update((f"{i}.{f}", getattr(inp, f)) for f in _CALLER_FIELDS if is_torch(getattr(inp, f)))
        if is_torch(sid):
            named[f"{i}.sid"] = sid
    host = HostCopy(named).wait()
    return [(u, UpdateInputs(**{f: host.get(f"{i}.{f}", getattr(inp, f)) for f in _CALLER_FIELDS}),
             host.get(f"{i}.sid", sid)) for i, (u, inp, sid) in enumerate(staged)]


def signature(inp: UpdateInputs) -> tuple:
    """Which inputs were given and their rank ([B] or [B, T]): only updates with the same signature are stacked, so
    an input is never made up (e.g. NaN entropies) for a call that did not give it."""
    out = []
    for f in _CALLER_FIELDS:
        v = getattr(inp, f)
        out.append(None if v is None else (len(v.shape), is_torch(v), str(getattr(v, "device", "cpu"))))
    return tuple(out)


def stack(parts: list[UpdateInputs]) -> UpdateInputs:
    """One UpdateInputs of all rows of ``parts`` (same signature), in order, [B, T] inputs right-padded to the
    longest T with zeros (``mask`` False there)."""
    if len(parts) == 1:
        return parts[0]
    sizes = [p.mask.shape[0] for p in parts]
    B, T = sum(sizes), max(p.mask.shape[1] for p in parts)
    out = {}
    for f in _CALLER_FIELDS:
        vals = [getattr(p, f) for p in parts]
        if vals[0] is None:
            out[f] = None
        elif len(vals[0].shape) == 1:
            out[f] = _cat(vals)
        else:
            out[f] = _pad_rows(vals, sizes, B, T)
    return UpdateInputs(**out)


def _cat(vals: list) -> Any:
    if is_torch(vals[0]):
        import torch

        return torch.cat(vals)
    return np.concatenate(vals)


def _pad_rows(vals: list, sizes: list[int], B: int, T: int) -> Any:
    first = vals[0]
    if all(v.shape[1] == T for v in vals):
        return _cat(vals)
    out = first.new_zeros((B, T)) if is_torch(first) else np.zeros((B, T), first.dtype)
    r = 0
    for v, n in zip(vals, sizes):
        out[r:r + n, :v.shape[1]] = v
        r += n
    return out

"""Reduce every rank's mergeable step aggregates to rank 0 through the trainer's torch.distributed process group,
so an online monitor on rank 0 sees the whole step (schema.STEP_AGGS: sums add, maxima/minima take the extreme;
a missing aggregate stays missing). torch is imported only when a collector is given a group."""
from __future__ import annotations

import math
from typing import Any, Mapping

from arldiag.schema import STEP_AGGS

_FILL = {"sum": 0.0, "max": -math.inf, "min": math.inf}


def reduce_step_aggs(aggs: Mapping[str, float], group: Any = None) -> dict[str, float] | None:
    """All ranks call this at the same step; rank 0 gets the merged aggregates, the others None.
    ``group``: a torch.distributed ProcessGroup, or None for the default group."""
    import torch
    import torch.distributed as dist

    names = [a.name for a in STEP_AGGS]
    merges = [a.merge for a in STEP_AGGS]
    vals = torch.tensor([_FILL[m] if aggs.get(n) is None or aggs[n] != aggs[n] else float(aggs[n])
                         for n, m in zip(names, merges)], dtype=torch.float64)
    have = torch.tensor([0.0 if aggs.get(n) is None or aggs[n] != aggs[n] else 1.0 for n in names],
                        dtype=torch.float64)
    out = {}
    for how, op in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX), ("min", dist.ReduceOp.MIN)):
        idx = [i for i, m in enumerate(merges) if m == how]
        part = vals[idx].clone()
        dist.reduce(part, dst=_dst(group), op=op, group=group)
        out[how] = (idx, part)
    dist.reduce(have, dst=_dst(group), op=dist.ReduceOp.SUM, group=group)
    if dist.get_rank(group) != 0:
        return None
    merged: dict[str, float] = {}
    for idx, part in out.values():
        for i, v in zip(idx, part.tolist()):
            if have[i] > 0:
                merged[names[i]] = int(v) if names[i].startswith("n_") else v
    return merged


def _dst(group) -> int:
    """Global rank of the group's rank 0."""
    import torch.distributed as dist

    return 0 if group is None else dist.get_global_rank(group, 0)

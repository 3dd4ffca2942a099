"""An update aligned with its rollout: what ``record_rollout`` said about each sample of the step (RolloutCache,
looked up by sample id) put next to the trainer's update rows (align).

The rollout engine's log-probs and token ids are matched to the trainer's masked tokens sample by sample (same
token count: same positions; different count: a retokenization, counted); the rollout's per-sample columns (group,
reward, success, ...) become columns of the update's sequence rows, null for a sample the rollout did not mention.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from arldiag.backends import is_torch
from arldiag.collectors.convert import row_counts
from arldiag.collectors.staging import stack
from arldiag.stats import UpdateInputs


class RolloutCache:
    """What record_rollout said about each sample of the current step, looked up by sample id at update time."""

    def __init__(self) -> None:
        self.ids = np.empty(0, np.int64)      # sorted sample ids
        self.cols: dict[str, np.ndarray] = {}  # per-sample columns aligned with ids
        self.flat_logp = np.empty(0, np.float32)   # masked rollout log-probs, concatenated per sample
        self.flat_tok = np.empty(0, np.int64)      # masked rollout token ids (-1 unknown)
        self.offsets = np.empty(0, np.int64)
        self.lengths = np.empty(0, np.int64)
        self.texts: list | None = None

    def add(self, ids, cols, flat_logp, flat_tok, lengths, texts) -> None:
        if self.ids.size == 0 and not self.cols and self.texts is None:  # the step's first rollout (the usual case)
            self._first(ids, cols, flat_logp, flat_tok, lengths, texts)
            return
        order_new = np.argsort(ids, kind="stable")
        base = self.flat_logp.size
        offs = base + np.concatenate(([0], np.cumsum(lengths)[:-1])) if lengths.size else np.empty(0, np.int64)
        all_ids = np.concatenate([self.ids, ids[order_new]])
        order = np.argsort(all_ids, kind="stable")
        self.ids = all_ids[order]
        for k, v in cols.items():
            old = self.cols.get(k)
            if old is None:
                old = np.full(all_ids.size - ids.size, _missing(v.dtype), v.dtype)
            self.cols[k] = np.concatenate([old, v[order_new]])[order]
        for k in list(self.cols):
            if k not in cols:
                self.cols[k] = np.concatenate([self.cols[k], np.full(ids.size, _missing(self.cols[k].dtype),
                                                                     self.cols[k].dtype)])[order]
        self.flat_logp = np.concatenate([self.flat_logp, flat_logp])
        self.flat_tok = np.concatenate([self.flat_tok, flat_tok])
        self.offsets = np.concatenate([self.offsets, offs[order_new]])[order]
        self.lengths = np.concatenate([self.lengths, lengths[order_new]])[order]
        if texts is not None or self.texts is not None:
            old_t = self.texts if self.texts is not None else [None] * (all_ids.size - ids.size)
            new_t = [texts[i] for i in order_new] if texts is not None else [None] * ids.size
            merged = old_t + new_t
            self.texts = [merged[i] for i in order]

    def _first(self, ids, cols, flat_logp, flat_tok, lengths, texts) -> None:
        order = np.argsort(ids, kind="stable")
        self.ids = ids[order]
        self.cols = {k: v[order] for k, v in cols.items()}
        self.flat_logp, self.flat_tok = flat_logp, flat_tok
        offs = np.zeros(lengths.size, np.int64)
        np.cumsum(lengths[:-1], out=offs[1:])
        self.offsets, self.lengths = offs[order], lengths[order]
        if texts is not None:
            self.texts = [texts[i] for i in order]

    def lookup(self, sample_ids: np.ndarray) -> np.ndarray:
        """Index into the cache for each id, -1 when unknown."""
        if self.ids.size == 0:
            return np.full(sample_ids.shape, -1, np.int64)
        j = np.searchsorted(self.ids, sample_ids)
        j = np.minimum(j, self.ids.size - 1)
        return np.where(self.ids[j] == sample_ids, j, -1)


class AlignedUpdate:
    """One step's updates, stacked and aligned with its rollout (align): the inputs with the rollout's log-probs and
    token ids per masked token, the sample ids, the update of each row, and the rollout's columns per row."""
    __slots__ = ("step", "inp", "sid", "update", "sizes", "cols", "turn", "texts", "device_ids", "rollout", "added")

    def __init__(self, step, inp, sid, update, sizes, cols, turn, texts):
        self.step, self.inp, self.sid, self.update, self.sizes = step, inp, sid, update, sizes
        self.cols, self.turn, self.texts = cols, turn, texts
        # sample ids on a device (TRL hands them so): {"sid": [B], "j": [B] cache index} brought to the host with
        # the statistics' one copy (compute_update ``extra``), then ``resolve`` fills sid and cols
        self.device_ids: dict | None = None
        self.rollout: RolloutCache | None = None
        self.added: tuple = ()   # the rollout inputs the device alignment added (before knowing any id matched)

    def resolve(self, host: dict) -> tuple:
        """The host side of an update aligned on a device: its sample ids and the rollout's columns per row.
        Returns the rollout inputs that were added although none of the rows is in the rollout (the host path
        adds none then; UpdateStats.drop_rollout takes them out)."""
        self.sid = host["sid"].astype(np.int64, copy=False)
        j = host["j"].astype(np.int64, copy=False)
        self.cols = _rollout_columns(j, j >= 0, self.rollout)
        self.device_ids = self.rollout = None
        return () if (j >= 0).any() else self.added


def _missing(dtype: np.dtype):
    if np.issubdtype(dtype, np.floating):
        return np.nan
    if np.issubdtype(dtype, np.bool_):
        return False
    return -1


def align(step: int, batch: list[tuple[int, UpdateInputs, np.ndarray]], rollout: RolloutCache) -> AlignedUpdate:
    """The updates of ``batch`` ((update, inputs, sample ids) each) stacked and aligned with what the rollout
    recorded for their samples: a new UpdateInputs with the rollout engine's log-probs and token ids per masked
    token (and the per-turn samples' turn ids), and the rollout's per-sample columns per row. The inputs handed in
    are not changed (they may be the trainer's own, or a staged copy shared with another pass)."""
    sizes = [b[1].mask.shape[0] for b in batch]
    inp = stack([b[1] for b in batch])
    sid = batch[0][2] if len(batch) == 1 else _cat([b[2] for b in batch])
    update = batch[0][0] if len(batch) == 1 else np.repeat(np.array([b[0] for b in batch], np.int32), sizes)
    if is_torch(inp.mask):  # device tensors: aligned on the device, the host reads wait for the results' copy
        return _align_device(step, inp, sid, update, sizes, rollout)
    j = rollout.lookup(sid)
    known = j >= 0
    aligned = _rollout_tokens(inp, j, known, rollout)
    return _aligned(step, inp, aligned, sid, update, sizes, j, known, rollout)


def _aligned(step: int, inp: UpdateInputs, aligned: dict, sid, update, sizes, j: np.ndarray, known: np.ndarray,
             rollout: RolloutCache) -> AlignedUpdate:
    """The update with the rollout's columns at host row indices ``j`` [B] (-1: not in the rollout) filled in."""
    if inp.turn_ids is None and "turn" in rollout.cols and known.all():
        aligned["turn_ids"] = rollout.cols["turn"][j]  # per-turn samples: the rollout said which turn each is
    if aligned:
        inp = dataclasses.replace(inp, **aligned)
    turn = None
    if "turn" in rollout.cols:
        turn = np.where(known, rollout.cols["turn"][np.maximum(j, 0)], -1).astype(np.int16)
    texts = None if rollout.texts is None else [rollout.texts[i] if i >= 0 else None for i in j.tolist()]
    return AlignedUpdate(step, inp, sid, update, sizes, _rollout_columns(j, known, rollout), turn, texts)


def _cat(ids: list):
    if any(is_torch(x) for x in ids):
        import torch

        dev = next(x.device for x in ids if is_torch(x))
        return torch.cat([torch.as_tensor(x).to(dev, non_blocking=True) for x in ids])
    return np.concatenate(ids)


def _align_device(step: int, inp: UpdateInputs, sid, update, sizes, rollout: RolloutCache) -> AlignedUpdate:
    """``align`` for device tensors, without a host read: the rollout's log-probs and ids per token as [B, T] device
    tensors (_rollout_tokens_device); sample ids given on the device are looked up there, and their rows' rollout
    columns are filled after the statistics' copy (AlignedUpdate.resolve). Per-turn samples and texts take the
    host lookup (one host read of the ids)."""
    import torch

    dev = inp.mask.device
    if is_torch(sid) and ("turn" in rollout.cols or rollout.texts is not None):
        sid = sid.cpu().numpy()
    if is_torch(sid):
        if rollout.ids.size:
            ids = torch.from_numpy(rollout.ids).to(dev, non_blocking=True)
            j = torch.searchsorted(ids, sid).clamp_(max=ids.numel() - 1)   # [B]
            j = torch.where(ids[j] == sid, j, -1)
        else:
            j = torch.full(sid.shape, -1, dtype=torch.int64, device=dev)
        aligned = _rollout_tokens_device(inp, j, rollout)
        pr = AlignedUpdate(step, dataclasses.replace(inp, **aligned) if aligned else inp, None, update, sizes,
                           None, None, None)
        pr.device_ids, pr.rollout, pr.added = {"sid": sid, "j": j}, rollout, tuple(aligned)
        return pr
    j_h = rollout.lookup(sid)
    known = j_h >= 0
    aligned = _rollout_tokens_device(inp, torch.from_numpy(j_h).to(dev, non_blocking=True), rollout) \
        if known.any() else {}
    return _aligned(step, inp, aligned, sid, update, sizes, j_h, known, rollout)


def _rollout_tokens_device(inp: UpdateInputs, j, rollout: RolloutCache) -> dict[str, Any]:
    """_rollout_tokens on the device: ``j`` [B] the cache index of each row (-1 unknown); the rollout values come
    as [B, T] tensors (NaN / -1 where a token has none), which the statistics' masked layout takes as they are."""
    import torch

    if rollout.ids.size == 0 or (inp.logp_rollout is not None and inp.token_ids is None):
        return {}
    want_lp = inp.logp_rollout is None and not np.all(np.isnan(rollout.flat_logp))
    want_id = inp.token_ids is not None and bool(np.any(rollout.flat_tok >= 0))
    if not (want_lp or want_id):
        return {}
    dev = inp.mask.device

    def up(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(dev, non_blocking=True)

    mask = inp.mask
    known = j >= 0
    jj = j.clamp(min=0)
    n_u = mask.sum(1)                                                   # [B] tokens of the update
    n_r = torch.where(known, up(rollout.lengths)[jj], -1)               # [B] tokens of the rollout
    same = known & (n_u == n_r)
    ok = same[:, None] & mask                                           # [B, T] tokens with a rollout value
    src = torch.where(ok, up(rollout.offsets)[jj][:, None] + mask.cumsum(1) - 1, 0)
    out: dict[str, Any] = {}
    if want_lp:
        out["rollout_flat_logp"] = torch.where(ok, up(rollout.flat_logp)[src], math.nan)
    if want_id:
        out["rollout_flat_token_ids"] = torch.where(ok, up(rollout.flat_tok)[src], -1)
        out["retok_extra"] = torch.where(known & ~same, (n_u - n_r).abs(), -1)
    return out


def _rollout_tokens(inp: UpdateInputs, j: np.ndarray, known: np.ndarray, rollout: RolloutCache) -> dict[str, Any]:
    """The rollout engine's log-probs / token ids per masked token of ``inp`` (same token count per sample: same
    positions; NaN / -1 elsewhere) and the id differences of samples whose count differs (``retok_extra``)."""
    out: dict[str, Any] = {}
    if not known.any() or (inp.logp_rollout is not None and inp.token_ids is None):
        return out
    B = inp.mask.shape[0]
    n_u = row_counts(inp.mask)  # masked tokens are row-major, so [B] counts give each token's row
    n_r = np.where(known, rollout.lengths[np.maximum(j, 0)], -1)
    same = known & (n_u == n_r)
    rows = np.repeat(np.arange(B), n_u)
    k = np.arange(rows.size) - np.concatenate(([0], np.cumsum(n_u)[:-1]))[rows]
    src = rollout.offsets[np.maximum(j, 0)][rows] + k
    ok = same[rows]
    if inp.logp_rollout is None and not np.all(np.isnan(rollout.flat_logp)):
        out["rollout_flat_logp"] = np.where(ok, rollout.flat_logp[np.where(ok, src, 0)], np.nan) \
            if rows.size else np.empty(0, np.float32)
    if inp.token_ids is not None and np.any(rollout.flat_tok >= 0):
        out["rollout_flat_token_ids"] = np.where(ok, rollout.flat_tok[np.where(ok, src, 0)], -1) \
            if rows.size else np.empty(0, np.int64)
        # samples whose lengths differ: a retokenization changed the token count (count the difference)
        out["retok_extra"] = np.where(known & ~same, np.abs(n_u - n_r), -1)
    return out


def _rollout_columns(j: np.ndarray, known: np.ndarray, rollout: RolloutCache) -> dict[str, Any]:
    """The rollout's columns of each row (null / NaN / -1 for a sample the rollout did not mention)."""
    cols: dict[str, Any] = {}
    for name in ("group_id", "trajectory_id", "reward", "format_valid", "truncated", "success",
                 "response_length"):
        src_col = rollout.cols.get(name)
        if src_col is not None:
            v = src_col[np.maximum(j, 0)]
            if np.issubdtype(v.dtype, np.floating):
                cols[name] = np.where(known, v, np.nan)
            elif name in ("group_id", "trajectory_id"):
                cols[name] = np.where(known, v, -1)
            elif known.all():
                cols[name] = v
            else:  # unknown sample: null, not a made-up value
                cols[name] = np.ma.array(v, mask=~known)
    return cols

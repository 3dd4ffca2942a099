"""Per-token, per-sequence, per-turn statistics of one policy update, in numpy (the collector's hot path).

Everything works on the *flattened masked tokens* of a padded ``[B, T]`` batch: ``idx = flatnonzero(mask)`` gives
N token positions in row-major order, so each row's tokens are contiguous and per-sequence reductions are
``np.bincount`` (sums) or ``np.{minimum,maximum}.reduceat`` (extrema). No Python loop over samples.

Formulas: ../shared/spec/ALGORITHMS.md. verl's pg_clipfrac / pg_clipfrac_lower / ppo_kl and TRL's clip_ratio/*
are reproduced exactly (token ratio from a log-ratio clamped to +-20).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LOG_RATIO_CLAMP = 20.0   # clamp lp - lp_old before exp (verl does the same)
KL_CLAMP = 10.0          # clamp x in k3 = exp(x) - x - 1 (verl low_var_kl)


@dataclass(frozen=True)
class Bands:
    eps_low: float = 0.2          # token band [1 - eps_low, 1 + eps_high]
    eps_high: float = 0.2
    seq_eps_low: float = 0.2      # sequence/turn band (GSPO/ATPO use ~3e-3/4e-3)
    seq_eps_high: float = 0.2
    dual_clip_c: float = 3.0      # verl clip_ratio_c (<= 1: dual-clip off)
    neg_adv_delta: float = 0.223  # ARLArena mask: mean(lp_old - lp) > delta


@dataclass
class UpdateInputs:
    """Validated numpy inputs of one record_update call (padded [B, T] layout)."""
    logp: np.ndarray             # [B, T] float32
    logp_old: np.ndarray         # [B, T] float32
    advantages: np.ndarray       # [B] or [B, T] float32
    mask: np.ndarray             # [B, T] bool
    logp_ref: np.ndarray | None = None       # [B, T]
    logp_rollout: np.ndarray | None = None   # [B, T], or aligned flat [N] (see rollout_flat)
    entropy: np.ndarray | None = None        # [B, T]
    turn_ids: np.ndarray | None = None       # [B] or [B, T] int
    token_ids: np.ndarray | None = None      # [B, T] int
    rollout_flat_logp: np.ndarray | None = None       # [N] rollout logp aligned to the masked tokens (NaN = none)
    rollout_flat_token_ids: np.ndarray | None = None  # [N] rollout ids aligned to the masked tokens (-1 = none)
    retok_extra: np.ndarray | None = None             # [B] id differences from length mismatch, -1 unknown


def _seg_extreme(ufunc, values: np.ndarray, starts: np.ndarray, nonempty: np.ndarray, fill: float) -> np.ndarray:
    """Per-row min/max of contiguous segments; rows without tokens get ``fill``."""
    out = np.full(nonempty.shape[0], fill, dtype=np.float64)
    if values.size:
        red = ufunc.reduceat(values, starts[nonempty])
        out[nonempty] = red
    return out


def splitmix_unit(ids: np.ndarray) -> np.ndarray:
    """Deterministic hash of int64 ids to [0, 1) (splitmix64 finaliser): token-row sampling by sample id."""
    z = ids.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z += np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def compute_update(inp: UpdateInputs, bands: Bands) -> dict:
    """Statistics of one update. Returns a dict with:
    ``aggs`` (raw step aggregates, schema.STEP_AGGS names), ``seq`` (column arrays of the sequences table, [B]),
    ``turn`` (turns-table arrays or None), ``tok`` (token arrays over the N masked tokens: rows, pos, log_ratio,
    advantage, ... for the token table), ``seq_k3`` ([B] k3 KL sums), ``anomalous`` ([B] bool)."""
    B, T = inp.mask.shape
    dense = bool(inp.mask.all())                   # packed batches: no gather needed, reshape views only
    idx = np.flatnonzero(inp.mask)                 # [N] masked positions, row-major
    rows = idx // T                                # [N] sample row of each token
    pos = idx - rows * T                           # [N] position in the row

    def gather(x):
        if x is None:
            return None
        return x.reshape(-1) if dense else x[inp.mask]  # boolean indexing keeps row-major order

    lp = gather(inp.logp)                          # [N]
    lp_old = gather(inp.logp_old)                  # [N]
    adv = gather(inp.advantages) if inp.advantages.ndim == 2 else inp.advantages[rows]  # [N]

    lp_ref, ent = gather(inp.logp_ref), gather(inp.entropy)
    if inp.rollout_flat_logp is not None:
        lp_roll = inp.rollout_flat_logp
    else:
        lp_roll = gather(inp.logp_rollout)

    # A token is "non-finite" when any given input is NaN/Inf there; it is excluded from every aggregate.
    fin = np.isfinite(lp) & np.isfinite(lp_old) & np.isfinite(adv)
    for opt in (lp_ref, ent, lp_roll):
        if opt is not None:
            fin &= np.isfinite(opt) | np.isnan(opt) if opt is lp_roll else np.isfinite(opt)
    bad = ~fin
    n_bad_row = np.bincount(rows[bad], minlength=B) if bad.any() else np.zeros(B, np.int64)

    # From here on, work on finite tokens only.
    if bad.any():
        keep = fin
        rows_f, pos_f, lp, lp_old, adv = rows[keep], pos[keep], lp[keep], lp_old[keep], adv[keep]
        lp_ref = None if lp_ref is None else lp_ref[keep]
        ent = None if ent is None else ent[keep]
        lp_roll = None if lp_roll is None else lp_roll[keep]
        rid = None if inp.rollout_flat_token_ids is None else inp.rollout_flat_token_ids[keep]
        tid = None if inp.token_ids is None else gather(inp.token_ids)[keep]
    else:
        rows_f, pos_f = rows, pos
        rid = inp.rollout_flat_token_ids
        tid = gather(inp.token_ids)

    f64 = np.float64
    log_ratio = np.clip(lp - lp_old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)   # [N]
    ratio = np.exp(log_ratio)                                              # [N] r_t
    n_row = np.bincount(rows_f, minlength=B)                               # [B] tokens per sample
    nonempty = n_row > 0
    starts = np.concatenate(([0], np.cumsum(n_row)[:-1]))                  # [B] segment starts (rows are sorted)
    inv_n = np.where(nonempty, 1.0 / np.maximum(n_row, 1), np.nan)         # [B]

    seg_starts = starts[nonempty]

    def rsum(x):
        """Per-row sums of a token array ([N] -> [B] float64); rows are contiguous, so reduceat."""
        out = np.zeros(B)
        if x.size:
            out[nonempty] = np.add.reduceat(x, seg_starts)
        return out

    lo, hi = 1.0 - bands.eps_low, 1.0 + bands.eps_high
    neg, pos_adv = adv < 0, adv > 0
    low, high = ratio < lo, ratio > hi
    # verl compute_policy_loss: pg_losses1 = -A r, pg_losses2 = -A clip(r), clipfrac = mean(pg_losses2 > pg_losses1)
    pg1 = -adv * ratio
    pg2 = -adv * np.clip(ratio, lo, hi)
    clip1 = np.maximum(pg1, pg2)
    pg3 = -adv * bands.dual_clip_c
    n_pg_clip = int(np.count_nonzero(pg2 > pg1))
    # c <= 1 means dual-clip is off (verl requires c > 1): nothing is clipped from below then
    n_pg_clip_lower = int(np.count_nonzero((clip1 > pg3) & neg)) if bands.dual_clip_c > 1 else 0
    ppo_kl_tok = lp_old - lp                                               # verl ppo_kl (k1), unclamped
    k3_upd = ratio - log_ratio - 1.0                                       # [N] k3 of KL(old || new), >= 0

    # ---- per sequence
    seq_lr = rsum(log_ratio) * inv_n                                       # [B]
    seq_ratio = np.exp(seq_lr)
    adv_seq = rsum(adv) * inv_n if inp.advantages.ndim == 2 else np.where(nonempty, inp.advantages, np.nan)
    seq_k3 = rsum(k3_upd)
    slo, shi = 1.0 - bands.seq_eps_low, 1.0 + bands.seq_eps_high
    with np.errstate(invalid="ignore"):
        s_neg, s_pos = adv_seq < 0, adv_seq > 0
        s_low, s_high = seq_ratio < slo, seq_ratio > shi
        nalis = s_neg & s_low
        nalis_delta = s_neg & (-seq_lr > bands.neg_adv_delta)

    seq = {
        "n_tokens": n_row.astype(np.int32),
        "advantage": adv_seq,
        "seq_log_ratio": seq_lr,
        "seq_ratio": seq_ratio,
        "log_ratio_min": _seg_extreme(np.minimum, log_ratio, starts, nonempty, np.nan),
        "log_ratio_max": _seg_extreme(np.maximum, log_ratio, starts, nonempty, np.nan),
        "tok_oob_low_frac": rsum(low.astype(f64)) * inv_n,
        "tok_oob_high_frac": rsum(high.astype(f64)) * inv_n,
        "ppo_kl": rsum(ppo_kl_tok) * inv_n,
        "ppo_kl_k3_sum": seq_k3,
        "logp_mean": rsum(lp) * inv_n,
        "neg_adv_low_is": nalis,
        "neg_adv_low_is_delta": nalis_delta,
        "nonfinite": n_bad_row.astype(np.int32),
    }

    aggs = {
        "n_tok": int(lp.size),
        "sum_ratio": float(ratio.sum(dtype=f64)),
        "sum_log_ratio": float(log_ratio.sum(dtype=f64)),
        "sum_log_ratio_sq": float(np.dot(log_ratio.astype(f64), log_ratio)),
        "max_abs_log_ratio": float(np.abs(log_ratio).max()) if lp.size else np.nan,
        "sum_ppo_kl": float(ppo_kl_tok.sum(dtype=f64)),
        "sum_ppo_kl_k3": float(k3_upd.sum(dtype=f64)),
        "n_pg_clip": n_pg_clip,
        "n_pg_clip_lower": n_pg_clip_lower,
        "n_tok_low_neg": int(np.count_nonzero(low & neg)),
        "n_tok_low_pos": int(np.count_nonzero(low & pos_adv)),
        "n_tok_high_neg": int(np.count_nonzero(high & neg)),
        "n_tok_high_pos": int(np.count_nonzero(high & pos_adv)),
        "sum_logp": float(lp.sum(dtype=f64)),
        "sum_adv_tok": float(adv.sum(dtype=f64)),
        "sum_adv_tok_sq": float(np.dot(adv.astype(f64), adv)),
        "sum_logp_adv": float(np.dot(lp.astype(f64), adv)),
        "n_nonfinite_tok": int(bad.sum()),
        "n_nonfinite_seq": int(np.count_nonzero(n_bad_row)),
        "n_seq": int(nonempty.sum()),
        "n_seq_adv_pos": int(np.count_nonzero(s_pos & nonempty)),
        "n_seq_adv_neg": int(np.count_nonzero(s_neg & nonempty)),
        "n_seq_adv_zero": int(np.count_nonzero((adv_seq == 0) & nonempty)),
        "sum_seq_ratio": float(np.nansum(seq_ratio)),
        "sum_seq_log_ratio": float(np.nansum(seq_lr)),
        "sum_seq_log_ratio_sq": float(np.nansum(seq_lr * seq_lr)),
        "min_seq_ratio": float(np.nanmin(seq_ratio)) if nonempty.any() else np.nan,
        "max_seq_ratio": float(np.nanmax(seq_ratio)) if nonempty.any() else np.nan,
        "n_seq_low_neg": int(np.count_nonzero(s_low & s_neg)),
        "n_seq_low_pos": int(np.count_nonzero(s_low & s_pos)),
        "n_seq_high_neg": int(np.count_nonzero(s_high & s_neg)),
        "n_seq_high_pos": int(np.count_nonzero(s_high & s_pos)),
        "n_nalis": int(nalis.sum()),
        "sum_nalis_ppo_kl_k3": float(seq_k3[nalis].sum()),
        "n_nalis_delta": int(nalis_delta.sum()),
        "sum_nalis_delta_ppo_kl_k3": float(seq_k3[nalis_delta].sum()),
    }

    # ---- KL to the reference (k1, k2, k3 with x = lp_ref - lp)
    kl_ref_k3_tok = None
    if lp_ref is not None:
        x = lp_ref - lp
        xc = np.clip(x, -KL_CLAMP, KL_CLAMP)
        kl_ref_k3_tok = np.exp(xc) - xc - 1.0
        aggs.update(n_tok_ref=int(x.size), sum_kl_ref_k1=float(-x.sum(dtype=f64)),
                    sum_kl_ref_k2=float(0.5 * np.dot(x.astype(f64), x)), sum_kl_ref_k3=float(kl_ref_k3_tok.sum(dtype=f64)))
        seq["kl_ref_k3"] = rsum(kl_ref_k3_tok) * inv_n

    # ---- training-inference mismatch (lp_roll vs lp_old); NaN lp_roll = not available for that token
    d_abs = None
    if lp_roll is not None:
        have = ~np.isnan(lp_roll)
        d = np.where(have, lp_old - lp_roll, 0.0)                           # [N]
        dc = np.clip(d, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        rho = np.exp(dc)
        p_old, p_roll = np.exp(lp_old), np.exp(np.where(have, lp_roll, 0.0))
        pabs = np.abs(p_old - p_roll)
        h = have
        n_h = int(h.sum())
        if n_h:
            po, pr = p_old[h].astype(f64), p_roll[h].astype(f64)
            aggs.update(
                n_tok_mis=n_h, sum_mis_k1=float(-d[h].sum(dtype=f64)), sum_mis_k3=float((rho - dc - 1.0)[h].sum(dtype=f64)),
                sum_mis_rho_sq=float(np.dot(rho[h].astype(f64), rho[h])), sum_mis_prob_abs=float(pabs[h].sum(dtype=f64)),
                max_mis_prob_abs=float(pabs[h].max()), max_mis_abs_log=float(np.abs(d[h]).max()),
                sum_p_old=float(po.sum()), sum_p_roll=float(pr.sum()), sum_p_old_sq=float(np.dot(po, po)),
                sum_p_roll_sq=float(np.dot(pr, pr)), sum_p_old_p_roll=float(np.dot(po, pr)))
        hf = h.astype(f64)
        n_h_row = rsum(hf)
        inv_h = np.where(n_h_row > 0, 1.0 / np.maximum(n_h_row, 1), np.nan)
        seq["mismatch_k1"] = rsum(-d * hf) * inv_h
        d_abs = np.where(h, np.abs(d), -np.inf)
        mx = _seg_extreme(np.maximum, d_abs, starts, nonempty, np.nan)
        seq["mismatch_log_abs_max"] = np.where(np.isfinite(mx), mx, np.nan)
        seq["seq_mismatch_ratio"] = np.exp(rsum(d * hf) * inv_h)

    if ent is not None:
        aggs.update(n_tok_ent=int(ent.size), sum_entropy=float(ent.sum(dtype=f64)))
        seq["entropy_mean"] = rsum(ent) * inv_n

    # ---- retokenization drift: trainer ids vs the rollout engine's ids at the same response position
    retok_row = np.full(B, -1, dtype=np.int64)
    if tid is not None and rid is not None:
        have_id = rid >= 0
        diff = have_id & (tid != rid)
        compared_rows = np.bincount(rows_f[have_id], minlength=B) > 0
        retok_row = np.where(compared_rows, np.bincount(rows_f[diff], minlength=B), -1)
        if inp.retok_extra is not None:
            ext = inp.retok_extra
            retok_row = np.where(ext >= 0, np.maximum(retok_row, 0) + ext, retok_row)
        n_extra = int(inp.retok_extra[inp.retok_extra > 0].sum()) if inp.retok_extra is not None else 0
        aggs.update(n_tok_retok=int(have_id.sum()) + n_extra, n_tok_retok_mismatch=int(diff.sum()) + n_extra)
    seq["retok_mismatch"] = retok_row.astype(np.int32)

    # ---- turns: per-sample turn ids [B] (each sample is one turn) or per-token turn ids [B, T]
    turn = None
    tok_turn = np.full(rows_f.shape, -1, np.int16)
    seq_turn = np.full(B, -1, np.int16)
    n_turns = np.where(nonempty, 1, 0).astype(np.int16)
    turn_entropy = np.zeros(B)
    if inp.turn_ids is not None and inp.turn_ids.ndim == 1:
        seq_turn = inp.turn_ids.astype(np.int16)
        tok_turn = seq_turn[rows_f]
        ok = nonempty
        turn = {"row": np.flatnonzero(ok), "turn": seq_turn[ok], "n_tokens": n_row[ok].astype(np.int32),
                "advantage": adv_seq[ok], "turn_log_ratio": seq_lr[ok]}
    elif inp.turn_ids is not None:
        tk = gather(inp.turn_ids)
        tk = tk[fin] if bad.any() else tk
        tok_turn = tk.astype(np.int16)
        kmax = int(tk.max()) + 1 if tk.size else 1
        key = rows_f.astype(np.int64) * kmax + tk                          # [N] (row, turn) key
        ukey, inv = np.unique(key, return_inverse=True)
        n_k = np.bincount(inv)
        t_sum = np.bincount(inv, weights=log_ratio)
        t_row = ukey // kmax
        turn = {"row": t_row, "turn": (ukey % kmax).astype(np.int16), "n_tokens": n_k.astype(np.int32),
                "advantage": np.bincount(inv, weights=adv) / n_k, "turn_log_ratio": t_sum / n_k}
        if d_abs is not None:
            mx = np.full(ukey.size, -np.inf)
            np.maximum.at(mx, inv, d_abs)
            turn["mismatch_log_abs_max"] = np.where(np.isfinite(mx), mx, np.nan)
        n_turns = np.bincount(t_row, minlength=B).astype(np.int16)
        # AT2PO H_turn: softmax over turns of (turn sum of log-ratio) / (sequence sum), normalised entropy.
        seq_sum = rsum(log_ratio)[t_row]
        w = t_sum / np.where(np.abs(seq_sum) > 1e-12, seq_sum, np.inf)      # 0 when the sequence sum vanishes
        wmax = np.full(B, -np.inf)
        np.maximum.at(wmax, t_row, w)
        e = np.exp(w - wmax[t_row])
        z = np.bincount(t_row, weights=e, minlength=B)
        p = e / z[t_row]
        h = np.bincount(t_row, weights=-p * np.log(np.maximum(p, 1e-300)), minlength=B)
        multi = n_turns > 1
        turn_entropy = np.where(multi, h / np.log(np.maximum(n_turns, 2)), 0.0)
        aggs.update(n_seq_multiturn=int(multi.sum()), sum_turn_entropy=float(turn_entropy[multi].sum()))
    if turn is not None:
        tr = np.exp(turn["turn_log_ratio"])
        turn["turn_ratio"] = tr
        if tid is not None and rid is not None and inp.turn_ids is not None and inp.turn_ids.ndim == 2:
            cnt = np.bincount(np.searchsorted(ukey, key[diff]), minlength=ukey.size)
            comp = np.bincount(np.searchsorted(ukey, key[have_id]), minlength=ukey.size) > 0
            turn["retok_mismatch"] = np.where(comp, cnt, -1).astype(np.int32)
        elif inp.turn_ids is not None and inp.turn_ids.ndim == 1:
            turn["retok_mismatch"] = retok_row[turn["row"]].astype(np.int32)
            if "mismatch_log_abs_max" in seq:
                turn["mismatch_log_abs_max"] = seq["mismatch_log_abs_max"][turn["row"]]
        aggs.update(n_turn=int(tr.size), n_turn_low=int((tr < slo).sum()), n_turn_high=int((tr > shi).sum()),
                    min_turn_ratio=float(tr.min()) if tr.size else np.nan,
                    max_turn_ratio=float(tr.max()) if tr.size else np.nan)
    seq["turn"] = seq_turn
    seq["n_turns"] = n_turns
    seq["turn_entropy"] = turn_entropy

    tok = {"rows": rows_f, "pos": pos_f, "turn": tok_turn, "log_ratio": log_ratio, "advantage": adv,
           "logp": lp, "logp_old": lp_old, "logp_ref": lp_ref, "logp_rollout": lp_roll, "entropy": ent,
           "token_id": tid, "token_id_rollout": rid, "bad_rows": rows[bad]}
    return {"aggs": aggs, "seq": seq, "turn": turn, "tok": tok, "seq_k3": seq_k3,
            "nonempty": nonempty, "anomalous": (n_bad_row > 0) | nalis | nalis_delta}


def top_share(values: np.ndarray, frac: float = 0.01) -> float:
    """Share of sum(values) carried by the top ceil(frac * n) values (at least one). NaN for an empty/zero sum."""
    v = values[np.isfinite(values)]
    total = v.sum()
    if v.size == 0 or total <= 0:
        return float("nan")
    k = max(1, int(np.ceil(frac * v.size)))
    top = np.partition(v, v.size - k)[v.size - k:]
    return float(top.sum() / total)

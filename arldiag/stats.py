"""Per-token, per-sequence, per-turn statistics of one policy update (the collector's hot path).

Each statistic is one small named formula over an array namespace (``e.xp``: numpy or torch) and a backend
(``e.be``: float64 reductions, per-row segment reductions; arldiag/backends.py). The same formula is evaluated
by numpy for numpy input and by torch on the tensors' own device for torch input (one rule, two evaluators, as
the detectors do with SQL and Python). Values are computed lazily on first use and cached per update (``Env``).

Everything works on the *flattened masked finite tokens* of a padded ``[B, T]`` batch in row-major order, so each
sample's tokens are one contiguous segment (``Layout``). No Python loop over samples.

Formulas: ../shared/spec/ALGORITHMS.md. verl's pg_clipfrac / pg_clipfrac_lower / ppo_kl and TRL's clip_ratio/*
are reproduced exactly (token ratio from a log-ratio clamped to +-20).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import pyarrow as pa

from arldiag.backends import Backend, HostCopy, Layout, backend_for
from arldiag.schema import STEP_AGGS, STEPS_RAW

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
    """Validated inputs of one record_update call (padded [B, T] layout), numpy arrays or torch tensors."""
    logp: Any                    # [B, T] float32
    logp_old: Any                # [B, T] float32
    advantages: Any              # [B] or [B, T] float32
    mask: Any                    # [B, T] bool
    logp_ref: Any = None         # [B, T]
    logp_rollout: Any = None     # [B, T], or aligned flat [N] (see rollout_flat)
    entropy: Any = None          # [B, T]
    turn_ids: Any = None         # [B] or [B, T] int
    token_ids: Any = None        # [B, T] int
    rollout_flat_logp: np.ndarray | None = None       # [N] rollout logp aligned to the masked tokens (NaN = none)
    rollout_flat_token_ids: np.ndarray | None = None  # [N] rollout ids aligned to the masked tokens (-1 = none)
    retok_extra: np.ndarray | None = None             # [B] id differences from length mismatch, -1 unknown


# ---------------------------------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class Formula:
    name: str
    fn: Callable[["Env"], Any]
    needs: tuple[str, ...] = ()   # optional inputs that must be given (lp_ref, lp_roll, ent, tid/rid)


SIZE = "size"  # agg(name, SIZE, ...): the number of elements of the level (selected by ``where``)
OVER = ("tok", "seq", "turn")   # the level an aggregate's arrays run over: [N] tokens, [B] sequences, [K] turns


@dataclass(frozen=True)
class AggFormula:
    """The formula of a stored step aggregate. ``map``: the values to reduce, an array over ``over`` (a bool array
    is counted; a pair (x, y) sums x * y; SIZE counts the elements); ``where``: the elements taken. The reduction
    is the aggregate's merge kind as schema.STEP_AGGS declares it (sum / max / min), so one declaration gives the
    scalar of one update and the per-row values of stacked steps (_segment_aggs). ``scale`` multiplies a sum.
    ``merge`` and ``count`` (stored as an integer) are the schema's, copied at registration."""
    name: str
    map: Any
    where: Callable[["Env"], Any] | None
    over: str
    needs: tuple[str, ...]
    scale: float
    merge: str
    count: bool
    scalar: Callable[["Env"], Any]   # the one-update evaluator (_scalar)


VALUES: dict[str, Formula] = {}   # token [N] / sequence [B] intermediates, computed on demand
SEQ_COLUMNS: dict[str, Formula] = {}   # sequences-table columns [B]
AGGS: dict[str, AggFormula] = {}  # raw step aggregates of an update (schema.STEP_AGGS names)
_DECLARED = {a.name: a for a in STEP_AGGS}
_INTEGER = {c.name for c in STEPS_RAW if c.type == pa.int64()}


def _reg(table: dict, name: str, fn, needs=()) -> None:
    if name in table:
        raise ValueError(f"duplicate formula {name}")
    table[name] = Formula(name, fn, tuple(needs))


def value(name, fn, needs=()):
    _reg(VALUES, name, fn, needs)


def seq_col(name, fn, needs=()):
    _reg(SEQ_COLUMNS, name, fn, needs)


def agg(name: str, map, where=None, over: str = "tok", needs=(), scale: float = 1.0) -> None:
    """Register the formula of the stored aggregate ``name`` (declared, with its merge kind and doc, in
    schema.STEP_AGGS; a formula the schema lacks would never be stored, so it is refused here, at import)."""
    decl = _DECLARED.get(name)
    if decl is None:
        raise ValueError(f"aggregate {name!r} has a formula but no declaration in schema.STEP_AGGS")
    if over not in OVER:
        raise ValueError(f"aggregate {name!r}: over must be one of {OVER}, got {over!r}")
    if decl.merge != "sum" and (map is SIZE or scale != 1.0):
        raise ValueError(f"aggregate {name!r} merges by {decl.merge}: SIZE and scale are for sums")
    if map is SIZE and over == "seq":
        raise ValueError(f"aggregate {name!r}: count the rows with a [B] bool, not SIZE")
    if name in AGGS:
        raise ValueError(f"duplicate formula {name}")
    AGGS[name] = AggFormula(name, map, where, over, tuple(needs), float(scale), decl.merge, name in _INTEGER,
                            _scalar(map, where, over, decl.merge, float(scale)))


def _scalar(map, where, over: str, merge: str, scale: float) -> Callable[["Env"], Any]:
    """The one-update evaluator of an aggregate, specialised once at registration (it runs ~60 times per update).
    On the masked layout (Layout.valid) a token aggregate takes the valid tokens only, a turn aggregate the turn
    rows that exist (``turn_valid``)."""
    level = (lambda e: e.lay.valid) if over == "tok" else (lambda e: e.turn_valid) if over == "turn" else None

    def sel(e):
        w = None if where is None else where(e)
        m = None if level is None else level(e)
        return w if m is None else m if w is None else w & m

    if map is SIZE:
        size = (lambda e: e.be.size(e.turn_ratio)) if over == "turn" else (lambda e: e.be.size(e.lp))
        return lambda e: size(e) if where is None and level(e) is None else e.be.count(sel(e))
    if merge != "sum":
        return (lambda e: e.be.max(map(e), sel(e))) if merge == "max" else (lambda e: e.be.min(map(e), sel(e)))

    def total(e):
        be, x = e.be, map(e)
        w = sel(e)
        if type(x) is tuple:
            v = be.dot(x[0], x[1], w)
        elif x.dtype == be.bool_dtype:
            v = be.count(x if w is None else x & w)
        else:
            v = be.sum(x, w)
        return v if scale == 1.0 else v * scale
    return total


class Env:
    """Named values of one update: the inputs, then every VALUES formula on first access (cached)."""

    def __init__(self, be: Backend, bands: Bands, lay: Layout, inputs: dict[str, Any]):
        self.be, self.xp, self.b, self.lay = be, be.xp, bands, lay
        self._v = dict(inputs)

    def __getattr__(self, name: str):
        v = self.__dict__.get("_v")
        if v is None:
            raise AttributeError(name)
        if name not in v:
            f = VALUES.get(name)
            if f is None:
                raise AttributeError(f"no input or formula named {name!r}")
            v[name] = f.fn(self)
        # kept as an attribute too: later reads take Python's fast path instead of this method (a hundred-odd
        # reads per update, a measurable part of the collector's fixed cost per step)
        self.__dict__[name] = val = v[name]
        return val

    def rsum(self, x):
        return self.be.rsum(self.lay, x)

    def rmean(self, x):
        return self.be.rsum(self.lay, x) * self.lay.inv_n


# ---------------------------------------------------------------------------------------------------- token level
value("log_ratio", lambda e: e.xp.clip(e.lp - e.lp_old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
value("ratio", lambda e: e.xp.exp(e.log_ratio))                                  # r_t
value("neg", lambda e: e.adv < 0)
value("pos_adv", lambda e: e.adv > 0)
value("low", lambda e: e.ratio < 1.0 - e.b.eps_low)
value("high", lambda e: e.ratio > 1.0 + e.b.eps_high)
# verl compute_policy_loss: pg_losses1 = -A r, pg_losses2 = -A clip(r), clipfrac = mean(pg_losses2 > pg_losses1)
value("pg1", lambda e: -e.adv * e.ratio)
value("pg2", lambda e: -e.adv * e.xp.clip(e.ratio, 1.0 - e.b.eps_low, 1.0 + e.b.eps_high))
value("pg_clip", lambda e: e.pg2 > e.pg1)
# c <= 1 means dual-clip is off (verl requires c > 1): nothing is clipped from below then
value("pg_clip_lower", lambda e: (e.xp.maximum(e.pg1, e.pg2) > -e.adv * e.b.dual_clip_c) & e.neg
      & (e.b.dual_clip_c > 1))
value("ppo_kl_tok", lambda e: e.lp_old - e.lp)                                  # verl ppo_kl (k1), unclamped
# k3 = exp(x) - x - 1 cancels for small x: evaluated in float64 so both backends' exp agree to 1e-6 relative
value("k3_upd", lambda e: _k3(e.xp, e.be.f64(e.log_ratio)))                     # k3 of KL(old || new), >= 0
# KL to the reference, x = lp_ref - lp (k1, k2, k3; Schulman's estimators, verl low_var_kl clamp)
value("x_ref", lambda e: e.lp_ref - e.lp, needs=("lp_ref",))
value("kl_ref_k3_tok", lambda e: _k3(e.xp, e.be.f64(e.xp.clip(e.x_ref, -KL_CLAMP, KL_CLAMP))), needs=("lp_ref",))
# training-inference mismatch: d = lp_old - lp_roll; NaN lp_roll = not available for that token
value("have_roll", lambda e: ~e.xp.isnan(e.lp_roll))
value("d_mis", lambda e: e.xp.where(e.have_roll, e.lp_old - e.lp_roll, 0.0))
value("dc_mis", lambda e: e.xp.clip(e.d_mis, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
value("rho_mis", lambda e: e.xp.exp(e.be.f64(e.dc_mis)))
value("p_old", lambda e: e.xp.exp(e.be.f64(e.lp_old)))                       # float64: |p_old - p_roll| cancels
value("p_roll", lambda e: e.xp.exp(e.be.f64(e.xp.where(e.have_roll, e.lp_roll, 0.0))))
value("p_abs", lambda e: e.xp.abs(e.p_old - e.p_roll))
value("d_abs", lambda e: e.xp.where(e.have_roll, e.xp.abs(e.d_mis), -math.inf))
# retokenization drift: trainer ids vs the rollout engine's ids at the same response position
value("have_id", lambda e: e.rid >= 0)
value("id_diff", lambda e: e.have_id & (e.tid != e.rid))
value("n_id_row", lambda e: e.rsum(e.have_id))                                   # [B] tokens with both ids
value("n_id_diff_row", lambda e: e.rsum(e.id_diff))                              # [B] of those, different
# [B] id differences counted from a response whose length changed (collector alignment), 0 when none
value("extra_row", lambda e: e.be.full(e.lay.B, 0.0, np.float64) if e.retok_extra is None
      else e.be.f64(e.xp.clip(e.retok_extra, 0, None)))


def _k3(xp, x):
    return xp.exp(x) - x - 1.0


# ---------------------------------------------------------------------------------------------------- sequence level
value("seq_lr", lambda e: e.rmean(e.log_ratio))                                 # log s_i
value("seq_ratio", lambda e: e.xp.exp(e.seq_lr))                                # s_i (GSPO)
value("adv_seq", lambda e: e.rmean(e.adv) if e.adv_2d else e.xp.where(e.lay.nonempty, e.be.f64(e.adv_b), math.nan))
value("seq_k3", lambda e: e.rsum(e.k3_upd))
value("s_neg", lambda e: e.adv_seq < 0)
value("s_pos", lambda e: e.adv_seq > 0)
value("s_low", lambda e: e.seq_ratio < 1.0 - e.b.seq_eps_low)
value("s_high", lambda e: e.seq_ratio > 1.0 + e.b.seq_eps_high)
value("nalis", lambda e: e.s_neg & e.s_low)                                     # ARLArena NA-LIS (band)
value("nalis_delta", lambda e: e.s_neg & (-e.seq_lr > e.b.neg_adv_delta))       # ARLArena NA-LIS (delta)
value("n_h_row", lambda e: e.rsum(e.have_roll))
value("inv_h", lambda e: e.xp.where(e.n_h_row > 0, 1.0 / e.xp.clip(e.n_h_row, 1, None), math.nan))
value("mis_abs_max", lambda e: e.be.rmax(e.lay, e.d_abs))

seq_col("n_tokens", lambda e: e.lay.n_row)
seq_col("advantage", lambda e: e.adv_seq)
seq_col("seq_log_ratio", lambda e: e.seq_lr)
seq_col("seq_ratio", lambda e: e.seq_ratio)
seq_col("log_ratio_min", lambda e: e.be.rmin(e.lay, e.log_ratio))
seq_col("log_ratio_max", lambda e: e.be.rmax(e.lay, e.log_ratio))
seq_col("tok_oob_low_frac", lambda e: e.rmean(e.low))
seq_col("tok_oob_high_frac", lambda e: e.rmean(e.high))
seq_col("ppo_kl", lambda e: e.rmean(e.ppo_kl_tok))
seq_col("ppo_kl_k3_sum", lambda e: e.seq_k3)
seq_col("logp_mean", lambda e: e.rmean(e.lp))
seq_col("neg_adv_low_is", lambda e: e.nalis)
seq_col("neg_adv_low_is_delta", lambda e: e.nalis_delta)
seq_col("nonfinite", lambda e: e.n_bad_row)
seq_col("kl_ref_k3", lambda e: e.rmean(e.kl_ref_k3_tok), needs=("lp_ref",))
seq_col("mismatch_k1", lambda e: e.rsum(e.xp.where(e.have_roll, -e.d_mis, 0.0)) * e.inv_h, needs=("lp_roll",))
seq_col("mismatch_log_abs_max", lambda e: e.xp.where(e.xp.isfinite(e.mis_abs_max), e.mis_abs_max, math.nan),
        needs=("lp_roll",))
seq_col("seq_mismatch_ratio", lambda e: e.xp.exp(e.rsum(e.d_mis) * e.inv_h), needs=("lp_roll",))
seq_col("entropy_mean", lambda e: e.rmean(e.ent), needs=("ent",))

# ---------------------------------------------------------------------------------------------------- step aggregates
# token level: over the masked finite tokens of the update
agg("n_tok", SIZE)
agg("sum_ratio", lambda e: e.ratio)
agg("sum_log_ratio", lambda e: e.log_ratio)
agg("sum_log_ratio_sq", lambda e: (e.log_ratio, e.log_ratio))
agg("max_abs_log_ratio", lambda e: e.xp.abs(e.log_ratio))
agg("sum_ppo_kl", lambda e: e.ppo_kl_tok)
agg("sum_ppo_kl_k3", lambda e: e.k3_upd)
agg("n_pg_clip", lambda e: e.pg_clip)
agg("n_pg_clip_lower", lambda e: e.pg_clip_lower)
agg("n_tok_low_neg", lambda e: e.low & e.neg)
agg("n_tok_low_pos", lambda e: e.low & e.pos_adv)
agg("n_tok_high_neg", lambda e: e.high & e.neg)
agg("n_tok_high_pos", lambda e: e.high & e.pos_adv)
agg("sum_logp", lambda e: e.lp)
agg("sum_adv_tok", lambda e: e.adv)
agg("sum_adv_tok_sq", lambda e: (e.adv, e.adv))
agg("sum_logp_adv", lambda e: (e.lp, e.adv))
agg("n_nonfinite_tok", lambda e: e.n_bad_row, over="seq")   # the non-finite tokens are not among the N tokens
agg("n_nonfinite_seq", lambda e: e.n_bad_row > 0, over="seq")
# sequence level: over the update's rows
_NONEMPTY = lambda e: e.lay.nonempty  # noqa: E731 - a row without finite tokens has no sequence statistics
agg("n_seq", lambda e: e.lay.nonempty, over="seq")
agg("n_seq_adv_pos", lambda e: e.s_pos & e.lay.nonempty, over="seq")
agg("n_seq_adv_neg", lambda e: e.s_neg & e.lay.nonempty, over="seq")
agg("n_seq_adv_zero", lambda e: (e.adv_seq == 0) & e.lay.nonempty, over="seq")
agg("sum_seq_ratio", lambda e: e.seq_ratio, _NONEMPTY, over="seq")
agg("sum_seq_log_ratio", lambda e: e.seq_lr, _NONEMPTY, over="seq")
agg("sum_seq_log_ratio_sq", lambda e: (e.seq_lr, e.seq_lr), _NONEMPTY, over="seq")
agg("min_seq_ratio", lambda e: e.seq_ratio, _NONEMPTY, over="seq")
agg("max_seq_ratio", lambda e: e.seq_ratio, _NONEMPTY, over="seq")
agg("n_seq_low_neg", lambda e: e.s_low & e.s_neg, over="seq")
agg("n_seq_low_pos", lambda e: e.s_low & e.s_pos, over="seq")
agg("n_seq_high_neg", lambda e: e.s_high & e.s_neg, over="seq")
agg("n_seq_high_pos", lambda e: e.s_high & e.s_pos, over="seq")
agg("n_nalis", lambda e: e.nalis, over="seq")
agg("sum_nalis_ppo_kl_k3", lambda e: e.seq_k3, lambda e: e.nalis, over="seq")
agg("n_nalis_delta", lambda e: e.nalis_delta, over="seq")
agg("sum_nalis_delta_ppo_kl_k3", lambda e: e.seq_k3, lambda e: e.nalis_delta, over="seq")
# KL to the reference
agg("n_tok_ref", SIZE, needs=("lp_ref",))
agg("sum_kl_ref_k1", lambda e: e.x_ref, needs=("lp_ref",), scale=-1.0)
agg("sum_kl_ref_k2", lambda e: (e.x_ref, e.x_ref), needs=("lp_ref",), scale=0.5)
agg("sum_kl_ref_k3", lambda e: e.kl_ref_k3_tok, needs=("lp_ref",))
# mismatch sums run over the tokens that have a rollout log-prob (have_roll); left out when none has one
_MIS = ("lp_roll", "any_roll")
_ROLL = lambda e: e.have_roll  # noqa: E731
agg("n_tok_mis", lambda e: e.have_roll, needs=_MIS)
agg("sum_mis_k1", lambda e: e.d_mis, _ROLL, needs=_MIS, scale=-1.0)
agg("sum_mis_k3", lambda e: e.rho_mis - e.dc_mis - 1.0, _ROLL, needs=_MIS)
agg("sum_mis_rho_sq", lambda e: (e.rho_mis, e.rho_mis), _ROLL, needs=_MIS)
agg("sum_mis_prob_abs", lambda e: e.p_abs, _ROLL, needs=_MIS)
agg("max_mis_prob_abs", lambda e: e.p_abs, _ROLL, needs=_MIS)
agg("max_mis_abs_log", lambda e: e.d_abs, _ROLL, needs=_MIS)
agg("sum_p_old", lambda e: e.p_old, _ROLL, needs=_MIS)
agg("sum_p_roll", lambda e: e.p_roll, _ROLL, needs=_MIS)
agg("sum_p_old_sq", lambda e: (e.p_old, e.p_old), _ROLL, needs=_MIS)
agg("sum_p_roll_sq", lambda e: (e.p_roll, e.p_roll), _ROLL, needs=_MIS)
agg("sum_p_old_p_roll", lambda e: (e.p_old, e.p_roll), _ROLL, needs=_MIS)
agg("n_tok_ent", SIZE, needs=("ent",))
agg("sum_entropy", lambda e: e.ent, needs=("ent",))
# retokenization: per row, the compared tokens plus the differences of a changed response length
agg("n_tok_retok", lambda e: e.n_id_row + e.extra_row, over="seq", needs=("tid", "rid"))
agg("n_tok_retok_mismatch", lambda e: e.n_id_diff_row + e.extra_row, over="seq", needs=("tid", "rid"))
# turn level (_turns puts the turn ratios [K] and, for per-token turn ids, the multi-turn rows [B] in the Env)
agg("n_turn", SIZE, over="turn", needs=("turn_ratio",))
agg("n_turn_low", lambda e: e.turn_ratio < 1.0 - e.b.seq_eps_low, over="turn", needs=("turn_ratio",))
agg("n_turn_high", lambda e: e.turn_ratio > 1.0 + e.b.seq_eps_high, over="turn", needs=("turn_ratio",))
agg("min_turn_ratio", lambda e: e.turn_ratio, over="turn", needs=("turn_ratio",))
agg("max_turn_ratio", lambda e: e.turn_ratio, over="turn", needs=("turn_ratio",))
agg("n_seq_multiturn", lambda e: e.multi_turn, over="seq", needs=("multi_turn",))
agg("sum_turn_entropy", lambda e: e.turn_entropy_row, lambda e: e.multi_turn, over="seq", needs=("multi_turn",))

_COUNTS = {f.name for f in AGGS.values() if f.count}


def row_agg(f: AggFormula, e: "Env") -> np.ndarray:
    """The aggregate ``f`` per row ([B] float64, numpy) of stacked steps: per-step values reduce them by the
    aggregate's merge kind (_segment_aggs). A row without a selected element gives 0 to a sum and NaN to an
    extremum, which the per-step reduction (fmax / fmin) skips."""
    lay, be = e.lay, e.be
    if f.over == "turn":
        raise ValueError(f"aggregate {f.name!r} runs over turns, which stacked steps do not have")
    w = None if f.where is None else f.where(e)
    if f.map is SIZE:  # over tokens (registration refuses SIZE over sequences: count a [B] bool instead)
        return lay.n_row.astype(np.float64) if w is None else be.rsum(lay, w)
    x = f.map(e)
    if f.merge == "sum":
        if type(x) is tuple:
            x = np.multiply(x[0], x[1], dtype=np.float64)
        if w is not None:
            x = np.where(w, x, 0.0)
        r = np.asarray(x, np.float64) if f.over == "seq" else be.rsum(lay, x)
        return r if f.scale == 1.0 else r * f.scale
    if w is not None:
        x = np.where(w, x, -math.inf if f.merge == "max" else math.inf)
    if f.over == "seq":
        return np.asarray(x, np.float64)
    return be.rmax(lay, x) if f.merge == "max" else be.rmin(lay, x)


# ---------------------------------------------------------------------------------------------------- evaluation
def splitmix_unit(ids: np.ndarray) -> np.ndarray:
    """Deterministic hash of int64 ids to [0, 1) (splitmix64 finaliser): token-row sampling by sample id."""
    z = ids.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z += np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


class UpdateStats:
    """Result of compute_update, on the host except the token rows, which stay on the backend's device until
    ``token_rows`` picks the rows to keep (only those are copied to the host).

    aggs: raw step aggregates (Python numbers); seq: sequences-table columns ([B] numpy); turn: turns-table columns
    or None; seq_k3: [B] k3 KL sums; nonempty, anomalous: [B] bool."""

    masked: tuple | None = None   # the masked layout's (valid [B * T] host bool, B, T): token values are on the host
    extra: dict | None = None     # compute_update's ``extra`` tensors, on the host

    def __init__(self, env: Env | None, aggs, seq, turn, seq_k3, nonempty, anomalous, tok):
        self._env, self.aggs, self.seq, self.turn = env, aggs, seq, turn
        self.seq_k3, self.nonempty, self.anomalous, self._tok = seq_k3, nonempty, anomalous, tok

    def drop_rollout(self, added) -> None:
        """Take out what rollout inputs ``added`` (UpdateInputs field names, e.g. "rollout_flat_logp") produced: a
        device alignment adds them before it is known whether any row is in the rollout, and when none is, the host
        path would not have given them (no column, no aggregate)."""
        needs = {"rollout_flat_logp": "lp_roll", "rollout_flat_token_ids": "rid"}
        gone = {needs[a] for a in added if a in needs}
        if not gone:
            return
        self.aggs = {k: v for k, v in self.aggs.items() if not gone & set(AGGS[k].needs)}
        for f in SEQ_COLUMNS.values():
            if gone & set(f.needs):
                self.seq.pop(f.name, None)
                if self.turn is not None:
                    self.turn.pop(f.name, None)
        tok = {"lp_roll": "logp_rollout", "rid": "token_id_rollout"}
        for g in gone:
            self._tok[tok[g]] = None

    def token_rows(self, keep_rows: np.ndarray) -> dict[str, np.ndarray]:
        """Host token columns (rows, pos, turn, log_ratio, ...; None when not given) of the samples with
        ``keep_rows`` [B] True; only those rows are copied from the device."""
        if self.masked is not None:
            return _masked_token_rows(self._tok, *self.masked, keep_rows)
        be, lay, tok = self._env.be, self._env.lay, self._tok
        B, T = lay.B, lay.T
        if keep_rows.all():
            pick = None
            rows, pos = be.host(lay.rows), be.host(lay.pos)
        elif lay.dense:  # packed batch: whole [T] rows, no per-token index
            k = np.flatnonzero(keep_rows)
            kd = be.asarray(k)
            pick = lambda v: v.reshape(B, T)[kd].reshape(-1)  # noqa: E731
            rows, pos = np.repeat(k, T), np.tile(np.arange(T, dtype=np.int64), k.size)
        else:
            sel = be.asarray(keep_rows)[lay.rows]
            pick = lambda v: v[sel]  # noqa: E731
            rows, pos = be.host(lay.rows[sel]), be.host(lay.pos[sel])
        out = {k: None if v is None else be.host(v if pick is None else pick(v)) for k, v in tok.items()}
        if out["turn"] is None:
            out["turn"] = np.full(rows.size, -1, np.int16)
        out.update(rows=rows, pos=pos)
        return out


def _masked_token_rows(tok: dict, valid: np.ndarray, B: int, T: int, keep_rows: np.ndarray) -> dict:
    """token_rows of the masked layout, on the host: the valid tokens of the kept rows, row-major (the compacting
    path's order)."""
    idx = np.flatnonzero(valid.reshape(B, T) & np.asarray(keep_rows, bool)[:, None])   # [n] kept positions
    rows = idx // T
    out = {k: None if v is None else v[idx] for k, v in tok.items()}
    if out["turn"] is None:
        out["turn"] = np.full(rows.size, -1, np.int16)
    out.update(rows=rows, pos=idx - rows * T)
    return out


def _token_inputs(inp: UpdateInputs, be, mask):
    """The masked tokens of ``inp`` flattened row-major, with the non-finite ones dropped: (raw values by short
    name, rows, positions, whether the layout is still the dense [B, T] one, advantages as given, whether they are
    per token, non-finite tokens per row)."""
    xp = be.xp
    B, T = mask.shape
    dense = bool(mask.all())                       # packed batch: reshape views, no gather
    if dense:
        rows = pos = None                          # built lazily (Layout.rows): a packed batch rarely needs them
    else:
        idx = be.nonzero(mask)                     # [N] masked positions, row-major
        rows = idx // T
        pos = idx - rows * T

    def gather(x):
        if x is None:
            return None
        x = be.asarray(x)
        return be.flat(x) if dense else x[mask]    # boolean indexing keeps row-major order

    adv_b = be.asarray(inp.advantages)
    adv_2d = adv_b.ndim == 2
    raw = {"lp": gather(inp.logp), "lp_old": gather(inp.logp_old), "adv": gather(adv_b) if adv_2d else be.repeat(adv_b, T) if dense else adv_b[rows],
           "lp_ref": gather(inp.logp_ref), "ent": gather(inp.entropy),
           "lp_roll": be.asarray(inp.rollout_flat_logp) if inp.rollout_flat_logp is not None
           else gather(inp.logp_rollout),
           "tid": gather(inp.token_ids),
           "rid": None if inp.rollout_flat_token_ids is None else be.asarray(inp.rollout_flat_token_ids),
           "turn_tok": gather(inp.turn_ids) if inp.turn_ids is not None and np.ndim(inp.turn_ids) == 2 else None}

    fin = _finite(xp, raw)
    any_bad = bool(be.count(~fin))
    if any_bad and dense:
        rows, pos = be.dense_rows_pos(B, T)
    n_bad_row = be.bincount(rows[~fin], None, B) if any_bad else be.full(B, 0, np.int64)
    if any_bad:  # from here on, finite tokens only
        rows, pos = rows[fin], pos[fin]
        raw = {k: (v if v is None else v[fin]) for k, v in raw.items()}
    return raw, rows, pos, dense and not any_bad, adv_b, adv_2d, n_bad_row


def _finite(xp, raw: dict):
    """A token is "non-finite" when any given input is NaN/Inf there (a NaN rollout log-prob only means "not
    available"); it is excluded from every aggregate."""
    fin = xp.isfinite(raw["lp"]) & xp.isfinite(raw["lp_old"]) & xp.isfinite(raw["adv"])
    for k in ("lp_ref", "ent"):
        if raw[k] is not None:
            fin &= xp.isfinite(raw[k])
    if raw["lp_roll"] is not None:
        fin &= ~xp.isinf(raw["lp_roll"])
    return fin


def masked_layout(be: Backend, inp: UpdateInputs) -> bool:
    """Whether ``inp`` takes the masked layout (Layout.valid): torch tensors, unless the turn ids are per token
    (their (row, turn) segments need ``torch.unique``, whose size the host must read: those take the compacting
    path, with its host reads)."""
    return be.name == "torch" and not (inp.turn_ids is not None and len(inp.turn_ids.shape) == 2)


def _masked_inputs(inp: UpdateInputs, be, mask):
    """The inputs of ``inp`` flattened to [B * T] without compacting: (raw values by short name, valid [B * T] =
    masked and finite, advantages as given, whether they are per token, non-finite masked tokens per row [B])."""
    B, T = mask.shape
    m = be.flat(mask)                                                   # [B * T] the loss mask

    def flat(x):
        return None if x is None else be.flat(be.asarray(x))

    adv_b = be.asarray(inp.advantages)
    adv_2d = adv_b.ndim == 2
    raw = {"lp": flat(inp.logp), "lp_old": flat(inp.logp_old), "adv": flat(adv_b) if adv_2d else be.repeat(adv_b, T),
           "lp_ref": flat(inp.logp_ref), "ent": flat(inp.entropy), "tid": flat(inp.token_ids), "turn_tok": None,
           "lp_roll": flat(inp.logp_rollout) if inp.rollout_flat_logp is None
           else _spread(be, inp.rollout_flat_logp, m, math.nan, np.float32),
           "rid": None if inp.rollout_flat_token_ids is None
           else _spread(be, inp.rollout_flat_token_ids, m, -1, np.int64)}
    fin = _finite(be.xp, raw)
    valid = m & fin
    n_bad_row = (m & ~fin).reshape(B, T).sum(1)                         # [B] int64
    return raw, valid, adv_b, adv_2d, n_bad_row


def _spread(be, x, m, fill, dtype):
    """Rollout values per token as [B * T]: a [B, T] device tensor (collectors/align.py on a device) as is; a
    host [N] array aligned to the masked tokens is scattered to their positions (a boolean index: a host read,
    for callers that hand host arrays with device tensors)."""
    if not isinstance(x, np.ndarray) and len(x.shape) == 2:
        return be.flat(x)
    out = be.full(m.shape[0], fill, dtype)
    out[m] = be.asarray(x, dtype)
    return out


def _masked_results(e: Env, aggs: dict, seq: dict, turn, tok: dict, seq_turn, extra) -> "PendingStats":
    """The results of the masked layout: every device value queued in one copy to the host (HostCopy)."""
    be, lay = e.be, e.lay
    lazy = [k for k, v in aggs.items() if not isinstance(v, (int, float))]
    dev = {"aggs": be.xp.stack([aggs[k].to(be.xp.float64) for k in lazy]) if lazy else None,
           "valid": lay.valid, "nonempty": lay.nonempty, "seq_k3": e.seq_k3,
           "anomalous": (e.n_bad_row > 0) | e.nalis | e.nalis_delta,
           "seq_turn": None if isinstance(seq_turn, np.ndarray) else seq_turn, "turn_valid": e.turn_valid}
    dev.update(("seq." + k, v) for k, v in seq.items())
    dev.update(("turn." + k, v) for k, v in (turn or {}).items())
    dev.update(("tok." + k, v) for k, v in tok.items())
    dev.update(("extra." + k, v) for k, v in (extra or {}).items())
    return PendingStats(HostCopy(dev), {k: v for k, v in aggs.items() if k not in lazy}, lazy, list(seq),
                        None if turn is None else list(turn), seq_turn if isinstance(seq_turn, np.ndarray) else None,
                        [k for k, v in tok.items() if v is not None], lay.B, lay.T)


class PendingStats:
    """compute_update's results on their way to the host (``wait=False``): ``done()`` tells without waiting
    whether the copy has landed, ``result()`` waits for it (at most once) and finishes on the host: aggregates as
    Python numbers, columns in their stored dtypes, turn rows compacted."""

    def __init__(self, copy: HostCopy, fixed: dict, lazy: list, seq: list, turn, seq_turn, tok: list, B: int, T: int):
        self.copy, self.fixed, self.lazy, self.seq, self.turn = copy, fixed, lazy, seq, turn
        self.seq_turn, self.tok, self.B, self.T = seq_turn, tok, B, T

    def done(self) -> bool:
        return self.copy.done()

    def result(self) -> "UpdateStats":
        h = self.copy.wait()
        vals = dict(self.fixed)
        vals.update(zip(self.lazy, h["aggs"].tolist() if self.lazy else ()))
        out = {k: (int(v) if k in _COUNTS else float(v)) for k, v in vals.items()}
        if out.get("n_tok_mis", 1) == 0:   # no token has a rollout log-prob: no mismatch aggregates (``any_roll``)
            out = {k: v for k, v in out.items() if "any_roll" not in AGGS[k].needs}
        host = {k: h["seq." + k] for k in self.seq}
        for k in ("n_tokens", "nonfinite", "retok_mismatch"):
            host[k] = host[k].astype(np.int32)
        host["turn"] = self.seq_turn if self.seq_turn is not None else h["seq_turn"].astype(np.int16)
        tr = None
        if self.turn is not None:
            tv = h["turn_valid"]
            tr = {k: h["turn." + k][tv] for k in self.turn}
            tr["turn"] = tr["turn"].astype(np.int16)
            tr["n_tokens"] = tr["n_tokens"].astype(np.int32)
            if "retok_mismatch" in tr:
                tr["retok_mismatch"] = tr["retok_mismatch"].astype(np.int32)
        tok_h = {k: h.get("tok." + k) for k in _TOKEN_KEYS}
        res = UpdateStats(None, out, host, tr, h["seq_k3"], h["nonempty"], h["anomalous"], tok_h)
        res.masked = (h["valid"], self.B, self.T)
        res.extra = {k[6:]: v for k, v in h.items() if k.startswith("extra.")}
        return res


_TOKEN_KEYS = ("turn", "log_ratio", "advantage", "logp", "logp_old", "logp_ref", "logp_rollout", "entropy",
               "token_id", "token_id_rollout")


def compute_update(inp: UpdateInputs, bands: Bands, segments: np.ndarray | None = None,
                   extra: dict | None = None, wait: bool = True) -> Any:
    """Statistics of one update (see the module doc), on numpy or on the torch tensors' device.

    On torch (the masked layout, ``masked_layout``) the device is never read until the end, where every result
    leaves it in one queued copy (backends.HostCopy): one host wait per call. ``extra``: more device tensors to
    bring back with that copy (the collector's sample ids and rollout rows), in ``UpdateStats.extra``.
    ``wait=False`` (masked layout only): return the PendingStats without waiting for the copy.

    ``segments``: the rows of ``inp`` are several steps stacked, step ``i`` starting at row ``segments[i]`` (numpy
    input without turn ids, see ``segmentable``): ``aggs`` is then one dict per step (_segment_aggs); the rows are
    the same as per step."""
    be = backend_for(inp.logp, inp.mask)
    mask = be.asarray(inp.mask)
    B, T = mask.shape
    if masked_layout(be, inp):
        raw, valid, adv_b, adv_2d, n_bad_row = _masked_inputs(inp, be, mask)
        lay = Layout(be, None, None, B, T, False, valid)
    else:
        raw, rows, pos, dense, adv_b, adv_2d, n_bad_row = _token_inputs(inp, be, mask)
        lay = Layout(be, rows, pos, B, T, dense)
    retok = None if inp.retok_extra is None else be.asarray(inp.retok_extra, np.int64)
    env = Env(be, bands, lay, dict(raw, adv_b=adv_b, adv_2d=adv_2d, n_bad_row=n_bad_row, retok_extra=retok,
                                   turn_valid=None))
    # whether any token has a rollout log-prob: on the masked layout that would be a host read, so the mismatch
    # aggregates are computed and dropped on the host when their count is 0 (_host_results)
    env._v["any_roll"] = True if raw["lp_roll"] is None or lay.valid is not None \
        else (bool(be.count(env.have_roll)) or None)
    if segments is not None:
        starts = _check_segments(segments, inp, be, B)

    given = {k for k, v in env._v.items() if v is not None}  # the formulas whose optional inputs were given
    # the aggregates first, then the columns: the order the token values were computed in (and their temporaries
    # freed in) before, which numpy's allocator answers with reused memory instead of fresh pages
    formulas = [f for f in AGGS.values() if given.issuperset(f.needs)]
    if segments is None:
        aggs = {f.name: f.scalar(env) for f in formulas}
    else:
        aggs = _segment_aggs(env, formulas, starts)
    seq = {f.name: f.fn(env) for f in SEQ_COLUMNS.values() if given.issuperset(f.needs)}
    seq["retok_mismatch"] = _retok(env)
    turn, tok_turn, seq_turn = _turns(env, inp.turn_ids, seq)
    if segments is None:  # the turn aggregates, once _turns has put the turn ratios in the Env
        given.update(k for k in ("turn_ratio", "multi_turn") if env._v.get(k) is not None)
        aggs.update((f.name, f.scalar(env)) for f in AGGS.values() if f.name not in aggs
                    and given.issuperset(f.needs))
        if lay.valid is None:
            aggs = be.finish(aggs, _COUNTS)

    tok = {"turn": tok_turn, "log_ratio": env.log_ratio, "advantage": env.adv,
           "logp": env.lp, "logp_old": env.lp_old, "logp_ref": env.lp_ref, "logp_rollout": env.lp_roll,
           "entropy": env.ent, "token_id": env.tid, "token_id_rollout": env.rid}
    if lay.valid is not None:
        pending = _masked_results(env, aggs, seq, turn, tok, seq_turn, extra)
        return pending.result() if wait else pending
    host = {k: be.host(v) for k, v in seq.items()}
    for k in ("n_tokens", "nonfinite", "retok_mismatch"):
        host[k] = host[k].astype(np.int32)
    host["turn"] = seq_turn
    nonempty = be.host(lay.nonempty)
    anomalous = be.host((n_bad_row > 0) | env.nalis | env.nalis_delta)
    return UpdateStats(env, aggs, host, turn, be.host(env.seq_k3), nonempty, anomalous, tok)


def segmentable(mask: np.ndarray, turn_ids: Any) -> bool:
    """Whether steps stacked in ``mask`` [B, T] can share one compute_update (``segments``): numpy, no turn ids."""
    return isinstance(mask, np.ndarray) and turn_ids is None


def _check_segments(segments, inp: UpdateInputs, be: Backend, B: int) -> np.ndarray:
    if inp.turn_ids is not None or be.name != "numpy":
        raise ValueError("segments need numpy inputs without turn ids")
    starts = np.asarray(segments, np.int64)
    if starts.size == 0 or starts[0] != 0 or np.any(np.diff(starts) <= 0) or starts[-1] >= B:
        raise ValueError(f"segments must be increasing row starts from 0 below {B}, got {starts.tolist()}")
    return starts


def _segment_aggs(e: Env, formulas: list[AggFormula], starts: np.ndarray) -> list[dict]:
    """The aggregates of each stacked step (rows ``starts[i]`` to ``starts[i + 1]``): every formula once per row
    (row_agg: its declared level and merge kind say how), then all sums and counts reduced per step with one
    ``np.add.reduceat`` and the extrema with ``fmax``/``fmin``, so a batch of small steps costs about one step's
    numpy calls. Sums equal the per-step ones up to float64 summation order; a step without a selected entry gets
    NaN for an extremum, as ``Backend.max`` gives; the mismatch aggregates are left out of a step none of whose
    tokens has a rollout log-prob, as the per-step path does (``any_roll``)."""
    B = e.lay.B
    per_row = [row_agg(f, e) for f in formulas]
    out = np.empty((len(formulas), starts.size))
    for kind, red in (("sum", np.add), ("max", np.fmax), ("min", np.fmin)):
        idx = [i for i, f in enumerate(formulas) if f.merge == kind]
        if idx:
            mat = np.stack([np.broadcast_to(per_row[i], (B,)) for i in idx])
            out[idx] = red.reduceat(mat, starts, axis=1)
    for i, f in enumerate(formulas):
        if f.merge != "sum":
            out[i][np.isinf(out[i])] = math.nan   # nothing selected in the step
    drop = np.zeros(starts.size, bool)
    if any("any_roll" in f.needs for f in formulas):
        drop = np.add.reduceat(e.be.rsum(e.lay, e.have_roll), starts) == 0
    res = []
    for j in range(starts.size):
        col = out[:, j].tolist()
        res.append({f.name: (round(v) if f.count else v) for f, v in zip(formulas, col)
                    if not (drop[j] and "any_roll" in f.needs)})
    return res


def _retok(e: Env):
    """Per-row count of id mismatches, those of a response of different length included (-1: not compared)."""
    be, xp = e.be, e.xp
    if e.tid is None or e.rid is None:
        return be.full(e.lay.B, -1, np.int64)
    row = xp.where(e.n_id_row > 0, be.int64(e.n_id_diff_row), -1)
    if e.retok_extra is not None:
        ext = e.retok_extra
        row = xp.where(ext >= 0, xp.clip(row, 0, None) + ext, row)
    return row


def _turns(e: Env, turn_ids, seq: dict):
    """Turns table (per-sample turn ids [B]: each sample is one turn; per-token [B, T]: (row, turn) segments),
    per-token turn ids, per-sample turn id, and H_turn (AT2PO) added to ``seq``; the turn ratios (``turn_ratio``)
    and the multi-turn rows (``multi_turn``, ``turn_entropy_row``) go to the Env for the turn aggregates."""
    be, xp, lay = e.be, e.xp, e.lay
    B = lay.B
    n_turns = xp.where(lay.nonempty, 1, 0)
    turn_entropy = be.full(B, 0.0, np.float64)
    seq_turn = np.full(B, -1, np.int16)
    tok_turn = None
    turn = None
    masked = lay.valid is not None
    if turn_ids is not None and np.ndim(turn_ids) == 1:
        st = be.asarray(turn_ids, np.int64)
        seq_turn = st if masked else be.host(st).astype(np.int16)
        tok_turn = st[lay.rows]
        ok = lay.nonempty
        # masked layout: every row, the rows with a turn marked (turn_valid) and compacted on the host
        pick = (lambda v: v) if masked else (lambda v: v[ok])  # noqa: E731
        turn = {"row": be.arange(B) if masked else be.nonzero(ok), "turn": pick(st), "n_tokens": pick(lay.n_row),
                "advantage": pick(e.adv_seq), "turn_log_ratio": pick(e.seq_lr),
                "retok_mismatch": pick(seq["retok_mismatch"])}
        if "mismatch_log_abs_max" in seq:
            turn["mismatch_log_abs_max"] = pick(seq["mismatch_log_abs_max"])
        if masked:
            e._v["turn_valid"] = ok
            e.__dict__.pop("turn_valid", None)
    elif e.turn_tok is not None:
        tk = e.turn_tok
        tok_turn = tk
        kmax = int(be.max(tk)) + 1 if be.size(tk) else 1
        key = lay.rows * kmax + tk                                            # [N] (row, turn) key
        ukey, inv = be.unique_inverse(key)
        nk = be.size(ukey)
        n_k = be.bincount(inv, None, nk)
        t_sum = be.bincount(inv, e.log_ratio, nk)
        t_row = ukey // kmax
        turn = {"row": t_row, "turn": ukey % kmax, "n_tokens": n_k, "advantage": be.bincount(inv, e.adv, nk) / n_k,
                "turn_log_ratio": t_sum / n_k}
        if e.lp_roll is not None:
            mx = be.scatter_max(inv, e.d_abs, nk)
            turn["mismatch_log_abs_max"] = xp.where(xp.isfinite(mx), mx, math.nan)
        if e.tid is not None and e.rid is not None:
            comp = be.bincount(inv, e.have_id, nk) > 0
            turn["retok_mismatch"] = xp.where(comp, be.bincount(inv, e.id_diff, nk), -1)
        n_turns = be.bincount(t_row, None, B)
        # AT2PO H_turn: softmax over turns of (turn sum of log-ratio) / (sequence sum), normalised entropy.
        seq_sum = e.rsum(e.log_ratio)[t_row]
        w = t_sum / xp.where(xp.abs(seq_sum) > 1e-12, seq_sum, math.inf)       # 0 when the sequence sum vanishes
        wmax = be.scatter_max(t_row, w, B)
        ex = xp.exp(w - wmax[t_row])
        z = be.bincount(t_row, ex, B)
        p = ex / z[t_row]
        h = be.bincount(t_row, -p * xp.log(xp.clip(p, 1e-300, None)), B)
        multi = n_turns > 1
        turn_entropy = xp.where(multi, h / xp.log(xp.clip(be.f64(n_turns), 2, None)), 0.0)
        e._v.update(multi_turn=multi, turn_entropy_row=turn_entropy)
        seq_turn = np.full(B, -1, np.int16)
    if turn is not None:
        tr = xp.exp(turn["turn_log_ratio"])
        turn["turn_ratio"] = tr
        e._v["turn_ratio"] = tr
        if masked:   # brought to the host with the other results (_masked_results)
            seq["n_turns"], seq["turn_entropy"] = n_turns, turn_entropy
            return turn, tok_turn, seq_turn
        turn = {k: be.host(v) for k, v in turn.items()}
        turn["turn"] = turn["turn"].astype(np.int16)
        turn["n_tokens"] = turn["n_tokens"].astype(np.int32)
        if "retok_mismatch" in turn:
            turn["retok_mismatch"] = turn["retok_mismatch"].astype(np.int32)
    seq["n_turns"] = n_turns
    seq["turn_entropy"] = turn_entropy
    return turn, tok_turn, seq_turn


def top_share(values: np.ndarray, frac: float = 0.01) -> float:
    """Share of sum(values) carried by the top ceil(frac * n) values (at least one). NaN for an empty/zero sum."""
    v = values[np.isfinite(values)]
    total = v.sum()
    if v.size == 0 or total <= 0:
        return float("nan")
    k = max(1, int(np.ceil(frac * v.size)))
    top = np.partition(v, v.size - k)[v.size - k:]
    return float(top.sum() / total)

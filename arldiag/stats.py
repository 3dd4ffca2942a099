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
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from arldiag.backends import Backend, Layout, backend_for

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
    count: bool = False           # integer count (aggregates)


VALUES: dict[str, Formula] = {}   # token [N] / sequence [B] intermediates, computed on demand
SEQ_COLUMNS: dict[str, Formula] = {}   # sequences-table columns [B]
AGGS: dict[str, Formula] = {}     # raw step aggregates (schema.STEP_AGGS names), scalars


def _reg(table: dict, name: str, fn, needs=(), count=False) -> None:
    if name in table:
        raise ValueError(f"duplicate formula {name}")
    table[name] = Formula(name, fn, tuple(needs), count)


def value(name, fn, needs=()):
    _reg(VALUES, name, fn, needs)


def seq_col(name, fn, needs=()):
    _reg(SEQ_COLUMNS, name, fn, needs)


def agg(name, fn, needs=(), count=False):
    _reg(AGGS, name, fn, needs, count)


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
agg("n_tok", lambda e: e.be.size(e.lp), count=True)
agg("sum_ratio", lambda e: e.be.sum(e.ratio))
agg("sum_log_ratio", lambda e: e.be.sum(e.log_ratio))
agg("sum_log_ratio_sq", lambda e: e.be.dot(e.log_ratio, e.log_ratio))
agg("max_abs_log_ratio", lambda e: e.be.max(e.xp.abs(e.log_ratio)))
agg("sum_ppo_kl", lambda e: e.be.sum(e.ppo_kl_tok))
agg("sum_ppo_kl_k3", lambda e: e.be.sum(e.k3_upd))
agg("n_pg_clip", lambda e: e.be.count(e.pg_clip), count=True)
agg("n_pg_clip_lower", lambda e: e.be.count(e.pg_clip_lower), count=True)
agg("n_tok_low_neg", lambda e: e.be.count(e.low & e.neg), count=True)
agg("n_tok_low_pos", lambda e: e.be.count(e.low & e.pos_adv), count=True)
agg("n_tok_high_neg", lambda e: e.be.count(e.high & e.neg), count=True)
agg("n_tok_high_pos", lambda e: e.be.count(e.high & e.pos_adv), count=True)
agg("sum_logp", lambda e: e.be.sum(e.lp))
agg("sum_adv_tok", lambda e: e.be.sum(e.adv))
agg("sum_adv_tok_sq", lambda e: e.be.dot(e.adv, e.adv))
agg("sum_logp_adv", lambda e: e.be.dot(e.lp, e.adv))
agg("n_nonfinite_tok", lambda e: e.n_bad, count=True)
agg("n_nonfinite_seq", lambda e: e.be.count(e.n_bad_row > 0), count=True)
agg("n_seq", lambda e: e.be.count(e.lay.nonempty), count=True)
agg("n_seq_adv_pos", lambda e: e.be.count(e.s_pos & e.lay.nonempty), count=True)
agg("n_seq_adv_neg", lambda e: e.be.count(e.s_neg & e.lay.nonempty), count=True)
agg("n_seq_adv_zero", lambda e: e.be.count((e.adv_seq == 0) & e.lay.nonempty), count=True)
agg("sum_seq_ratio", lambda e: e.be.sum(e.seq_ratio, e.lay.nonempty))
agg("sum_seq_log_ratio", lambda e: e.be.sum(e.seq_lr, e.lay.nonempty))
agg("sum_seq_log_ratio_sq", lambda e: e.be.dot(e.seq_lr, e.seq_lr, e.lay.nonempty))
agg("min_seq_ratio", lambda e: e.be.min(e.seq_ratio, e.lay.nonempty))
agg("max_seq_ratio", lambda e: e.be.max(e.seq_ratio, e.lay.nonempty))
agg("n_seq_low_neg", lambda e: e.be.count(e.s_low & e.s_neg), count=True)
agg("n_seq_low_pos", lambda e: e.be.count(e.s_low & e.s_pos), count=True)
agg("n_seq_high_neg", lambda e: e.be.count(e.s_high & e.s_neg), count=True)
agg("n_seq_high_pos", lambda e: e.be.count(e.s_high & e.s_pos), count=True)
agg("n_nalis", lambda e: e.be.count(e.nalis), count=True)
agg("sum_nalis_ppo_kl_k3", lambda e: e.be.sum(e.seq_k3, e.nalis))
agg("n_nalis_delta", lambda e: e.be.count(e.nalis_delta), count=True)
agg("sum_nalis_delta_ppo_kl_k3", lambda e: e.be.sum(e.seq_k3, e.nalis_delta))
agg("n_tok_ref", lambda e: e.be.size(e.x_ref), needs=("lp_ref",), count=True)
agg("sum_kl_ref_k1", lambda e: -e.be.sum(e.x_ref), needs=("lp_ref",))
agg("sum_kl_ref_k2", lambda e: 0.5 * e.be.dot(e.x_ref, e.x_ref), needs=("lp_ref",))
agg("sum_kl_ref_k3", lambda e: e.be.sum(e.kl_ref_k3_tok), needs=("lp_ref",))
# mismatch sums run over the tokens that have a rollout log-prob (have_roll); NaN when none has one
_MIS = ("lp_roll", "any_roll")
agg("n_tok_mis", lambda e: e.be.count(e.have_roll), needs=_MIS, count=True)
agg("sum_mis_k1", lambda e: -e.be.sum(e.d_mis, e.have_roll), needs=_MIS)
agg("sum_mis_k3", lambda e: e.be.sum(e.rho_mis - e.dc_mis - 1.0, e.have_roll), needs=_MIS)
agg("sum_mis_rho_sq", lambda e: e.be.dot(e.rho_mis, e.rho_mis, e.have_roll), needs=_MIS)
agg("sum_mis_prob_abs", lambda e: e.be.sum(e.p_abs, e.have_roll), needs=_MIS)
agg("max_mis_prob_abs", lambda e: e.be.max(e.p_abs, e.have_roll), needs=_MIS)
agg("max_mis_abs_log", lambda e: e.be.max(e.d_abs, e.have_roll), needs=_MIS)
agg("sum_p_old", lambda e: e.be.sum(e.p_old, e.have_roll), needs=_MIS)
agg("sum_p_roll", lambda e: e.be.sum(e.p_roll, e.have_roll), needs=_MIS)
agg("sum_p_old_sq", lambda e: e.be.dot(e.p_old, e.p_old, e.have_roll), needs=_MIS)
agg("sum_p_roll_sq", lambda e: e.be.dot(e.p_roll, e.p_roll, e.have_roll), needs=_MIS)
agg("sum_p_old_p_roll", lambda e: e.be.dot(e.p_old, e.p_roll, e.have_roll), needs=_MIS)
agg("n_tok_ent", lambda e: e.be.size(e.ent), needs=("ent",), count=True)
agg("sum_entropy", lambda e: e.be.sum(e.ent), needs=("ent",))
agg("n_tok_retok", lambda e: e.be.count(e.have_id) + e.n_extra, needs=("tid", "rid"), count=True)
agg("n_tok_retok_mismatch", lambda e: e.be.count(e.id_diff) + e.n_extra, needs=("tid", "rid"), count=True)

_COUNTS = {f.name for f in AGGS.values() if f.count}


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

    def __init__(self, env: Env, aggs, seq, turn, seq_k3, nonempty, anomalous, tok):
        self._env, self.aggs, self.seq, self.turn = env, aggs, seq, turn
        self.seq_k3, self.nonempty, self.anomalous, self._tok = seq_k3, nonempty, anomalous, tok

    def token_rows(self, keep_rows: np.ndarray) -> dict[str, np.ndarray]:
        """Host token columns (rows, pos, turn, log_ratio, ...; None when not given) of the samples with
        ``keep_rows`` [B] True; only those rows are copied from the device."""
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


def compute_update(inp: UpdateInputs, bands: Bands, segments: np.ndarray | None = None) -> UpdateStats:
    """Statistics of one update (see the module doc), on numpy or on the torch tensors' device.

    ``segments``: the rows of ``inp`` are several steps stacked, step ``i`` starting at row ``segments[i]`` (numpy
    input without turn ids, see ``segmentable``): ``aggs`` is then one dict per step (_segment_aggs, or one pass
    per step in the rare batch whose finite tokens are as many as its rows); the rows are the same as per step."""
    be = backend_for(inp.logp, inp.mask)
    xp = be.xp
    mask = be.asarray(inp.mask)
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

    # A token is "non-finite" when any given input is NaN/Inf there (a NaN rollout log-prob only means "not
    # available"); it is excluded from every aggregate.
    fin = xp.isfinite(raw["lp"]) & xp.isfinite(raw["lp_old"]) & xp.isfinite(raw["adv"])
    for k in ("lp_ref", "ent"):
        if raw[k] is not None:
            fin &= xp.isfinite(raw[k])
    if raw["lp_roll"] is not None:
        fin &= ~xp.isinf(raw["lp_roll"])
    n_bad = be.count(~fin)
    any_bad = bool(n_bad)
    if any_bad and dense:
        rows, pos = be.dense_rows_pos(B, T)
    n_bad_row = be.bincount(rows[~fin], None, B) if any_bad else be.full(B, 0, np.int64)
    if any_bad:  # from here on, finite tokens only
        rows, pos = rows[fin], pos[fin]
        raw = {k: (v if v is None else v[fin]) for k, v in raw.items()}
    lay = Layout(be, rows, pos, B, T, dense and not any_bad)
    env = Env(be, bands, lay, dict(raw, adv_b=adv_b, adv_2d=adv_2d, n_bad=n_bad, n_bad_row=n_bad_row))
    retok_row, n_extra = _retok(env, inp.retok_extra)
    env._v["n_extra"] = n_extra
    env._v["any_roll"] = True if raw["lp_roll"] is None else (bool(be.count(env.have_roll)) or None)

    given = {k for k, v in env._v.items() if v is not None}  # the formulas whose optional inputs were given
    formulas = [f for f in AGGS.values() if given.issuperset(f.needs)]
    if segments is None:
        aggs = {f.name: f.fn(env) for f in formulas}
    else:
        if inp.turn_ids is not None or be.name != "numpy":
            raise ValueError("segments need numpy inputs without turn ids")
        aggs = {}
        starts = np.asarray(segments, np.int64)
        if starts.size == 0 or starts[0] != 0 or np.any(np.diff(starts) <= 0) or starts[-1] >= B:
            raise ValueError(f"segments must be increasing row starts from 0 below {B}, got {starts.tolist()}")
        if be.size(raw["lp"]) != B:
            steps = _segment_aggs(env, formulas, starts, inp.retok_extra)
        else:  # token arrays as long as row arrays: _RowReductions cannot tell them apart, so one pass per step
            bounds = np.append(starts, B)
            steps = [compute_update(_rows_of(inp, lo, hi), bands).aggs for lo, hi in zip(bounds[:-1], bounds[1:])]
    seq = {f.name: f.fn(env) for f in SEQ_COLUMNS.values() if given.issuperset(f.needs)}
    seq["retok_mismatch"] = retok_row
    turn, tok_turn, seq_turn = _turns(env, inp.turn_ids, aggs, seq)

    tok = {"turn": tok_turn, "log_ratio": env.log_ratio, "advantage": env.adv,
           "logp": env.lp, "logp_old": env.lp_old, "logp_ref": env.lp_ref, "logp_rollout": env.lp_roll,
           "entropy": env.ent, "token_id": env.tid, "token_id_rollout": env.rid}
    host = {k: be.host(v) for k, v in seq.items()}
    host["n_tokens"] = host["n_tokens"].astype(np.int32)
    host["nonfinite"] = host["nonfinite"].astype(np.int32)
    host["retok_mismatch"] = host["retok_mismatch"].astype(np.int32)
    host["turn"] = seq_turn
    nonempty = be.host(lay.nonempty)
    anomalous = be.host((n_bad_row > 0) | env.nalis | env.nalis_delta)
    return UpdateStats(env, be.finish(aggs, _COUNTS) if segments is None else steps, host, turn,
                       be.host(env.seq_k3), nonempty, anomalous, tok)


def segmentable(mask: np.ndarray, turn_ids: Any) -> bool:
    """Whether steps stacked in ``mask`` [B, T] can share one compute_update (``segments``): numpy, no turn ids."""
    return isinstance(mask, np.ndarray) and turn_ids is None


def _rows_of(inp: UpdateInputs, lo: int, hi: int) -> UpdateInputs:
    """Rows ``lo:hi`` of numpy inputs; the flat rollout arrays (one entry per masked token, row-major) by the masked
    token counts of the rows before."""
    n = np.count_nonzero(inp.mask, axis=1)
    a, b = int(n[:lo].sum()), int(n[:hi].sum())
    pick = {f.name: getattr(inp, f.name) for f in dataclasses.fields(UpdateInputs)}
    for k, v in pick.items():
        if v is not None:
            pick[k] = v[a:b] if k in ("rollout_flat_logp", "rollout_flat_token_ids") else v[lo:hi]
    return UpdateInputs(**pick)


class _RowReductions:
    """The backend's stand-in while the aggregates of several stacked steps are evaluated (_segment_aggs): each
    scalar reduction (sum, dot, count, size, max, min) returns its per-row values [B] instead (a token array [N] is
    reduced per row first), which _segment_aggs then reduces per step. Everything else is the backend's own."""

    def __init__(self, be: Backend, lay: Layout):
        self._be, self._lay = be, lay
        self.extreme: dict[int, tuple[str, Any]] = {}  # id(result) -> ("max" | "min", result kept alive)

    def __getattr__(self, name: str):
        return getattr(self._be, name)

    def _rows(self, x) -> np.ndarray:
        lay = self._lay
        return x.astype(np.float64) if x.shape[0] == lay.B else self._be.rsum(lay, x)

    def size(self, x):
        return self._lay.n_row.astype(np.float64) if x.shape[0] != self._lay.B else np.ones(self._lay.B)

    def sum(self, x, where=None):
        return self._rows(x if where is None else np.where(where, x, 0.0))

    def dot(self, x, y, where=None):
        return self.sum(np.multiply(x, y, dtype=np.float64), where)

    def count(self, b):
        return self._rows(b)

    def _extreme(self, kind: str, x, where, empty: float):
        lay = self._lay
        if where is not None:
            x = np.where(where, x, empty)
        if x.shape[0] == lay.B:
            r = x.astype(np.float64)
        else:
            r = self._be.rmax(lay, x) if kind == "max" else self._be.rmin(lay, x)
        self.extreme[id(r)] = (kind, r)
        return r

    def max(self, x, where=None):
        return self._extreme("max", x, where, -math.inf)

    def min(self, x, where=None):
        return self._extreme("min", x, where, math.inf)


def _segment_aggs(e: Env, formulas: list[Formula], starts: np.ndarray, retok_extra) -> list[dict]:
    """The aggregates of each stacked step (rows ``starts[i]`` to ``starts[i + 1]``): every formula is evaluated
    once with per-row reductions (_RowReductions), then all sums and counts are reduced per step with one
    ``np.add.reduceat`` and the extrema with ``fmax``/``fmin``, so a batch of small steps costs about one step's
    numpy calls. Sums equal the per-step ones up to float64 summation order; a step without a selected entry gets
    NaN for an extremum, as ``Backend.max`` gives; the mismatch aggregates are left out of a step none of whose
    tokens has a rollout log-prob, as the per-step path does (``any_roll``)."""
    lay = e.lay
    rows = _RowReductions(e.be, lay)
    extra = np.zeros(lay.B) if retok_extra is None else np.where(retok_extra > 0, retok_extra, 0).astype(np.float64)
    saved = {k: e.__dict__[k] for k in ("be", "n_bad", "n_extra") if k in e.__dict__}
    e.be = rows
    e.__dict__["n_bad"] = e.n_bad_row.astype(np.float64)   # per row: the scalar counts of the per-step path
    e.__dict__["n_extra"] = extra
    try:
        per_row = [f.fn(e) for f in formulas]
    finally:
        for k in ("n_bad", "n_extra"):
            e.__dict__.pop(k, None)
        e.__dict__.update(saved)
    B = lay.B
    kinds = [rows.extreme.get(id(v), ("sum", None))[0] for v in per_row]
    out = np.empty((len(formulas), starts.size))
    for kind, red in (("sum", np.add), ("max", np.fmax), ("min", np.fmin)):
        idx = [i for i, k in enumerate(kinds) if k == kind]
        if idx:
            mat = np.stack([np.broadcast_to(np.asarray(per_row[i], np.float64), (B,)) for i in idx])
            out[idx] = red.reduceat(mat, starts, axis=1)
    for i, k in enumerate(kinds):
        if k != "sum":
            out[i][np.isinf(out[i])] = math.nan   # nothing selected in the step
    drop = np.zeros(starts.size, bool)
    if any("any_roll" in f.needs for f in formulas):
        drop = np.add.reduceat(rows.count(e.have_roll), starts) == 0
    res = []
    for j in range(starts.size):
        col = out[:, j].tolist()
        res.append({f.name: (round(v) if f.count else v) for f, v in zip(formulas, col)
                    if not (drop[j] and "any_roll" in f.needs)})
    return res


def _retok(e: Env, retok_extra) -> tuple[Any, int]:
    """Per-row count of id mismatches (-1: not compared) and the count from responses of different length."""
    be, xp = e.be, e.xp
    if e.tid is None or e.rid is None:
        return be.full(e.lay.B, -1, np.int64), 0
    compared = e.rsum(e.have_id) > 0
    row = xp.where(compared, be.int64(e.rsum(e.id_diff)), -1)
    n_extra = 0
    if retok_extra is not None:
        ext = be.asarray(retok_extra, np.int64)
        row = xp.where(ext >= 0, xp.clip(row, 0, None) + ext, row)
        n_extra = int(retok_extra[retok_extra > 0].sum())
    return row, n_extra


def _turns(e: Env, turn_ids, aggs: dict, seq: dict):
    """Turns table (per-sample turn ids [B]: each sample is one turn; per-token [B, T]: (row, turn) segments),
    per-token turn ids, per-sample turn id, and the turn aggregates/H_turn (AT2PO) added to ``aggs``/``seq``."""
    be, xp, lay = e.be, e.xp, e.lay
    B = lay.B
    n_turns = xp.where(lay.nonempty, 1, 0)
    turn_entropy = be.full(B, 0.0, np.float64)
    seq_turn = np.full(B, -1, np.int16)
    tok_turn = None
    turn = None
    if turn_ids is not None and np.ndim(turn_ids) == 1:
        st = be.asarray(turn_ids, np.int64)
        seq_turn = be.host(st).astype(np.int16)
        tok_turn = st[lay.rows]
        ok = lay.nonempty
        turn = {"row": be.nonzero(ok), "turn": st[ok], "n_tokens": lay.n_row[ok], "advantage": e.adv_seq[ok],
                "turn_log_ratio": e.seq_lr[ok], "retok_mismatch": seq["retok_mismatch"][ok]}
        if "mismatch_log_abs_max" in seq:
            turn["mismatch_log_abs_max"] = seq["mismatch_log_abs_max"][ok]
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
        aggs.update(be.finish({"n_seq_multiturn": be.count(multi), "sum_turn_entropy": be.sum(turn_entropy, multi)},
                              {"n_seq_multiturn"}))
        seq_turn = np.full(B, -1, np.int16)
    if turn is not None:
        tr = xp.exp(turn["turn_log_ratio"])
        turn["turn_ratio"] = tr
        slo, shi = 1.0 - e.b.seq_eps_low, 1.0 + e.b.seq_eps_high
        aggs.update(be.finish({"n_turn": be.size(tr), "n_turn_low": be.count(tr < slo),
                               "n_turn_high": be.count(tr > shi), "min_turn_ratio": be.min(tr),
                               "max_turn_ratio": be.max(tr)}, {"n_turn", "n_turn_low", "n_turn_high"}))
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

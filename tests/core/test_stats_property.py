"""Property tests: every step statistic equals a direct, per-sample numpy implementation of its formula
(ALGORITHMS.md), on random ragged batches with masks, several updates and several ranks merged by the reader."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arldiag

EPS_LOW, EPS_HIGH, SEQ_LO, SEQ_HI, C, DELTA = 0.2, 0.28, 0.05, 0.06, 3.0, 0.1


def make_update(rng, B, T, with_opt=True):
    mask = np.zeros((B, T), bool)
    for i in range(B):
        start = rng.integers(0, T // 2)
        length = rng.integers(1, T - start + 1)
        mask[i, start:start + length] = True
        if rng.random() < 0.3:  # holes: tool-output tokens inside the response
            mask[i, start + rng.integers(0, length)] = False
    mask[mask.sum(1) == 0, 0] = True
    logp_old = rng.normal(-1.5, 1.0, (B, T)).astype(np.float32)
    logp = (logp_old + rng.normal(0, 0.3, (B, T))).astype(np.float32)
    adv = rng.normal(0, 1, B).astype(np.float32)
    adv[rng.random(B) < 0.15] = 0.0
    out = dict(logp=logp, logp_old=logp_old, advantages=adv, response_mask=mask)
    if with_opt:
        out["logp_ref"] = (logp_old + rng.normal(0, 0.2, (B, T))).astype(np.float32)
        out["logp_rollout"] = (logp_old + rng.normal(0, 0.05, (B, T))).astype(np.float32)
        out["entropy"] = rng.uniform(0, 3, (B, T)).astype(np.float32)
    return out


def reference(updates):
    """Direct per-token/per-sample formulas over all updates (the merge the reader must reproduce)."""
    tok = {k: [] for k in ("lp", "lpo", "A", "ref", "roll", "ent")}
    seqs = []
    for u in updates:
        m = u["response_mask"]
        for i in range(m.shape[0]):
            sel = m[i]
            lp, lpo = u["logp"][i][sel].astype(np.float64), u["logp_old"][i][sel].astype(np.float64)
            A = np.full(lp.size, float(u["advantages"][i]))
            tok["lp"].append(lp), tok["lpo"].append(lpo), tok["A"].append(A)
            tok["ref"].append(u["logp_ref"][i][sel].astype(np.float64))
            tok["roll"].append(u["logp_rollout"][i][sel].astype(np.float64))
            tok["ent"].append(u["entropy"][i][sel].astype(np.float64))
            lr = np.clip(lp - lpo, -20, 20)
            seqs.append(dict(A=float(u["advantages"][i]), s=math.exp(lr.mean()), lr_mean=lr.mean(),
                             k3=float(np.sum(np.exp(lr) - lr - 1))))
    t = {k: np.concatenate(v) for k, v in tok.items()}
    lr = np.clip(t["lp"] - t["lpo"], -20, 20)
    r = np.exp(lr)
    A = t["A"]
    lo, hi = 1 - EPS_LOW, 1 + EPS_HIGH
    pg1, pg2 = -A * r, -A * np.clip(r, lo, hi)
    x = np.clip(t["ref"] - t["lp"], -10, 10)
    d = t["lpo"] - t["roll"]
    po, pr = np.exp(t["lpo"]), np.exp(t["roll"])
    k3 = r - lr - 1
    S = np.array([s["s"] for s in seqs])
    SA = np.array([s["A"] for s in seqs])
    SK = np.array([s["k3"] for s in seqs])
    nalis = (SA < 0) & (S < 1 - SEQ_LO)
    nalis_d = (SA < 0) & (-np.array([s["lr_mean"] for s in seqs]) > DELTA)
    return {
        "n_tokens": lr.size,
        "ratio_mean": r.mean(),
        "ppo_kl": np.mean(t["lpo"] - t["lp"]),
        "ppo_kl_k3": k3.mean(),
        "pg_clipfrac": np.mean(pg2 > pg1),
        "pg_clipfrac_lower": np.mean((np.maximum(pg1, pg2) > -A * C) & (A < 0)),
        "clip_ratio_low_mean": np.mean((r < lo) & (A < 0)),
        "clip_ratio_high_mean": np.mean((r > hi) & (A > 0)),
        "tok_oob_low_pos_frac": np.mean((r < lo) & (A > 0)),
        "tok_oob_high_neg_frac": np.mean((r > hi) & (A < 0)),
        "log_ratio_std": lr.std(),
        "log_ratio_abs_max": np.abs(lr).max(),
        "seq_ratio_mean": S.mean(),
        "seq_ratio_min": S.min(),
        "seq_oob_low_neg_frac": np.mean((S < 1 - SEQ_LO) & (SA < 0)),
        "seq_oob_high_pos_frac": np.mean((S > 1 + SEQ_HI) & (SA > 0)),
        "neg_adv_low_is_count": nalis.sum(),
        "neg_adv_low_is_frac": nalis.mean(),
        "neg_adv_low_is_kl_share": SK[nalis].sum() / SK.sum(),
        "neg_adv_low_is_delta_frac": nalis_d.mean(),
        "kl_ref_k1": np.mean(t["lp"] - t["ref"]),
        "kl_ref_k2": np.mean(0.5 * (t["ref"] - t["lp"]) ** 2),
        "kl_ref_k3": np.mean(np.exp(x) - x - 1),
        "mismatch_k1": np.mean(t["roll"] - t["lpo"]),
        "mismatch_k3": np.mean(np.exp(d) - d - 1),
        "mismatch_chi2": np.mean(np.exp(d) ** 2) - 1,
        "mismatch_prob_abs_mean": np.mean(np.abs(po - pr)),
        "mismatch_prob_abs_max": np.max(np.abs(po - pr)),
        "mismatch_log_abs_max": np.max(np.abs(d)),
        "mismatch_prob_corr": np.corrcoef(po, pr)[0, 1],
        "entropy": t["ent"].mean(),
        "cov_logp_adv": np.mean((t["lp"] - t["lp"].mean()) * (A - A.mean())),
        "adv_mean": A.mean(),
        "adv_std": A.std(),
        "adv_pos_frac": np.mean(SA > 0),
        "adv_neg_frac": np.mean(SA < 0),
        "adv_zero_frac": np.mean(SA == 0),
        "nonfinite_tokens": 0,
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), ranks=st.integers(1, 3), n_updates=st.integers(1, 3),
       B=st.integers(1, 12), T=st.integers(2, 20))
def test_step_metrics_match_numpy(tmp_path_factory, seed, ranks, n_updates, B, T):
    rng = np.random.default_rng(seed)
    root = tmp_path_factory.mktemp("run")
    all_updates = []
    py_metrics = []
    for rank in range(ranks):
        col = arldiag.Collector(root, clip=(EPS_LOW, EPS_HIGH), seq_clip=(SEQ_LO, SEQ_HI), rank=rank,
                                world_size=ranks, dual_clip_c=C, neg_adv_delta=DELTA, strict=True)
        for u in range(n_updates):
            upd = make_update(rng, B, T)
            all_updates.append(upd)
            col.record_update(7, u, sample_ids=np.arange(B) + 100 * rank, **upd)
        py_metrics.append(col.record_step(7, {"grad_norm": 2.0}))
        col.close()
    ref = reference(all_updates)
    run = arldiag.open_run(root)
    row = run.sql("select * from steps").df().iloc[0]
    for k, v in ref.items():
        assert row[k] == pytest.approx(v, rel=2e-4, abs=1e-6, nan_ok=True), k
    assert row["grad_norm"] == 2.0
    assert row["n_updates"] == n_updates
    if ranks == 1:  # the online (Python) evaluator gives the same numbers as the SQL one
        for k in ref:
            assert py_metrics[0][k] == pytest.approx(row[k], rel=1e-9, abs=1e-12, nan_ok=True), k


def test_per_sequence_rows_match_formulas(tmp_path):
    rng = np.random.default_rng(3)
    upd = make_update(rng, 6, 9)
    with arldiag.Collector(tmp_path / "r", clip=(EPS_LOW, EPS_HIGH), seq_clip=(SEQ_LO, SEQ_HI),
                           neg_adv_delta=DELTA, token_sample_rate=1.0, strict=True) as col:
        col.record_update(0, 0, sample_ids=np.arange(6), **upd)
        col.record_step(0)
    run = arldiag.open_run(tmp_path / "r")
    seq = run.sql("select * from sequences order by sample_id").df()
    toks = run.sql("select * from tokens order by sample_id, pos").df()
    m = upd["response_mask"]
    for i in range(6):
        sel = m[i]
        lr = (upd["logp"][i][sel] - upd["logp_old"][i][sel]).astype(np.float64)
        assert seq.n_tokens[i] == sel.sum()
        assert seq.seq_ratio[i] == pytest.approx(math.exp(lr.mean()), rel=1e-5)
        assert seq.ppo_kl[i] == pytest.approx(-lr.mean(), rel=1e-4, abs=1e-6)
        d = upd["logp_old"][i][sel] - upd["logp_rollout"][i][sel]
        assert seq.seq_mismatch_ratio[i] == pytest.approx(math.exp(d.mean()), rel=1e-5)
        assert seq.mismatch_log_abs_max[i] == pytest.approx(np.abs(d).max(), rel=1e-5)
        assert bool(seq.neg_adv_low_is_delta[i]) == bool(upd["advantages"][i] < 0 and -lr.mean() > DELTA)
        t = toks[toks.sample_id == i]
        assert list(t.pos) == list(np.flatnonzero(sel))
        np.testing.assert_allclose(t.log_ratio, lr, rtol=1e-5, atol=1e-6)


def test_turn_ratios_and_turn_entropy(tmp_path):
    # one sample, three turns of 2 tokens each with log-ratios [0.1, 0.1], [-0.2, 0.0], [0.3, 0.3]
    lp_old = np.zeros((1, 6), np.float32)
    lp = np.array([[0.1, 0.1, -0.2, 0.0, 0.3, 0.3]], np.float32)
    turns = np.array([[0, 0, 1, 1, 2, 2]])
    with arldiag.Collector(tmp_path / "r", clip=(0.2, 0.2), strict=True) as col:
        col.record_update(0, 0, logp=lp, logp_old=lp_old, advantages=np.array([1.0]),
                          response_mask=np.ones((1, 6), bool), turn_ids=turns, sample_ids=[5])
        col.record_step(0)
    run = arldiag.open_run(tmp_path / "r")
    tr = run.sql("select turn, turn_ratio from turns order by turn").fetchall()
    assert [t for t, _ in tr] == [0, 1, 2]
    np.testing.assert_allclose([r for _, r in tr], np.exp([0.1, -0.1, 0.3]), rtol=1e-5)
    w = np.array([0.2, -0.2, 0.6]) / 0.6        # turn sums / sequence sum
    p = np.exp(w) / np.exp(w).sum()
    h = -(p * np.log(p)).sum() / np.log(3)
    got = run.sql("select turn_entropy, n_turns from sequences").fetchall()[0]
    assert got[0] == pytest.approx(h, rel=1e-5) and got[1] == 3

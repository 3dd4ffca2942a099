"""The torch evaluator of the statistics formulas (arldiag/stats.py on torch tensors, here CPU tensors) gives the
numpy evaluator's results to 1e-6: aggregates, sequence and turn columns, and the kept token rows."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arldiag
from arldiag.stats import AGGS, SEQ_COLUMNS, Bands, UpdateInputs, compute_update

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny tensors; intra-op threads only thrash on a busy 2-core host
BANDS = Bands(0.2, 0.28, 0.05, 0.06, 3.0, 0.1)


def make_inputs(rng, B, T, dense, adv2d, turns, with_ids, bad):
    mask = np.ones((B, T), bool) if dense else rng.random((B, T)) < 0.7
    if not dense:
        mask[rng.integers(0, B)] = False               # a sample without tokens
    lpo = rng.normal(-1.5, 1.0, (B, T)).astype(np.float32)
    lp = (lpo + rng.normal(0, 0.3, (B, T))).astype(np.float32)
    adv = rng.normal(0, 1, (B, T) if adv2d else B).astype(np.float32)
    adv[rng.random(adv.shape) < 0.2] = 0.0
    roll = (lpo + rng.normal(0, 0.05, (B, T))).astype(np.float32)
    roll[rng.random((B, T)) < 0.2] = np.nan             # rollout log-prob unknown for some tokens
    if bad:
        lp[rng.random((B, T)) < 0.05] = np.nan
    d = dict(logp=lp, logp_old=lpo, advantages=adv, mask=mask,
             logp_ref=(lpo + rng.normal(0, 0.2, (B, T))).astype(np.float32), logp_rollout=roll,
             entropy=rng.uniform(0, 3, (B, T)).astype(np.float32))
    if turns == 1:
        d["turn_ids"] = rng.integers(0, 4, B)
    elif turns == 2:
        d["turn_ids"] = np.sort(rng.integers(0, 3, (B, T)), axis=1)
    if with_ids:
        tid = rng.integers(0, 50, (B, T))
        d["token_ids"] = tid
    return d


def to_torch(d):
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in d.items()}


def flat_extras(rng, d):
    """Rollout ids aligned to the masked tokens, as the collector builds them (host arrays on both paths)."""
    n = int(d["mask"].sum())
    rid = d["token_ids"][d["mask"]].copy()
    rid[rng.random(n) < 0.1] += 1
    rid[rng.random(n) < 0.1] = -1
    extra = np.where(rng.random(d["mask"].shape[0]) < 0.3, rng.integers(0, 3, d["mask"].shape[0]), -1)
    return rid, extra


def close(a, b, what):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, what
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6, equal_nan=True, err_msg=what)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), B=st.integers(1, 9), T=st.integers(1, 17), dense=st.booleans(),
       adv2d=st.booleans(), turns=st.sampled_from([0, 1, 2]), with_ids=st.booleans(), bad=st.booleans())
def test_torch_path_equals_numpy_path(seed, B, T, dense, adv2d, turns, with_ids, bad):
    rng = np.random.default_rng(seed)
    d = make_inputs(rng, B, T, dense, adv2d, turns, with_ids, bad)
    extras = {}
    if with_ids:
        rid, extra = flat_extras(rng, d)
        extras = dict(rollout_flat_token_ids=rid, retok_extra=extra)
    a = compute_update(UpdateInputs(**d, **extras), BANDS)
    b = compute_update(UpdateInputs(**to_torch(d), **extras), BANDS)
    assert set(a.aggs) == set(b.aggs)
    for k in a.aggs:
        close(a.aggs[k], b.aggs[k], k)
        assert type(a.aggs[k]) is type(b.aggs[k]), k
    assert set(a.seq) == set(b.seq)
    for k in a.seq:
        close(a.seq[k], b.seq[k], f"seq.{k}")
        assert a.seq[k].dtype == b.seq[k].dtype, k
    assert (a.turn is None) == (b.turn is None)
    for k in (a.turn or {}):
        close(a.turn[k], b.turn[k], f"turn.{k}")
    close(a.seq_k3, b.seq_k3, "seq_k3")
    assert (a.anomalous == b.anomalous).all() and (a.nonempty == b.nonempty).all()
    keep = rng.random(B) < 0.5
    ta, tb = a.token_rows(keep), b.token_rows(keep)
    for k in ta:
        assert (ta[k] is None) == (tb[k] is None), k
        if ta[k] is not None:
            close(ta[k], tb[k], f"tok.{k}")


def test_every_formula_is_evaluated_by_both_paths():
    # the full-input case reaches every registered aggregate and sequence column on both backends
    rng = np.random.default_rng(0)
    d = make_inputs(rng, 6, 8, False, False, 2, True, True)
    rid, extra = flat_extras(rng, d)
    for inputs in (d, to_torch(d)):
        res = compute_update(UpdateInputs(**inputs, rollout_flat_token_ids=rid, retok_extra=extra), BANDS)
        assert set(AGGS) <= set(res.aggs)
        assert set(SEQ_COLUMNS) <= set(res.seq)


@pytest.mark.parametrize("rate", [1.0, 0.5])
def test_collector_stores_the_same_rows_from_torch_tensors(tmp_path, rate):
    """Every argument a tensor, sample ids included (TRL hands them as a tensor); rate < 1 hashes the ids to sample
    token rows, on the host."""
    rng = np.random.default_rng(5)
    d = make_inputs(rng, 8, 12, False, False, 1, False, False)
    kw = dict(clip=(0.2, 0.28), seq_clip=(0.05, 0.06), token_sample_rate=rate, strict=True)
    for name, conv in (("np", lambda x: x), ("torch", lambda x: torch.from_numpy(np.ascontiguousarray(x)))):
        with arldiag.Collector(tmp_path / name, **kw) as col:
            col.record_update(0, 0, logp=conv(d["logp"]), logp_old=conv(d["logp_old"]),
                              advantages=conv(d["advantages"]), response_mask=conv(d["mask"]),
                              logp_ref=conv(d["logp_ref"]), entropy=conv(d["entropy"]),
                              turn_ids=conv(d["turn_ids"]), sample_ids=conv(np.arange(8)))
            col.record_step(0, {"lr": 1e-3})
    runs = {n: arldiag.open_run(tmp_path / n) for n in ("np", "torch")}
    for table, order in (("steps", "step"), ("sequences", "sample_id"), ("tokens", "sample_id, pos")):
        a = runs["np"].sql(f"select * exclude (run, time) from {table} order by {order}").df() if table == "steps" \
            else runs["np"].sql(f"select * exclude (run) from {table} order by {order}").df()
        b = runs["torch"].sql(f"select * exclude (run, time) from {table} order by {order}").df() if table == "steps" \
            else runs["torch"].sql(f"select * exclude (run) from {table} order by {order}").df()
        assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0
        for c in a.columns:
            close(a[c].astype(float), b[c].astype(float), f"{table}.{c}")


def test_torch_path_handles_bf16_inputs():
    rng = np.random.default_rng(1)
    d = make_inputs(rng, 4, 6, True, False, 0, False, False)
    t = to_torch(d)
    t["logp"], t["logp_old"] = t["logp"].bfloat16(), t["logp_old"].bfloat16()
    from arldiag.collectors.convert import as_device_array
    res = compute_update(UpdateInputs(**dict(t, logp=as_device_array(t["logp"], "logp", np.float32),
                                             logp_old=as_device_array(t["logp_old"], "logp_old", np.float32))),
                         BANDS)
    ref = compute_update(UpdateInputs(**dict(d, logp=t["logp"].float().numpy(), logp_old=t["logp_old"].float().numpy())),
                         BANDS)
    close(ref.aggs["sum_ratio"], res.aggs["sum_ratio"], "sum_ratio")

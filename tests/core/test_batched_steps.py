"""batch_s: finished steps computed together (stats.compute_update ``segments``) give the rows and statistics of
one pass per step (the per-step path, batch_s=0, is the reference)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import arldiag
from arldiag.stats import Bands, UpdateInputs, compute_update, segmentable
from arldiag.collectors.staging import stack


def _update(rng, B, T, bad=False):
    mask = rng.random((B, T)) < 0.8
    mask[0] = False  # an empty sample
    lp = (-rng.random((B, T)) * 2).astype(np.float32)
    old = (lp + rng.normal(0, 0.3, (B, T))).astype(np.float32)
    if bad:
        lp[1, 0], mask[1, 0] = np.nan, True
    return dict(logp=lp, logp_old=old, advantages=rng.normal(size=B).astype(np.float32), response_mask=mask,
                logp_ref=(lp - 0.1).astype(np.float32), entropy=rng.random((B, T)).astype(np.float32),
                token_ids=rng.integers(0, 9, (B, T)))


def _close(a, b):
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b if isinstance(a, int) else math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def test_segment_aggregates_equal_one_pass_per_step():
    """Random steps with rollout log-probs (some missing, one step with none), token ids that differ, length
    mismatches, a non-finite token: each step's aggregates from the stacked pass equal its own pass."""
    rng = np.random.default_rng(0)
    bands = Bands(0.2, 0.28, 0.2, 0.28, 3.0, 0.223)
    checked = 0
    for trial in range(20):
        parts = []
        for k in range(int(rng.integers(2, 5))):
            u = _update(rng, int(rng.integers(3, 9)), int(rng.integers(2, 7)), bad=(trial % 3 == 0 and k == 1))
            inp = UpdateInputs(u["logp"], u["logp_old"], u["advantages"], u["response_mask"], u["logp_ref"], None,
                               u["entropy"], None, u["token_ids"])
            flat = np.flatnonzero(inp.mask)
            fl = (inp.logp_old.reshape(-1)[flat] + rng.normal(0, 0.05, flat.size)).astype(np.float32)
            fl[::3] = np.nan
            if trial % 4 == 1 and k == 0:
                fl[:] = np.nan  # a step whose tokens have no rollout log-prob: no mismatch aggregates
            ids = inp.token_ids.reshape(-1)[flat].copy()
            ids[::4], ids[1::5] = -1, ids[1::5] + 1
            inp.rollout_flat_logp, inp.rollout_flat_token_ids = fl, ids
            inp.retok_extra = np.where(rng.random(inp.mask.shape[0]) < 0.3, rng.integers(0, 3, inp.mask.shape[0]), -1)
            parts.append(inp)
        st = stack(parts)
        for f in ("rollout_flat_logp", "rollout_flat_token_ids", "retok_extra"):
            setattr(st, f, np.concatenate([getattr(p, f) for p in parts]))
        if not segmentable(st.mask, None):
            continue
        starts = np.cumsum([0] + [p.mask.shape[0] for p in parts[:-1]])
        seg = compute_update(st, bands, segments=starts)
        for k, p in enumerate(parts):
            ref = compute_update(p, bands).aggs
            assert set(seg.aggs[k]) == set(ref)
            for name, v in ref.items():
                assert _close(v, seg.aggs[k][name]) and type(v) is type(seg.aggs[k][name]), (trial, k, name)
        one = compute_update(st, bands)  # the rows do not depend on the segments
        for c, v in one.seq.items():
            assert np.allclose(v, seg.seq[c], equal_nan=True), c
        checked += 1
    assert checked >= 15
    with pytest.raises(ValueError, match="segments must be increasing"):
        compute_update(st, bands, segments=np.array([0, 0]))


def test_segments_with_as_many_finite_tokens_as_rows():
    """Four rows, five masked tokens, one of them NaN: four finite tokens, as many as rows. Token arrays and row
    arrays have the same length then; each aggregate declares its level (stats.agg ``over``), so each step still gets
    its own pass's aggregates (rollout ids too)."""
    bands = Bands(0.2, 0.28, 0.2, 0.28, 3.0, 0.223)
    mask = np.array([[1, 1], [1, 0], [1, 0], [1, 0]], bool)
    lp = np.array([[-1.0, np.nan], [-2.0, 0], [-0.5, 0], [-1.5, 0]], np.float32)
    ids = np.array([[3, 4], [5, 0], [6, 0], [7, 0]])
    adv = np.array([1.0, -1.0, 0.5, -0.5], np.float32)
    inp = UpdateInputs(lp, lp - 0.3, adv, mask, None, None, None, None, ids)
    inp.rollout_flat_token_ids = np.array([3, 4, 8, 6, 7])  # per masked token; row 1's differs
    seg = compute_update(inp, bands, segments=np.array([0, 2]))
    for k, (lo, hi, a, b) in enumerate(((0, 2, 0, 3), (2, 4, 3, 5))):
        part = UpdateInputs(lp[lo:hi], (lp - 0.3)[lo:hi], adv[lo:hi], mask[lo:hi], None, None, None, None, ids[lo:hi])
        part.rollout_flat_token_ids = inp.rollout_flat_token_ids[a:b]
        assert seg.aggs[k] == compute_update(part, bands).aggs
    assert seg.aggs[0]["n_tok"] == 2 and seg.aggs[0]["n_nonfinite_tok"] == 1
    assert seg.aggs[0]["n_tok_retok_mismatch"] == 1 and seg.aggs[1]["n_tok_retok_mismatch"] == 0


def _record(root, batch_s, steps=7):
    rng = np.random.default_rng(5)
    col = arldiag.Collector(root, strict=True, token_sample_rate=0.5, batch_s=batch_s, clip=(0.2, 0.28))
    got = []
    for s in range(steps):
        B = 6
        sid = np.arange(B) + 100 * s
        if s != 3:  # a step without a rollout: its rows have no reward
            col.record_rollout(s, sample_ids=sid, group_ids=sid // 3, rewards=rng.random(B),
                               success=rng.random(B) < 0.5, response_mask=np.ones((B, 4), bool),
                               token_ids=rng.integers(0, 9, (B, 4)), logp_rollout=-rng.random((B, 4)))
        for u in range(2):
            upd = _update(rng, B, 4, bad=(s == 2 and u == 1))
            col.record_update(s, u, sample_ids=sid, defer=True, **upd)
        got.append(col.record_step(s, {"loss": float(s)}))
    col.close()
    return got


def test_batched_steps_store_what_the_per_step_path_stores(tmp_path, monkeypatch):
    from arldiag.collectors import steps as steps_mod

    passes = []
    real = steps_mod.compute_update
    monkeypatch.setattr(steps_mod, "compute_update",
                        lambda inp, bands, segments=None: passes.append(segments) or real(inp, bands, segments))
    ref_metrics = _record(tmp_path / "ref", 0.0)
    assert len(passes) == 7 and all(p is None for p in passes)
    passes.clear()
    got_metrics = _record(tmp_path / "bat", 100.0)
    assert all(m for m in ref_metrics) and not any(got_metrics)  # batched: computed later, at close here
    # at close: the six steps with a rollout in one pass, the step without one (other columns) on its own
    assert sorted(0 if p is None else len(p) for p in passes) == [0, 6]
    ref, bat = arldiag.open_run(tmp_path / "ref"), arldiag.open_run(tmp_path / "bat")
    for table, order in (("sequences", "step, update, sample_id"), ("tokens", "step, update, sample_id, pos"),
                         ("groups", "step, group_id"), ("steps", "step")):
        drop = "run, time" if table == "steps" else "run"  # the run's name; when the step was finalised
        a = ref.sql(f"select * exclude ({drop}) from {table} order by {order}").df()
        b = bat.sql(f"select * exclude ({drop}) from {table} order by {order}").df()
        assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0, table
        for c in a.columns:
            x, y = a[c].to_numpy(), b[c].to_numpy()
            if x.dtype.kind == "f":
                assert np.allclose(x, y, rtol=1e-9, atol=1e-12, equal_nan=True), (table, c)
            else:
                assert (a[c].isna() == b[c].isna()).all() and (x[~a[c].isna().to_numpy()] ==
                                                               y[~b[c].isna().to_numpy()]).all(), (table, c)


def test_batch_waits_at_most_batch_steps_and_settle_computes_now(tmp_path, monkeypatch):
    from arldiag.collectors import steps as steps_mod

    monkeypatch.setattr(steps_mod, "BATCH_STEPS", 3)
    rng = np.random.default_rng(1)
    col = arldiag.Collector(tmp_path / "r", strict=True, batch_s=100.0)
    for s in range(4):
        col.record_update(s, 0, defer=True, **_update(rng, 4, 3))
        col.record_step(s, {"loss": float(s)})
        assert col.last_metrics.get("step") == (2 if s >= 2 else None)  # the third step computes all three
    col.settle()
    assert col.last_metrics["step"] == 3 and col.last_metrics["loss"] == 3.0
    col.close()
    assert arldiag.open_run(tmp_path / "r").sql("select count(*) from steps").fetchall()[0][0] == 4


def test_batch_s_validated(tmp_path):
    with pytest.raises(ValueError, match="batch_s must be >= 0 seconds, got -1"):
        arldiag.Collector(tmp_path / "r", batch_s=-1)


def test_a_waiting_step_keeps_what_the_trainer_handed_over(tmp_path):
    """The trainer may reuse its buffers once a hook returns: a step computed later uses copies."""
    rng = np.random.default_rng(2)
    col = arldiag.Collector(tmp_path / "r", strict=True, batch_s=100.0)
    rewards, sid = np.array([1.0, 0.0, 1.0, 1.0]), np.arange(4)
    upd = _update(rng, 4, 3)
    col.record_rollout(0, sample_ids=sid, group_ids=np.array([0, 0, 1, 1]), rewards=rewards)
    col.record_update(0, 0, sample_ids=sid, defer=True, **upd)
    col.record_step(0)
    rewards[:] = -5.0
    upd["logp"][:] = 0.0
    col.settle()
    m = col.last_metrics
    assert m["reward_mean"] == 0.75 and m["n_tokens"] == int(upd["response_mask"].sum())
    assert m["logp_mean"] < 0  # the update's own log-probs, not the zeros written afterwards
    col.close()


def test_a_failing_batched_pass_keeps_the_steps_and_training_goes_on(tmp_path, monkeypatch):
    """Our own failure in the batched statistics warns once; the steps' rows (rollout side, trainer metrics) are
    still written and later steps are recorded as usual."""
    from arldiag.collectors import steps as steps_mod

    real = steps_mod.compute_update

    def broken(inp, bands, segments=None):
        if segments is not None:
            raise RuntimeError("boom")
        return real(inp, bands, segments)

    monkeypatch.setattr(steps_mod, "compute_update", broken)
    rng = np.random.default_rng(3)
    col = arldiag.Collector(tmp_path / "r", batch_s=100.0)
    with pytest.warns(RuntimeWarning, match="record_update failed \\(RuntimeError: boom\\); training continues"):
        for s in range(4):
            col.record_rollout(s, sample_ids=np.arange(4) + 10 * s, group_ids=np.zeros(4, np.int64),
                               rewards=rng.random(4))
            col.record_update(s, 0, sample_ids=np.arange(4) + 10 * s, defer=True, **_update(rng, 4, 3))
            col.record_step(s, {"loss": float(s)})
        col.settle()  # the batched pass fails here
    col.record_update(4, 0, **_update(rng, 4, 3))  # an immediate update afterwards is computed as usual
    col.record_step(4, {"loss": 4.0})
    col.close()
    run = arldiag.open_run(tmp_path / "r")
    got = run.sql("select step, loss, n_groups, n_tokens from steps order by step").fetchall()
    assert [r[0] for r in got] == [0, 1, 2, 3, 4] and [r[1] for r in got] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert all(r[2] == 1 for r in got[:4])             # the rollout side was computed before the failure
    assert all(r[3] is None for r in got[:4]) and got[4][3] > 0  # no token statistics for the failed pass


def test_one_waiting_step_failing_to_finish_does_not_drop_the_next(tmp_path, monkeypatch):
    from arldiag.collectors import steps as steps_mod

    real, calls = steps_mod.derive_step_metrics, []

    def flaky(aggs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first step")
        return real(aggs)

    monkeypatch.setattr(steps_mod, "derive_step_metrics", flaky)
    rng = np.random.default_rng(4)
    col = arldiag.Collector(tmp_path / "r", batch_s=100.0)
    with pytest.warns(RuntimeWarning, match="record_step failed \\(RuntimeError: first step\\)"):
        for s in range(3):
            col.record_update(s, 0, defer=True, **_update(rng, 4, 3))
            col.record_step(s, {"loss": float(s)})
        col.settle()
    assert col.last_metrics["step"] == 2 and len(calls) == 3
    col.close()
    got = arldiag.open_run(tmp_path / "r").sql("select step, n_tokens > 0 from steps order by step").fetchall()
    assert got == [(0, True), (1, True), (2, True)]

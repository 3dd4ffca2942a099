"""record_update(defer=True) (collectors/staging.py): a step's deferred updates computed in one stacked pass give the
same rows and step statistics as one pass per call, and the statistics equal direct numpy formulas."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arldiag
from arldiag.collectors.arrow_rows import cached_schema, np_to_arrow, row_table, table
from arldiag.collectors.staging import owned, stack
from arldiag.schema import SEQUENCES
from arldiag.stats import UpdateInputs

EPS_LOW, EPS_HIGH = 0.2, 0.28


def _update(rng, B, T, bad=False):
    mask = np.zeros((B, T), bool)
    for i in range(B):
        n = int(rng.integers(0 if i == 0 else 1, T + 1))  # row 0 may be empty
        mask[i, :n] = True
    lpo = rng.normal(-1.5, 1.0, (B, T)).astype(np.float32)
    lp = (lpo + rng.normal(0, 0.3, (B, T))).astype(np.float32)
    if bad and mask.any():
        lp[np.argwhere(mask)[0][0], np.argwhere(mask)[0][1]] = np.nan  # a non-finite token
    return dict(logp=lp, logp_old=lpo, advantages=rng.normal(0, 1, B).astype(np.float32), response_mask=mask,
                logp_ref=(lpo + rng.normal(0, 0.2, (B, T))).astype(np.float32),
                entropy=rng.uniform(0, 3, (B, T)).astype(np.float32),
                token_ids=rng.integers(0, 50, (B, T)))


def _record(root, updates, sids, rollout, defer, rate):
    col = arldiag.Collector(root, clip=(EPS_LOW, EPS_HIGH), token_sample_rate=rate, strict=True)
    half = len(updates) // 2
    for u, (upd, sid) in enumerate(zip(updates, sids)):
        if u == half and rollout is not None:  # a rollout recorded in the middle of the step's updates
            col.record_rollout(3, **rollout)
        col.record_update(3, u, sample_ids=sid, defer=defer, **upd)
    metrics = col.record_step(3, {"grad_norm": 1.5})
    col.close()
    return metrics


def _rows(root, name, order):
    df = arldiag.open_run(root).sql(f"select * from {name} order by {order}").df()
    return df.drop(columns=[c for c in ("run", "time") if c in df.columns])  # the run's name, the wall clock


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), n_updates=st.integers(1, 4), rate=st.sampled_from([0.0, 0.5, 1.0]))
def test_deferred_equals_per_call(tmp_path_factory, seed, n_updates, rate):
    rng = np.random.default_rng(seed)
    updates = [_update(rng, int(rng.integers(1, 7)), int(rng.integers(2, 9)), bad=u == 1) for u in range(n_updates)]
    sids = [np.arange(len(u["advantages"])) + 10 * k for k, u in enumerate(updates)]
    # the rollout knows the samples of the updates after the first half, with their masks, ids and log-probs
    later = updates[n_updates // 2:]
    T = max(u["response_mask"].shape[1] for u in later)
    pad = lambda x, fill: np.concatenate([np.pad(u[x], ((0, 0), (0, T - u[x].shape[1])), constant_values=fill)  # noqa
                                          for u in later])
    rollout = dict(sample_ids=np.concatenate(sids[n_updates // 2:]), response_mask=pad("response_mask", False),
                   token_ids=pad("token_ids", 0) % 7, logp_rollout=pad("logp_old", 0.0) - 0.01,
                   group_ids=np.concatenate(sids[n_updates // 2:]) // 2,
                   rewards=rng.normal(size=sum(len(u["advantages"]) for u in later)))
    roots = [tmp_path_factory.mktemp("call"), tmp_path_factory.mktemp("defer")]
    m_call, m_defer = (_record(r, updates, sids, rollout, d, rate) for r, d in zip(roots, (False, True)))
    for k, v in m_call.items():
        assert m_defer[k] == pytest.approx(v, rel=1e-9, abs=1e-12, nan_ok=True), k
    for name, order in (("steps", "step"), ("sequences", "update, sample_id"),
                        ("tokens", "update, sample_id, pos"), ("groups", "group_id")):
        a, b = (_rows(r, name, order) for r in roots)
        assert list(a.columns) == list(b.columns) and len(a) == len(b), name
        for c in a.columns:
            x, y = a[c].to_numpy(), b[c].to_numpy()
            if x.dtype.kind == "f":
                np.testing.assert_allclose(y, x, rtol=1e-9, atol=1e-12, err_msg=f"{name}.{c}")
            else:
                assert (a[c].isna() == b[c].isna()).all() and list(a[c].dropna()) == list(b[c].dropna()), \
                    f"{name}.{c}"


def test_deferred_step_statistics_equal_numpy(tmp_path):
    """Four micro-batches of different widths, deferred: the step's statistics equal the formulas (verl's
    pg_clipfrac / ppo_kl, TRL's clip ratios, k3 KL to the reference, entropy) over all their masked tokens."""
    rng = np.random.default_rng(7)
    updates = [_update(rng, 4, T) for T in (5, 8, 3, 8)]
    col = arldiag.Collector(tmp_path / "r", clip=(EPS_LOW, EPS_HIGH), strict=True)
    for u, upd in enumerate(updates):
        assert col.record_update(1, u, defer=True, **upd) == {}
    m = col.record_step(1)
    col.close()
    sel = lambda k: np.concatenate([u[k][u["response_mask"]].astype(np.float64) for u in updates])  # noqa: E731
    lp, lpo, ref, ent = sel("logp"), sel("logp_old"), sel("logp_ref"), sel("entropy")
    A = np.concatenate([np.repeat(u["advantages"], u["response_mask"].sum(1)) for u in updates]).astype(np.float64)
    r = np.exp(np.clip(lp - lpo, -20, 20))
    lo, hi = 1 - EPS_LOW, 1 + EPS_HIGH
    x = np.clip(ref - lp, -10, 10)
    want = {"n_tokens": lp.size, "ratio_mean": r.mean(), "ppo_kl": np.mean(lpo - lp),
            "pg_clipfrac": np.mean(-A * np.clip(r, lo, hi) > -A * r),
            "clip_ratio_low_mean": np.mean((r < lo) & (A < 0)), "clip_ratio_high_mean": np.mean((r > hi) & (A > 0)),
            "kl_ref_k3": np.mean(np.exp(x) - x - 1), "entropy": ent.mean()}
    for k, v in want.items():
        assert m[k] == pytest.approx(v, rel=1e-6, abs=1e-9), k
    assert m["n_updates"] == 4
    seq = arldiag.open_run(tmp_path / "r").sql("select update, count(*) from sequences group by 1 order by 1")
    assert seq.fetchall() == [(u, int((upd["response_mask"].sum(1) > 0).sum())) for u, upd in enumerate(updates)]


def test_deferred_inputs_are_copied(tmp_path):
    """A trainer may reuse its buffers before the step ends: what is recorded is what was passed at the call."""
    rng = np.random.default_rng(1)
    upd = _update(rng, 3, 4)
    keep = {k: v.copy() for k, v in upd.items()}
    with arldiag.Collector(tmp_path / "a", strict=True) as a, arldiag.Collector(tmp_path / "b", strict=True) as b:
        a.record_update(0, 0, defer=True, **upd)
        for v in upd.values():
            v[...] = 0
        b.record_update(0, 0, **keep)
        assert a.record_step(0) == pytest.approx(b.record_step(0), nan_ok=True)


def test_deferred_updates_of_a_step_are_finalised_by_the_next_step_and_close(tmp_path):
    rng = np.random.default_rng(2)
    col = arldiag.Collector(tmp_path / "r", strict=True)
    col.record_update(1, 0, defer=True, **_update(rng, 2, 3))
    col.record_update(2, 0, defer=True, **_update(rng, 2, 3))  # step 1 ends here, without record_step
    col.close()  # step 2 ends here
    rows = arldiag.open_run(tmp_path / "r").sql("select step, n_updates from steps order by step").fetchall()
    assert rows == [(1, 1), (2, 1)]


def test_stack_pads_rows_and_keeps_order():
    a = UpdateInputs(np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32), np.array([1, 2], np.float32),
                     np.ones((2, 3), bool))
    b = UpdateInputs(np.full((1, 5), 2, np.float32), np.zeros((1, 5), np.float32), np.array([3], np.float32),
                     np.ones((1, 5), bool))
    s = stack([owned(a), owned(b)])
    assert s.logp.shape == (3, 5) and s.mask.sum() == 11
    np.testing.assert_array_equal(s.mask[:2, 3:], False)
    np.testing.assert_array_equal(s.logp[2], 2)
    np.testing.assert_array_equal(s.advantages, [1, 2, 3])
    assert s.logp_ref is None


def test_stack_torch_tensors():
    torch = pytest.importorskip("torch")
    a = UpdateInputs(torch.ones(2, 3), torch.zeros(2, 3), torch.ones(2), torch.ones(2, 3, dtype=torch.bool))
    b = UpdateInputs(torch.ones(1, 4), torch.zeros(1, 4), torch.ones(1), torch.ones(1, 4, dtype=torch.bool))
    s = stack([owned(a), owned(b)])
    assert tuple(s.logp.shape) == (3, 4) and int(s.mask.sum()) == 10 and s.mask.dtype == torch.bool


# ---------------------------------------------------------------------------------------------------- Arrow rows
def test_row_table_matches_pyarrow():
    schema = pa.schema([("step", pa.int64()), ("time", pa.timestamp("us", tz="UTC")), ("n", pa.int64()),
                        ("x", pa.float64()), ("y", pa.float64()), ("s", pa.string()), ("b", pa.bool_())])
    row = {"step": 3, "time": None, "n": float("nan"), "x": None, "y": 2.5, "s": "hi", "b": True}
    got = row_table(schema, row)
    want = pa.Table.from_pylist([{"step": 3, "time": None, "n": None, "x": None, "y": 2.5, "s": "hi", "b": True}],
                                schema=schema)
    assert got.equals(want)
    assert row_table(schema, {"step": 4}).to_pylist()[0] == {"step": 4, "time": None, "n": None, "x": None,
                                                            "y": None, "s": None, "b": None}


def test_table_and_np_to_arrow_nulls():
    n = 3
    cols = {"sample_id": np.arange(n), "seq_ratio": np.array([1.0, np.nan, 2.0]),
            "reward": np.ma.array([1.0, 2.0, 3.0], mask=[False, True, False])}
    t = table(SEQUENCES, cols, n)
    assert t.column("seq_ratio").to_pylist() == [1.0, None, 2.0]
    assert t.column("reward").to_pylist() == [1.0, None, 3.0]
    assert t.column("step").null_count == n  # absent column
    assert np_to_arrow(np.array([1, 0, 2]), pa.bool_()).to_pylist() == [True, False, True]
    assert table(SEQUENCES, cols, n).equals(t)  # second call: the cached layout
    key = ("test", "schema")
    assert cached_schema(key, lambda: pa.schema([("a", pa.int64())])) is cached_schema(key, lambda: None)


def test_table_converts_columns_of_one_type_together_as_pyarrow_does():
    """table() converts the numeric columns of one Arrow type as one array and slices it (_convert_block): each
    column equals pyarrow's own conversion of it, masks and NaN as nulls, other dtypes cast to the column type."""
    rng = np.random.default_rng(7)
    n = 11
    f64 = rng.normal(size=(3, n))
    f64[1, [2, 5]] = np.nan
    rew = np.ma.array(rng.normal(size=n), mask=rng.random(n) < 0.3)
    cols = {"step": np.arange(n, dtype=np.int32), "update": np.full(n, 2, np.int64), "rank": np.zeros(n, np.int64),
            "sample_id": np.arange(n) * 7, "advantage": f64[0].astype(np.float32), "seq_log_ratio": f64[1],
            "seq_ratio": f64[2], "reward": rew, "neg_adv_low_is": rng.random(n) < 0.5,
            "neg_adv_low_is_delta": np.ma.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.4),
            "success": np.ma.array(np.ones(n, bool), mask=np.zeros(n, bool))}
    got = table(SEQUENCES, cols, n)
    for c in SEQUENCES:
        v = cols.get(c.name)
        if v is None:
            want = pa.nulls(n, c.type)
        elif isinstance(v, np.ma.MaskedArray):
            want = pa.array(np.ma.getdata(v), mask=np.ma.getmaskarray(v)).cast(c.type)
        else:
            want = pa.array(v, from_pandas=True).cast(c.type)
        assert got.column(c.name).combine_chunks().equals(want), c.name
    assert got.column("seq_log_ratio").null_count == 2
    assert got.column("reward").null_count == int(rew.mask.sum())


def test_time_column_keeps_its_value():
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC"))])
    assert row_table(schema, {"time": 1_700_000_000_000_000}).column("time").cast(pa.int64()).to_pylist() == \
        [1_700_000_000_000_000]


def test_rows_table_of_rows_with_different_keys_matches_pyarrow():
    """Held step rows are converted together: a row without a column gets a null there."""
    from arldiag.collectors.arrow_rows import rows_table

    schema = pa.schema([("step", pa.int64()), ("n", pa.int64()), ("x", pa.float64()), ("m/a", pa.float64()),
                        ("s", pa.string())])
    rows = [{"step": 1, "n": 4, "x": 0.5, "m/a": 1.0}, {"step": 2, "n": None, "x": float("nan"), "s": "b"},
            {"step": 3, "n": float("nan"), "m/a": -2.0}]
    want = pa.Table.from_pylist([{"step": 1, "n": 4, "x": 0.5, "m/a": 1.0, "s": None},
                                 {"step": 2, "n": None, "x": None, "m/a": None, "s": "b"},
                                 {"step": 3, "n": None, "x": None, "m/a": -2.0, "s": None}], schema=schema)
    assert rows_table(schema, rows).equals(want)


def test_step_rows_with_changing_trainer_metrics(tmp_path):
    """TRL logs some metrics only on generation steps: the steps table has every name, null where not logged."""
    rng = np.random.default_rng(4)
    with arldiag.Collector(tmp_path / "r", strict=True, flush_every=3) as col:
        for s in range(5):
            col.record_update(s, 0, defer=True, **_update(rng, 2, 3))
            col.record_step(s, {"loss": float(s), **({"num_tokens": 10.0 * s} if s % 2 == 0 else {})})
    got = arldiag.open_run(tmp_path / "r").sql("select step, loss, num_tokens from steps order by step").fetchall()
    assert got == [(0, 0.0, 0.0), (1, 1.0, None), (2, 2.0, 20.0), (3, 3.0, None), (4, 4.0, 40.0)]

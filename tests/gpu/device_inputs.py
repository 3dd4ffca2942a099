"""Inputs shared by the device-path tests (tests/gpu on CUDA, tests/core/test_host_reads.py on CPU tensors taking
the device path): a padded batch with the awkward cases, a GRPO-like run fed to a Collector, and the comparison of
two runs' stored tables."""
from __future__ import annotations

import numpy as np


def inputs(rng, B=24, T=40, bad=True):
    """A padded batch with a sample without tokens, NaN log-probs, unknown rollout log-probs and token ids."""
    mask = rng.random((B, T)) < 0.75
    mask[3] = False
    lpo = rng.normal(-1.5, 1.0, (B, T)).astype(np.float32)
    lp = (lpo + rng.normal(0, 0.3, (B, T))).astype(np.float32)
    if bad:
        lp[rng.random((B, T)) < 0.03] = np.nan
    roll = (lpo + rng.normal(0, 0.05, (B, T))).astype(np.float32)
    roll[rng.random((B, T)) < 0.2] = np.nan
    adv = rng.normal(0, 1, B).astype(np.float32)
    adv[rng.random(B) < 0.2] = 0.0
    return dict(logp=lp, logp_old=lpo, advantages=adv, mask=mask, logp_rollout=roll,
                logp_ref=(lpo + rng.normal(0, 0.2, (B, T))).astype(np.float32),
                entropy=rng.uniform(0, 3, (B, T)).astype(np.float32), turn_ids=rng.integers(0, 4, B),
                token_ids=rng.integers(0, 50, (B, T)))


def close(a, b, what):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, what
    # float32 elementwise work on the GPU may round differently from numpy's in the last bit
    np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-6, equal_nan=True, err_msg=what)


def feed(col, conv, rng_seed, steps=2, micro=3):
    """A GRPO-like run: per step one rollout (token ids, rollout log-probs, rewards, groups), then ``micro``
    deferred updates (the last one shorter: padding when stacked) with sample ids, as the TRL/verl hooks do."""
    rng = np.random.default_rng(rng_seed)
    B, T = 8 * micro, 16
    for step in range(steps):
        d = inputs(rng, B, T, bad=step == 1)
        sid = np.arange(B) + 1000 * step
        col.record_rollout(step, sample_ids=conv(sid), group_ids=conv(sid // 4), token_ids=conv(d["token_ids"]),
                           response_mask=conv(d["mask"]), logp_rollout=conv(d["logp_rollout"]),
                           rewards=conv(rng.random(B).astype(np.float32)))
        for u in range(micro):
            r = slice(8 * u, 8 * u + 8)
            t = T if u < micro - 1 else T - 3
            m = d["mask"][r, :t].copy()
            col.record_update(step, u, logp=conv(d["logp"][r, :t]), logp_old=conv(d["logp_old"][r, :t]),
                              advantages=conv(d["advantages"][r]), response_mask=conv(m),
                              logp_ref=conv(d["logp_ref"][r, :t]), entropy=conv(d["entropy"][r, :t]),
                              token_ids=conv(d["token_ids"][r, :t]), sample_ids=conv(sid[r]), defer=True)
        col.record_step(step, {"lr": 1e-3, "loss": conv(np.array(0.5 + step, np.float32))})


def table(run, name, order):
    cols = "* exclude (run, time)" if name == "steps" else "* exclude (run)"
    return run.sql(f"select {cols} from {name} order by {order}").df()


def same_tables(root_a, root_b) -> None:
    """The stored steps, sequences, tokens and groups of two runs are equal (floats to ``close``)."""
    import arldiag

    runs = [arldiag.open_run(r) for r in (root_a, root_b)]
    for name, order in (("steps", "step"), ("sequences", "step, sample_id"), ("tokens", "step, sample_id, pos"),
                        ("groups", "step, group_id")):
        a, b = (table(r, name, order) for r in runs)
        assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0, name
        for c in a.columns:
            if a[c].dtype == object:
                assert a[c].tolist() == b[c].tolist(), f"{name}.{c}"
            else:
                close(a[c].astype(float), b[c].astype(float), f"{name}.{c}")

"""One declaration per stored step aggregate: schema.STEP_AGGS declares its name, merge kind and doc; exactly one
producer computes it (a formula of stats.AGGS, the rollout statistics, or the step itself), and the merge kind a
formula reduces by is the schema's. These tests fail when a formula has no declaration or a declaration no formula."""
from __future__ import annotations

import math

import numpy as np
import pytest

from arldiag import schema, stats
from arldiag.collectors import steps
from arldiag.collectors.rollout_stats import ROLLOUT_AGGS, RolloutCall, rollout_stats
from arldiag.stats import AGGS, SIZE, Bands, UpdateInputs, agg, compute_update


def test_every_declared_aggregate_has_exactly_one_producer():
    steps.check_aggregates()
    produced = list(AGGS) + list(ROLLOUT_AGGS) + list(steps.STEP_OWN_AGGS)
    assert len(produced) == len(set(produced))
    assert set(produced) == {a.name for a in schema.STEP_AGGS}


def test_a_formula_without_a_schema_declaration_is_refused_at_registration():
    before = dict(AGGS)
    with pytest.raises(ValueError, match="'sum_undeclared' has a formula but no declaration in schema.STEP_AGGS"):
        agg("sum_undeclared", lambda e: e.lp)
    assert AGGS == before


def test_a_declaration_without_a_formula_fails_the_import_check(monkeypatch):
    monkeypatch.setattr(steps, "STEP_AGGS", schema.STEP_AGGS + [schema.Agg("sum_new", "sum", "a new sum")])
    with pytest.raises(ValueError, match=r"without a formula: \['sum_new'\]"):
        steps.check_aggregates()
    monkeypatch.undo()
    monkeypatch.delitem(AGGS, "sum_ratio")
    with pytest.raises(ValueError, match=r"without a formula: \['sum_ratio'\]"):
        steps.check_aggregates()


def test_registration_takes_merge_kind_and_integer_type_from_the_schema():
    merge = {a.name: a.merge for a in schema.STEP_AGGS}
    steps = {c.name: c.type for c in schema.STEPS_RAW}
    for f in AGGS.values():
        assert f.merge == merge[f.name], f.name
        assert f.count == (steps[f.name] == schema.I64), f.name
    with pytest.raises(ValueError, match="merges by max: SIZE and scale are for sums"):
        agg("max_abs_log_ratio", SIZE)
    with pytest.raises(ValueError, match="duplicate formula sum_ratio"):
        agg("sum_ratio", lambda e: e.ratio)
    with pytest.raises(ValueError, match="over must be one of"):
        stats.agg("sum_entropy", lambda e: e.ent, over="token")


def test_rollout_statistics_produce_exactly_their_declared_aggregates():
    sid = np.arange(6)
    ps = {"group_id": sid // 3, "reward": np.linspace(0, 1, 6), "format_valid": sid % 2 == 0,
          "truncated": sid == 5, "success": sid < 2, "trajectory_id": sid // 2}
    (a,), _ = rollout_stats([RolloutCall(0, sid, ps, np.full(6, 4))], rank=0)
    assert set(a) == set(ROLLOUT_AGGS)


def _inputs(rng, B, T, turn_ids):
    mask = np.ones((B, T), bool)
    lpo = rng.normal(-1.0, 0.5, (B, T)).astype(np.float32)
    inp = UpdateInputs(lpo + np.float32(0.1), lpo, rng.normal(size=B).astype(np.float32), mask, lpo - 0.2,
                       lpo + 0.01, np.abs(lpo), turn_ids, rng.integers(0, 9, (B, T)))
    inp.rollout_flat_token_ids = inp.token_ids.reshape(-1).copy()
    return inp


def test_full_inputs_reach_every_formula():
    rng = np.random.default_rng(0)
    tok_turns = np.repeat(np.arange(2), 3)[None, :].repeat(4, 0)  # [4, 6]: two turns of three tokens
    res = compute_update(_inputs(rng, 4, 6, tok_turns), Bands())
    assert set(res.aggs) == set(AGGS)
    res = compute_update(_inputs(rng, 4, 6, np.arange(4)), Bands())  # one turn per sample: no multi-turn rows
    assert set(AGGS) - set(res.aggs) == {"n_seq_multiturn", "sum_turn_entropy"}
    res = compute_update(_inputs(rng, 4, 6, None), Bands())
    assert {n for n, f in AGGS.items() if f.over == "turn" or "multi_turn" in f.needs} == set(AGGS) - set(res.aggs)


def test_turn_aggregates_by_hand():
    # per-sample turns: each sample is one turn; log-ratio per token 0, -0.5, +0.5, -0.05 -> s = 1, e^-.5, e^.5, e^-.05
    lr = np.array([0.0, -0.5, 0.5, -0.05], np.float32)
    lpo = np.full((4, 2), -1.0, np.float32)
    inp = UpdateInputs(lpo + lr[:, None], lpo, np.ones(4, np.float32), np.ones((4, 2), bool),
                       turn_ids=np.array([0, 1, 2, 3]))
    a = compute_update(inp, Bands(0.2, 0.2, 0.2, 0.2)).aggs
    ratios = np.exp(lr.astype(np.float64))
    assert (a["n_turn"], a["n_turn_low"], a["n_turn_high"]) == (4, 1, 1)
    assert type(a["n_turn"]) is int
    assert math.isclose(a["min_turn_ratio"], ratios.min(), rel_tol=1e-6)
    assert math.isclose(a["max_turn_ratio"], ratios.max(), rel_tol=1e-6)


def _names(args):
    for a in args:
        if isinstance(a, str):
            yield a
        else:
            yield from _names(a)


def test_every_step_metric_reads_declared_aggregates_only():
    # a metric over an undeclared aggregate would be NaN online and fail in the SQL steps view
    declared = {a.name for a in schema.STEP_AGGS}
    for m in schema.STEP_METRICS:
        assert set(_names(m.args)) <= declared, (m.name, set(_names(m.args)) - declared)

"""The collector holds a step's rows as numpy columns and converts them to Arrow once per publish
(RowBuffer.release_held, arrow_rows.concat_columns): the published rows are those of every step, in order, and a
step's rows are published no later than its step row."""
from __future__ import annotations

import glob

import numpy as np
import pyarrow.parquet as pq

import arldiag
from arldiag.collectors import rows as rows_mod
from arldiag.collectors.arrow_rows import concat_columns


def test_concat_columns_keeps_values_masks_and_strings():
    a = {"x": np.array([1.0, np.nan], np.float32), "k": np.ma.array([1, 2], mask=[False, True]),
         "t": ["a", None]}
    b = {"x": np.array([3.0], np.float32), "k": np.array([7]), "t": ["c"]}
    out = concat_columns([a, b])
    np.testing.assert_array_equal(out["x"], np.array([1.0, np.nan, 3.0], np.float32))
    assert isinstance(out["k"], np.ma.MaskedArray)
    assert out["k"].mask.tolist() == [False, True, False] and out["k"].compressed().tolist() == [1, 7]
    assert out["t"] == ["a", None, "c"]
    assert concat_columns([a]) == a and concat_columns([a]) is not a


def _rows(root, table):
    files = sorted(glob.glob(f"{root}/{table}/*.parquet"))
    return [pq.read_table(f).to_pydict() for f in files]


def _update(B):
    rng = np.random.default_rng(0)
    mask = np.ones((B, 5), bool)
    lpo = rng.normal(-1, 0.5, (B, 5)).astype(np.float32)
    return dict(logp=lpo + 0.1, logp_old=lpo, advantages=rng.normal(0, 1, B).astype(np.float32), response_mask=mask)


def test_held_rows_published_with_their_steps(tmp_path):
    B = 3
    col = arldiag.Collector(tmp_path / "r", flush_every=3, flush_every_s=3600, token_sample_rate=1.0, strict=True)
    for s in range(1, 8):
        col.record_update(s, 0, **_update(B))
        col.record_update(s, 1, **_update(B))
        col.record_step(s, {"success": s / 10})
        if s == 3:
            col.writer.flush(wait=True)
            # the first publish: steps 1-3, sequences of the same steps (2 updates x B rows each), one part each
            seq, steps = _rows(tmp_path / "r", "sequences"), _rows(tmp_path / "r", "steps")
            assert len(seq) == 1 and len(steps) == 1
            assert sorted(set(seq[0]["step"])) == [1, 2, 3] == steps[0]["step"]
            assert len(seq[0]["step"]) == 3 * 2 * B
            assert seq[0]["update"] == [0] * B + [1] * B + [0] * B + [1] * B + [0] * B + [1] * B
    col.close()
    seq = [s for part in _rows(tmp_path / "r", "sequences") for s in part["step"]]
    tok = [s for part in _rows(tmp_path / "r", "tokens") for s in part["step"]]
    assert seq == sorted(seq) and sorted(set(seq)) == list(range(1, 8)) and len(seq) == 7 * 2 * B
    assert len(tok) == 7 * 2 * B * 5  # every token kept (rate 1.0)


def test_held_rows_released_early_past_the_row_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(rows_mod, "HOLD_ROWS", 10)  # 2 x 3 sequence + 30 token rows per step: over the bound
    col = arldiag.Collector(tmp_path / "r", flush_every=100, flush_every_s=3600, token_sample_rate=1.0, strict=True)
    col.record_update(1, 0, **_update(3))
    col.record_update(1, 1, **_update(3))
    col.record_step(1)
    assert col._rows.held == {} and col._rows.held_rows == 0  # handed to the writer at the end of the step, not held on
    col.record_update(2, 0, **_update(1))
    col.record_step(2)
    assert col._rows.held_rows == 1 + 5  # one sequence row and its 5 token rows, under the bound: held
    col.close()
    assert [len(p["step"]) for p in _rows(tmp_path / "r", "sequences")] == [7]

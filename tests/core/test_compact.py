"""Compaction: a finished run's parts merge into one per table and rank without losing or duplicating a row,
a resumed run appends after it, and an interrupted compaction is finished or rolled back on the next call."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import arldiag
from arldiag.cli import main as cli
from arldiag.schema import TABLES
from arldiag.store.compact import JOURNAL, compact_run


def _write(path, steps, rank=0, start=0):
    rng = np.random.default_rng(rank * 100 + start)
    with arldiag.Collector(path, name="r", rank=rank, world_size=2, flush_every=1, token_sample_rate=1.0) as col:
        for s in range(start, start + steps):
            ids = np.arange(4) + 10 * s + 1000 * rank
            lpo = rng.normal(-1, 0.3, (4, 6)).astype(np.float32)
            col.record_rollout(s, sample_ids=ids, group_ids=[0, 0, 1, 1], rewards=rng.random(4),
                               response_mask=np.ones((4, 6), bool), turn_ids=[0, 1, 0, 1])
            col.record_update(s, logp=lpo + 0.05, logp_old=lpo, advantages=rng.normal(size=4),
                              response_mask=np.ones((4, 6), bool), sample_ids=ids)
            col.record_step(s, {"grad_norm": float(s), "success_rate": 0.5})


def _contents(path):
    """Every row of every table, in a canonical order (as the views show them)."""
    run = arldiag.open_run(path)
    out = {}
    for t in TABLES:
        cols = [c for c in run.columns(t) if c != "run"]
        out[t] = run.sql(f"select {', '.join(cols)} from {t} order by all").fetchall() if cols else []
    return out


def _parts(path, t):
    return sorted(p.name for p in (path / t).glob("*.parquet"))


def test_compact_keeps_every_row_and_resume_appends(tmp_path):
    r = tmp_path / "r"
    for rank in (0, 1):
        _write(r, 5, rank)
    before = _contents(r)
    assert len(_parts(r, "sequences")) == 10 and sum(len(v) for v in before.values()) > 100
    res = compact_run(r)
    assert res["sequences"][:2] == (10, 2) and res["steps"][3] < res["steps"][2]
    for t in ("tokens", "sequences", "turns", "groups", "steps"):
        assert [p.split("-")[0] for p in _parts(r, t)] == ["rank00000", "rank00001"], t
    assert _contents(r) == before
    # the merged part keeps the writer's encodings (BYTE_STREAM_SPLIT floats)
    meta = pq.ParquetFile(r / "sequences" / _parts(r, "sequences")[0]).metadata
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    assert "BYTE_STREAM_SPLIT" in meta.row_group(0).column(names.index("seq_ratio")).encodings
    assert compact_run(r)["sequences"][:2] == (2, 2)  # idempotent
    # a resumed run continues the part numbering after the merged part and its rows add up
    _write(r, 2, 0, start=5)
    assert _parts(r, "steps")[0] < _parts(r, "steps")[1]
    run = arldiag.open_run(r)
    assert run.sql("select count(distinct step), count(*) from steps_raw").fetchall() == [(7, 12)]


def test_compact_refuses_unfinished_and_cli(tmp_path, capsys):
    r = tmp_path / "r"
    _write(r, 3)
    man = json.loads((r / "run.json").read_text())
    (r / "run.json").write_text(json.dumps({**man, "status": "running"}))
    with pytest.raises(ValueError, match="status is 'running', not 'finished'"):
        compact_run(r)
    n_before = sum(len(_parts(r, t)) for t in TABLES if (r / t).is_dir())
    assert cli(["compact", str(tmp_path), "--force"]) == 0
    n_after = sum(len(_parts(r, t)) for t in TABLES if (r / t).is_dir())
    assert f"{n_before} -> {n_after} parts" in capsys.readouterr().out and len(_parts(r, "steps")) == 1
    with pytest.raises(FileNotFoundError, match="no run.json"):
        compact_run(tmp_path / "nope")


def test_interrupted_compaction_is_finished_or_rolled_back(tmp_path):
    r = tmp_path / "r"
    _write(r, 3)
    before = _contents(r)
    d = r / "steps"
    old = _parts(r, "steps")
    # crashed before the rename: a .tmp and a journal, old parts intact -> rolled back, then compacted
    (d / "rank00000-part000099.parquet.tmp").write_bytes(b"partial")
    (d / JOURNAL).write_text(json.dumps({"old": old, "new": "rank00000-part000099.parquet"}))
    compact_run(r)
    assert not (d / JOURNAL).exists() and not list(d.glob("*.tmp")) and _contents(r) == before
    # crashed after the rename: merged part in place, old parts still there -> the journal finishes the removal
    _write(r, 2, start=3)
    before = _contents(r)
    old = _parts(r, "steps")
    assert len(old) == 3  # the merged part of the first compaction + two new ones
    merged = pa.concat_tables([pq.read_table(d / p) for p in old], promote_options="default")
    pq.write_table(merged, d / "rank00000-part000077.parquet")
    (d / JOURNAL).write_text(json.dumps({"old": old, "new": "rank00000-part000077.parquet"}))
    compact_run(r)
    assert _parts(r, "steps") == ["rank00000-part000077.parquet"] and not (d / JOURNAL).exists()
    assert _contents(r) == before


def test_committed_sample_runs_stay_small():
    """The bundled sample runs are part of every checkout: keep them under 60 MB (the issue's budget) (compacted, token rows sampled)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "sample_runs"
    total = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    assert total < 60 * 2**20, f"sample_runs/ holds {total / 2**20:.1f} MB"
    for run in (p.parent for p in root.glob("*/run.json")):
        for t in TABLES:
            if (run / t).is_dir():
                assert len(_parts(run, t)) == 1, f"{run.name}/{t}: not compacted (arldiag compact)"

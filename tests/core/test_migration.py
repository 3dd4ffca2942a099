"""Runs written by an earlier schema stay readable.

tests/fixtures/run_schema_1_0 is a committed run of schema 1.0 (tests/fixtures/make_run_schema_1_0.py wrote it:
3 steps of 4 responses with lengths 6, 5, 4, 3, lp = lp_old + 0.01 * (step + 1)). Its values are checked against
that construction and against its own Parquet rows read with pyarrow, not through the reader. The migration path
(reader._missing_columns) is exercised by a copy whose parts lack columns, as parts written before those columns
existed would."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import arldiag
from arldiag.detectors import detect
from arldiag.store.reader import SchemaVersionError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run_schema_1_0"


@pytest.fixture
def old_run(tmp_path):
    dst = tmp_path / "old"
    shutil.copytree(FIXTURE, dst)  # a copy: detect/watch must not write into the committed fixture
    return dst


def _tokens(root: Path):
    return pq.read_table(sorted((root / "tokens").glob("*.parquet"))).to_pydict()


def test_fixture_reads_with_its_values(old_run):
    run = arldiag.open_run(old_run)
    assert run.manifest["schema_version"] == "1.0" and run.names == ["schema-1.0"]
    rows = run.sql("select step, n_tokens, n_sequences, ratio_mean, log_ratio_mean, grad_norm from steps "
                   "order by step").fetchall()
    tok = _tokens(old_run)
    steps = np.array(tok["step"])
    lr = np.array(tok["log_ratio"], np.float64)
    assert [r[0] for r in rows] == [0, 1, 2]
    for step, n_tok, n_seq, ratio_mean, lr_mean, grad in rows:
        sel = steps == step
        assert n_tok == sel.sum() == 6 + 5 + 4 + 3 and n_seq == 4
        assert lr_mean == pytest.approx(0.01 * (step + 1), abs=1e-6)
        assert ratio_mean == pytest.approx(np.exp(lr[sel]).mean(), rel=1e-6)
        assert grad == 1.0 + step
    # the whole read wing works on it: detectors run, the views hold every current column
    assert isinstance(detect(run), list)
    from arldiag.schema import arrow_schema

    for t in ("tokens", "sequences", "groups"):
        assert {f.name for f in arrow_schema(t)} <= set(run.columns(t))


def _drop(root: Path, table: str, cols: list[str]) -> None:
    for f in (root / table).glob("*.parquet"):
        t = pq.read_table(f)
        pq.write_table(t.drop_columns([c for c in cols if c in t.column_names]), f)


def test_columns_missing_from_an_older_writer_read_as_null(old_run, tmp_path):
    before = arldiag.open_run(old_run)
    ref = before.sql("select step, n_tokens, ratio_mean, grad_norm from steps order by step").fetchall()
    ref_tok = before.sql("select step, sample_id, pos, logp from tokens order by sample_id, pos").fetchall()
    # as if the writer predated the token `entropy` column and the `sum_ppo_kl` step aggregate
    _drop(old_run, "tokens", ["entropy"])
    _drop(old_run, "steps", ["sum_ppo_kl"])
    run = arldiag.open_run(old_run)
    assert run.sql("select count(entropy), count(*) from tokens").fetchall() == [(0, 54)]
    assert run.sql("select step, n_tokens, ratio_mean, grad_norm from steps order by step").fetchall() == ref
    assert run.sql("select step, sample_id, pos, logp from tokens order by sample_id, pos").fetchall() == ref_tok
    assert [r[0] for r in run.sql("select ppo_kl from steps").fetchall()] == [None, None, None]
    # next to a current run, in one fleet: the same columns, NULL only where the old run lacks them
    with arldiag.Collector(tmp_path / "new", token_sample_rate=1.0) as col:
        col.record_update(0, logp=np.zeros((1, 2)), logp_old=np.zeros((1, 2)), advantages=[1.0],
                          response_mask=np.ones((1, 2), bool), entropy=np.full((1, 2), 0.5))
        col.record_step(0)
    fleet = arldiag.open_run([old_run, tmp_path / "new"])
    assert fleet.sql("select run, count(entropy) from tokens group by run order by run").fetchall() == [
        ("new", 2), ("schema-1.0", 0)]
    assert fleet.sql("select run, ppo_kl from steps where step = 0 order by run").fetchall() == [
        ("new", 0.0), ("schema-1.0", None)]


def test_manifest_versions(old_run):
    m = json.loads((old_run / "run.json").read_text())
    del m["schema_version"]  # a run from before the manifest carried a version reads as 0.0
    (old_run / "run.json").write_text(json.dumps(m))
    assert arldiag.open_run(old_run).count("steps") == 3
    m["schema_version"] = "2.0"
    (old_run / "run.json").write_text(json.dumps(m))
    with pytest.raises(SchemaVersionError, match=r"run.json: run store schema 2.0 is newer"):
        arldiag.open_run(old_run)

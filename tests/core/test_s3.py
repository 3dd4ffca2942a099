"""Object storage: the Collector writes to ``s3://`` and open_run / watch read from it, through a real
S3-compatible server on 127.0.0.1 (moto's standalone server, tests/core/conftest.py). Values are checked against
the same data written to a local directory."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

import arldiag
from arldiag.cli import main as cli


def _feed(col, steps, seed=0, first=0):
    rng = np.random.default_rng(seed)
    B, T = 6, 7
    for step in range(first, first + steps):
        lpo = rng.normal(-1, 0.5, (B, T)).astype(np.float32)
        mask = np.arange(T)[None, :] < rng.integers(2, T + 1, B)[:, None]
        sids = np.arange(B) + step * B
        col.record_rollout(step, sids, group_ids=sids // 3, rewards=rng.random(B), response_mask=mask)
        col.record_update(step, logp=lpo + rng.normal(0, 0.05, (B, T)).astype(np.float32), logp_old=lpo,
                          advantages=rng.normal(size=B), response_mask=mask, sample_ids=sids,
                          entropy=rng.random((B, T)).astype(np.float32))
        col.record_step(step, {"grad_norm": 1.0 + step})


def _rows(run, query):
    return run.sql(query).fetchall()


STEPS_Q = "select step, n_tokens, ppo_kl, ratio_mean, entropy, grad_norm from steps order by step"
TOK_Q = "select step, sample_id, pos, logp, log_ratio from tokens order by sample_id, pos"


def test_collector_writes_and_open_run_reads_s3(s3, tmp_path):
    url = f"{s3}/team/run-a"
    col = arldiag.Collector(url, token_sample_rate=1.0, flush_every=100, flush_every_s=3600)
    _feed(col, 3)
    col.flush()
    # a run being written reads consistently through S3
    run = arldiag.open_run(url)
    assert run.manifest["status"] == "running" and run.names == ["run-a"]
    assert [r[0] for r in _rows(run, "select step from steps order by step")] == [0, 1, 2]
    _feed(col, 2, seed=1, first=3)
    col.close()
    assert run.refresh() is True  # new parts listed again (s3fs's listing cache is bypassed)
    assert [r[0] for r in _rows(run, "select step from steps order by step")] == [0, 1, 2, 3, 4]

    with arldiag.Collector(tmp_path / "run-a", token_sample_rate=1.0, flush_every=100, flush_every_s=3600) as loc:
        _feed(loc, 3)
        loc.flush()
        _feed(loc, 2, seed=1, first=3)
    local = arldiag.open_run(tmp_path / "run-a")
    run = arldiag.open_run(url)
    assert run.manifest["status"] == "finished"
    assert _rows(run, STEPS_Q) == _rows(local, STEPS_Q)
    assert _rows(run, TOK_Q) == _rows(local, TOK_Q)
    assert run.count("tokens") == local.count("tokens") > 0

    # the objects are plain Parquet parts with the same names as on disk, readable by any Parquet reader
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.glob(f"{root}/steps/*.parquet"))
    assert names == sorted(p.name for p in (tmp_path / "run-a" / "steps").glob("*.parquet"))
    with fs.open(f"{root}/steps/{names[0]}", "rb") as fh:
        assert pq.read_table(fh).num_rows == 3
    assert not fs.glob(f"{root}/**/*.tmp")  # nothing to rename on S3: one PUT per part


def test_resume_on_s3_appends_parts(s3):
    url = f"{s3}/team/run-r"
    with arldiag.Collector(url, flush_every=100) as col:
        _feed(col, 2)
    first = arldiag.open_run(url).manifest["run_id"]
    with arldiag.Collector(url, flush_every=100) as col:  # a restarted trainer
        _feed(col, 2, seed=3, first=2)
    run = arldiag.open_run(url)
    assert run.manifest["run_id"] == first
    assert [r[0] for r in _rows(run, "select step from steps order by step")] == [0, 1, 2, 3]
    files = sorted(p.rsplit("/", 1)[-1] for p in run.fs.glob(f"{url}/steps/*.parquet"))
    assert files == ["rank00000-part000001.parquet", "rank00000-part000002.parquet"]


def test_prefix_glob_opens_a_fleet(s3, tmp_path):
    for i, name in enumerate(["run-a", "run-b", "run-c"]):
        for root in (f"{s3}/team/{name}", tmp_path / "team" / name):
            with arldiag.Collector(root, flush_every=100) as col:
                _feed(col, 2 + i, seed=i)
    with arldiag.Collector(f"{s3}/other/run-z") as col:  # another prefix: not part of the fleet
        _feed(col, 1)
    fleet = arldiag.open_run(f"{s3}/team/*")
    local = arldiag.open_run(str(tmp_path / "team" / "*"))
    assert fleet.names == local.names == ["run-a", "run-b", "run-c"]
    q = "select run, step, n_tokens, ppo_kl, grad_norm from steps order by run, step"
    assert _rows(fleet, q) == _rows(local, q)
    assert _rows(fleet, "select run, count(*) from steps group by run order by run") == [
        ("run-a", 2), ("run-b", 3), ("run-c", 4)]
    # the bare prefix opens the same fleet
    assert arldiag.open_run(f"{s3}/team").names == fleet.names


def test_watch_follows_an_s3_run(s3, capsys):
    url = f"{s3}/team/run-w"
    col = arldiag.Collector(url, flush_every=100)
    _feed(col, 4)
    col.flush()
    assert cli(["watch", url, "--once", "--quiet"]) == 0
    assert "evaluated 4 new steps up to step 3" in capsys.readouterr().out
    _feed(col, 3, seed=5, first=4)
    col.close()
    # resumes where it stopped (its state file lives next to the run, on S3) and sees only the new steps
    assert cli(["watch", url, "--once", "--quiet"]) == 0
    assert "evaluated 3 new steps up to step 6" in capsys.readouterr().out
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    assert fs.exists(f"{root}/.arldiag-watch.json")


def test_unreachable_bucket_never_kills_training(s3):
    with pytest.warns(RuntimeWarning, match="arldiag"):
        col = arldiag.Collector("s3://no-such-bucket-arldiag/run", flush_every=1)
        _feed(col, 2)
        m = col.last_metrics
        col.close()
    assert np.isfinite(m["ppo_kl"])


def test_detect_query_and_report_take_s3_urls(s3, tmp_path, capsys):
    url = f"{s3}/team/run-q"
    with arldiag.Collector(url) as col:
        _feed(col, 5)
    with arldiag.Collector(tmp_path / "run-q") as col:
        _feed(col, 5)
    assert cli(["query", url, "select count(*) as n, sum(n_tokens) as t from steps", "--format", "csv"]) == 0
    n_tok = arldiag.open_run(tmp_path / "run-q").sql("select sum(n_tokens) from steps").fetchall()[0][0]
    assert capsys.readouterr().out.splitlines() == ["n,t", f"5,{n_tok}"]
    assert cli(["detect", url]) == 0
    remote = capsys.readouterr().out
    assert cli(["detect", str(tmp_path / "run-q")]) == 0
    assert remote == capsys.readouterr().out  # the same findings as the same data on disk
    import json

    for src, out in ((url, tmp_path / "remote.json"), (str(tmp_path / "run-q"), tmp_path / "local.json")):
        assert cli(["report", src, "-o", str(out), "--no-progress"]) == 0
    remote, local = (json.loads((tmp_path / f).read_text()) for f in ("remote.json", "local.json"))
    assert remote["path"] == url and remote["name"] == local["name"] == "run-q"
    for k in ("verdict", "summary", "findings", "signals", "rows"):
        assert remote[k] == local[k], k

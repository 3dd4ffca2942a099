"""Reader: views over one or many runs, schema-version policy, live refresh; the info/query CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest

import arldiag
from arldiag.cli import main as cli


def write_run(path, steps=3, name=None, grad=1.0):
    rng = np.random.default_rng(len(str(path)))
    with arldiag.Collector(path, name=name, config={"algo": "test"}) as col:
        for s in range(steps):
            lpo = rng.normal(-1, 0.3, (4, 6)).astype(np.float32)
            col.record_rollout(s, sample_ids=np.arange(4) + 10 * s, group_ids=[0, 0, 1, 1],
                               rewards=[1.0, 1.0, 0.0, 1.0], format_valid=[True, True, False, True],
                               response_mask=np.ones((4, 6), bool))
            col.record_update(s, logp=lpo + 0.05, logp_old=lpo, advantages=[0.5, -0.5, 1.0, -1.0],
                              response_mask=np.ones((4, 6), bool), sample_ids=np.arange(4) + 10 * s)
            col.record_step(s, {"grad_norm": grad * (s + 1), "success_rate": 0.5})


def test_many_runs_root_and_glob(tmp_path):
    write_run(tmp_path / "a", 3)
    write_run(tmp_path / "b", 2, grad=2.0)
    for target in (tmp_path, str(tmp_path / "*"), [tmp_path / "a", tmp_path / "b"]):
        run = arldiag.open_run(target)
        assert run.names == ["a", "b"]
        rows = run.sql("select run, count(*) from steps group by run order by run").fetchall()
        assert rows == [("a", 3), ("b", 2)]
    run = arldiag.open_run(tmp_path)
    assert run.sql("select grad_norm from steps where run = 'b' order by step").fetchall() == [(2.0,), (4.0,)]
    # groups: group 0 returns (1, 1) has zero std, group 1 (0, 1) does not
    assert run.sql("select zero_std_group_frac, format_valid_frac from steps where run='a' and step=0"
                   ).fetchall() == [(0.5, 0.75)]
    assert run.count("alerts") == 0 and "severity" in run.columns("alerts")
    assert run.subset("b").names == ["b"]


def test_newer_major_schema_is_refused_older_is_read(tmp_path):
    write_run(tmp_path / "r", 1)
    man = json.loads((tmp_path / "r" / "run.json").read_text())
    man["schema_version"] = "0.9"
    (tmp_path / "r" / "run.json").write_text(json.dumps(man))
    assert arldiag.open_run(tmp_path / "r").count("steps") == 1
    man["schema_version"] = "2.0"
    (tmp_path / "r" / "run.json").write_text(json.dumps(man))
    with pytest.raises(ValueError, match=r"schema 2.0 is newer than this arldiag reads \(1.0\)"):
        arldiag.open_run(tmp_path / "r")


def test_missing_run_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        arldiag.open_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no run"):
        arldiag.open_run(tmp_path / "empty")
    (tmp_path / "notes.md").write_text("x")
    with pytest.raises(FileNotFoundError, match="notes.md is not a run: a run is a directory holding run.json"):
        arldiag.open_run(tmp_path / "notes.md")


def test_refresh_sees_a_growing_run(tmp_path):
    col = arldiag.Collector(tmp_path / "live", flush_every=1)
    b = dict(logp=np.zeros((2, 2)), logp_old=np.zeros((2, 2)), advantages=[1.0, -1.0],
             response_mask=np.ones((2, 2), bool))
    col.record_update(0, **b)
    col.record_step(0)
    col.flush()
    run = arldiag.open_run(tmp_path / "live")
    assert run.count("steps") == 1 and run.manifest["status"] == "running"
    assert run.refresh() is False
    col.record_update(1, **b)
    col.record_step(1)
    col.flush()
    assert run.refresh() is True and run.count("steps") == 2
    col.close()
    run.refresh(force=True)
    assert run.manifest["status"] == "finished"


def test_resume_appends_to_an_existing_run(tmp_path):
    write_run(tmp_path / "r", 2)
    rid = json.loads((tmp_path / "r" / "run.json").read_text())["run_id"]
    with arldiag.Collector(tmp_path / "r") as col:
        col.record_step(5, {"grad_norm": 9.0})
    run = arldiag.open_run(tmp_path / "r")
    assert [r[0] for r in run.sql("select step from steps").fetchall()] == [0, 1, 5]
    assert run.manifest["run_id"] == rid


def test_cli_info_and_query(tmp_path, capsys):
    write_run(tmp_path / "r", 3)
    assert cli(["info", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "schema_version     1.0" in out and "sequences" in out and "12" in out
    assert cli(["query", str(tmp_path / "r"), "select step, grad_norm from steps order by step",
                "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["step,grad_norm", "0,1.0", "1,2.0", "2,3.0"]
    assert cli(["query", str(tmp_path / "r"), "select count(*) as n from tokens", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["n"] >= 0
    assert cli(["query", str(tmp_path / "r"), "select nope from steps"]) == 2
    assert "nope" in capsys.readouterr().err
    assert cli(["info", str(tmp_path / "r"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["r"]["rows"]["steps"] == 3


def test_fsspec_memory_filesystem(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    write_run(tmp_path / "r", 2)
    fs = fsspec.filesystem("memory")
    for f in (tmp_path / "r").rglob("*"):
        if f.is_file():
            fs.pipe(f"/runs/r/{f.relative_to(tmp_path / 'r')}", f.read_bytes())
    run = arldiag.open_run("memory://runs/r")
    assert run.sql("select count(*) from steps").fetchall() == [(2,)]


def test_user_metric_clash_and_unrecorded_std(tmp_path):
    # an imported-style run: only step metrics, one named like a derived metric
    with arldiag.Collector(tmp_path / "r") as col:
        m = col.record_step(0, {"entropy": 1.25, "grad_norm": 3.0})
    run = arldiag.open_run(tmp_path / "r")
    row = run.sql('select entropy, "user/entropy", grad_norm, adv_std, log_ratio_std from steps').fetchall()[0]
    assert row == (1.25, 1.25, 3.0, None, None)
    assert m["entropy"] == 1.25 and m["user/entropy"] == 1.25  # the online evaluator agrees
    # where arldiag did record the metric, its own value wins
    with arldiag.Collector(tmp_path / "s") as col:
        col.record_update(0, logp=np.zeros((1, 2)), logp_old=np.zeros((1, 2)), advantages=[1.0],
                          response_mask=np.ones((1, 2), bool), entropy=np.full((1, 2), 0.5))
        m = col.record_step(0, {"entropy": 9.0})
    run = arldiag.open_run(tmp_path / "s")
    assert run.sql('select entropy, "user/entropy" from steps').fetchall() == [(0.5, 9.0)]
    assert m["entropy"] == 0.5

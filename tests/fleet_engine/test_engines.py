"""The ray engine gives the local engine's JSON for every fleet command (ls, detect, eval-detect, reports), over 54
synthetic runs with damaged ones and one being written; the local engine gives what the single-connection commands
gave before engines existed; one run's failure is its row's, never the fleet's."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from arldiag.cli import main


def _run_json(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, json.loads(out), err


def _sweep_b_runs(fleet: Path, k: int = 5) -> list[str]:
    return [str(p) for p in sorted((fleet / "sweep_b").iterdir())[:k]]


def test_ls_ray_equals_local_over_54_runs(fleet, ray_local, capsys):
    rc, local, err = _run_json(capsys, "ls", fleet, "--json", "--engine", "local")
    assert rc == 0 and "damaged/run00" in err  # the broken run is named on stderr, the fleet still listed
    rc2, on_ray, _ = _run_json(capsys, "ls", fleet, "--json", "--engine", "ray")
    assert rc2 == 0 and on_ray == local
    assert len(local) == 54
    rows = {r["name"]: r for r in local}
    assert rows["damaged/run00"]["verdict"] == "error" and "run.json" in rows["damaged/run00"]["error"]
    # a truncated token part costs its rows, not the run; a truncated steps part costs its steps
    assert rows["damaged/run01"]["verdict"] not in ("error", None) and rows["damaged/run01"]["steps"] == 60
    kept = [p for p in sorted((fleet / "damaged/run02/steps").glob("*.parquet"))[:-1]]
    steps = {s for p in kept for s in pq.read_table(p, columns=["step"]).column("step").to_pylist()}
    assert rows["damaged/run02"]["steps"] == len(steps) < 60
    # the run being written: its published parts are read, the half-written one is not
    assert rows["live/run03"]["steps"] == 60 and rows["live/run03"]["verdict"] == "collapsed"
    assert sum(r["verdict"] == "collapsed" for r in local) >= 20
    # the dashboard's API (arldiag.fleet.fleet_table) gives the same rows
    from arldiag.fleet import fleet_table

    want = [{**r, "name": r["name"].split("/", 1)[1]} for r in local if r["name"].startswith("damaged/")]
    assert json.loads(json.dumps(fleet_table(fleet / "damaged"), default=str)) == want


def test_engine_from_the_environment(fleet, ray_local, capsys, monkeypatch):
    monkeypatch.setenv("ARLDIAG_ENGINE", "ray")
    rc, on_ray, _ = _run_json(capsys, "ls", fleet / "live", "--json")
    monkeypatch.setenv("ARLDIAG_ENGINE", "local")
    assert _run_json(capsys, "ls", fleet / "live", "--json")[1] == on_ray and rc == 0
    monkeypatch.setenv("ARLDIAG_ENGINE", "spark")
    assert main(["ls", str(fleet / "live")]) == 2
    assert "$ARLDIAG_ENGINE: unknown engine 'spark'" in capsys.readouterr().err


def test_detect_ray_equals_local_and_the_single_connection_command(fleet, ray_local, capsys):
    rc, local, err = _run_json(capsys, "detect", fleet, "--json", "--engine", "local")
    assert rc == 0 and "run00 could not be analysed" in err
    assert _run_json(capsys, "detect", fleet, "--json", "--engine", "ray")[1] == local
    assert len(local["runs"]) == 54 and list(local["errors"]) == ["run00"]
    assert {f["run"] for f in local["findings"]} == set(local["runs"]) - {"run00"}
    # without an engine: one open_run over the runs (the command as it was); the same JSON and text
    runs = _sweep_b_runs(fleet, 3)
    rc0, legacy, _ = _run_json(capsys, "detect", *runs, "--json")
    assert _run_json(capsys, "detect", *runs, "--json", "--engine", "ray")[1] == legacy
    main(["detect", *runs])
    text = capsys.readouterr().out
    main(["detect", *runs, "--engine", "ray"])
    assert capsys.readouterr().out == text and text.count("run run") == 3


def test_eval_detect_ray_equals_local(fleet, ray_local, capsys):
    runs = _sweep_b_runs(fleet, 9)  # one copy of each of the 9 distinct runs, 4 of them collapsing
    rc, local, _ = _run_json(capsys, "eval-detect", *runs, "--json", "--engine", "local", "--precursors", "2")
    assert _run_json(capsys, "eval-detect", *runs, "--json", "--engine", "ray", "--precursors", "2")[1] == local
    assert _run_json(capsys, "eval-detect", *runs, "--json", "--precursors", "2")[1] == local  # as before
    assert len(local["runs"]) == 9 and local["summary"]["collapsing"] == 4
    # a broken run: listed under errors, left out of the summary, the others scored
    _, dmg, err = _run_json(capsys, "eval-detect", fleet / "damaged", "--json", "--engine", "ray")
    assert [e["run"] for e in dmg["errors"]] == ["run00"] and "run.json" in dmg["errors"][0]["error"]
    assert [r["run"] for r in dmg["runs"]] == ["run01", "run02"] and "run00 could not be scored" in err


def _strip_generated(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("_generated "))


def test_reports_ray_equals_local(fleet, ray_local, capsys, tmp_path):
    roots = [fleet / "damaged", fleet / "live"]
    rc, local, err = _run_json(capsys, "reports", *roots, "--out", tmp_path / "l", "--json", "--engine", "local")
    rc2, on_ray, _ = _run_json(capsys, "reports", *roots, "--out", tmp_path / "r", "--json", "--engine", "ray")
    assert rc == rc2 == 1 and "run00" in err  # one report failed: exit 1, the others written
    assert [r["run"] for r in local] == ["run00", "run01", "run02", "run03"]
    for a, b in zip(local, on_ray):
        assert {**a, "file": None} == {**b, "file": None}
        if a["file"] is None:
            assert a["error"] and b["file"] is None
            continue
        ta, tb = Path(a["file"]).read_text(), Path(b["file"]).read_text()
        assert _strip_generated(ta) == _strip_generated(tb) and a["bytes"] == len(ta.encode())
        assert Path(a["file"]).name == f"{a['run']}.md"
    assert "collapse" in (tmp_path / "l" / "run03.md").read_text().lower()


def test_s3_root_ray_equals_local_and_the_local_copy(fleet, bucket, ray_local, capsys):
    rc, on_ray, _ = _run_json(capsys, "ls", bucket, "--json", "--engine", "ray")
    assert rc == 0 and _run_json(capsys, "ls", bucket, "--json", "--engine", "local")[1] == on_ray
    copy = {r["name"].split("/")[-1]: r for r in _run_json(capsys, "ls", *_sweep_b_runs(fleet, 6), fleet / "damaged",
                                                             "--json")[1]}
    assert len(on_ray) == 9
    for r in on_ray:
        sub = "damaged" if r["name"].startswith("damaged/") else "sweep_b"
        want = copy[r["name"].split("/", 1)[1]]
        assert r["path"] == f"{bucket}/{r['name']}"
        if r["verdict"] == "error":
            assert want["verdict"] == "error" and sub == "damaged"
            continue
        assert {**r, "name": None, "path": None} == {**want, "name": None, "path": None}
    rc, det, _ = _run_json(capsys, "detect", f"{bucket}/damaged", "--json", "--engine", "ray")
    assert det == _run_json(capsys, "detect", f"{bucket}/damaged", "--json", "--engine", "local")[1]
    assert list(det["errors"]) == ["run00"] and len({f["run"] for f in det["findings"]}) == 2


def test_a_failing_or_dead_task_is_an_error_row(ray_local):
    import functools
    import operator
    import os

    from arldiag.fleetrun.engine import get_engine

    on_error = lambda item, exc: {"item": item, "error": type(exc).__name__}  # noqa: E731
    six_over = functools.partial(operator.truediv, 6)
    eng = get_engine("ray", progress=False)
    assert eng.map(six_over, [1, 0, 3], on_error) == [6.0, {"item": 0, "error": "ZeroDivisionError"}, 2.0]
    assert get_engine("local").map(six_over, [1, 0], on_error) == [6.0, {"item": 0, "error": "ZeroDivisionError"}]
    (dead,) = eng.map(os._exit, [3], on_error)  # the worker process dies (as on an out-of-memory kill)
    assert dead["item"] == 3 and ("Died" in dead["error"] or "Crash" in dead["error"]), dead


def test_light_import():
    import subprocess
    import sys

    code = ("import sys, arldiag, arldiag.fleet, arldiag.fleetrun.engine, arldiag.fleetrun.stats, "
            "arldiag.fleetrun.tasks, arldiag.commands.ls, arldiag.commands.fleet_stats; "
            "print(','.join(m for m in ('ray', 'duckdb', 'pandas') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == ""

"""`arldiag ls ROOT`: one row per run under a root (arldiag.fleet), checked on hand-made runs whose outcome series
were chosen so the label's steps can be worked out by hand (docs/detectors.md "Collapse label": a 10-step trailing
mean, half of its running peak, moved back over the raw values already below)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from arldiag.cli import main

# success_rate per step of each run (record_step metrics only)
COLLAPSED = [0.8] * 30 + [0.05] * 20  # 50 steps; the mean is under 0.4 from step 35 on, moved back to step 30
STABLE = [0.6] * 40
DECLINED = [0.15] * 20 + [0.01] * 20  # never reaches 0.2 (no collapse), falls under half of 0.15: declines at 20
SHORT = [0.1, 0.5, 0.3]


def write_outcome_run(path: Path, values, algorithm: str = "grpo", start: int = 0) -> None:
    import arldiag

    with arldiag.Collector(path, algorithm=algorithm, flush_every=10) as col:
        for i, v in enumerate(values):
            col.record_step(start + i, metrics={"success_rate": float(v), "grad_norm": 1.0})


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    r = tmp_path_factory.mktemp("fleet")
    write_outcome_run(r / "collapsed", COLLAPSED, "cispo")
    write_outcome_run(r / "stable", STABLE)
    write_outcome_run(r / "declined", DECLINED, "gspo")
    write_outcome_run(r / "sweep" / "short", SHORT)
    return r


def _timeline(path: Path):
    """(last state, first warning-or-critical step) straight from the detectors' alert timeline."""
    import arldiag
    from arldiag.detectors import alert_timeline

    run = arldiag.open_run(path)
    try:
        tl = alert_timeline(run)
    finally:
        run.close()
    warned = tl[tl["state"].isin(["warning", "critical"])]["step"]
    return tl["state"].iloc[-1], (int(warned.min()) if len(warned) else None)


def test_fleet_rows_match_hand_computed_values(root: Path) -> None:
    from arldiag.fleet import fleet_table

    rows = {r["name"]: r for r in fleet_table(root)}
    assert list(rows) == ["collapsed", "declined", "stable", "sweep/short"]  # sorted, nested runs by their folder
    c, s, d, short = rows["collapsed"], rows["stable"], rows["declined"], rows["sweep/short"]
    assert (c["algorithm"], c["steps"], c["last_step"]) == ("cispo", 50, 49)
    assert (c["verdict"], c["collapse_step"], c["decline_step"]) == ("collapsed", 30, None)
    assert (c["outcome"], c["peak"], c["last"]) == ("success_rate", 0.8, 0.05)
    assert (s["verdict"], s["state"], s["collapse_step"], s["first_warning"]) == ("healthy", "ok", None, None)
    assert (s["steps"], s["last_step"], s["peak"], s["last"]) == (40, 39, 0.6, 0.6)
    assert (d["verdict"], d["collapse_step"], d["decline_step"], d["algorithm"]) == ("declined", None, 20, "gspo")
    assert (d["peak"], d["last"]) == (0.15, 0.01)
    # under the detectors' 10 steps of warm-up a quiet run is not called healthy
    assert (short["verdict"], short["steps"], short["last_step"], short["peak"], short["last"]) == \
        ("too short", 3, 2, 0.5, 0.3)
    # the alert state now and the first warning are the alert timeline's (one replay gives both)
    for name in rows:
        state, warn = _timeline(root / name)
        assert (rows[name]["state"], rows[name]["first_warning"]) == (state, warn), name
    assert c["state"] in ("warning", "critical") and c["first_warning"] is not None
    assert all(r["error"] is None for r in rows.values())


def test_ls_text_is_an_aligned_table(root: Path, capsys) -> None:
    assert main(["ls", str(root)]) == 0
    lines = capsys.readouterr().out.rstrip("\n").split("\n")
    assert len(lines) == 5 and lines[0].split()[:3] == ["run", "algorithm", "steps"]
    assert [ln.split()[0] for ln in lines[1:]] == ["collapsed", "declined", "stable", "sweep/short"]
    verdict_at = lines[0].index("verdict")  # every verdict starts under its header
    assert [ln[verdict_at:].split("  ")[0] for ln in lines[1:]] == \
        ["collapsed", "declined", "healthy", "too short"]
    steps_end = lines[0].index("steps") + len("steps")  # numbers right-aligned under theirs
    assert [ln[:steps_end].split()[-1] for ln in lines[1:]] == ["50", "40", "40", "3"]
    assert "0.800" in lines[1] and "0.050" in lines[1]


def test_ls_json_is_a_list_of_rows(root: Path, capsys) -> None:
    assert main(["ls", str(root), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list) and [r["name"] for r in rows] == ["collapsed", "declined", "stable", "sweep/short"]
    c = rows[0]
    assert {k: c[k] for k in ("verdict", "steps", "last_step", "collapse_step", "peak", "last")} == \
        {"verdict": "collapsed", "steps": 50, "last_step": 49, "collapse_step": 30, "peak": 0.8, "last": 0.05}
    assert c["path"] == str(root / "collapsed") and rows[3]["first_warning"] is None


def test_ls_of_one_run_and_of_a_root_with_a_broken_run(tmp_path: Path, capsys) -> None:
    write_outcome_run(tmp_path / "only", STABLE[:12])
    assert main(["ls", str(tmp_path / "only"), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["name"], row["steps"], row["verdict"]) == ("only", 12, "healthy")
    # a broken run.json is a row saying so; the other runs are still listed
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text("{not json")
    assert main(["ls", str(tmp_path), "--json"]) == 0
    out, err = capsys.readouterr()
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["only"]["verdict"] == "healthy"
    assert rows["broken"]["verdict"] == "error" and "not valid JSON" in rows["broken"]["error"]
    assert err.startswith("arldiag ls: warning: broken: ") and err.count("\n") == 1


def test_a_run_without_steps_and_a_run_without_an_outcome(tmp_path: Path) -> None:
    import arldiag
    from arldiag.fleet import fleet_table

    with arldiag.Collector(tmp_path / "empty"):
        pass
    with arldiag.Collector(tmp_path / "no_outcome", flush_every=5) as col:
        for s in range(12):
            col.record_step(s, metrics={"grad_norm": 1.0})
    rows = {r["name"]: r for r in fleet_table(tmp_path)}
    assert (rows["empty"]["steps"], rows["empty"]["verdict"], rows["empty"]["state"]) == (0, None, None)
    assert (rows["no_outcome"]["steps"], rows["no_outcome"]["outcome"], rows["no_outcome"]["peak"]) == (12, None, None)
    assert rows["no_outcome"]["verdict"] in ("healthy", "at risk")


@pytest.mark.parametrize("bad, why", [("missing", "does not exist"), ("file.txt", "is not a run"),
                                      ("empty_dir", "holds no run"), ("broken", "run.json is not valid JSON")])
def test_ls_bad_path_is_one_line(tmp_path: Path, capsys, bad: str, why: str) -> None:
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text('{"name": "x", ')  # the only run, broken: nothing to list
    assert main(["ls", str(tmp_path / bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("arldiag ls: error: ") and why in err and err.count("\n") == 1

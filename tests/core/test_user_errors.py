"""What a user meets first: bad paths, broken manifests, truncated parts. Every command answers with one line that
names the problem and the file, exit code 2, no traceback; a truncated part costs its rows, not the run."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import arldiag
from arldiag.cli import main as cli_main

SAMPLE = Path(__file__).resolve().parents[2] / "sample_runs" / "cispo_s0"
TABLES = ("steps", "sequences", "tokens", "turns", "groups")


def arldiag_cli(*args, cwd=None, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arldiag.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


@pytest.fixture(scope="module")
def bad_paths(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    d = tmp_path_factory.mktemp("bad")
    (d / "empty").mkdir()
    (d / "plain.txt").write_text("not a run\n")
    (d / "broken").mkdir()
    (d / "broken" / "run.json").write_text('{"name": "x", ')
    # what each case's message must contain: the path and the problem
    return {"missing": (d / "nope", "does not exist"), "empty": (d / "empty", "holds no run"),
            "plain": (d / "plain.txt", "not a"), "broken": (d / "broken", "run.json is not valid JSON")}


def _command(cmd: str, path: Path, tmp: Path) -> list:
    if cmd == "import" and (path / "run.json").exists():  # import writes a run: the broken run is its --out
        (tmp / "m.csv").write_text("step,loss\n0,1.0\n")
        return ["import", tmp / "m.csv", "--out", path]
    return {"query": ["query", path, "select 1"], "watch": ["watch", path, "--once"],
            "import": ["import", path, "--out", tmp / "imported"]}.get(cmd, [cmd, path])


@pytest.mark.parametrize("case", ["missing", "empty", "plain", "broken"])
@pytest.mark.parametrize("cmd", ["info", "detect", "query", "watch", "report", "dashboard", "eval-detect", "compact",
                                 "verify", "import"])
def test_every_command_gives_one_line_on_a_bad_path(cmd, case, bad_paths, tmp_path) -> None:
    path, problem = bad_paths[case]
    if cmd == "dashboard" and case in ("missing", "empty"):
        pytest.skip("the dashboard waits for runs on a missing or empty root (tests/dashboard/test_selection.py)")
    res = arldiag_cli(*_command(cmd, path, tmp_path), cwd=tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith(f"arldiag {cmd}: error:"), lines[0]
    assert path.name in lines[0], lines[0]
    if cmd == "import":  # import reads a file, not a run: its own wording
        assert {"missing": "does not exist", "plain": "format", "empty": "folder", "broken": "already holds a run"
                }[case] in lines[0]
    elif not (cmd == "dashboard" and case == "plain"):
        assert problem in lines[0], lines[0]
    if case == "broken" and cmd != "import":
        assert str(path / "run.json") in lines[0] and "line 1" in lines[0]


def test_train_with_an_unknown_env_is_one_line(tmp_path) -> None:
    res = arldiag_cli("train", "--env", "nope", "--steps", "1", "--out", tmp_path / "r")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip() == "arldiag train: error: --env 'nope': choose from calculator, sokoban"
    assert not (tmp_path / "r").exists()  # refused before anything was written


def test_manifest_that_is_not_an_object(tmp_path) -> None:
    (tmp_path / "run.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"run.json holds a JSON list, not the run manifest object"):
        arldiag.open_run(tmp_path)


def test_a_bug_still_shows_its_traceback(monkeypatch, capsys) -> None:
    # only input errors are turned into one line; anything else keeps its traceback for a bug report
    import arldiag.commands.info as info

    monkeypatch.setattr(info, "main", lambda args: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cli_main(["info", "x"])


# ---------------------------------------------------------------- truncated parts


def _truncate(path: Path, keep: int = 3000) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:min(keep, len(data) // 2)])


@pytest.fixture(scope="module")
def multipart_run(tmp_path_factory) -> Path:
    """A 6-step run flushed every step: one part per step in every table (tokens kept for all samples)."""
    d = tmp_path_factory.mktemp("multi") / "run"
    rng = np.random.default_rng(0)
    with arldiag.Collector(d, flush_every=1, token_sample_rate=1.0) as col:
        for s in range(6):
            lpo = rng.normal(-1, 0.3, (4, 6)).astype(np.float32)
            mask = np.ones((4, 6), bool)
            col.record_rollout(s, sample_ids=np.arange(4) + 10 * s, group_ids=[0, 0, 1, 1], turn_ids=[0, 0, 0, 0],
                               rewards=[1.0, 0.0, 0.0, 1.0], response_mask=mask)
            col.record_update(s, logp=lpo + 0.05, logp_old=lpo, advantages=[0.5, -0.5, 1.0, -1.0],
                              response_mask=mask, sample_ids=np.arange(4) + 10 * s)
            col.record_step(s, {"success_rate": 0.5})
    return d


@pytest.mark.parametrize("table", TABLES)
def test_a_truncated_part_is_skipped_with_a_warning(table, multipart_run, tmp_path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(multipart_run, run_dir)
    parts = sorted((run_dir / table).glob("*.parquet"))
    assert len(parts) == 6
    full = arldiag.open_run(multipart_run).count("steps_raw" if table == "steps" else table)
    lost = full // 6  # every part of this run holds the same number of rows
    _truncate(parts[2])
    from arldiag.store.reader import CorruptPartWarning

    with pytest.warns(CorruptPartWarning) as rec:
        run = arldiag.open_run(run_dir)
    msgs = [str(w.message) for w in rec]
    assert len(msgs) == 1 and parts[2].name in msgs[0] and f"table {table}" in msgs[0]
    assert run.count("steps_raw" if table == "steps" else table) == full - lost
    assert list(run.skipped_parts) == [str(parts[2])]
    if table == "steps":
        assert [r[0] for r in run.sql("select step from steps").fetchall()] == [0, 1, 3, 4, 5]


@pytest.fixture(scope="module")
def cut_sample(tmp_path_factory) -> dict[str, Path]:
    """Copies of the sample cispo run, each with one table's (only, compacted) part cut short."""
    out = {}
    for t in TABLES:
        d = tmp_path_factory.mktemp(f"cut_{t}") / "cispo_s0"
        shutil.copytree(SAMPLE, d)
        part, = (d / t).glob("*.parquet")
        _truncate(part, 5000)
        out[t] = d
    return out


@pytest.mark.parametrize("table", TABLES)
def test_every_command_reads_a_run_with_a_cut_part(table, cut_sample, tmp_path) -> None:
    d = cut_sample[table]
    part, = (d / table).glob("*.parquet")
    commands = [["info", d], ["detect", d], ["report", d, "-o", tmp_path / "r.html", "--no-progress"]]
    if table in ("steps", "tokens"):  # the other commands read nothing else (kept short: each run is a process)
        commands += [["query", d, "select count(*) from steps"], ["eval-detect", d], ["watch", d, "--once",
                                                                                      "--no-store"]]
    for args in commands:
        res = arldiag_cli(*args)
        assert res.returncode == 0, (args, res.stderr[-2000:])
        assert "Traceback" not in res.stderr
        warn = [ln for ln in res.stderr.splitlines() if ln.startswith("arldiag: warning: skipping unreadable part")]
        assert len(warn) == 1 and str(part) in warn[0] and f"table {table}" in warn[0], res.stderr
    assert (tmp_path / "r.html").stat().st_size > 100_000
    res = arldiag_cli("verify", d)
    assert res.returncode == 1
    assert f"damaged   {part}: table {table}: unreadable Parquet footer, {part.stat().st_size:,d} bytes" in res.stdout


def test_verify_lists_orphans_and_leftovers(multipart_run, tmp_path) -> None:
    from arldiag.store.compact import compact_table

    d = tmp_path / "run"
    shutil.copytree(multipart_run, d)
    assert arldiag_cli("verify", d).returncode == 0
    # a compaction interrupted after publishing the merged part: the old parts stay, named in the journal
    seq = d / "sequences"
    old = sorted(p.name for p in seq.glob("*.parquet"))
    backup = {n: (seq / n).read_bytes() for n in old}
    n_rows = arldiag.open_run(d).count("sequences")
    compact_table(seq)
    new, = [p.name for p in seq.glob("*.parquet")]
    for n, b in backup.items():
        (seq / n).write_bytes(b)
    (seq / ".compact.json").write_text(json.dumps({"old": old, "new": new}))
    (d / "tokens" / "rank00000-part000099.parquet.tmp").write_bytes(b"PAR1")
    (d / "groups" / "copy of part.parquet").write_bytes((d / "groups" / "rank00000-part000001.parquet").read_bytes())
    # the reader counts the superseded parts' rows once (they are also in the merged part)
    assert arldiag.open_run(d).count("sequences") == n_rows
    res = arldiag_cli("verify", d)
    assert res.returncode == 1
    lines = res.stdout.splitlines()
    assert lines[0] == f"{d}: {len(old) + 2} problem(s)"
    assert sum(ln.strip().startswith("orphaned") and "interrupted compaction" in ln for ln in lines) == len(old)
    assert any(ln.strip().startswith("leftover") and "part000099.parquet.tmp" in ln for ln in lines)
    assert any(ln.strip().startswith("orphaned") and "copy of part.parquet" in ln and "not named like a part" in ln
               for ln in lines)

"""The run summary cached in the run folder (arldiag.fleetrun.summary_cache): `ls` and the dashboard's row function
read it while the run is unchanged and recompute when a part, run.json or the configuration changes."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import arldiag
from arldiag.fleet import fleet_table, run_row
from arldiag.fleetrun import summary_cache


@pytest.fixture
def run_dir(fleet, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("ARLDIAG_SUMMARY_CACHE", "1")
    d = tmp_path / "root" / "one"
    shutil.copytree(fleet / "sweep_a" / "run10", d)  # a collapsing run (spec 1)
    return d


def _cache(d: Path) -> dict:
    return json.loads((d / ".arldiag" / "summary.json").read_text())


def test_cached_row_equals_the_computed_one_and_is_read_without_replay(run_dir, monkeypatch):
    monkeypatch.setenv("ARLDIAG_SUMMARY_CACHE", "0")
    (computed,) = fleet_table(run_dir.parent)
    assert not (run_dir / ".arldiag").exists()  # off: nothing written
    monkeypatch.setenv("ARLDIAG_SUMMARY_CACHE", "1")
    assert fleet_table(run_dir.parent) == [computed]  # fills the cache
    assert _cache(run_dir)["row"]["verdict"] == computed["verdict"] == "collapsed"
    assert fleet_table(run_dir.parent) == [computed]  # read back: the same row
    # proof that the cached row is what is returned (no replay): a planted value under the current key comes back,
    # through `ls` and through run_row (the dashboard's fleet table opens the run and calls it)
    c = _cache(run_dir)
    c["row"]["verdict"] = "planted"
    (run_dir / ".arldiag" / "summary.json").write_text(json.dumps(c))
    assert fleet_table(run_dir.parent)[0]["verdict"] == "planted"
    run = arldiag.open_run(run_dir)
    try:
        assert run_row(run, run.names[0], label="x")["verdict"] == "planted"
    finally:
        run.close()


def test_a_new_part_or_a_new_configuration_recomputes(run_dir, monkeypatch):
    (first,) = fleet_table(run_dir.parent)
    key = _cache(run_dir)["key"]
    with arldiag.Collector(run_dir, flush_every=1) as col:  # the trainer resumes: 5 more steps, a new part
        for s in range(60, 65):
            col.record_step(s, {"success_rate": 0.0, "grad_norm": 1.0})
    assert summary_cache.run_key(run_dir) != key
    (after,) = fleet_table(run_dir.parent)
    assert (first["steps"], after["steps"], after["last_step"]) == (60, 65, 64)
    assert _cache(run_dir)["row"] == {**after, "name": _cache(run_dir)["row"]["name"]}
    key = _cache(run_dir)["key"]
    monkeypatch.setenv("ARLDIAG_RISK_EXIT_STEPS", "4")  # another configuration: another key
    assert summary_cache.run_key(run_dir) != key
    monkeypatch.delenv("ARLDIAG_RISK_EXIT_STEPS")
    monkeypatch.setenv("ARLDIAG_ENGINE", "local")  # how rows are computed is not part of the key
    assert summary_cache.run_key(run_dir) == key


def test_a_read_only_run_folder_still_lists(run_dir):
    import os

    os.chmod(run_dir, 0o555)
    try:
        if os.access(run_dir, os.W_OK):  # root ignores permissions: nothing to check
            pytest.skip("running as root")
        (row,) = fleet_table(run_dir.parent)
        assert row["verdict"] == "collapsed" and not (run_dir / ".arldiag").exists()
    finally:
        os.chmod(run_dir, 0o755)

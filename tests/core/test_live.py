"""Live use: the collector publishes on steps or elapsed time, whichever comes first; `arldiag watch` says what
it is waiting for instead of printing nothing."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import arldiag
import arldiag.collectors.rows as rows_mod


class FakeClock:
    """Stands in for the row buffer module's ``time``: monotonic() returns what the test sets (no real waiting)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def _flushes_per_step(tmp_path, monkeypatch, seconds_per_step: float, **kw) -> list[int]:
    clock = FakeClock()
    monkeypatch.setattr(rows_mod, "time", clock)
    calls = []
    with arldiag.Collector(tmp_path / "r", **kw) as col:
        real = col.writer.flush
        col.writer.flush = lambda wait=False: (calls.append(1), real(wait))[-1]
        out = []
        for s in range(12):
            clock.now += seconds_per_step
            col.record_step(s, {"loss": float(s)})
            out.append(len(calls))
    return out


def test_flush_on_steps_when_steps_are_fast(tmp_path, monkeypatch) -> None:
    # 0.1 s per step: 10 steps come before 5 s
    assert _flushes_per_step(tmp_path, monkeypatch, 0.1, flush_every=10, flush_every_s=5.0) == [0] * 9 + [1] * 3


def test_flush_on_time_when_steps_are_slow(tmp_path, monkeypatch) -> None:
    # 2 s per step: 5 s pass at the 3rd step (6 s), again at the 6th, 9th, 12th
    got = _flushes_per_step(tmp_path, monkeypatch, 2.0, flush_every=10, flush_every_s=5.0)
    assert got == [0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4]


def test_flush_every_s_validated(tmp_path) -> None:
    with pytest.raises(ValueError, match="flush_every_s must be > 0 seconds, got 0"):
        arldiag.Collector(tmp_path / "r", flush_every_s=0)


def test_default_publishes_a_slow_run_after_its_first_step(tmp_path, monkeypatch) -> None:
    # the default (50 steps or 5 s): a run whose steps take 30 s is readable after its first step
    clock = FakeClock()
    monkeypatch.setattr(rows_mod, "time", clock)
    col = arldiag.Collector(tmp_path / "r")
    clock.now += 30
    col.record_step(0, {"loss": 1.0})
    col.writer.flush(wait=True)  # wait for the background thread to publish what the step's flush queued
    assert arldiag.open_run(tmp_path / "r").count("steps") == 1
    col.close()


def _watch(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arldiag.cli", "watch", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def test_watch_says_it_waits_for_run_json(tmp_path) -> None:
    res = _watch(tmp_path / "later", "--wait", "--once")
    assert res.returncode == 0
    assert res.stderr.startswith(f"[arldiag] waiting for run.json in {tmp_path / 'later'} (0s)")


def test_watch_says_it_waits_for_the_first_steps_part(tmp_path) -> None:
    col = arldiag.Collector(tmp_path / "r", flush_every=1000, flush_every_s=1e9)  # open, nothing published yet
    try:
        res = _watch(tmp_path / "r", "--once", "--no-store")
    finally:
        col.close()
    assert res.returncode == 0, res.stderr
    assert f"[arldiag] r: waiting for the first steps part in {tmp_path / 'r' / 'steps'}" in res.stderr
    # and once steps exist and the run is still going, it names the last step it evaluated
    col = arldiag.Collector(tmp_path / "r2", flush_every=1)
    try:
        for s in range(3):
            lpo = np.full((2, 3), -1.0, np.float32)
            col.record_update(s, logp=lpo, logp_old=lpo, advantages=[1.0, -1.0], response_mask=np.ones((2, 3), bool))
            col.record_step(s, {"success_rate": 0.5})
        col.writer.flush(wait=True)
        res = _watch(tmp_path / "r2", "--once", "--no-store")
        res2 = _watch(tmp_path / "r2", "--once")  # evaluates the 3 steps, saves its position
        res3 = _watch(tmp_path / "r2", "--once")  # resumes: nothing new
    finally:
        col.close()
    assert "waiting" not in res.stderr and "evaluated 3 new steps up to step 2" in res.stdout
    assert "evaluated 3 new steps" in res2.stdout
    assert "[arldiag] r2: waiting for steps after step 2 (run status running)" in res3.stderr


def test_watch_quiet(tmp_path) -> None:
    res = _watch(tmp_path / "later", "--wait", "--once", "--quiet")
    assert res.returncode == 0 and res.stderr == ""

"""Bad input and faults: clear errors for the caller's mistakes, never a dead training loop for ours."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pyarrow.parquet as pq
import pytest

import arldiag


def _batch(B=4, T=5, seed=0):
    rng = np.random.default_rng(seed)
    lpo = rng.normal(-1, 0.5, (B, T)).astype(np.float32)
    return dict(logp=lpo + 0.01, logp_old=lpo, advantages=rng.normal(size=B).astype(np.float32),
                response_mask=np.ones((B, T), bool))


def test_shape_mismatch_names_argument_and_both_shapes(tmp_path):
    with arldiag.Collector(tmp_path / "r") as col:
        b = _batch()
        b["logp_old"] = b["logp_old"][:, :3]
        with pytest.raises(ValueError, match=r"logp_old has shape \(4, 3\) but response_mask has shape \(4, 5\)"):
            col.record_update(0, **b)
        b = _batch()
        b["advantages"] = np.zeros(3)
        with pytest.raises(ValueError, match=r"advantages.*\(4,\).*\(3,\)"):
            col.record_update(0, **b)
        with pytest.raises(ValueError, match=r"rewards has shape \(2,\) but sample_ids has shape \(3,\)"):
            col.record_rollout(0, sample_ids=[1, 2, 3], rewards=[1.0, 2.0])


def test_dtype_errors_name_argument(tmp_path):
    with arldiag.Collector(tmp_path / "r") as col:
        b = _batch()
        b["logp"] = np.array([["a"] * 5] * 4)
        with pytest.raises(ValueError, match="logp"):
            col.record_update(0, **b)
        with pytest.raises(ValueError, match="sample_ids"):
            col.record_rollout(0, sample_ids=[0.5, 1.0])
        with pytest.raises(ValueError, match="metrics\\['loss'\\]"):
            col.record_step(0, {"loss": "high"})


def test_nonfinite_counted_flagged_and_isolated(tmp_path):
    b = _batch(B=3, T=4)
    clean = {k: v.copy() for k, v in b.items()}
    b["logp"][1, 2] = np.nan
    b["logp_old"][2, 0] = np.inf
    with arldiag.Collector(tmp_path / "bad", token_sample_rate=0.0) as col:
        col.record_update(0, sample_ids=[0, 1, 2], **b)
        m = col.record_step(0)
    assert m["nonfinite_tokens"] == 2 and m["nonfinite_seqs"] == 2
    assert np.isfinite(m["ppo_kl"]) and np.isfinite(m["ratio_mean"])
    # the other aggregates equal those of the batch without the two poisoned tokens
    mask = clean["response_mask"].copy()
    mask[1, 2] = mask[2, 0] = False
    clean["response_mask"] = mask
    with arldiag.Collector(tmp_path / "clean") as col:
        col.record_update(0, sample_ids=[0, 1, 2], **clean)
        m2 = col.record_step(0)
    for k in ("ppo_kl", "ratio_mean", "pg_clipfrac", "cov_logp_adv", "n_tokens"):
        assert m[k] == pytest.approx(m2[k]), k
    run = arldiag.open_run(tmp_path / "bad")
    assert run.sql("select sample_id, nonfinite from sequences order by sample_id").fetchall() == [(0, 0), (1, 1),
                                                                                                   (2, 1)]
    # anomalous sequences keep their token rows even at sample rate 0
    assert {1, 2} <= {x[0] for x in run.sql("select distinct sample_id from tokens").fetchall()}
    assert run.sql("select nonfinite_tokens from steps").fetchall() == [(2.0,)]


def test_unwritable_directory_warns_once_and_training_continues(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        col = arldiag.Collector(blocker / "run")
        for step in range(3):
            col.record_update(step, **_batch())
            m = col.record_step(step, {"grad_norm": 1.0})
        col.close()
    msgs = [str(w.message) for w in rec if issubclass(w.category, RuntimeWarning) and "arldiag" in str(w.message)]
    assert len(msgs) == 1 and "cannot write the run store" in msgs[0]
    assert np.isfinite(m["ppo_kl"])  # statistics still computed (for an online monitor)
    with pytest.raises((OSError, NotADirectoryError)):
        arldiag.Collector(blocker / "run2", strict=True)


def test_full_disk_warns_once_then_recovers(tmp_path, monkeypatch):
    real = pq.write_table
    state = {"fail": True, "calls": 0}

    def flaky(*a, **k):
        state["calls"] += 1
        if state["fail"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*a, **k)

    monkeypatch.setattr(pq, "write_table", flaky)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        col = arldiag.Collector(tmp_path / "r", flush_every=1)
        for step in range(3):
            col.record_update(step, **_batch())
            col.record_step(step)
        col.flush()
        state["fail"] = False  # space is back: the kept rows are written at the next flush
        col.record_update(3, **_batch())
        col.record_step(3)
        col.close()
    msgs = [w for w in rec if "No space left" in str(w.message)]
    assert len(msgs) == 1
    run = arldiag.open_run(tmp_path / "r")
    assert [r[0] for r in run.sql("select step from steps order by step").fetchall()] == [0, 1, 2, 3]
    assert not list((tmp_path / "r").rglob("*.tmp")) or True  # a failed tmp may remain; readers ignore it


def test_strict_mode_raises_write_errors(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq, "write_table", boom)
    col = arldiag.Collector(tmp_path / "r", flush_every=1, strict=True)
    col.record_update(0, **_batch())
    with pytest.raises(RuntimeError, match="No space left"):
        col.record_step(0)
        col.flush()


def test_calls_after_close_warn_once_and_leave_the_run_as_it_was(tmp_path):
    col = arldiag.Collector(tmp_path / "r")
    col.record_update(0, **_batch())
    col.record_step(0, {"success_rate": 0.5})
    col.close()
    before = {p.name: p.stat().st_size for p in (tmp_path / "r").rglob("*") if p.is_file()}
    with pytest.warns(RuntimeWarning, match=r"record_update\(step=1\) after close\(\) is not recorded") as rec:
        assert col.record_update(1, **_batch()) == {}
        col.record_rollout(1, sample_ids=[0, 1, 2, 3], rewards=[1.0, 0.0, 1.0, 0.0])
        assert col.record_step(1, {"success_rate": 0.7}) == {}
    assert len([w for w in rec if "after close()" in str(w.message)]) == 1  # once, not per call
    after = {p.name: p.stat().st_size for p in (tmp_path / "r").rglob("*") if p.is_file()}
    assert after == before
    run = arldiag.open_run(tmp_path / "r")
    assert [r[0] for r in run.sql("select step from steps").fetchall()] == [0]
    strict = arldiag.Collector(tmp_path / "s", strict=True)
    strict.close()
    with pytest.raises(RuntimeError, match=r"record_step\(step=0\) after close\(\)"):
        strict.record_step(0)


def test_monitor_errors_do_not_kill_training(tmp_path):
    class Broken:
        def bind(self, col):
            pass

        def on_step(self, step, metrics):
            raise ZeroDivisionError("bug in user monitor")

    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with arldiag.Collector(tmp_path / "r", monitor=Broken()) as col:
            for s in range(3):
                col.record_update(s, **_batch())
                col.record_step(s)
    assert sum("bug in user monitor" in str(w.message) for w in rec) == 1
    assert arldiag.open_run(tmp_path / "r").count("steps_raw") == 3


WRITER = textwrap.dedent("""
    import sys, numpy as np, arldiag
    rng = np.random.default_rng(0)
    col = arldiag.Collector(sys.argv[1], flush_every=1, token_sample_rate=1.0)
    B, T = 256, 64
    step = 0
    while True:
        lpo = rng.normal(-1, 0.5, (B, T)).astype(np.float32)
        col.record_update(step, logp=lpo + 0.01, logp_old=lpo, advantages=rng.normal(size=B),
                          response_mask=np.ones((B, T), bool), sample_ids=np.arange(B) + step * B)
        col.record_step(step, {"grad_norm": 1.0})
        if step % 2:
            col.flush()  # synchronous: everything up to here is published
            print(step, flush=True)
        step += 1
""")


def test_sigkill_while_writing_leaves_a_readable_run(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(script), str(run_dir)], stdout=subprocess.PIPE, text=True)
    steps_done = 0
    deadline = time.monotonic() + 120
    while steps_done < 25 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        steps_done = int(line) + 1
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert steps_done >= 25, "writer subprocess did not get going"
    # every published file is a complete Parquet file
    for f in run_dir.rglob("*.parquet"):
        pq.read_metadata(f)
    run = arldiag.open_run(run_dir)
    steps = [r[0] for r in run.sql("select step from steps order by step").fetchall()]
    assert steps == list(range(len(steps)))            # a prefix: nothing in the middle lost
    assert len(steps) >= steps_done                     # every flushed step survived; only the tail is lost
    n_tok = run.sql("select count(*) from tokens").fetchall()[0][0]
    assert n_tok >= len(steps) * 256 * 64               # token parts are published before their step rows
    assert run.manifest["status"] == "running"


RANK_WRITER = textwrap.dedent("""
    import sys, numpy as np, arldiag
    root, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = np.random.default_rng(rank)
    col = arldiag.Collector(root, rank=rank, world_size=world, flush_every=3, flush_every_s=3600,
                            token_sample_rate=1.0)
    B, T = 32, 16
    step = 0
    while True:
        lpo = rng.normal(-1, 0.5, (B, T)).astype(np.float32)
        col.record_update(step, logp=lpo + 0.01, logp_old=lpo, advantages=rng.normal(size=B),
                          response_mask=np.ones((B, T), bool), sample_ids=np.arange(B) + (step * world + rank) * B)
        col.record_step(step, {"grad_norm": 1.0})
        if step % 4 == 3:
            col.flush()  # synchronous: everything up to here is published
            print(step, flush=True)
        step += 1
""")
B_RANK, T_RANK = 32, 16


def _start_ranks(tmp_path, world):
    script = tmp_path / "rank_writer.py"
    script.write_text(RANK_WRITER)
    run_dir = tmp_path / "run"
    procs = [subprocess.Popen([sys.executable, str(script), str(run_dir), str(r), str(world)],
                              stdout=subprocess.PIPE, text=True) for r in range(world)]
    return run_dir, procs


def _check_whole_steps(run, world):
    """Every (rank, step) visible has all its rows: B*T token rows and B sequences; step rows come after them."""
    per = run.sql("select rank, step, count(*) from tokens group by rank, step").fetchall()
    assert all(n == B_RANK * T_RANK for _, _, n in per), "a step's token rows are visible only in part"
    seqs = run.sql("select rank, step, count(*) from sequences group by rank, step").fetchall()
    assert all(n == B_RANK for _, _, n in seqs)
    with_tokens = {(r, s) for r, s, _ in per}
    raw = run.sql("select rank, step from steps_raw").fetchall()
    assert set(raw) <= with_tokens  # token parts are published before the step rows that count them
    return raw


def test_reader_while_ranks_append_never_fails_nor_sees_partial_rows(tmp_path):
    world = 2
    run_dir, procs = _start_ranks(tmp_path, world)
    try:
        for p in procs:  # wait for the first published steps (the manifest and parts exist)
            assert p.stdout.readline(), "writer subprocess died"
        run = arldiag.open_run(run_dir)
        seen, changes = 0, 0
        deadline = time.monotonic() + 60
        while (seen < 40 or changes < 5) and time.monotonic() < deadline:
            changes += run.refresh()
            raw = _check_whole_steps(run, world)
            n = run.sql("select count(*) from steps").fetchall()[0][0]
            assert n >= seen  # a reader never goes backwards
            seen = n
            # the merged steps view counts exactly the token rows of the ranks it merged
            tot = run.sql("select sum(n_tokens) from steps").fetchall()[0][0] or 0
            assert tot == len(raw) * B_RANK * T_RANK
        assert seen >= 40 and changes >= 5, "writers did not get going"
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_sigkill_at_random_points_of_a_multi_rank_run_loses_only_unflushed_tails(tmp_path):
    world = 3
    rng = np.random.default_rng(int(time.time()))  # random kill points; the seed is in the failure message
    seed = int(rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    run_dir, procs = _start_ranks(tmp_path, world)
    flushed = [-1] * world
    targets = [int(rng.integers(3, 40)) for _ in range(world)]  # flushes to wait for before each rank's kill
    try:
        for r, p in enumerate(procs):
            for _ in range(targets[r]):
                line = p.stdout.readline()
                if not line:
                    break
                flushed[r] = int(line)
            time.sleep(float(rng.uniform(0, 0.3)))  # past the flush: somewhere inside the unflushed tail
            os.kill(p.pid, signal.SIGKILL)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert min(flushed) >= 0, f"a writer did not get going (seed {seed})"
    for f in run_dir.rglob("*.parquet"):
        pq.read_metadata(f)  # every published part is a complete Parquet file
    run = arldiag.open_run(run_dir)
    raw = _check_whole_steps(run, world)
    for r in range(world):
        steps = sorted(s for rk, s in raw if rk == r)
        assert steps == list(range(len(steps))), f"rank {r} lost a step in the middle (seed {seed})"
        assert len(steps) >= flushed[r] + 1, f"rank {r} lost flushed steps (seed {seed})"


def test_a_full_steps_buffer_publishes_the_rows_of_its_steps_first(tmp_path, monkeypatch):
    import arldiag.store.writer as w

    monkeypatch.setitem(w.PART_ROWS, "steps", 2)  # the steps buffer fills long before the token buffer
    col = arldiag.Collector(tmp_path / "r", flush_every=1000, flush_every_s=3600, token_sample_rate=1.0)
    for step in range(2):
        col.record_update(step, sample_ids=np.arange(4) + 4 * step, **_batch())
        col.record_step(step)
    col.record_update(2, sample_ids=np.arange(4) + 8, **_batch())  # finalises step 1: the steps part goes out
    deadline = time.monotonic() + 30
    while not list((tmp_path / "r" / "steps").glob("*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.05)
    tok = sorted((tmp_path / "r" / "tokens").glob("*.parquet"))
    assert tok, "a steps part was published before the token rows of its steps"
    assert sorted(set(pq.read_table(tok).column("step").to_pylist())) == [0, 1]
    col.close()

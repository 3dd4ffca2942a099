"""Benchmark: `arldiag report` on a run with 10 M token rows (target: <= 30 s, HTML < 10 MB).

The run is synthetic and written with pyarrow straight into the store layout (run.json + <table>/rank00000-part*.
parquet, the writer's token encodings) so the setup takes seconds, not a Collector pass: 500 steps x 100 sequences x
200 tokens; from step 300 a growing share of negative-advantage sequences drifts to s_i ~ 0.67 and the run collapses
at step ~380. Step aggregates are computed from the same token arrays with numpy, so the steps view is consistent.

    python benchmarks/report_speed.py [--tokens 10000000] [--keep DIR]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from arldiag.schema import SCHEMA_VERSION, STEP_AGGS, arrow_schema
from arldiag.store.writer import parquet_options

B, T = 100, 200          # sequences per step, tokens per sequence
EPS_LOW, EPS_HIGH, DELTA = 0.2, 0.28, 0.223


def _table(name: str, cols: dict, n: int, extra: list[pa.Field] = ()) -> pa.Table:
    schema = arrow_schema(name)
    for f in extra:
        schema = schema.append(f)
    arrays = [pa.array(cols[f.name], type=f.type) if f.name in cols else pa.nulls(n, f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _chunk(steps: np.ndarray, rng: np.random.Generator) -> tuple[pa.Table, pa.Table, pa.Table]:
    """Token, sequence and raw step rows of the given steps."""
    S = steps.size
    step_seq = np.repeat(steps, B)                                               # [S*B]
    sid = step_seq * 1000 + np.tile(np.arange(B), S)                             # [S*B]
    adv = rng.standard_normal(S * B).astype(np.float32)                          # [S*B]
    share = np.clip((step_seq - 300) / 100.0, 0.0, 0.8)
    drift = np.where((adv < 0) & (rng.random(S * B) < share), -0.4, 0.0).astype(np.float32)
    lp_old = -rng.exponential(1.0, (S * B, T)).astype(np.float32)                # [S*B, T]
    lr = drift[:, None] + 0.05 * rng.standard_normal((S * B, T)).astype(np.float32)  # [S*B, T] lp - lp_old
    lp = lp_old + lr
    ent_level = np.where(step_seq < 300, 1.5, np.maximum(0.1, 1.5 - 0.01 * (step_seq - 300))).astype(np.float32)
    ent = ent_level[:, None] + 0.05 * rng.standard_normal((S * B, T)).astype(np.float32)
    r = np.exp(lr)                                                               # [S*B, T]
    k3 = r - lr - 1.0                                                            # r - log r - 1
    A = adv[:, None]
    low, high = r < 1 - EPS_LOW, r > 1 + EPS_HIGH
    tok_id = rng.integers(0, 50_000, (S * B, T)).astype(np.int32)
    n = S * B * T
    tokens = _table("tokens", {
        "step": np.repeat(step_seq, T), "update": np.zeros(n, np.int32), "rank": np.zeros(n, np.int32),
        "sample_id": np.repeat(sid, T), "pos": np.tile(np.arange(T, dtype=np.int32), S * B),
        "turn": np.full(n, -1, np.int16), "token_id": tok_id.ravel(), "token_id_rollout": tok_id.ravel(),
        "logp": lp.ravel(), "logp_old": lp_old.ravel(), "entropy": ent.ravel(),
        "advantage": np.repeat(adv, T), "log_ratio": lr.ravel(),
        "sampled": np.repeat(sid % 20 != 0, T)}, n)

    seq_lr = lr.mean(1)                                                          # [S*B]
    seq_r = np.exp(seq_lr)
    k3_sum = k3.sum(1)
    nalis = (adv < 0) & (seq_r < 1 - EPS_LOW)
    nalis_d = (adv < 0) & (seq_r < np.exp(-DELTA))
    p_succ = np.where(step_seq < 380, 0.2 + 0.5 * step_seq / 380, 0.02)
    success = rng.random(S * B) < p_succ
    fmt = rng.random(S * B) < np.where(step_seq < 380, 0.95, 0.1)
    texts = [f"<think>sample {i}</think><action>left</action>" for i in sid]
    seqs = _table("sequences", {
        "step": step_seq, "update": np.zeros(S * B, np.int32), "rank": np.zeros(S * B, np.int32),
        "sample_id": sid, "group_id": sid // 8, "trajectory_id": np.full(S * B, -1), "turn": np.full(S * B, -1,
                                                                                                  np.int16),
        "n_tokens": np.full(S * B, T, np.int32), "advantage": adv, "seq_log_ratio": seq_lr, "seq_ratio": seq_r,
        "log_ratio_min": lr.min(1), "log_ratio_max": lr.max(1), "tok_oob_low_frac": low.mean(1),
        "tok_oob_high_frac": high.mean(1), "ppo_kl": -seq_lr, "ppo_kl_k3_sum": k3_sum, "entropy_mean": ent.mean(1),
        "logp_mean": lp.mean(1), "neg_adv_low_is": nalis, "neg_adv_low_is_delta": nalis_d,
        "nonfinite": np.zeros(S * B, np.int32), "retok_mismatch": np.zeros(S * B, np.int32),
        "n_turns": np.ones(S * B, np.int16), "turn_entropy": np.zeros(S * B, np.float32),
        "reward": success.astype(np.float32), "format_valid": fmt, "truncated": np.zeros(S * B, bool),
        "success": success, "response_length": np.full(S * B, T, np.int32), "text": texts}, S * B)

    idx = np.searchsorted(steps, step_seq)                                       # [S*B] step index of each seq
    tsum = lambda x: np.bincount(idx, weights=x.sum(1) if x.ndim == 2 else x, minlength=S)  # noqa: E731
    aggs = {
        "n_updates": np.ones(S), "n_tok": np.full(S, B * T), "sum_ratio": tsum(r), "sum_log_ratio": tsum(lr),
        "sum_log_ratio_sq": tsum(lr ** 2), "max_abs_log_ratio": np.maximum.reduceat(np.abs(lr).max(1), np.arange(
            0, S * B, B)), "sum_ppo_kl": -tsum(lr), "sum_ppo_kl_k3": tsum(k3),
        "n_pg_clip": tsum((A > 0) & high | (A < 0) & low), "n_pg_clip_lower": np.zeros(S),
        "n_tok_low_neg": tsum(low & (A < 0)), "n_tok_low_pos": tsum(low & (A > 0)),
        "n_tok_high_neg": tsum(high & (A < 0)), "n_tok_high_pos": tsum(high & (A > 0)),
        "sum_logp": tsum(lp), "sum_adv_tok": tsum(np.broadcast_to(A, lr.shape)),
        "sum_adv_tok_sq": tsum(np.broadcast_to(A ** 2, lr.shape)), "sum_logp_adv": tsum(lp * A),
        "n_tok_ent": np.full(S, B * T), "sum_entropy": tsum(ent), "n_seq": np.full(S, B),
        "n_seq_adv_pos": tsum(adv > 0), "n_seq_adv_neg": tsum(adv < 0), "n_seq_adv_zero": np.zeros(S),
        "sum_seq_ratio": tsum(seq_r), "sum_seq_log_ratio": tsum(seq_lr), "sum_seq_log_ratio_sq": tsum(seq_lr ** 2),
        "min_seq_ratio": np.minimum.reduceat(seq_r, np.arange(0, S * B, B)),
        "max_seq_ratio": np.maximum.reduceat(seq_r, np.arange(0, S * B, B)),
        "n_seq_low_neg": tsum(nalis), "n_seq_low_pos": tsum((adv > 0) & (seq_r < 1 - EPS_LOW)),
        "n_seq_high_neg": tsum((adv < 0) & (seq_r > 1 + EPS_HIGH)),
        "n_seq_high_pos": tsum((adv > 0) & (seq_r > 1 + EPS_HIGH)),
        "n_nalis": tsum(nalis), "sum_nalis_ppo_kl_k3": tsum(np.where(nalis, k3_sum, 0.0)),
        "n_nalis_delta": tsum(nalis_d), "sum_nalis_delta_ppo_kl_k3": tsum(np.where(nalis_d, k3_sum, 0.0)),
        "n_roll": np.full(S, B), "n_roll_reward": np.full(S, B), "sum_reward": tsum(success.astype(float)),
        "sum_reward_sq": tsum(success.astype(float)), "n_format_known": np.full(S, B),
        "n_format_valid": tsum(fmt), "n_trunc_known": np.full(S, B), "n_truncated": np.zeros(S),
        "n_resp_len": np.full(S, B), "sum_resp_len": np.full(S, B * T), "max_resp_len": np.full(S, T),
        "min_resp_len": np.full(S, T), "n_traj": np.full(S, B), "n_traj_success": tsum(success),
    }
    k3_by_step = k3_sum.reshape(S, B)
    aggs["kl_top_share"] = k3_by_step.max(1) / k3_by_step.sum(1)  # top 1 % of 100 sequences = the largest one
    names = {a.name: a for a in STEP_AGGS}
    cols = {k: (v.astype(np.int64) if k.startswith("n_") else v.astype(np.float64)) for k, v in aggs.items()
            if k in names}
    grad = np.where(steps < 370, 1.0, 20.0) + 0.1 * rng.standard_normal(S)
    cols.update(step=steps.astype(np.int64), rank=np.zeros(S, np.int32),
                time=[dt.datetime.now(dt.timezone.utc)] * S,
                **{"m/success_rate": (aggs["n_traj_success"] / B).astype(np.float64), "m/grad_norm": grad})
    steps_t = _table("steps", cols, S, [pa.field("m/success_rate", pa.float64()), pa.field("m/grad_norm",
                                                                                               pa.float64())])
    return tokens, seqs, steps_t


def make_run(root: Path, n_tokens: int, seed: int = 0) -> Path:
    n_steps = max(1, n_tokens // (B * T))
    rng = np.random.default_rng(seed)
    for t in ("tokens", "sequences", "steps"):
        (root / t).mkdir(parents=True, exist_ok=True)
    for part, s0 in enumerate(range(0, n_steps, 50), start=1):
        tok, seq, st = _chunk(np.arange(s0, min(n_steps, s0 + 50)), rng)
        for name, tab in (("tokens", tok), ("sequences", seq), ("steps", st)):
            pq.write_table(tab, root / name / f"rank00000-part{part:06d}.parquet",
                           **parquet_options(name, tab.schema))
    manifest = {"schema_version": SCHEMA_VERSION, "run_id": "bench", "name": "bench-10m",
                "created": dt.datetime.now(dt.timezone.utc).isoformat(), "algorithm": "cispo",
                "config": {"algo": "cispo", "loss_agg": "token-mean", "adv_estimator": "grpo"},
                "clip": [EPS_LOW, EPS_HIGH], "seq_clip": [EPS_LOW, EPS_HIGH], "neg_adv_delta": DELTA,
                "dual_clip_c": 3.0, "token_sample_rate": 1.0, "collector_version": "bench", "host": "bench",
                "world_size": 1, "status": "finished"}
    (root / "run.json").write_text(json.dumps(manifest, indent=2))
    return root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=10_000_000, help="token rows (default 10 M)")
    ap.add_argument("--keep", help="write the run (and reports) here and keep them")
    args = ap.parse_args(argv)
    import arldiag
    from arldiag.report.cli import write_report

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="arldiag-report-bench-"))
    try:
        t0 = time.perf_counter()
        run_dir = make_run(root / "run", args.tokens)
        setup = time.perf_counter() - t0
        run = arldiag.open_run(run_dir)
        print(f"setup: {run.count('tokens'):,} token rows, {run.count('sequences'):,} sequences, "
              f"{run.count('steps'):,} steps written in {setup:.1f} s")
        t0 = time.perf_counter()
        from arldiag.detectors import detect

        detect(run)
        t_detect = time.perf_counter() - t0
        timings = {}
        for fmt in ("html", "md", "json"):
            out = root / f"report.{fmt}"
            t0 = time.perf_counter()
            write_report(str(run_dir), str(out), fmt=fmt, progress=False)
            timings[fmt] = (time.perf_counter() - t0, out.stat().st_size)
        print(f"detect alone: {t_detect:.1f} s")
        for fmt, (sec, size) in timings.items():
            print(f"report --format {fmt}: {sec:.1f} s ({sec / 30:.2f} of the 30 s target), {size / 1e6:.2f} MB")
        ok = timings["html"][0] <= 30 and timings["html"][1] < 10e6
        print("target met" if ok else "TARGET MISSED", "(html <= 30 s and < 10 MB)")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

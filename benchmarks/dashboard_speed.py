"""Dashboard speed on a big run: first render and callback times over a synthetic run with 10 M token rows.

The run is written with pyarrow directly in the store layout (run.json + <table>/rank00000-partNNNNNN.parquet), which
is much faster to set up than driving the Collector; its values are plausible, not a training run. Then:
- first render: create_app + GET / + layout + the overview callback, through Flask's test client (what a browser
  does on page load, JSON encoding included);
- every other view's callback, cold (cache empty) and warm (cached), also through the test client;
- a breakdown of the first render by calling the view functions directly.

Targets (issue 6): first render <= 3 s, callbacks < 1 s. Prints figures; asserts nothing.

    python benchmarks/dashboard_speed.py [--tokens 10000000] [--steps 500] [--out DIR] [--keep]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SEQ_PER_STEP = 1024
TOKENS_PER_SEQ = 200
STEPS_PER_PART = 10  # a part per 10 steps: a run publishing every 5 s at ~0.5 s per step


def _table(table: str, cols: dict) -> pa.Table:
    from arldiag.schema import arrow_schema

    schema = arrow_schema(table)
    n = len(next(iter(cols.values())))
    arrays = []
    for f in schema:
        v = cols.get(f.name)
        arrays.append(pa.nulls(n, f.type) if v is None else pa.array(v, type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _write(path: Path, table: str, part: int, t: pa.Table) -> None:
    d = path / table
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(t, d / f"rank00000-part{part:06d}.parquet", compression="zstd", use_dictionary=False,
                   row_group_size=256 * 1024)


def write_big_run(path: Path, n_tokens: int, n_steps: int, seed: int = 0) -> dict:
    """A run with ~n_tokens token rows over n_steps steps (1024 sequences per step, 3 turns each)."""
    from arldiag.schema import STEP_AGGS

    rng = np.random.default_rng(seed)
    tok_per_step = max(TOKENS_PER_SEQ, n_tokens // n_steps)
    kept_seq = tok_per_step // TOKENS_PER_SEQ  # sequences of a step whose token rows are kept
    path.mkdir(parents=True, exist_ok=True)
    manifest = {"schema_version": "1.0", "run_id": "bench", "name": path.name, "created": dt.datetime.now(
        dt.timezone.utc).isoformat(), "algorithm": "grpo", "config": {}, "clip": [0.2, 0.28], "seq_clip": [0.2, 0.28],
        "neg_adv_delta": 0.223, "dual_clip_c": 3.0, "token_sample_rate": kept_seq / SEQ_PER_STEP,
        "collector_version": "bench", "host": "bench", "world_size": 1, "status": "finished"}
    (path / "run.json").write_text(json.dumps(manifest))
    counts = {"tokens": 0, "sequences": 0, "turns": 0, "steps": 0}
    for part, s0 in enumerate(range(0, n_steps, STEPS_PER_PART), start=1):
        steps = np.arange(s0, min(s0 + STEPS_PER_PART, n_steps))
        ns = steps.size
        drift = 0.02 + 0.3 * (steps / n_steps) ** 4  # ratios widen late in the run (a collapse-like tail)
        # sequences: [ns * SEQ_PER_STEP]
        S = ns * SEQ_PER_STEP
        sstep = np.repeat(steps, SEQ_PER_STEP)
        sid = sstep * 10_000 + np.tile(np.arange(SEQ_PER_STEP), ns)
        adv = rng.normal(0, 1, S).astype(np.float32)
        slr = rng.normal(0, np.repeat(drift, SEQ_PER_STEP) / 4, S).astype(np.float32)
        k3 = (TOKENS_PER_SEQ * np.repeat(drift, SEQ_PER_STEP) ** 2 / 2 * rng.exponential(1, S)).astype(np.float32)
        sr = np.exp(slr)
        seq = {"step": sstep, "update": np.zeros(S, np.int32), "rank": np.zeros(S, np.int32), "sample_id": sid,
               "group_id": sid // 8, "trajectory_id": sid, "turn": np.full(S, -1, np.int16),
               "n_tokens": np.full(S, TOKENS_PER_SEQ, np.int32), "advantage": adv, "seq_log_ratio": slr,
               "seq_ratio": sr, "ppo_kl": -slr, "ppo_kl_k3_sum": k3, "neg_adv_low_is": (adv < 0) & (sr < 0.8),
               "neg_adv_low_is_delta": (adv < 0) & (sr < 0.8), "nonfinite": np.zeros(S, np.int32),
               "n_turns": np.full(S, 3, np.int16), "reward": (adv > 0).astype(np.float32),
               "format_valid": np.ones(S, bool), "success": adv > 0, "response_length": np.full(S, TOKENS_PER_SEQ)}
        _write(path, "sequences", part, _table("sequences", seq))
        # turns: 3 per sequence
        tsteps, tsid = np.repeat(sstep, 3), np.repeat(sid, 3)
        tlr = np.repeat(slr, 3) + rng.normal(0, 0.01, 3 * S).astype(np.float32)
        _write(path, "turns", part, _table("turns", {
            "step": tsteps, "update": np.zeros(3 * S, np.int32), "rank": np.zeros(3 * S, np.int32),
            "sample_id": tsid, "turn": np.tile(np.arange(3, dtype=np.int16), S),
            "n_tokens": np.full(3 * S, TOKENS_PER_SEQ // 3, np.int32), "advantage": np.repeat(adv, 3),
            "turn_log_ratio": tlr, "turn_ratio": np.exp(tlr)}))
        # tokens of the first kept_seq sequences of each step (top-KL ones would be kept too; position is enough)
        keep = (np.tile(np.arange(SEQ_PER_STEP), ns) < kept_seq)
        K = int(keep.sum()) * TOKENS_PER_SEQ
        ksid, kstep = np.repeat(sid[keep], TOKENS_PER_SEQ), np.repeat(sstep[keep], TOKENS_PER_SEQ)
        lr = (np.repeat(slr[keep], TOKENS_PER_SEQ)
              + rng.normal(0, 1, K).astype(np.float32) * np.repeat(drift, kept_seq * TOKENS_PER_SEQ)[:K])
        lp_old = -rng.gamma(2.0, 0.5, K).astype(np.float32)
        _write(path, "tokens", part, _table("tokens", {
            "step": kstep, "update": np.zeros(K, np.int32), "rank": np.zeros(K, np.int32), "sample_id": ksid,
            "pos": np.tile(np.arange(TOKENS_PER_SEQ, dtype=np.int32), K // TOKENS_PER_SEQ),
            "turn": np.tile(np.repeat(np.arange(3, dtype=np.int16), TOKENS_PER_SEQ // 3 + 1)[:TOKENS_PER_SEQ],
                            K // TOKENS_PER_SEQ),
            "token_id": rng.integers(0, 50_000, K, dtype=np.int32), "token_id_rollout": np.full(K, -1, np.int32),
            "logp": lp_old + lr, "logp_old": lp_old, "logp_rollout": lp_old, "logp_ref": lp_old - 0.01,
            "entropy": rng.gamma(2.0, 0.5, K).astype(np.float32),
            "advantage": np.repeat(adv[keep], TOKENS_PER_SEQ), "log_ratio": lr, "sampled": np.ones(K, bool)}))
        # raw step aggregates: plausible sums so the derived metrics are in range
        n_tok = float(SEQ_PER_STEP * TOKENS_PER_SEQ)
        aggs = {}
        for a in STEP_AGGS:
            if a.name.startswith("n_"):
                aggs[a.name] = np.full(ns, n_tok if "tok" in a.name else SEQ_PER_STEP, np.int64)
            else:
                aggs[a.name] = rng.normal(0, 1, ns) * n_tok * drift
        aggs.update(n_updates=np.ones(ns, np.int64), n_tok_low_neg=(n_tok * drift * 0.2).astype(np.int64),
                    sum_entropy=n_tok * (1.5 - steps / n_steps), n_traj_success=(SEQ_PER_STEP * (0.6 - 0.3 * drift))
                    .astype(np.int64), max_abs_log_ratio=drift * 8)
        cols = {"step": steps, "rank": np.zeros(ns, np.int32),
                "time": [dt.datetime.now(dt.timezone.utc)] * ns, **aggs}
        steps_t = _table("steps", cols)
        steps_t = steps_t.append_column("m/success_rate", pa.array(0.6 - drift, pa.float64()))
        steps_t = steps_t.append_column("m/grad_norm", pa.array(1 + 10 * drift, pa.float64()))
        _write(path, "steps", part, steps_t)
        counts["tokens"] += K
        counts["sequences"] += S
        counts["turns"] += 3 * S
        counts["steps"] += ns
    return counts


def _out_id(outputs: list[tuple[str, str]]) -> str:
    """Dash's id of a multi-output callback: ..a.prop...b.prop.."""
    return ".." + "...".join(f"{i}.{p}" for i, p in outputs) + ".."


def _post(client, outputs: list[tuple[str, str]], inputs: list[tuple[str, str, object]], changed: str) -> float:
    body = {"output": _out_id(outputs),
            "outputs": [{"id": i, "property": p} for i, p in outputs],
            "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
            "changedPropIds": [changed], "state": []}
    t = time.perf_counter()
    r = client.post("/_dash-update-component", json=body)
    dt_ = time.perf_counter() - t
    if r.status_code != 200:
        raise RuntimeError(f"callback {outputs} failed: {r.status_code} {r.data[:300]!r}")
    return dt_


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=10_000_000)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--out", type=Path, default=None, help="where to write the run (reused when it exists)")
    ap.add_argument("--keep", action="store_true", help="keep the generated run")
    args = ap.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="arldiag-dash-bench-"))
    run_dir = root / "big"
    if not (run_dir / "run.json").exists():
        t = time.perf_counter()
        counts = write_big_run(run_dir, args.tokens, args.steps)
        print(f"setup: wrote {counts} in {time.perf_counter() - t:.1f} s")
    try:
        return _measure(root, "big")
    finally:
        if not args.keep and args.out is None:
            shutil.rmtree(root, ignore_errors=True)


def _measure(root: Path, name: str) -> int:
    from arldiag.dashboards.app import create_app

    rows = []
    t0 = time.perf_counter()
    app = create_app(root)  # server start: imports Dash/plotly, builds callbacks (before any browser connects)
    client = app.server.test_client()
    t_start = time.perf_counter() - t0
    t0 = time.perf_counter()
    page = client.get("/").status_code
    layout_ok = client.get("/_dash-layout").status_code
    t_layout = time.perf_counter() - t0
    sel = [name]
    view = lambda tab: [("tabs", "value", tab), ("run-select", "value", sel), ("data-version", "data", 0)]  # noqa
    t_over = _post(client, [("view-overview", "style"), ("g-overview", "figure"), ("overview-note", "children")],
                   view("overview"), "tabs.value")
    first = time.perf_counter() - t0
    print(f"server start (imports + create_app): {t_start:.2f} s")
    print(f"first render (page + layout + overview callback, run opened on demand): {first:.2f} s "
          f"[page {page}/{layout_ok}, page+layout {t_layout:.2f} s, overview callback {t_over:.2f} s]  target <= 3 s")
    print(f"first render including server start: {first + t_start:.2f} s")
    src = app.arldiag_source
    run = src.get(name).run
    print(f"run: {run.count('tokens'):,} token rows, {run.count('sequences'):,} sequence rows, "
          f"{run.count('turns'):,} turn rows, {run.count('steps'):,} steps")

    step = 450 if 450 <= (src.cached(name, ("step_range",), lambda r: r.con.execute(
        "select max(step) from steps").fetchall()[0][0]) or 0) else 0
    calls = {
        "ratios (sequence heatmap + clip panels)": ([("view-ratios", "style"), ("g-ratios-heat", "figure"),
                                                     ("g-clipping", "figure")],
                                                    view("ratios")[:2] + [("ratio-level", "value", "sequences"),
                                                                          ("data-version", "data", 0)], "tabs.value"),
        "ratios (token heatmap over 10M rows)": ([("view-ratios", "style"), ("g-ratios-heat", "figure"),
                                                  ("g-clipping", "figure")],
                                                 view("ratios")[:2] + [("ratio-level", "value", "tokens"),
                                                                       ("data-version", "data", 0)],
                                                 "ratio-level.value"),
        "kl": ([("view-kl", "style"), ("g-kl", "figure")], view("kl"), "tabs.value"),
        "advantages": ([("view-advantages", "style"), ("g-advantages", "figure")], view("advantages"), "tabs.value"),
        "entropy": ([("view-entropy", "style"), ("g-entropy", "figure")], view("entropy"), "tabs.value"),
        "turns": ([("view-turns", "style"), ("g-turns-heat", "figure"), ("g-turns", "figure")], view("turns"),
                  "tabs.value"),
        "alerts (detect + timeline)": ([("view-alerts", "style"), ("g-timeline", "figure"), ("findings", "children"),
                                        ("alerts-table", "children")], view("alerts"), "tabs.value"),
        f"sequence table (step {step})": ([("view-sequences", "style"), ("seq-table", "children"),
                                           ("seq-info", "children")],
                                          [("tabs", "value", "sequences"), ("run-select", "value", sel),
                                           ("step-input", "value", step), ("seq-by", "value", "ppo_kl_k3_sum"),
                                           ("data-version", "data", 0)], "step-input.value"),
        "token view (one sequence)": ([("seq-header", "children"), ("token-spans", "children"),
                                       ("g-tokens", "figure")],
                                      [("seq-selected", "data", f"{step}:{step * 10_000}:0:0"),
                                       ("color-by", "value", "log_ratio")], "seq-selected.data"),
    }
    for label, (outs, ins, changed) in calls.items():
        if label.startswith("token view"):
            body_state = [{"id": "run-select", "property": "value", "value": sel}]
            t = time.perf_counter()
            r = client.post("/_dash-update-component", json={
                "output": _out_id(outs),
                "outputs": [{"id": i, "property": p} for i, p in outs],
                "inputs": [{"id": i, "property": p, "value": v} for i, p, v in ins],
                "changedPropIds": [changed], "state": body_state})
            cold = time.perf_counter() - t
            assert r.status_code == 200, r.data[:300]
            t = time.perf_counter()
            client.post("/_dash-update-component", json={
                "output": _out_id(outs),
                "outputs": [{"id": i, "property": p} for i, p in outs],
                "inputs": [{"id": i, "property": p, "value": v} for i, p, v in ins],
                "changedPropIds": [changed], "state": body_state})
            warm = time.perf_counter() - t
        else:
            cold = _post(client, outs, ins, changed)
            warm = _post(client, outs, ins, changed)
        rows.append((label, cold, warm))
    # live tick with nothing changed: the poll callback (one stat per file) answers 204
    t = time.perf_counter()
    client.post("/_dash-update-component", json={
        "output": "..data-version.data...run-select.options...status.children..",
        "outputs": [{"id": "data-version", "property": "data"}, {"id": "run-select", "property": "options"},
                    {"id": "status", "property": "children"}],
        "inputs": [{"id": "tick", "property": "n_intervals", "value": 1}],
        "changedPropIds": ["tick.n_intervals"], "state": [{"id": "data-version", "property": "data",
                                                           "value": src.version}]})
    rows.append(("live tick, no change", time.perf_counter() - t, float("nan")))
    print(f"{'callback':<45} {'cold s':>8} {'warm s':>8}   target < 1 s")
    for label, cold, warm in rows:
        print(f"{label:<45} {cold:8.3f} {warm:8.3f}")

    # breakdown of the first render's overview callback (fresh source, so nothing cached)
    from arldiag.dashboards import detectors_bridge, queries, views_series
    from arldiag.dashboards.source import RunSource

    fresh = RunSource(root)
    t = time.perf_counter()
    r2 = fresh.get(name).run
    t_open = time.perf_counter() - t
    t = time.perf_counter()
    queries.step_series(r2, views_series.metrics_of("overview"))
    t_series = time.perf_counter() - t
    t = time.perf_counter()
    _, note = detectors_bridge.timeline(r2)
    t_tl = time.perf_counter() - t
    t = time.perf_counter()
    found, reason = detectors_bridge.findings(r2)
    t_detect = time.perf_counter() - t
    print(f"overview breakdown: open_run {t_open:.3f} s, step series {t_series:.3f} s, alert_timeline {t_tl:.3f} s"
          + (f" ({note})" if note else ""))
    print(f"detect() alone, no warm-up: {t_detect:.3f} s for {len(found)} findings {reason}"
          "(the app computes it in the background after the overview, on a second connection)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

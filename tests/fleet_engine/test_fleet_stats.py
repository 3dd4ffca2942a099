"""`arldiag fleet-stats`: every statistic on Ray Data (partials merged part -> run -> fleet) equals one DuckDB query
over all runs (the local engine), and both equal the statistic computed directly with numpy from the token parts."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from arldiag.cli import main
from arldiag.fleetrun import stats as S


def _stats(capsys, root, stat, by, engine):
    assert main(["fleet-stats", str(root), "--stat", stat, "--by", by, "--json", "--engine", engine]) == 0
    return json.loads(capsys.readouterr().out)


def _tokens(fleet: Path) -> dict[str, dict[str, np.ndarray]]:
    """Every readable token part of the runs whose run.json reads, by run name, as float64 columns."""
    out = {}
    for rj in sorted(fleet.rglob("run.json")):
        try:
            name = json.loads(rj.read_text())["name"]
        except ValueError:
            continue
        cols: dict[str, list] = {}
        for p in sorted((rj.parent / "tokens").glob("*.parquet")):
            try:
                t = pq.read_table(p)
            except Exception:  # noqa: BLE001 - the truncated part: the reader leaves it out too
                continue
            for c in ("step", "log_ratio", "advantage", "logp_old", "logp_rollout"):
                cols.setdefault(c, []).append(t.column(c).to_numpy().astype(np.float64))
        out[name] = {c: np.concatenate(v) for c, v in cols.items()}
    return out


@pytest.fixture(scope="module")
def tokens(fleet):
    return _tokens(fleet)


def _close(a, b):
    """JSON values equal, floats to 1e-9 relative (sums of floats in another order)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def test_histogram_by_run_ray_equals_local_and_numpy(fleet, ray_local, capsys, tokens):
    local = _stats(capsys, fleet, "log_ratio_hist", "run", "local")
    on_ray = _stats(capsys, fleet, "log_ratio_hist", "run", "ray")
    assert on_ray == local  # integer counts: equal, not close
    assert local["runs"] == 53 and [s["run"] for s in local["skipped_runs"]] == ["damaged/run00"]
    assert local["skipped_parts"] == 1  # damaged/run01's truncated token part
    edges = np.array(local["groups"][0]["edges"])
    assert len(local["groups"]) == 53
    for g in local["groups"]:
        t = tokens[g["run"]]
        for sign, sel in (("neg", t["advantage"] < 0), ("pos", t["advantage"] > 0)):
            x = t["log_ratio"][sel & np.isfinite(t["log_ratio"])]
            inner = np.histogram(x[(x >= edges[0]) & (x < edges[-1])], bins=edges)[0]
            want = [int((x < edges[0]).sum())] + inner.tolist() + [int((x >= edges[-1]).sum())]
            assert g[sign] == want


def test_negative_advantage_low_is_share_by_algorithm(fleet, ray_local, capsys, tokens):
    local = _stats(capsys, fleet, "neg_adv_low_is_share", "algorithm", "local")
    assert _stats(capsys, fleet, "neg_adv_low_is_share", "algorithm", "ray") == local
    algo = {}
    for rj in fleet.rglob("run.json"):
        try:
            m = json.loads(rj.read_text())
        except ValueError:
            continue
        algo[m["name"]] = m["algorithm"]
    assert [g["algorithm"] for g in local["groups"]] == ["cispo", "grpo", "gspo"]
    for g in local["groups"]:
        neg = low = 0
        for name, t in tokens.items():
            if algo[name] == g["algorithm"]:
                a, x = t["advantage"], t["log_ratio"]
                neg += int((a < 0).sum())
                low += int(((a < 0) & (x < math.log(0.8))).sum())
        assert (g["n_neg"], g["n_low"]) == (neg, low) and g["share"] == pytest.approx(low / neg, rel=1e-12)
    assert 0 < local["groups"][0]["share"] < 0.5  # collapsing runs pile up low-IS negative samples


def test_kl_top1_share_by_step_and_fleet(fleet, ray_local, capsys, tokens):
    root = fleet / "sweep_b"
    local = _stats(capsys, root, "kl_top1_share", "step", "local")
    assert _close(_stats(capsys, root, "kl_top1_share", "step", "ray"), local)
    assert [g["step"] for g in local["groups"]] == list(range(60))
    for g in local["groups"][::15]:
        x = np.concatenate([t["log_ratio"][t["step"] == g["step"]] for name, t in tokens.items()
                            if int(name[3:]) >= 27])  # sweep_b: run27 .. run53
        k3 = np.sort(np.expm1(x) - x)[::-1]
        k = 0.01 * len(k3)
        exact = (k3[: int(k)].sum() + (k - int(k)) * k3[int(k)]) / k3.sum()
        assert g["n"] == len(x) and g["kl_k3_sum"] == pytest.approx(k3.sum(), rel=1e-9)
        assert g["top1_share"] == pytest.approx(exact, abs=0.01)  # bins of 0.002 in the log-ratio


def test_mismatch_tails_by_run(fleet, ray_local, capsys, tokens):
    local = _stats(capsys, fleet / "sweep_b", "mismatch_tails", "run", "local")
    assert _close(_stats(capsys, fleet / "sweep_b", "mismatch_tails", "run", "ray"), local)
    assert len(local["groups"]) == 27
    for g in local["groups"][::10]:
        t = tokens[g["run"]]
        m = np.abs(t["logp_old"] - t["logp_rollout"])
        assert g["n"] == len(m) and g["max_abs"] == m.max()
        for thr in S.MISMATCH_TAILS:
            assert g[f"share_over_{thr:g}"] == pytest.approx((m > thr).mean(), rel=1e-12)


def test_s3_fleet_stats_ray_equals_local(bucket, ray_local, capsys):
    local = _stats(capsys, bucket, "log_ratio_hist", "algorithm", "local")
    assert _stats(capsys, bucket, "log_ratio_hist", "algorithm", "ray") == local
    assert local["runs"] == 8 and local["skipped_parts"] == 1 and local["skipped_runs"][0]["run"] == "damaged/run00"


def test_merge_is_associative_on_hand_values():
    """Two parts of a run merged equal the partial of their rows together (the part -> run step)."""
    cols = {"log_ratio": np.array([-0.31, 0.01, 0.02, -2.0, np.nan]), "advantage": np.array([-1.0, 1, -1, -1, 1])}
    one = S.partial_of(S.STATS["neg_adv_low_is_share"], cols, np.array(["a"] * 5, dtype=object))
    assert one == {"a": [[3.0, 2.0], []]}  # 3 negative finite, of which -0.31 and -2.0 under log(0.8) = -0.223
    halves = [S.partial_of(S.STATS["log_ratio_hist"], {k: v[sl] for k, v in cols.items()}, np.zeros(len(cols["advantage"][sl]), int))
              for sl in (slice(0, 2), slice(2, 5))]
    whole = S.partial_of(S.STATS["log_ratio_hist"], cols, np.zeros(5, int))
    assert S.merge(S.merge({}, halves[0]), halves[1]) == whole
    res = S.finish(S.STATS["log_ratio_hist"], "step", whole)["groups"][0]
    assert res["n_neg"] == 3 and res["neg"][0] == 1 and res["neg"][1 + 13] == 1  # -2 underflows; -0.31 in [-0.35, -0.3), bin 13
    assert S.top_share([99, 1], [99.0, 10.0]) == pytest.approx(10 / 109)

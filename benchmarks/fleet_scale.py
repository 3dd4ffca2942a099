"""Fleet scale: the local engine against Ray with 1 and 2 workers over a root of synthetic runs (docs/scale.md).

    python benchmarks/fleet_scale.py [--runs 200] [--big-runs 2] [--big-tokens 10M] [--root DIR] [--out FILE]

Measured in one process, so the ratios compare like with like on the same machine and load:
  - `ls` (one replay per run) uncached on the local engine, then with the run summary cached (the second `ls`);
  - the cost per run of uncached `ls` as the fleet grows (25, 50, 100, all runs);
  - `ls` and `detect` on Ray with 1 and 2 workers (``ray.init(num_cpus=k)``), uncached; the Ray time includes
    starting Ray (what a command pays on a laptop; on a running cluster it joins instead);
  - `fleet-stats --stat log_ratio_hist --by algorithm` over every token row: one DuckDB query against Ray Data;
  - peak memory (VmHWM) of each Ray worker process, read from /proc before Ray shuts down.
The runs are ~N distinct synthetic runs (a fifth of them collapsing) copied under new names, plus ``--big-runs``
runs of ``--big-tokens`` token rows; writing 200 runs through the Collector would dominate the benchmark.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

DISTINCT = 10


def build(root: Path, runs: int, big_runs: int, big_tokens: int) -> None:
    from arldiag.synth import write_synth

    if (root / "done.json").exists() and json.loads((root / "done.json").read_text()) == [runs, big_runs, big_tokens]:
        return
    shutil.rmtree(root, ignore_errors=True)
    seeds = root.parent / (root.name + "_seeds")
    shutil.rmtree(seeds, ignore_errors=True)
    for i in range(DISTINCT):
        write_synth(seeds / f"s{i}", tokens=20_000, steps=300, max_len=32, seed=i, flush_every=50,
                    collapse_at=240 if i % 5 == 0 else None)
    if big_runs:
        write_synth(seeds / "big", tokens=big_tokens, steps=300, max_len=512, seed=99, flush_every=50)
    algos = ("grpo", "cispo", "gspo", "dapo")
    for n in range(runs):
        big = n < big_runs
        dst = root / f"run{n:03d}"
        shutil.copytree(seeds / ("big" if big else f"s{n % DISTINCT}"), dst)
        m = json.loads((dst / "run.json").read_text())
        m["name"], m["algorithm"] = dst.name, algos[n % len(algos)]
        (dst / "run.json").write_text(json.dumps(m))
    shutil.rmtree(seeds)
    (root / "done.json").write_text(json.dumps([runs, big_runs, big_tokens]))


def clear_cache(root: Path) -> None:
    for d in root.glob("*/.arldiag"):
        shutil.rmtree(d)


def timed(fn, *a, **k) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn(*a, **k)
    return time.perf_counter() - t, out


def worker_peaks_mb() -> list[float]:
    """Peak resident memory of this machine's Ray worker processes (their cmdline starts with ``ray::``)."""
    peaks = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            if not cmd.startswith(b"ray::"):
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks.append(int(line.split()[1]) / 1024)
        except OSError:
            continue
    return sorted(peaks, reverse=True)


def ls_and_detect_local(root: Path, n: int, res: dict) -> None:
    """Local `ls` (uncached, by fleet size, then cached) and `detect`; keeps rows and findings in ``res`` (``_rows``,
    ``_findings``) for the Ray runs to be compared with."""
    from arldiag.commands.detect import fleet_detect
    from arldiag.commands.ls import fleet_rows

    dirs = sorted(d for d in root.iterdir() if (d / "run.json").is_file())
    grow = {}
    for k in (25, 50, 100):
        if k < n:
            grow[k] = timed(fleet_rows, [str(d) for d in dirs[:k]], "local")[0] / k
    t_ls, rows = timed(fleet_rows, [str(root)], "local")
    grow[n] = t_ls / n
    res["ls_local_s_per_run_by_fleet_size"] = {k: round(v, 4) for k, v in grow.items()}
    res["ls_local_uncached_s"] = round(t_ls, 2)
    os.environ["ARLDIAG_SUMMARY_CACHE"] = "1"
    clear_cache(root)
    t_fill, _ = timed(fleet_rows, [str(root)], "local")
    t_hit, cached = timed(fleet_rows, [str(root)], "local")
    assert cached == rows, "cached rows differ from computed rows"
    res.update(ls_local_cache_fill_s=round(t_fill, 2), ls_local_cached_s=round(t_hit, 3),
               ls_local_cached_s_per_run=round(t_hit / n, 5))
    os.environ["ARLDIAG_SUMMARY_CACHE"] = "0"
    t_det, det = timed(fleet_detect, [str(root)], None, "local", False)
    res["detect_local_s"] = round(t_det, 2)
    res["_rows"], res["_findings"] = rows, [f.to_dict() for f in det[0]]


def main(argv=None) -> int:
    from arldiag.commands.detect import fleet_detect
    from arldiag.commands.fleet_stats import fleet_stats
    from arldiag.commands.ls import fleet_rows
    from arldiag.synth import parse_count

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--big-runs", type=int, default=2)
    p.add_argument("--big-tokens", default="10M")
    p.add_argument("--root", default="/tmp/arldiag_fleet_scale")
    p.add_argument("--out", default=None, help="write the figures as JSON here too")
    p.add_argument("--only", choices=("all", "stats"), default="all",
                   help="stats: only fleet-stats, local against Ray with 1 and 2 workers")
    a = p.parse_args(argv)
    root = Path(a.root)
    t_build, _ = timed(build, root, a.runs, a.big_runs, parse_count(a.big_tokens))
    n = a.runs
    res: dict = {"runs": n, "big_runs": a.big_runs, "big_tokens": parse_count(a.big_tokens), "cpus": os.cpu_count(),
                 "build_s": round(t_build, 1)}
    os.environ["ARLDIAG_SUMMARY_CACHE"] = "0"
    full = a.only == "all"
    if full:
        ls_and_detect_local(root, n, res)
    t_fs, fs_local = timed(fleet_stats, [str(root)], "log_ratio_hist", "algorithm", "local")
    res["fleet_stats_local_s"] = round(t_fs, 2)
    import ray

    for workers in (1, 2):
        t0 = time.perf_counter()
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        out = res[f"ray{workers}"] = {"init_s": round(time.perf_counter() - t0, 2)}
        if full:
            t_r, rrows = timed(fleet_rows, [str(root)], "ray")
            assert rrows == res["_rows"], "ray rows differ from local rows"
            t_rd, rdet = timed(fleet_detect, [str(root)], None, "ray", False)
            assert [f.to_dict() for f in rdet[0]] == res["_findings"]
            out.update(ls_s=round(t_r, 2), detect_s=round(t_rd, 2), ls_over_local=round(t_r / res["ls_local_uncached_s"], 2),
                       detect_over_local=round(t_rd / res["detect_local_s"], 2))
        t_rs, fs_ray = timed(fleet_stats, [str(root)], "log_ratio_hist", "algorithm", "ray")
        assert fs_ray == fs_local
        out.update(fleet_stats_s=round(t_rs, 2), fleet_stats_over_local=round(t_rs / t_fs, 2),
                   worker_peak_mb=[round(x) for x in worker_peaks_mb()[:4]])
        ray.shutdown()
    res.pop("_rows", None), res.pop("_findings", None)
    tokens = sum(sum(g["neg"]) + sum(g["pos"]) for g in fs_local["groups"])
    res["token_rows_with_advantage"] = tokens
    print(json.dumps(res, indent=2))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

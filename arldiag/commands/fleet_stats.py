"""`arldiag fleet-stats ROOT... --stat NAME --by step|run|algorithm [--engine local|ray]`: one token statistic
across every run under the roots (arldiag.fleetrun.stats: histograms of log-ratio by advantage sign, the
negative-advantage low-IS share, the KL top-1 % share, the mismatch tails).

The local engine answers with one DuckDB query over every run's token parts; the ray engine reduces each part to a
mergeable partial on Ray Data and merges them part -> run -> fleet, with the same numbers. A run whose run.json
cannot be read is left out (named on stderr); an unreadable part is left out as the reader leaves it out.
"""
from __future__ import annotations

import argparse
import json
import sys

from arldiag.fleetrun.engine import add_engine_argument, engine_name, get_engine
from arldiag.fleetrun.locate import locate_runs
from arldiag.fleetrun.stats import BYS, STATS, finish, get_stat, local_query, ray_partials
from arldiag.store.reader import CorruptPartWarning


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("root", nargs="+", help="folders of runs, run directories, globs or an s3:// URL")
    p.add_argument("--stat", required=True, choices=list(STATS), help="the statistic (docs/scale.md)")
    p.add_argument("--by", choices=BYS, default="run", help="group by step (across runs), run or algorithm")
    p.add_argument("--json", action="store_true", help="print JSON (default: a short table)")
    add_engine_argument(p)


def fleet_stats(roots, stat_name: str, by: str, engine: str | None = None) -> dict:
    """The statistic's JSON: {stat, by, groups: [{<by>: key, ...values}], runs, skipped_runs, skipped_parts}."""
    stat = get_stat(stat_name)
    refs = locate_runs(roots)
    good = [r for r in refs if r.manifest_error is None]
    skipped = [{"run": r.label, "error": r.manifest_error} for r in refs if r.manifest_error is not None]
    if not good:
        raise ValueError(f"no run could be read under {', '.join(map(str, roots))}")
    if engine_name(engine) == "ray":
        eng = get_engine("ray", progress=False)  # joins or starts Ray; Ray Data runs on it
        try:
            merged, bad_parts = ray_partials(good, stat, by)
        finally:
            eng.close()
    else:
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CorruptPartWarning)
            merged = local_query(good, stat, by)
        bad_parts = sorted({str(w.message) for w in caught  # the token parts left out (not a steps part's warning)
                            if issubclass(w.category, CorruptPartWarning) and "(table tokens;" in str(w.message)})
    out = finish(stat, by, merged)
    out.update(runs=len(good), skipped_runs=skipped, skipped_parts=len(bad_parts))
    return out


def main(args: argparse.Namespace) -> int:
    res = fleet_stats(args.root, args.stat, args.by, args.engine)
    for s in res["skipped_runs"]:
        print(f"arldiag fleet-stats: warning: {s['run']} left out: {s['error']}", file=sys.stderr)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{res['stat']} by {res['by']} over {res['runs']} runs")
    for g in res["groups"]:
        vals = {k: v for k, v in g.items() if k != res["by"] and not isinstance(v, list)}
        print(f"  {str(g[res['by']]):<28} " + "  ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in vals.items()))
    return 0

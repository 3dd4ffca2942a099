"""`arldiag info RUN`: the manifest and the row count of every table."""
from __future__ import annotations

import json

from arldiag.store.reader import open_run


def add_arguments(p) -> None:
    p.add_argument("run", help="run directory, a root of runs, or a glob")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def main(args) -> int:
    run = open_run(args.run)
    tables = ["steps", "sequences", "tokens", "turns", "groups", "alerts"]
    out = {}
    for name in run.names:
        counts = {t: int(run.con.execute(f"SELECT count(*) FROM {'steps_raw' if t == 'steps' else t} "
                                         "WHERE run = ?", [name]).fetchall()[0][0]) for t in tables}
        out[name] = {"path": str(run.paths[name]), "manifest": run.manifests[name], "rows": counts}
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    for name, info in out.items():
        m = info["manifest"]
        print(f"run {name}  ({info['path']})")
        for k in ("run_id", "schema_version", "algorithm", "created", "status", "clip", "seq_clip", "neg_adv_delta",
                  "token_sample_rate", "world_size", "collector_version", "host"):
            if k in m:
                print(f"  {k:<18} {m[k]}")
        if m.get("config"):
            print(f"  {'config':<18} {json.dumps(m['config'], default=str)[:300]}")
        print("  rows:")
        for t, n in info["rows"].items():
            print(f"    {t:<10} {n:>12,d}")
    return 0

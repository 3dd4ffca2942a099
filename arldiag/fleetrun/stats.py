"""Cross-run token statistics (`arldiag fleet-stats`): a declared set of statistics whose partials merge exactly,
computed part -> run -> fleet on Ray Data, or as one DuckDB query over every run (the local engine).

Every statistic is a vector of per-group sums (and a few maxima) over token rows. Each token emits one or more
(component, weight) pairs; a part's partial is the bincount of those pairs per group, partials add up (maxima take
the max), and the final numbers are computed from the merged vector. The emitters are written twice, in numpy (Ray
tasks) and in SQL (the local query), with the same arithmetic (a cast to DOUBLE, a subtraction, a division, a floor)
so bin assignments agree to the bit: counts are equal, sums of floats equal up to summation order.

Statistics (docs/scale.md):
  log_ratio_hist        histogram of token log-ratios (log pi - log pi_old), for advantage < 0 and > 0 apart
  neg_adv_low_is_share  share of negative-advantage tokens whose ratio is under 1 - eps (eps = 0.2)
  kl_top1_share         share of the k3 policy-update KL (e^x - 1 - x, x the log-ratio) carried by the top 1 % of
                        tokens, from a histogram of x (bins of 0.002): tokens of the boundary bin count pro rata
  mismatch_tails        training-inference mismatch |log pi_old - log pi_rollout|: shares over 0.1 / 0.5 / 1 and the
                        maximum
Groups (``--by``): step (across runs), run (the run's name) or algorithm (run.json's, "unknown" when absent).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from arldiag.store.location import is_url
from arldiag.store.reader import Run, read_manifest
from arldiag.store.verify import part_problem, superseded_parts

BYS = ("step", "run", "algorithm")
HIST_LO, HIST_W, HIST_N = -1.0, 0.05, 40          # log_ratio_hist: 40 bins over [-1, 1) + under/overflow
KL_LO, KL_W, KL_N = -2.0, 0.002, 2000             # kl_top1_share: bins of x over [-2, 2) + under/overflow
NALIS_EPS = 0.2
MISMATCH_TAILS = (0.1, 0.5, 1.0)


def _bin_np(x, lo: float, w: float, n: int):
    import numpy as np

    return np.clip(np.floor((x - lo) / w), -1, n).astype(np.int64) + 1  # 0: underflow, n + 1: overflow


def _bin_sql(col: str, lo: float, w: float, n: int) -> str:
    return f"(least(greatest(floor((CAST({col} AS DOUBLE) - ({lo!r})) / {w!r}), -1), {n}) + 1)"


@dataclass(frozen=True)
class Emitter:
    """Tokens passing ``where`` add ``weight`` to component ``comp`` (numpy over a dict of float64 columns, and SQL)."""
    where_np: Callable
    comp_np: Callable
    weight_np: Callable | None  # None: 1 per token (a count)
    where_sql: str
    comp_sql: str
    weight_sql: str | None


@dataclass(frozen=True)
class Stat:
    name: str
    columns: tuple[str, ...]   # token columns read (besides step)
    n_sum: int                 # components summed
    emitters: tuple[Emitter, ...]
    finish: Callable[[list, list], dict]
    max_np: Callable | None = None   # (columns, rows mask) -> values whose max is kept, None: no maximum
    max_where_sql: str = ""
    max_sql: str = ""
    doc: str = field(default="")


def _finite(*cols):
    import numpy as np

    def f(c):
        m = np.ones(len(c[cols[0]]), bool)
        for k in cols:
            m &= np.isfinite(c[k])
        return m
    return f


def _fin_sql(*cols) -> str:
    return " AND ".join(f"isfinite(CAST({k} AS DOUBLE))" for k in cols)


# ----------------------------------------------------------------------------------------------- log_ratio_hist
def _hist_finish(s: list, _m: list) -> dict:
    nb = HIST_N + 2
    return {"edges": [HIST_LO + i * HIST_W for i in range(HIST_N + 1)],
            "neg": [int(v) for v in s[:nb]], "pos": [int(v) for v in s[nb:2 * nb]],
            "n_neg": int(sum(s[:nb])), "n_pos": int(sum(s[nb:2 * nb]))}


_HIST = Stat(
    "log_ratio_hist", ("log_ratio", "advantage"), 2 * (HIST_N + 2),
    (Emitter(lambda c: _finite("log_ratio", "advantage")(c) & (c["advantage"] != 0),
             lambda c: _bin_np(c["log_ratio"], HIST_LO, HIST_W, HIST_N) + (c["advantage"] > 0) * (HIST_N + 2), None,
             f"{_fin_sql('log_ratio', 'advantage')} AND advantage <> 0",
             f"{_bin_sql('log_ratio', HIST_LO, HIST_W, HIST_N)} + CASE WHEN advantage > 0 THEN {HIST_N + 2} ELSE 0 END",
             None),),
    _hist_finish)


# --------------------------------------------------------------------------------------------- neg_adv_low_is
_LOW = math.log(1.0 - NALIS_EPS)


def _nalis_finish(s: list, _m: list) -> dict:
    n_neg, n_low = int(s[0]), int(s[1])
    return {"n_neg": n_neg, "n_low": n_low, "share": n_low / n_neg if n_neg else None, "eps": NALIS_EPS}


_NEG = lambda c: _finite("log_ratio", "advantage")(c) & (c["advantage"] < 0)  # noqa: E731
_NALIS = Stat(
    "neg_adv_low_is_share", ("log_ratio", "advantage"), 2,
    (Emitter(_NEG, lambda c: 0, None, f"{_fin_sql('log_ratio', 'advantage')} AND advantage < 0", "0", None),
     Emitter(lambda c: _NEG(c) & (c["log_ratio"] < _LOW), lambda c: 1, None,
             f"{_fin_sql('log_ratio', 'advantage')} AND advantage < 0 AND CAST(log_ratio AS DOUBLE) < {_LOW!r}",
             "1", None)),
    _nalis_finish)


# ---------------------------------------------------------------------------------------------- kl_top1_share
def _k3_np(c):
    import numpy as np

    x = c["log_ratio"]
    return np.expm1(x) - x


_K3_SQL = "(exp(CAST(log_ratio AS DOUBLE)) - 1 - CAST(log_ratio AS DOUBLE))"


def top_share(counts: list, sums: list, q: float = 0.01) -> float | None:
    """Share of the total carried by the top ``q`` of the items, from per-bin counts and sums: bins from the largest
    mean down, the bin that crosses q * n counted pro rata."""
    n, total = sum(counts), sum(sums)
    if n <= 0 or total <= 0:
        return None
    want = q * n
    order = sorted((i for i, k in enumerate(counts) if k > 0), key=lambda i: sums[i] / counts[i], reverse=True)
    got, top = 0.0, 0.0
    for i in order:
        take = min(counts[i], want - got)
        top += sums[i] * take / counts[i]
        got += take
        if got >= want:
            break
    return top / total


def _kl_finish(s: list, _m: list) -> dict:
    nb = KL_N + 2
    counts, sums = s[:nb], s[nb:2 * nb]
    return {"n": int(sum(counts)), "kl_k3_sum": float(sum(sums)), "top1_share": top_share(counts, sums)}


_KL = Stat(
    "kl_top1_share", ("log_ratio",), 2 * (KL_N + 2),
    (Emitter(_finite("log_ratio"), lambda c: _bin_np(c["log_ratio"], KL_LO, KL_W, KL_N), None,
             _fin_sql("log_ratio"), _bin_sql("log_ratio", KL_LO, KL_W, KL_N), None),
     Emitter(_finite("log_ratio"), lambda c: _bin_np(c["log_ratio"], KL_LO, KL_W, KL_N) + KL_N + 2, _k3_np,
             _fin_sql("log_ratio"), f"{_bin_sql('log_ratio', KL_LO, KL_W, KL_N)} + {KL_N + 2}", _K3_SQL)),
    _kl_finish)


# --------------------------------------------------------------------------------------------- mismatch_tails
def _mis_np(c):
    import numpy as np

    return np.abs(c["logp_old"] - c["logp_rollout"])


_MIS_SQL = "abs(CAST(logp_old AS DOUBLE) - CAST(logp_rollout AS DOUBLE))"


def _mis_finish(s: list, m: list) -> dict:
    n = int(s[0])
    out: dict[str, Any] = {"n": n}
    for i, t in enumerate(MISMATCH_TAILS):
        out[f"share_over_{t:g}"] = s[1 + i] / n if n else None
    out["max_abs"] = m[0] if n else None
    return out


_MF = _finite("logp_old", "logp_rollout")
_MIS = Stat(
    "mismatch_tails", ("logp_old", "logp_rollout"), 1 + len(MISMATCH_TAILS),
    (Emitter(_MF, lambda c: 0, None, _fin_sql("logp_old", "logp_rollout"), "0", None),)
    + tuple(Emitter(lambda c, t=t: _MF(c) & (_mis_np(c) > t), lambda c, i=i: 1 + i, None,
                    f"{_fin_sql('logp_old', 'logp_rollout')} AND {_MIS_SQL} > {t!r}", str(1 + i), None)
            for i, t in enumerate(MISMATCH_TAILS)),
    _mis_finish, max_np=_mis_np, max_where_sql=_fin_sql("logp_old", "logp_rollout"), max_sql=_MIS_SQL)

STATS: dict[str, Stat] = {s.name: s for s in (_HIST, _NALIS, _KL, _MIS)}


def get_stat(name: str) -> Stat:
    if name not in STATS:
        raise ValueError(f"--stat: unknown statistic {name!r}; choose from {', '.join(STATS)}")
    return STATS[name]


# ------------------------------------------------------------------------------------------------- partials
Partial = dict  # {group key: [sums (list of n_sum floats), maxima (list)]}


def partial_of(stat: Stat, cols: dict, groups) -> Partial:
    """The partial of token rows ``cols`` (name -> float64 array) whose group keys are ``groups`` (an array, or one
    key for every row)."""
    import numpy as np

    out: Partial = {}
    n = len(next(iter(cols.values()))) if cols else 0
    if n == 0:
        return out
    if np.ndim(groups) == 0:  # one key for the whole part (--by run or algorithm): no sort of n keys
        keys, gidx = np.array([groups], dtype=object), np.zeros(n, dtype=np.int64)
    else:
        keys, gidx = np.unique(groups, return_inverse=True)
    sums = np.zeros(len(keys) * stat.n_sum)
    for e in stat.emitters:
        m = e.where_np(cols)
        if not m.any():
            continue
        comp = np.broadcast_to(np.asarray(e.comp_np(cols)), m.shape)[m]
        w = None if e.weight_np is None else np.asarray(e.weight_np(cols), dtype=float)[m]
        sums += np.bincount(gidx[m] * stat.n_sum + comp, weights=w, minlength=len(sums))
    sums = sums.reshape(len(keys), stat.n_sum)
    maxima = np.full(len(keys), -np.inf)
    if stat.max_np is not None:
        m = _finite(*stat.columns)(cols)
        np.maximum.at(maxima, gidx[m], stat.max_np(cols)[m])
    for i, k in enumerate(keys.tolist()):
        out[k] = [sums[i].tolist(), [float(maxima[i])] if stat.max_np is not None else []]
    return out


def merge(into: Partial, other: Partial) -> Partial:
    """``into`` += ``other`` (sums add, maxima take the max); returns ``into``."""
    for k, (s, m) in other.items():
        if k not in into:
            into[k] = [list(s), list(m)]
        else:
            a = into[k]
            a[0] = [x + y for x, y in zip(a[0], s)]
            a[1] = [max(x, y) for x, y in zip(a[1], m)]
    return into


def finish(stat: Stat, by: str, merged: Partial) -> dict:
    """The command's JSON: one entry per group, sorted by key."""
    groups = []
    for k in sorted(merged, key=lambda v: (v is None, v)):
        s, m = merged[k]
        groups.append({by: k, **stat.finish(s, [None if v == -math.inf else v for v in m])})
    return {"stat": stat.name, "by": by, "groups": groups}


# --------------------------------------------------------------------------------------- one part (Ray tasks)
def token_parts(path: str) -> list[str]:
    """The published token parts of a run (local folder or URL), as the reader lists them."""
    from pathlib import Path

    if is_url(path):
        import fsspec

        fs, p = fsspec.core.url_to_fs(path)
        proto = path.split("://", 1)[0]
        try:
            return sorted(f"{proto}://{x.lstrip('/')}" for x in fs.glob(f"{p.rstrip('/')}/tokens/*.parquet"))
        except FileNotFoundError:
            return []

    d = Path(path) / "tokens"
    if not d.is_dir():
        return []
    old = superseded_parts(d)
    return sorted(str(p) for p in d.iterdir() if p.name.endswith(".parquet") and p.name not in old)


def part_partial(item: dict) -> dict:
    """The partial of one token part: ``item`` holds part, run, algorithm, stat, by. An unreadable part (the reader
    leaves it out too) yields no rows and names why."""
    import numpy as np
    import pyarrow.parquet as pq

    stat = get_stat(item["stat"])
    fs = None
    f = item["part"]
    if is_url(f):
        import fsspec

        fs, f = fsspec.core.url_to_fs(f)
    why = part_problem(f, fs)
    if why is not None:
        return {"run": item["run"], "partial": {}, "error": f"{item['part']}: {why}"}
    fh = fs.open(f, "rb") if fs is not None else open(f, "rb")
    with fh:
        pf = pq.ParquetFile(fh)
        present = set(pf.schema_arrow.names)
        want = [c for c in ("step",) + stat.columns if c in present]
        t = pf.read(columns=want)
    n = t.num_rows
    cols = {c: (t.column(c).to_numpy(zero_copy_only=False).astype(np.float64) if c in present
                else np.full(n, np.nan)) for c in stat.columns}
    by = item["by"]
    if by == "step":
        groups = t.column("step").to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        groups = item["run"] if by == "run" else (item["algorithm"] or "unknown")
    return {"run": item["run"], "partial": partial_of(stat, cols, groups), "error": None}


# --------------------------------------------------------------------------------------------- local: DuckDB
def local_query(refs, stat: Stat, by: str) -> Partial:
    """The merged vector of every group from one DuckDB query over the runs' token views (arldiag.open_run)."""
    from pathlib import Path

    if not refs:
        return {}
    urls = [r for r in refs if is_url(r.path)]
    if urls and len(urls) != len(refs):
        raise ValueError("fleet-stats --engine local: roots must be all local folders or all URLs")
    fs = None
    if urls:
        import fsspec

        fs = fsspec.core.url_to_fs(urls[0].path)[0]
        strip = lambda u: fsspec.core.url_to_fs(u)[1]  # noqa: E731
        manifests = {r.name: read_manifest(strip(r.path), fs) for r in refs}
        run = Run({r.name: r.path for r in refs}, manifests, fs=fs)
    else:  # the runs by the names the Ray path gives them (locate_runs), broken ones already left out
        run = Run({r.name: Path(r.path) for r in refs}, {r.name: read_manifest(Path(r.path)) for r in refs})
    try:
        algo = {r.name: (r.algorithm or "unknown") for r in refs}
        key = {"step": "CAST(step AS BIGINT)", "run": "run", "algorithm": "algo"}[by]
        run.con.execute("CREATE OR REPLACE TEMP TABLE fleet_algo (name VARCHAR, algo VARCHAR)")
        run.con.executemany("INSERT INTO fleet_algo VALUES (?, ?)", list(algo.items()))
        src = "(SELECT t.*, a.algo FROM tokens t LEFT JOIN fleet_algo a ON t.run = a.name)"
        arms = [f"SELECT {key} AS g, CAST({e.comp_sql} AS BIGINT) AS c, "
                f"{'CAST(1 AS DOUBLE)' if e.weight_sql is None else e.weight_sql} AS w FROM {src} WHERE {e.where_sql}"
                for e in stat.emitters]
        q = f"SELECT g, c, sum(w) FROM ({' UNION ALL '.join(arms)}) GROUP BY g, c"
        out: Partial = {}
        for g, c, w in run.con.execute(q).fetchall():
            out.setdefault(g, [[0.0] * stat.n_sum, [-math.inf] if stat.max_np is not None else []])[0][int(c)] = w
        if stat.max_np is not None:
            for g, mx in run.con.execute(f"SELECT {key}, max({stat.max_sql}) FROM {src} WHERE {stat.max_where_sql} "
                                         "GROUP BY 1").fetchall():
                out.setdefault(g, [[0.0] * stat.n_sum, [-math.inf]])[1][0] = float(mx)
        return out
    finally:
        run.close()


# --------------------------------------------------------------------------------------------- Ray Data
def ray_partials(refs, stat: Stat, by: str) -> tuple[Partial, list[str]]:
    """Partials of every token part on Ray Data (one row per part, read and reduced inside the task: memory per
    task is one part), merged part -> run -> fleet here. Returns (merged, unreadable parts)."""
    import json

    import ray

    items = [{"part": p, "run": r.name, "algorithm": r.algorithm, "stat": stat.name, "by": by}
             for r in refs for p in token_parts(r.path)]
    if not items:
        return {}, []
    import logging

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ds = ray.data.from_items(items, override_num_blocks=min(len(items), 200))
    for name in list(logging.root.manager.loggerDict):  # Ray Data's per-dataset INFO lines would drown the output
        if name.startswith("ray.data"):
            logging.getLogger(name).setLevel(logging.ERROR)
    rows = ds.map(_partial_row).take_all()
    per_run: dict[str, Partial] = {}
    errors = []
    for row in rows:
        res = json.loads(row["result"])
        if res["error"]:
            errors.append(res["error"])
        merge(per_run.setdefault(res["run"], {}), _unkey(res["partial"]))
    fleet: Partial = {}
    for name in sorted(per_run):
        merge(fleet, per_run[name])
    return fleet, sorted(errors)


def _partial_row(row: dict) -> dict:
    # Ray Data rows hold columns of one type; the partial travels as its JSON text (keys of any type)
    import json

    res = part_partial(row)
    res["partial"] = [[k, v] for k, v in res["partial"].items()]
    return {"result": json.dumps(res)}


def _unkey(pairs) -> Partial:
    return {(int(k) if isinstance(k, (int, float)) and not isinstance(k, bool) else k): v for k, v in pairs}

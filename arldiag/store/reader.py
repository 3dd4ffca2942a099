"""Read a run store (or many) through DuckDB views.

``open_run`` accepts a run directory, a root holding run directories, a glob, a list of those, or an fsspec URL
(``memory://``, ``s3://`` ... when fsspec and the filesystem are installed). Every view has a leading ``run``
column; ``steps`` merges the raw per-(step, rank) aggregates exactly and derives the metrics of schema.STEP_METRICS
with the SQL evaluator (the Python twin is schema.derive_step_metrics).

DuckDB only ever sees published ``*.parquet`` files (parts are renamed into place by the writer), so a run that is
still being written reads consistently; ``refresh()`` picks up new parts.
"""
from __future__ import annotations

import glob as _glob
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any, Iterable

from arldiag.schema import SCHEMA_VERSION, STEP_AGGS, STEP_METRICS, TABLES, USER_METRIC_PREFIX, arrow_schema, metric_sql
from arldiag.store.verify import part_problem, superseded_parts

_SAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


class SchemaVersionError(ValueError):
    pass


class RunStoreError(ValueError):
    """A run store that cannot be read as it is (a broken run.json, ...); the message names the file."""


class CorruptPartWarning(UserWarning):
    """A Parquet part that cannot be read was left out; the message names the file and what was lost."""


def _major(v: str) -> int:
    return int(str(v).split(".")[0])


def read_manifest(path: Path, fs=None) -> dict:
    p = f"{path}/run.json"
    try:
        if fs is not None:
            with fs.open(p, "r") as fh:
                m = json.load(fh)
        else:
            with open(p) as fh:
                m = json.load(fh)
    except json.JSONDecodeError as exc:
        raise RunStoreError(f"{p} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                            "a run.json is written atomically, so it was edited or copied partially") from None
    except UnicodeDecodeError as exc:
        raise RunStoreError(f"{p} is not a text JSON file ({exc.reason})") from None
    if not isinstance(m, dict):
        raise RunStoreError(f"{p} holds a JSON {type(m).__name__}, not the run manifest object")
    v = m.get("schema_version", "0.0")
    if _major(v) > _major(SCHEMA_VERSION):
        raise SchemaVersionError(
            f"{p}: run store schema {v} is newer than this arldiag reads ({SCHEMA_VERSION}); "
            f"upgrade arldiag (pip install -U arldiag) to read it")
    return m


def resolve_run_dirs(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Run directories (holding run.json) named by paths, roots or globs, in a stable order."""
    found: list[Path] = []
    for p in paths:
        s = str(p)
        cands = [Path(x) for x in sorted(_glob.glob(s))] if any(ch in s for ch in "*?[") else [Path(s)]
        if not cands:
            raise FileNotFoundError(f"no run matches {s!r}")
        for c in cands:
            if (c / "run.json").is_file():
                found.append(c)
            elif c.is_dir():
                sub = sorted(q.parent for q in c.rglob("run.json"))
                if not sub:
                    raise FileNotFoundError(f"{c} holds no run (no run.json found under it)")
                found.extend(sub)
            elif c.exists():
                raise FileNotFoundError(f"run path {c} is not a run: a run is a directory holding run.json "
                                        "(or a folder of such directories)")
            else:
                raise FileNotFoundError(f"run path {c} does not exist")
    out, seen = [], set()
    for f in found:
        r = f.resolve()
        if r not in seen:
            seen.add(r)
            out.append(f)
    return out


class Run:
    """One or several runs behind DuckDB views (see module doc)."""

    def __init__(self, paths: dict[str, Any], manifests: dict[str, dict], con=None, fs=None):
        import duckdb

        self.paths = paths
        self.manifests = manifests
        self.fs = fs
        self.con = con or duckdb.connect(":memory:")
        if fs is not None:
            self.con.register_filesystem(fs)
        self._files: dict[str, dict[str, list[str]]] = {}
        self._columns: dict[str, list[str]] = {}
        self._checked: dict[tuple, str | None] = {}  # (file, size) -> why it is unreadable, None when fine
        self.skipped_parts: dict[str, str] = {}  # file -> what was lost (warned once)
        self.refresh(force=True)

    # ------------------------------------------------------------------ public
    @property
    def names(self) -> list[str]:
        return list(self.paths)

    @property
    def manifest(self) -> dict:
        return self.manifests[self.names[0]]

    def sql(self, query: str, params: Any = None):
        return self.con.execute(query, params) if params is not None else self.con.sql(query)

    def df(self, query: str):
        return self.con.sql(query).df()

    def columns(self, table: str) -> list[str]:
        if table not in self._columns:
            self._columns[table] = [r[0] for r in self.con.sql(f"DESCRIBE {table}").fetchall()]
        return self._columns[table]

    def has_column(self, table: str, col: str) -> bool:
        """True when the column exists and holds at least one non-null value."""
        if col not in self.columns(table):
            return False
        return bool(self.con.execute(f'SELECT count("{col}") FROM {table}').fetchall()[0][0])

    def count(self, table: str) -> int:
        return int(self.con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0])

    def subset(self, name: str) -> "Run":
        if name not in self.paths:
            raise KeyError(f"no run named {name!r}; runs: {self.names}")
        return Run({name: self.paths[name]}, {name: self.manifests[name]}, fs=self.fs)

    def refresh(self, force: bool = False) -> bool:
        """Re-scan the parts on disk; re-create the views when files appeared. Returns True when changed."""
        # Tables are listed in the reverse of the writer's publication order (steps after tokens at each flush):
        # a step row this scan sees was published after its token, sequence and group rows, which the later
        # listings then see too, so a snapshot never holds a step without its rows.
        files = {name: {t: self._readable(t, self._list(path, t)) for t in reversed(TABLES)}
                 for name, path in self.paths.items()}
        if not force and files == self._files:
            return False
        self._files = files
        self._columns = {}
        for name, path in self.paths.items():
            try:
                self.manifests[name] = read_manifest(path, self.fs)
            except (OSError, ValueError):
                pass
        for t in TABLES:
            self._create_view("steps_raw" if t == "steps" else t, t)
        self._create_steps_view()
        return True

    def close(self) -> None:
        self.con.close()

    # ------------------------------------------------------------------ internals
    def _readable(self, table: str, files: list[str]) -> list[str]:
        """The parts whose Parquet footer reads; the others are left out with one warning each, so one truncated
        file (a copy cut short, a full disk outside the writer's atomic rename) costs its rows, not the run."""
        out = []
        for f in files:
            try:
                size = self.fs.size(f) if self.fs is not None else os.path.getsize(f)
            except OSError:
                continue  # removed since listing (compaction)
            key = (f, size)
            if key not in self._checked:
                self._checked[key] = part_problem(f, self.fs)
            why = self._checked[key]
            if why is None:
                out.append(f)
            elif f not in self.skipped_parts:
                self.skipped_parts[f] = f"table {table}: {why}"
                warnings.warn(f"skipping unreadable part {f} (table {table}; {why}); the rest of the run is read",
                              CorruptPartWarning, stacklevel=2)
        return out

    def _list(self, path, table: str) -> list[str]:
        if self.fs is not None:
            proto = str(path).split("://", 1)[0] + "://" if "://" in str(path) else ""
            self.fs.invalidate_cache(f"{path}/{table}")  # s3fs caches listings: refresh() must see new parts
            try:
                return sorted(proto + p.lstrip("/") if proto else p
                              for p in self.fs.glob(f"{path}/{table}/*.parquet"))
            except FileNotFoundError:
                return []
        d = Path(path) / table
        if not d.is_dir():
            return []

        old = superseded_parts(d)  # left by an interrupted compaction: their rows are also in the merged part
        return sorted(str(p) for p in d.iterdir() if p.name.endswith(".parquet") and p.name not in old)

    def _empty_select(self, table: str) -> str:
        cols = [f'CAST(NULL AS {_sql_type(f.type)}) AS "{f.name}"' for f in arrow_schema(table)]
        return f"SELECT {', '.join(cols)} WHERE false"

    def _create_view(self, view: str, table: str) -> None:
        parts = []
        for name in self.paths:
            files = self._files[name][table]
            lit = "'" + name.replace("'", "''") + "'"
            if files:
                src = f"read_parquet([{', '.join(_lit(f) for f in files)}], union_by_name = true)"
                parts.append(f"SELECT {lit} AS run, *{self._missing_columns(src, table)} FROM {src}")
            else:
                parts.append(f"SELECT {lit} AS run, * FROM ({self._empty_select(table)})")
        self.con.execute(f"CREATE OR REPLACE VIEW {view} AS " + " UNION ALL BY NAME ".join(parts))

    def _missing_columns(self, src: str, table: str) -> str:
        """Schema migration on read: a column of the current schema that a run's parts lack (the run was written
        before the column existed, schema.MIGRATIONS) is read as a typed NULL, so every view has the same columns
        whichever writer version wrote each run, and the derived step metrics of a missing aggregate are NULL."""
        present = {r[0] for r in self.con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
        return "".join(f', CAST(NULL AS {_sql_type(f.type)}) AS "{f.name}"' for f in arrow_schema(table)
                       if f.name not in present)

    def _create_steps_view(self) -> None:
        raw_cols = [r[0] for r in self.con.sql("DESCRIBE steps_raw").fetchall()]
        user = [c for c in raw_cols if c.startswith(USER_METRIC_PREFIX)]
        merge = {"sum": "sum", "max": "max", "min": "min"}
        agg_sql = [f'{merge[a.merge]}("{a.name}") AS "{a.name}"' for a in STEP_AGGS]
        # user metrics: ranks usually log the same value; the mean is the natural merge
        agg_sql += [f'avg("{c}") AS "{c}"' for c in user]
        user_names = {c[len(USER_METRIC_PREFIX):]: c for c in user}
        # A trainer metric with the name of a derived one (e.g. an imported run's `entropy`) fills it where arldiag
        # recorded nothing, so detectors read it; the trainer's own value is also kept as `user/<name>`.
        derived = [f'coalesce({metric_sql(m)}, "{user_names[m.name]}") AS "{m.name}"' if m.name in user_names
                   else f'{metric_sql(m)} AS "{m.name}"' for m in STEP_METRICS]
        names = {m.name for m in STEP_METRICS}
        user_sql = []
        for n, c in user_names.items():
            alias = n if n not in names and n not in ("run", "step", "time") else f"user/{n}"
            user_sql.append(f'"{c}" AS "{alias}"')
        self.con.execute(
            "CREATE OR REPLACE VIEW steps AS WITH merged AS (SELECT run, step, max(time) AS time, "
            + ", ".join(agg_sql) + " FROM steps_raw GROUP BY run, step) SELECT run, step, time, "
            + ", ".join(derived + user_sql) + " FROM merged ORDER BY run, step")


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _sql_type(t) -> str:
    import pyarrow as pa

    return ("BIGINT" if t == pa.int64() else "INTEGER" if t == pa.int32() else "SMALLINT" if t == pa.int16()
            else "FLOAT" if t == pa.float32() else "DOUBLE" if t == pa.float64() else "BOOLEAN" if t == pa.bool_()
            else "TIMESTAMPTZ" if pa.types.is_timestamp(t) else "VARCHAR")


def _unique_names(dirs: list, manifests: list[dict]) -> list[str]:
    names, used = [], {}
    for d, m in zip(dirs, manifests):
        base = _SAFE.sub("_", str(m.get("name") or Path(str(d)).name)) or "run"
        n = base
        if n in used:
            used[base] += 1
            n = f"{base}-{used[base]}"
        used.setdefault(base, 1)
        names.append(n)
    return names


def open_run(path: str | os.PathLike | Iterable[str | os.PathLike], **kw) -> Run:
    """Open one run, several runs, or every run under a root, as DuckDB views (see the module doc)."""
    if isinstance(path, (str, os.PathLike)) and "://" in str(path) and not str(path).startswith("file://"):
        return _open_fsspec(str(path))
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    if not paths:
        raise ValueError("open_run: no run path given")
    dirs = resolve_run_dirs(paths)
    manifests = [read_manifest(d) for d in dirs]
    names = _unique_names(dirs, manifests)
    return Run(dict(zip(names, dirs)), dict(zip(names, manifests)), **kw)


def _open_fsspec(url: str) -> Run:
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"open_run({url!r}) needs fsspec (pip install fsspec)") from exc
    fs, root = fsspec.core.url_to_fs(url)
    proto = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    if fs.exists(f"{root}/run.json"):
        dirs = [root]
    else:
        dirs = sorted(str(Path(p).parent) for p in fs.glob(f"{root}/**/run.json"))
        if not dirs:
            raise FileNotFoundError(f"no run (run.json) under {url}")
    manifests = [read_manifest(d, fs) for d in dirs]
    names = _unique_names(dirs, manifests)
    full = {n: (d if "://" in d else f"{proto}://{d.lstrip('/')}" if proto != "file" else d) for n, d in
            zip(names, dirs)}
    return Run(full, dict(zip(names, manifests)), fs=fs)

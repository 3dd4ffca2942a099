"""Runs under a root (discovered by arldiag.views.runs): opening (read-only, via arldiag.open_run), change detection
and a small query cache.

Why a cache keyed by file state: a live dashboard re-renders on every refresh tick, but a run's Parquet files change
only when the trainer flushes. A run's *signature* (number, total size and newest mtime of its files) changes exactly
when a file is published (the store publishes atomically by rename), so cached query results stay valid until then.
DuckDB connections are not safe for concurrent use from Flask's request threads, so each run has a lock.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from arldiag.dashboards.security import resolve_run
from arldiag.views.runs import MAX_DEPTH, TABLE_DIRS, discover_runs, run_signature  # noqa: F401 (re-exported)
import arldiag


@dataclass
class OpenRun:
    name: str
    path: Path
    run: Any                       # arldiag.store.reader.Run
    signature: tuple
    lock: threading.RLock = field(default_factory=threading.RLock)
    cache: "OrderedDict[tuple, Any]" = field(default_factory=OrderedDict)
    pending: dict = field(default_factory=dict)  # key -> Future of a background warm-up


class RunSource:
    """The runs under one root, opened lazily and refreshed only when their files change."""

    def __init__(self, root: Path | str, cache_size: int = 64, opener: Callable[[Path], Any] | None = None):
        root = Path(root)
        # a root that does not exist yet is fine: the dashboard is started before the trainer writes its first run
        # (every scan then finds no run until it appears); a file is never a root of runs
        if root.exists() and not root.is_dir():
            raise ValueError(f"root must be a directory of runs, got the file {str(root)!r}")
        self.root = root.resolve()
        self.cache_size = cache_size
        self._opener = opener
        self._runs: dict[str, OpenRun] = {}
        self._side: dict[str, OpenRun] = {}  # second connections, used only by background warm-ups
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._names: list[str] = discover_runs(self.root)
        self.version = 0  # bumped whenever any open run (or the list of runs) changed

    # ---------------------------------------------------------------- discovery / opening
    def names(self, rescan: bool = False) -> list[str]:
        if rescan:
            self._names = discover_runs(self.root)
        return list(self._names)

    def valid(self, names: list[str]) -> list[str]:
        """The names (in order) that resolve to runs inside the root; others are dropped."""
        out = []
        for n in names:
            try:
                if n in self._runs or resolve_run(self.root, n):
                    out.append(n)
            except (ValueError, OSError):
                continue
        return out

    def get(self, name: str) -> OpenRun:
        """The open run called ``name`` (a relative name sent by the browser); ValueError if it is not a run."""
        with self._lock:
            if name in self._runs:
                return self._runs[name]
        path = resolve_run(self.root, name)
        opener = self._opener or _default_opener
        run = opener(path)
        orun = OpenRun(name=name, path=path, run=run, signature=run_signature(path))
        with self._lock:
            return self._runs.setdefault(name, orun)

    def poll(self) -> bool:
        """Re-scan the root and the open runs; refresh the runs whose files changed. True if anything changed."""
        changed = False
        names = discover_runs(self.root)
        if names != self._names:
            self._names, changed = names, True
        with self._lock:
            runs = list(self._runs.values())
        for orun in runs:
            sig = run_signature(orun.path)
            if sig != orun.signature:
                with orun.lock:
                    orun.run.refresh()
                    orun.signature = sig
                    orun.cache.clear()
                changed = True
        if changed:
            self.version += 1
        return changed

    # ---------------------------------------------------------------- cached queries
    def cached(self, name: str, key: tuple, compute: Callable[[Any], Any]) -> Any:
        """``compute(run)`` under the run's lock, memoised until the run's files change."""
        orun = self.get(name)
        fut = orun.pending.get(key)
        if fut is not None:  # a warm-up is computing it on the side connection: wait rather than compute twice
            try:
                fut.result(timeout=60)
            except Exception:  # noqa: BLE001 - fall back to computing it here
                pass
        with orun.lock:
            if key in orun.cache:
                orun.cache.move_to_end(key)
                return orun.cache[key]
            value = compute(orun.run)
            orun.cache[key] = value
            while len(orun.cache) > self.cache_size:
                orun.cache.popitem(last=False)
            return value


    def warm(self, name: str, key: tuple, compute: Callable[[Any], Any]) -> Future | None:
        """Compute ``compute(run)`` in the background on a second connection to the run and cache it, so a slow
        view (the detectors over a big run) is ready when its tab is opened. Needs no lock on the main connection,
        so callbacks are not blocked meanwhile. The result is dropped if the run changed in the meantime."""
        orun = self.get(name)
        with orun.lock:
            if key in orun.cache or key in orun.pending:
                return None
            sig = orun.signature
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="arldiag-warm")
            fut = self._pool.submit(self._warm_job, orun, key, compute, sig)
            orun.pending[key] = fut
        return fut

    def _warm_job(self, orun: OpenRun, key: tuple, compute: Callable[[Any], Any], sig: tuple) -> None:
        try:
            side = self._side.get(orun.name)
            if side is None:
                run = (self._opener or _default_opener)(orun.path)
                side = self._side[orun.name] = OpenRun(orun.name, orun.path, run, sig)
            elif side.signature != sig:
                side.run.refresh()
                side.signature = sig
            value = compute(side.run)
            with orun.lock:
                if orun.signature == sig and key not in orun.cache:
                    orun.cache[key] = value
        finally:
            orun.pending.pop(key, None)


def _default_opener(path: Path):
    return arldiag.open_run(path)

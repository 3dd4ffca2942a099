"""Run discovery under a root folder (the dashboard's run list) and the file signature that says a run changed.

Two ways to name runs exist on purpose: ``arldiag.store.reader.resolve_run_dirs`` resolves what a user typed on the
command line (paths, globs; an error for a path that is no run), while ``discover_runs`` lists what lives under a
served root for a browser: depth-limited, never following symlinks (a link cannot pull in a run from outside the
root), most recently written first.
"""
from __future__ import annotations

import os
from pathlib import Path

MAX_DEPTH = 3  # run dirs are found at most this deep under the root (root/sweep/seed0/run.json is depth 2)
TABLE_DIRS = ("tokens", "sequences", "turns", "groups", "steps", "alerts", "actions")


def discover_runs(root: Path | str) -> list[str]:
    """Relative POSIX names of the run dirs (dirs holding run.json) under ``root``, most recently written first."""
    root = Path(root)
    found: list[tuple[float, str]] = []

    def walk(d: Path, depth: int) -> None:
        try:
            entries = list(os.scandir(d))
        except OSError:
            return
        if any(e.name == "run.json" and e.is_file(follow_symlinks=False) for e in entries):
            rel = d.relative_to(root).as_posix()
            # last written: run.json or a table folder (a folder's mtime changes when a part is renamed into it)
            found.append((max(_mtime(d / n) for n in ("run.json", *TABLE_DIRS)), rel))
            return  # a run's table folders are not runs
        if depth >= MAX_DEPTH:
            return
        for e in entries:
            if e.is_dir(follow_symlinks=False) and not e.name.startswith("."):
                walk(Path(e.path), depth + 1)

    walk(root, 0)
    return [name for _, name in sorted(found, key=lambda t: (-t[0], t[1]))]


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def run_signature(path: Path) -> tuple:
    """(files, bytes, newest mtime_ns) over run.json and the table folders: changes whenever a file is published
    (the store publishes atomically by rename), so a cached view of the run stays valid until it changes."""
    n = size = newest = 0
    for sub in (path, *(path / t for t in TABLE_DIRS)):
        try:
            it = os.scandir(sub)
        except OSError:
            continue
        with it:
            for e in it:
                if e.name.endswith(".parquet") or e.name == "run.json":
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    n += 1
                    size += st.st_size
                    newest = max(newest, st.st_mtime_ns)
    return (n, size, newest)

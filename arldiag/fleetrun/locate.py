"""The runs under one or several roots: local folders, globs, or fsspec URLs (``s3://bucket/sweep``).

Each run is a ``RunRef``: the path a task opens (a local folder or a full URL, so a Ray worker on another node
opens the same object), the label a fleet table shows (its folder relative to its root, ``run_label``)
and the run name ``open_run`` would give it among all the runs listed (run.json's ``name``, made unique in order),
so per-run results join into the JSON a single ``open_run`` over the same roots gives.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from arldiag.store.location import is_url
from arldiag.store.reader import _unique_names, read_manifest, resolve_run_dirs


@dataclass(frozen=True)
class RunRef:
    path: str    # local folder or full URL of the run (holds run.json)
    label: str   # the fleet table's name: the folder relative to its root
    name: str    # the run's name among all runs listed (what open_run over the same roots names it)
    root: str    # the root it was found under
    algorithm: str | None = None  # run.json's algorithm (fleet-stats --by algorithm)
    manifest_error: str | None = None  # why run.json could not be read (its task reports it)


def _manifest(path: str, fs=None) -> dict:
    try:
        return read_manifest(path, fs)
    except (OSError, ValueError) as exc:
        return {"__error__": f"{type(exc).__name__}: {exc}"}  # a broken run.json: its task reports it


def _url_runs(url: str) -> list[tuple[str, str, dict]]:
    """(full URL, label, manifest) of the runs at or under an fsspec URL."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    proto = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    root = root.rstrip("/")
    if fs.exists(f"{root}/run.json"):
        dirs = [root]
    else:
        dirs = sorted(p.rsplit("/", 1)[0] for p in fs.glob(f"{root}/**/run.json"))
        if not dirs:
            raise FileNotFoundError(f"no run (run.json) under {url}")
    out = []
    for d in dirs:
        full = d if "://" in d else f"{proto}://{d.lstrip('/')}"
        rel = d[len(root):].strip("/")
        out.append((full, rel or d.rsplit("/", 1)[-1], _manifest(d, fs)))
    return out


def run_label(root: Path, path: str | os.PathLike | None, name: str) -> str:
    """A run's folder relative to the root (the name the dashboard gives it); the run's name when it is the root."""
    try:
        rel = Path(path).resolve().relative_to(root.resolve()).as_posix()
    except (TypeError, ValueError, OSError):
        return name
    return name if rel in ("", ".") else rel


def _local_runs(root: str) -> list[tuple[str, str, dict]]:
    base = Path(root)
    return [(str(d), run_label(base, d, d.name), _manifest(str(d))) for d in resolve_run_dirs([root])]


def locate_runs(roots: Iterable[str | os.PathLike]) -> list[RunRef]:
    """Every run under ``roots`` in a stable order (each root's runs sorted, roots in order, duplicates once).
    Raises FileNotFoundError naming a root that is not a run and holds none."""
    roots = [str(r) for r in ([roots] if isinstance(roots, (str, os.PathLike)) else roots)]
    if not roots:
        raise ValueError("no root of runs given")
    found, seen = [], set()
    for r in roots:
        for path, label, manifest in (_url_runs(r) if is_url(r) else _local_runs(r)):
            key = path if is_url(path) else str(Path(path).resolve())
            if key not in seen:
                seen.add(key)
                found.append((path, label, manifest, r))
    names = _unique_names([f[0] for f in found], [f[2] for f in found])
    return [RunRef(path=p, label=lab, name=n, root=r, algorithm=m.get("algorithm"), manifest_error=m.get("__error__"))
            for (p, lab, m, r), n in zip(found, names)]

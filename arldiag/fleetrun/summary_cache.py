"""The run summary (a fleet row, arldiag.fleet) cached in the run folder, ``RUN/.arldiag/summary.json``.

A row costs one replay of the run's steps through the detectors (about 0.2 s for a few hundred steps); a fleet
table of 1,000 runs would take minutes. The cache makes a row that did not change cost one directory listing: the
key is every published part's name, size and mtime, run.json's size and mtime, the arldiag code that computed the
row and the configuration it applied (settings file and ARLDIAG_* environment). A new part, a rewritten run.json
(a run that finished), an edited arldiag.toml or an edited detector all miss the cache and recompute.

Local run folders only (an object store's listing costs as much as the replay saves); a folder that cannot be
written (a read-only share) simply never caches. ARLDIAG_SUMMARY_CACHE=0 turns it off.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import arldiag
from arldiag.schema import TABLES
from arldiag.settings import config_path
from arldiag.store.location import write_json_atomic

CACHE_DIR = ".arldiag"
CACHE_FILE = "summary.json"
ENV_SWITCH = "ARLDIAG_SUMMARY_CACHE"
# environment that selects how rows are computed, not what they hold: not part of the key
_NOT_KEYED = {ENV_SWITCH, "ARLDIAG_ENGINE", "ARLDIAG_RAY_ADDRESS", "ARLDIAG_DEBUG"}
_CODE_STAMP: str | None = None


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def _code_stamp() -> str:
    """The arldiag version and the newest mtime of its modules (once per process): a row computed by other
    detector code is not reused."""
    global _CODE_STAMP
    if _CODE_STAMP is None:
        pkg = Path(arldiag.__file__).parent
        newest = 0
        for dirpath, _, files in os.walk(pkg):
            for f in files:
                if f.endswith((".py", ".json")):
                    try:
                        newest = max(newest, os.stat(os.path.join(dirpath, f)).st_mtime_ns)
                    except OSError:
                        pass
        _CODE_STAMP = f"{arldiag.__version__}:{newest}"
    return _CODE_STAMP


def _config_stamp() -> list:
    path = config_path()
    stamp: list[Any] = [None]
    if path:
        try:
            st = os.stat(path)
            stamp = [str(Path(path).resolve()), st.st_size, st.st_mtime_ns]
        except OSError:
            stamp = [path]
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("ARLDIAG_") and k not in _NOT_KEYED)
    return stamp + [env]


def run_key(run_dir: str | os.PathLike) -> str | None:
    """The cache key of a local run folder (a hex digest), None when the folder cannot be listed."""
    d = Path(run_dir)
    entries: list[Any] = []
    try:
        st = os.stat(d / "run.json")
        entries.append(["run.json", st.st_size, st.st_mtime_ns])
        for t in TABLES:
            sub = d / t
            if not sub.is_dir():
                continue
            with os.scandir(sub) as it:
                for e in it:
                    if e.name.endswith(".parquet"):
                        s = e.stat()
                        entries.append([f"{t}/{e.name}", s.st_size, s.st_mtime_ns])
    except OSError:
        return None
    entries.sort()
    blob = json.dumps([_code_stamp(), _config_stamp(), entries], default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def key_of(run_dir: str | os.PathLike, key: str | None = None) -> str | None:
    """``key`` (else the run's current ``run_key``) when the run's row may be cached: caching on and a local folder
    (rows of s3:// runs are not cached); None otherwise."""
    if not enabled() or "://" in str(run_dir):
        return None
    return key or run_key(run_dir)


def load(run_dir: str | os.PathLike, key: str | None = None) -> dict | None:
    """The cached row of a run when its key still matches, else None."""
    key = key_of(run_dir, key)
    if key is None:
        return None
    try:
        with open(Path(run_dir) / CACHE_DIR / CACHE_FILE) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("row"), dict):
        return None
    return data["row"]


def store(run_dir: str | os.PathLike, row: dict, key: str | None = None) -> bool:
    """Write the row under the run's current key (atomically); False when it could not be written."""
    key = key_of(run_dir, key)
    if key is None:
        return False
    try:
        (Path(run_dir) / CACHE_DIR).mkdir(exist_ok=True)
        write_json_atomic(Path(run_dir) / CACHE_DIR / CACHE_FILE, {"key": key, "row": row})
    except OSError:
        return False  # a read-only run folder: rows are recomputed, nothing else changes
    return True

"""Integrity of a run store: unreadable parts, orphaned parts, leftover temporary files (``arldiag verify``).

The writer publishes parts by rename, so a healthy store holds only complete ``rank*-part*.parquet`` files. What
breaks that comes from outside the writer: a copy cut short (``rsync`` interrupted, a full disk on the copy), a
compaction killed between its rename and its clean-up (its journal names the superseded parts), a crash between
writing a ``*.tmp`` and renaming it. The reader leaves the first two out (``part_problem``, ``superseded_parts``);
``verify_run`` lists all of them.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from arldiag.schema import TABLES
from arldiag.store.writer import PART_RE

JOURNAL = ".compact.json"  # the journal of arldiag.store.compact (which imports it from here)


def _rows_from_footer(f, fs=None) -> int | None:
    import pyarrow.parquet as pq

    try:
        if fs is not None:
            with fs.open(f, "rb") as fh:
                return pq.read_metadata(fh).num_rows
        return pq.read_metadata(f).num_rows
    except Exception:  # noqa: BLE001 - any failure means the footer is unreadable
        return None


def part_problem(f, fs=None, full: bool = False) -> str | None:
    """Why Parquet part ``f`` cannot be read (naming what is lost), or None when it reads.

    Without ``full`` only the footer is read (what a truncated file loses first; cheap enough for every refresh);
    with ``full`` every column chunk is decoded too (``arldiag verify``)."""
    import pyarrow.parquet as pq

    try:
        size = fs.size(f) if fs is not None else os.path.getsize(f)
    except OSError as exc:
        return f"cannot stat ({exc.strerror or exc})"
    try:
        fh = fs.open(f, "rb") if fs is not None else open(f, "rb")
        with fh:
            meta = pq.read_metadata(fh)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid/OSError for cut files
        return f"unreadable Parquet footer, {size:,d} bytes, row count unknown ({_short(exc)})"
    if not full:
        return None
    try:
        fh = fs.open(f, "rb") if fs is not None else open(f, "rb")
        with fh:
            # one thread: verification needs no parallel decode, and pyarrow's pool threads still busy at exit
            # aborted the process once under load ("terminate called without an active exception")
            pq.ParquetFile(fh).read(use_threads=False)
    except Exception as exc:  # noqa: BLE001
        return f"corrupt data, {meta.num_rows:,d} rows lost ({_short(exc)})"
    return None


def _short(exc: Exception) -> str:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return msg.split(". ")[0][:160]  # pyarrow's first sentence says what is wrong


def superseded_parts(table_dir: Path) -> set[str]:
    """Names of parts a compaction merged into a part that was published before the crash that kept them: their
    rows are in the merged part too, so reading them would count rows twice."""
    j = Path(table_dir) / JOURNAL
    if not j.is_file():
        return set()
    try:
        job = json.loads(j.read_text())
        if (Path(table_dir) / job["new"]).exists():
            return {str(n) for n in job["old"]}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return set()


@dataclass(frozen=True)
class Problem:
    kind: str      # "damaged", "orphaned" or "leftover"
    path: str
    detail: str

    def line(self) -> str:
        return f"{self.kind:<9} {self.path}: {self.detail}"


def verify_run(path: str | os.PathLike) -> list[Problem]:
    """Every problem of run directory ``path`` (see the module doc); [] for a healthy store."""
    root = Path(path)
    out: list[Problem] = []
    for t in TABLES:
        d = root / t
        if not d.is_dir():
            continue
        old = superseded_parts(d)
        for p in sorted(d.iterdir()):
            if p.name.endswith(".tmp"):
                out.append(Problem("leftover", str(p), "temporary file of an interrupted write or compaction "
                                                       "(never read; the next `arldiag compact` removes it)"))
            elif p.name in old:
                out.append(Problem("orphaned", str(p), "superseded by the part an interrupted compaction merged it "
                                                       "into (not read; `arldiag compact` removes it)"))
            elif p.name.endswith(".parquet"):
                if not PART_RE.search(p.name):
                    out.append(Problem("orphaned", str(p), "not named like a part (rankNNNNN-partNNNNNN.parquet); "
                                                           "read anyway"))
                why = part_problem(str(p), full=True)
                if why:
                    out.append(Problem("damaged", str(p), f"table {t}: {why}"))
    for p in sorted(root.glob("*.tmp")):
        out.append(Problem("leftover", str(p), "temporary file of an interrupted manifest write"))
    return out

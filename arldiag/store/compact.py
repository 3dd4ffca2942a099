"""Compaction: merge a finished run's many small parts into one part per table and rank.

A run writes one part per table every ``flush_every`` steps or ``flush_every_s`` seconds, so a 200-step run holds
4 (fast steps) to 200 (steps slower than 5 s) small files per table; each carries its own footer and statistics
(a `steps` part with ~100 columns is mostly footer). Merging them keeps every row and shrinks the run (the cispo
sample run: steps 761 -> 89 KB, groups 64 -> 7 KB).

Crash safety: the merged part is written as ``.tmp`` and fsynced, a journal ``.compact.json`` names the old parts
and the new one, the merged part is renamed into place, the old parts are removed, then the journal. A crash
before the rename leaves the old parts (the ``.tmp`` is removed on the next call); after it, the next call finishes
the removal from the journal, so rows are never lost and never end up twice once compaction completes.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from arldiag.schema import TABLES
from arldiag.store.location import write_json_atomic
from arldiag.store.reader import read_manifest
from arldiag.store.verify import JOURNAL
from arldiag.store.writer import PART_RE, parquet_options


def _recover(d: Path) -> None:
    """Finish or roll back a compaction of table folder ``d`` that a crash interrupted."""
    j = d / JOURNAL
    if j.exists():
        job = json.loads(j.read_text())
        if (d / job["new"]).exists():
            for name in job["old"]:
                (d / name).unlink(missing_ok=True)
        j.unlink()
    for tmp in d.glob("*.parquet.tmp"):
        tmp.unlink()


ARCHIVE_COMPRESSION = {"compression": "zstd", "compression_level": 15}
SORT_KEYS = ("step", "update", "sample_id", "turn", "pos")  # the row identity of every table, coarse to fine


def _sorted_by_keys(data):
    """Rows in key order: the writer emits each update's rows in mini-batch (shuffled) order, so sorted id columns
    delta-encode to almost nothing (sequences 38 -> about 31 bytes per row on the sample runs). Readers never rely
    on row order."""
    keys = [(k, "ascending") for k in SORT_KEYS if k in data.column_names]
    return data.sort_by(keys) if keys else data


def compact_table(d: Path) -> tuple[int, int, int, int]:
    """Merge the parts of each rank in table folder ``d``. Returns (parts before, parts after, bytes before,
    bytes after)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _recover(d)
    by_rank: dict[int, list[tuple[int, Path]]] = {}
    for p in d.glob("*.parquet"):
        m = PART_RE.search(p.name)
        if m:
            by_rank.setdefault(int(m.group(1)), []).append((int(m.group(2)), p))
    n0 = n1 = b0 = b1 = 0
    for rank, parts in sorted(by_rank.items()):
        parts.sort()
        size = sum(p.stat().st_size for _, p in parts)
        n0, b0 = n0 + len(parts), b0 + size
        if len(parts) == 1:
            n1, b1 = n1 + 1, b1 + size
            continue
        data = pa.concat_tables([pq.read_table(p) for _, p in parts], promote_options="default")
        data = _sorted_by_keys(data)
        # the last part number: a resumed run appends after it (writer.next_part_numbers)
        final = d / f"rank{rank:05d}-part{parts[-1][0] + 1:06d}.parquet"
        tmp = final.with_name(final.name + ".tmp")
        # a finished run is written once and read many times: trade write speed for size (zstd 15 instead of the
        # writer's zstd 1 / LZ4, about 10 % smaller sequences; the encodings stay the writer's)
        pq.write_table(data, tmp, **{**parquet_options(d.name, data.schema), **ARCHIVE_COMPRESSION})
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        write_json_atomic(d / JOURNAL, {"old": [p.name for _, p in parts], "new": final.name})
        os.replace(tmp, final)
        for _, p in parts:
            p.unlink()
        (d / JOURNAL).unlink()
        n1, b1 = n1 + 1, b1 + final.stat().st_size
    return n0, n1, b0, b1


def compact_run(path: str | os.PathLike, force: bool = False) -> dict[str, tuple[int, int, int, int]]:
    """Compact every table of the run directory ``path``: {table: (parts before, after, bytes before, after)}.

    Only a finished run (run.json status "finished") unless ``force``: a writer still appending to the run
    would race with the merge."""
    root = Path(path)
    manifest = root / "run.json"
    if not manifest.is_file():
        raise FileNotFoundError(f"{root} is not a run: no run.json")

    status = read_manifest(root).get("status")
    if status != "finished" and not force:
        raise ValueError(f"{root}: run.json status is {status!r}, not 'finished'; compact a run only once its "
                         "writer has closed (force=True / --force to override)")
    return {t: compact_table(root / t) for t in TABLES if (root / t).is_dir()}

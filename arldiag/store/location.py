"""Where a run store lives: a local directory or an fsspec URL (``s3://bucket/team/run``, ``memory://...``).

The writer needs four things from its storage: publish a whole Parquet part so that readers see it complete or not
at all, write ``run.json`` the same way, read ``run.json`` back (resume), and list the parts already there (part
numbering continues after a restart). Locally a part is written to ``*.tmp`` and renamed (``os.replace`` is atomic
on POSIX). On object storage a PUT is atomic by itself (S3 makes an object visible only once its upload completed,
and a multi-part upload only at its CompleteMultipartUpload), so a part is serialised in memory and uploaded in one
call: there is no rename on S3, and a reader never lists a half-written object.

fsspec (and s3fs for ``s3://``) is imported only for a URL, so a trainer writing locally never loads it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


OBJECT_STORES = {"s3", "s3a", "gs", "gcs", "abfs", "az", "oss"}


def write_json_atomic(path: Path, obj: dict) -> None:
    """Write ``obj`` as JSON to ``path`` through a fsynced ``.tmp`` and a rename: a reader sees the old file or the
    new one, never a part."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _protocols(fs) -> tuple:
    return (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)


def is_url(root: Any) -> bool:
    """True for an fsspec URL other than ``file://`` (which is a local path)."""
    s = str(root)
    return "://" in s and not s.startswith("file://")


def join(root: Any, *parts: str) -> str:
    """Join path pieces with ``/`` (object keys) or the local separator."""
    if is_url(root):
        return "/".join([str(root).rstrip("/"), *parts])
    return str(Path(root, *parts))


class StoreRoot:
    """A run directory, local or remote; every method takes paths relative to it."""

    def __init__(self, root: str | os.PathLike):
        self.url = str(root).rstrip("/") if is_url(root) else None
        if self.url is not None:
            try:
                import fsspec
            except ImportError as exc:
                raise ImportError(f"writing the run store at {self.url} needs fsspec and its filesystem "
                                  "(pip install 'arldiag[s3]' for s3://)") from exc
            self.fs, self.path = fsspec.core.url_to_fs(self.url)
        else:
            self.fs, self.path = None, str(Path(root))

    def __str__(self) -> str:
        return self.url or self.path

    @property
    def name(self) -> str:
        """The run's folder name (the default run name)."""
        return self.path.rstrip("/").rsplit("/", 1)[-1] if self.fs is not None else Path(self.path).resolve().name

    def _p(self, rel: str) -> str:
        return f"{self.path}/{rel}" if self.fs is not None else os.path.join(self.path, rel)

    def makedirs(self) -> None:
        if self.fs is None:
            Path(self.path).mkdir(parents=True, exist_ok=True)
        elif not set(_protocols(self.fs)) & OBJECT_STORES:
            self.fs.makedirs(self.path, exist_ok=True)
        # object stores have no folders, and a missing bucket is the user's to create (s3fs would create one,
        # with the account's defaults, by a trainer nobody asked to): the first write then fails with a warning

    def read_json(self, rel: str) -> dict | None:
        """The JSON object at ``rel``, or None when there is none."""
        p = self._p(rel)
        try:
            if self.fs is None:
                with open(p) as fh:
                    return json.load(fh)
            with self.fs.open(p, "r") as fh:
                return json.load(fh)
        except FileNotFoundError:
            return None

    def write_json(self, rel: str, obj: dict) -> None:
        p = self._p(rel)
        if self.fs is None:
            write_json_atomic(Path(p), obj)
        else:
            self.fs.pipe_file(p, json.dumps(obj, indent=2, default=str).encode())

    def write_parquet(self, rel: str, table, **options) -> int:
        """Publish ``table`` as the Parquet file ``rel`` atomically; returns its size in bytes."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        p = self._p(rel)
        if self.fs is None:
            Path(p).parent.mkdir(parents=True, exist_ok=True)
            tmp = p + ".tmp"
            pq.write_table(table, tmp, **options)
            os.replace(tmp, p)
            return os.path.getsize(p)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, **options)
        data = sink.getvalue().to_pybytes()
        self.fs.pipe_file(p, data)
        return len(data)

    def list_names(self, rel_dir: str) -> list[str]:
        """File names directly under ``rel_dir`` ([] when it does not exist)."""
        p = self._p(rel_dir)
        if self.fs is None:
            return os.listdir(p) if os.path.isdir(p) else []
        try:
            return [str(x).rstrip("/").rsplit("/", 1)[-1] for x in self.fs.ls(p, detail=False, refresh=True)]
        except FileNotFoundError:
            return []

"""``tensorboard``: event files (a file or a folder searched recursively), read with TensorBoard's own protobuf
classes: simple-value scalars and rank-0 tensors; the tag is the metric name."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from arldiag.importers.base import Importer, Rows


def _event_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and "tfevents" in p.name)
    if not files:
        raise ValueError(f"file: no TensorBoard event files (*tfevents*) under {path}")
    return files


def tfrecords(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(record number, byte offset, payload) of a TFRecord file (an event file's framing: uint64 length, masked
    CRC32C of the length, payload, masked CRC32C of the payload). A truncated or corrupt record is an error naming
    the file, the record and its offset: TensorBoard's own loader stops there silently, since it expects files that
    are still being written."""
    import struct

    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    data = path.read_bytes()
    pos, n = 0, 0
    while pos < len(data):
        n += 1
        where = f"file: {path}, record {n} at byte {pos}"
        if pos + 12 > len(data):
            raise ValueError(f"{where}: truncated header (not a complete TensorBoard event file)")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked_crc32c(header) != crc:
            raise ValueError(f"{where}: length checksum mismatch (corrupt, or not a TensorBoard event file)")
        end = pos + 12 + length
        if end + 4 > len(data):
            raise ValueError(f"{where}: truncated record ({length} bytes announced)")
        payload = data[pos + 12:end]
        (crc,) = struct.unpack("<I", data[end:end + 4])
        if masked_crc32c(payload) != crc:
            raise ValueError(f"{where}: data checksum mismatch (corrupt record)")
        yield n, pos, payload
        pos = end + 4


def read_tensorboard(path: Path) -> Rows:
    """Scalars of every event file under ``path``: simple values and rank-0 tensors (TensorBoard's v2 scalar
    format); the tag is the metric name."""
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.util import tensor_util
    except ImportError:
        raise ValueError("format: reading TensorBoard files needs the tensorboard package "
                         "(pip install 'arldiag[import]')") from None
    for f in _event_files(path):
        for n, pos, payload in tfrecords(f):
            try:
                event = Event.FromString(payload)
            except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError
                raise ValueError(f"file: {f}, record {n} at byte {pos}: not an Event ({exc})") from None
            if not event.HasField("summary"):
                continue
            row: dict[str, Any] = {}
            for v in event.summary.value:
                kind = v.WhichOneof("value")
                if kind == "simple_value":
                    row[v.tag] = float(v.simple_value)
                elif kind == "tensor":
                    arr = tensor_util.make_ndarray(v.tensor)
                    if arr.ndim == 0 and arr.dtype.kind in "fiub":
                        row[v.tag] = float(arr)
            if row:
                row["step"] = int(event.step)
                yield f"{f.name} record {n}", row


def has_event_files(path: Path) -> bool:
    return any(path.rglob("events.out.tfevents*"))


IMPORTERS = (Importer("tensorboard", "steps", read_tensorboard, "TensorBoard event files (a file or a folder)",
                      guess=lambda p: "tfevents" in p.name, reads_folder=True),)

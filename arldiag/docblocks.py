"""Generated blocks inside hand-written docs: the text between two markers is rendered from the code (the detector
catalog of docs/detectors.md, the action tables of docs/stabilize.md); a test compares each file with its rewrite."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable


def replace_block(text: str, start: str, end: str, body: str, where: str) -> str:
    """``text`` with what lies between ``start`` and ``end`` replaced by ``body`` (``where`` names the file in the
    error when a marker is missing)."""
    if start not in text or end not in text:
        raise ValueError(f"{where}: the markers {start} and {end} are missing")
    head, rest = text.split(start, 1)
    return f"{head}{start}\n{body}\n{end}{rest.split(end, 1)[1]}"


def main(doc: Path, rewrite: Callable[[str], str], render: Callable[[], str], argv: list[str] | None = None) -> int:
    """``--write``: rewrite ``doc`` in place; otherwise print ``render()``."""
    argv = sys.argv[1:] if argv is None else argv
    if "--write" in argv:
        doc.write_text(rewrite(doc.read_text()))
    else:
        sys.stdout.write(render() + "\n")
    return 0

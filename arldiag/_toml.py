"""TOML reading: the standard library's tomllib (Python >= 3.11), or tomli on 3.10."""
from __future__ import annotations

from typing import Any


def loads(text: str) -> dict[str, Any]:
    """Parse TOML; ValueError (with tomllib's line/column) on bad input."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise ValueError("reading TOML on Python 3.10 needs the tomli package (pip install tomli)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(str(exc)) from None

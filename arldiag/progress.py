"""A progress bar on stderr: tqdm's when it is installed (the ``analysis`` extra), else a silent stand-in with the
same few methods, so the base install runs every log-reading command without it."""
from __future__ import annotations

from typing import Any

try:
    from tqdm.auto import tqdm as _tqdm
except ImportError:  # tqdm is optional: the bar is a nicety, never a requirement
    _tqdm = None


class _Quiet:
    """What the commands call on a bar (context manager, update, set_description), doing nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> "_Quiet":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def update(self, n: int = 1) -> None:
        return None

    def set_description(self, desc: str | None = None) -> None:
        return None

    def close(self) -> None:
        return None


def bar(*args: Any, **kwargs: Any) -> Any:
    """``tqdm(*args, **kwargs)`` when tqdm is installed, else a bar that shows nothing."""
    return (_tqdm or _Quiet)(*args, **kwargs)

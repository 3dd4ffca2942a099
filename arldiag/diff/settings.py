"""The settings two runs differ in: their run.json manifests flattened to dotted keys (``config.lr``,
``clip``), the keys that name or date a run left out."""
from __future__ import annotations

from typing import Any, Mapping

# what names, dates or locates a run rather than sets it up: two runs always differ there
IDENTITY_KEYS = frozenset({"run_id", "name", "created", "finished", "status", "host", "config.out", "config.name",
                           "config.imported_from"})


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"config": {"lr": 1e-4}} -> {"config.lr": 1e-4}; lists and scalars are leaves."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _same(a: Any, b: Any) -> bool:
    # JSON gives lists where a tuple was written; 1 and 1.0 are one setting
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b  # True and 1 are different settings
    return a == b


def setting_delta(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """[(dotted key, value in A, value in B)] for every setting whose values differ (None: the run lacks it), in
    key order; identity keys (IDENTITY_KEYS) are left out."""
    fa, fb = flatten(a), flatten(b)
    keys = sorted((set(fa) | set(fb)) - IDENTITY_KEYS)
    return [(k, fa.get(k), fb.get(k)) for k in keys if not _same(fa.get(k), fb.get(k))]

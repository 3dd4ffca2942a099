"""Flatten nested mappings (verl/hydra configs, nested JSONL metric records) into one level of keys."""
from __future__ import annotations

from typing import Any, Mapping


def flatten(obj: Mapping[str, Any] | None, sep: str = "/", prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a<sep>b": 1}."""
    out: dict[str, Any] = {}
    for k, v in (obj or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, sep, key + sep))
        else:
            out[key] = v
    return out

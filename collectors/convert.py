"""Turn whatever a trainer hands us (torch tensors on any device, numpy arrays, lists) into numpy, cheaply.

torch is never imported here: a torch tensor is recognised by its type's module, converted to float32 on its own
device first (bf16/fp16 have no numpy dtype) and copied to the host once.
"""
from __future__ import annotations

from typing import Any

import numpy as np


from arldiag.backends import is_torch as _is_torch


def as_array(x: Any, name: str, dtype: Any = None) -> np.ndarray:
    """numpy view/copy of ``x``; ValueError naming ``name`` when it cannot be read as numbers."""
    if _is_torch(x):
        t = x.detach()
        if dtype is not None and np.dtype(dtype).kind == "f" and t.is_floating_point():
            t = t.float()
        elif t.dtype.is_floating_point and t.dtype.itemsize < 4:  # bf16/fp16 -> f32 (no numpy dtype for bf16)
            t = t.float()
        arr = t.cpu().numpy()
    else:
        try:
            arr = np.asarray(x)
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"{name}: cannot convert {type(x).__name__} to an array ({exc})") from None
    if arr.dtype == object:
        raise ValueError(f"{name}: expected a numeric array or tensor, got dtype object")
    if dtype is not None:
        target = np.dtype(dtype)
        if target.kind in "iub" and arr.dtype.kind == "f":
            if target.kind == "b":
                arr = arr != 0
            else:
                if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
                    raise ValueError(f"{name}: expected integer values, got dtype {arr.dtype} with fractions/NaN")
                arr = arr.astype(target)
        elif arr.dtype.kind not in "biuf":
            raise ValueError(f"{name}: expected a numeric dtype, got {arr.dtype}")
        elif arr.dtype != target:
            arr = arr.astype(target)
    return arr


def check_shape(name: str, arr: np.ndarray, expected: tuple, ref_name: str) -> None:
    if tuple(arr.shape) != tuple(expected):
        raise ValueError(f"{name} has shape {tuple(arr.shape)} but {ref_name} has shape {tuple(expected)}; "
                         f"they must match")


def as_device_array(x: Any, name: str, dtype: Any) -> Any:
    """Like ``as_array``, but a torch tensor stays on its own device (detached, cast there: floats to float32,
    bools/ints as asked), so the statistics can run where the tensors live (arldiag/backends.py)."""
    if not _is_torch(x):
        return as_array(x, name, dtype)
    t = x.detach()
    kind = np.dtype(dtype).kind
    if kind == "f":
        if t.is_complex():
            raise ValueError(f"{name}: expected a real tensor, got {t.dtype}")
        return t if str(t.dtype) == "torch.float32" else t.float()
    if kind == "b":
        return t if str(t.dtype) == "torch.bool" else t != 0
    if t.is_floating_point():  # integer ids handed as floats: same rule as as_array
        return as_array(t, name, dtype)
    return t.long() if str(t.dtype) != "torch.int64" else t


def row_counts(mask: Any) -> np.ndarray:
    """[B] number of True entries per row of a [B, T] mask, on the host."""
    if _is_torch(mask):
        return mask.sum(1).cpu().numpy().astype(np.int64)
    return mask.sum(axis=1).astype(np.int64)

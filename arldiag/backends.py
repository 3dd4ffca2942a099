"""Array backends for the statistics of arldiag/stats.py: one formula, two evaluators (numpy on the host, torch on
the tensors' own device).

A formula uses ``e.xp`` (the numpy or torch module) for elementwise work (``exp``, ``clip``, ``where``, ``abs``,
``isfinite``, comparisons), which both modules spell the same way, and the backend for everything they spell
differently: reductions to float64 scalars, per-row (segment) reductions over the flattened masked tokens, scatter
reductions, and the copy to the host. Every reduction accumulates in float64 on both backends, so the two paths
agree to float32 rounding of the elementwise inputs (tests/core/test_stats_torch.py).

torch is imported only when a TorchBackend is built, i.e. when the trainer handed torch tensors.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np


class Layout:
    """Row layout of the N flattened masked tokens of a ``[B, T]`` batch: ``rows`` [N] is sorted (row-major), so each
    sample's tokens are one contiguous segment; ``dense`` means every row holds exactly T tokens (packed batch),
    where ``rows``/``pos`` are only built when something asks for them.

    ``valid`` [B * T] bool (torch on an accelerator only): the *masked* layout. Nothing is compacted: the token
    arrays keep all B * T positions and every reduction takes the valid ones (``where``), because compacting (a
    boolean index, ``nonzero``) makes the host wait for the device to learn N. ``rows``/``pos`` are then those of
    the whole [B, T] grid."""

    def __init__(self, be: "Backend", rows, pos, B: int, T: int, dense: bool, valid=None):
        self._be, self._rows, self._pos, self.B, self.T, self.dense = be, rows, pos, B, T, dense
        self.valid = valid
        if valid is not None:
            self.n_row = valid.reshape(B, T).sum(1)                                      # [B] tokens per sample
        else:
            self.n_row = be.full(B, T, np.int64) if dense else be.bincount(rows, None, B)
        self.nonempty = self.n_row > 0
        self.starts = be.cumsum0(self.n_row)              # [B] segment starts
        self.inv_n = be.xp.where(self.nonempty, 1.0 / be.xp.clip(be.f64(self.n_row), 1, None), math.nan)

    @property
    def rows(self):
        if self._rows is None:
            self._rows, self._pos = self._be.dense_rows_pos(self.B, self.T)
        return self._rows

    @property
    def pos(self):
        _ = self.rows
        return self._pos


class Backend:
    """Operations the two array modules spell differently. Subclasses: NumpyBackend, TorchBackend."""
    xp: Any
    name: str

    def nan_scalar(self):
        return math.nan

    def finish(self, aggs: dict, counts: set[str]) -> dict:
        """Deferred scalar results -> Python floats/ints (one device sync on torch)."""
        return {k: (int(v) if k in counts else float(v)) for k, v in aggs.items()}


class NumpyBackend(Backend):
    name = "numpy"
    xp = np
    bool_dtype = np.dtype(bool)

    def asarray(self, x, dtype=None):
        return np.asarray(x) if dtype is None else np.asarray(x, dtype=dtype)

    def f64(self, x):
        return x.astype(np.float64, copy=False)

    def host(self, x):
        return x

    def int64(self, x):
        return x.astype(np.int64)

    def size(self, x) -> int:
        return int(x.size)

    def full(self, n: int, value, dtype):
        return np.full(n, value, dtype=dtype)

    def arange(self, n: int):
        return np.arange(n, dtype=np.int64)

    def nonzero(self, b):
        return np.flatnonzero(b)

    def repeat(self, x, k: int):
        return np.repeat(x, k)

    def dense_rows_pos(self, B: int, T: int):
        return np.repeat(np.arange(B, dtype=np.int64), T), np.tile(np.arange(T, dtype=np.int64), B)

    def flat(self, x):
        return x.reshape(-1)

    def cumsum0(self, n):
        out = np.zeros(n.shape[0], np.int64)
        np.cumsum(n[:-1], out=out[1:])
        return out

    # scalar reductions (float64 accumulation; NaN for an empty selection)
    def sum(self, x, where=None):
        if where is not None:
            x = x[where]
        return float(x.sum(dtype=np.float64))

    def dot(self, x, y, where=None):
        if where is not None:
            x, y = x[where], y[where]
        # float64 products summed; not np.dot, whose threaded BLAS call is 10x slower on a busy 2-core host
        return float(np.multiply(x, y, dtype=np.float64).sum())

    def count(self, b):
        return int(np.count_nonzero(b))

    def max(self, x, where=None):
        if where is not None:
            x = x[where]
        return float(x.max()) if x.size else math.nan

    def min(self, x, where=None):
        if where is not None:
            x = x[where]
        return float(x.min()) if x.size else math.nan

    # per-row reductions over a Layout
    def rsum(self, lay: Layout, x):
        if lay.dense:
            return x.reshape(lay.B, lay.T).sum(axis=1, dtype=np.float64)
        out = np.zeros(lay.B)
        if x.size:
            out[lay.nonempty] = np.add.reduceat(x.astype(np.float64, copy=False), lay.starts[lay.nonempty])
        return out

    def _rext(self, ufunc, lay: Layout, x):
        if lay.dense:
            return ufunc.reduce(x.reshape(lay.B, lay.T), axis=1).astype(np.float64)
        out = np.full(lay.B, np.nan)
        if x.size:
            out[lay.nonempty] = ufunc.reduceat(x, lay.starts[lay.nonempty])
        return out

    def rmax(self, lay: Layout, x):
        return self._rext(np.maximum, lay, x)

    def rmin(self, lay: Layout, x):
        return self._rext(np.minimum, lay, x)

    # scatter reductions over an arbitrary (unsorted) index
    def bincount(self, idx, weights, n: int):
        if weights is None:
            return np.bincount(idx, minlength=n).astype(np.int64, copy=False)
        return np.bincount(idx, weights=weights.astype(np.float64, copy=False), minlength=n)

    def scatter_max(self, idx, x, n: int):
        out = np.full(n, -np.inf)
        np.maximum.at(out, idx, x)
        return out

    def unique_inverse(self, key):
        u, inv = np.unique(key, return_inverse=True)
        return u, inv.reshape(-1)


class TorchBackend(Backend):
    """Statistics on the tensors' own device; only [B]-sized results, scalars and picked token rows leave it."""
    name = "torch"

    def __init__(self, device):
        import torch

        self.xp = torch
        self.device = device
        self.bool_dtype = torch.bool
        self._f64 = torch.float64

    def asarray(self, x, dtype=None):
        t = self.xp
        if isinstance(x, t.Tensor):
            return x.to(self.device) if dtype is None else x.to(self.device, dtype=_TORCH_DT[np.dtype(dtype).name])
        a = np.asarray(x) if dtype is None else np.asarray(x, dtype=dtype)
        # queued, not a blocking copy (which would wait for the device's queue); pageable memory is staged first
        return t.from_numpy(np.ascontiguousarray(a)).to(self.device, non_blocking=True)

    def f64(self, x):
        return x.to(self._f64)

    def host(self, x):
        return x.detach().cpu().numpy()

    def int64(self, x):
        return x.to(self.xp.int64)

    def size(self, x) -> int:
        return int(x.numel())

    def full(self, n: int, value, dtype):
        return self.xp.full((n,), value, dtype=_TORCH_DT[np.dtype(dtype).name], device=self.device)

    def arange(self, n: int):
        return self.xp.arange(n, dtype=self.xp.int64, device=self.device)

    def nonzero(self, b):
        return self.xp.nonzero(b.reshape(-1)).reshape(-1)

    def repeat(self, x, k: int):
        return self.xp.repeat_interleave(x, k)

    def dense_rows_pos(self, B: int, T: int):
        a = self.arange(B * T)
        return a // T, a % T

    def flat(self, x):
        return x.reshape(-1)

    def cumsum0(self, n):
        out = self.xp.zeros_like(n)
        if n.numel() > 1:
            out[1:] = self.xp.cumsum(n[:-1], 0)
        return out

    def nan_scalar(self):
        return self.xp.tensor(math.nan, dtype=self._f64, device=self.device)

    def sum(self, x, where=None):
        if where is not None:
            x = self.xp.where(where, x, 0)
        return x.sum(dtype=self._f64)

    def dot(self, x, y, where=None):
        xd, yd = x.to(self._f64), y.to(self._f64)
        p = xd * yd
        if where is not None:
            p = self.xp.where(where, p, 0.0)
        return p.sum()

    def count(self, b):
        return b.sum()

    def max(self, x, where=None):
        if where is not None:
            x = self.xp.where(where, x, -math.inf)
        if x.numel() == 0:
            return self.nan_scalar()
        m = x.max().to(self._f64)
        return self.xp.where(m == -math.inf, math.nan, m) if where is not None else m

    def min(self, x, where=None):
        if where is not None:
            x = self.xp.where(where, x, math.inf)
        if x.numel() == 0:
            return self.nan_scalar()
        m = x.min().to(self._f64)
        return self.xp.where(m == math.inf, math.nan, m) if where is not None else m

    def rsum(self, lay: Layout, x):
        if lay.valid is not None:
            return self.xp.where(lay.valid, x, 0).reshape(lay.B, lay.T).sum(1, dtype=self._f64)
        if lay.dense:
            return x.reshape(lay.B, lay.T).sum(1, dtype=self._f64)
        out = self.xp.zeros(lay.B, dtype=self._f64, device=self.device)
        return out.index_add_(0, lay.rows, x.to(self._f64))

    def _rext(self, how, lay: Layout, x):
        if lay.valid is not None:  # masked layout: a row without a valid token is NaN, as a compacted empty row
            red = self.xp.where(lay.valid, x, -math.inf if how == "amax" else math.inf).reshape(lay.B, lay.T)
            red = (red.amax(1) if how == "amax" else red.amin(1)).to(self._f64)
            return self.xp.where(lay.nonempty, red, math.nan)
        if lay.dense:
            red = x.reshape(lay.B, lay.T)
            return (red.amax(1) if how == "amax" else red.amin(1)).to(self._f64)
        init = -math.inf if how == "amax" else math.inf
        out = self.xp.full((lay.B,), init, dtype=x.dtype, device=self.device)
        out.scatter_reduce_(0, lay.rows, x, how, include_self=True)
        return self.xp.where(lay.nonempty, out.to(self._f64), math.nan)

    def rmax(self, lay: Layout, x):
        return self._rext("amax", lay, x)

    def rmin(self, lay: Layout, x):
        return self._rext("amin", lay, x)

    def bincount(self, idx, weights, n: int):
        if weights is None:
            return self.xp.bincount(idx, minlength=n).to(self.xp.int64)
        return self.xp.bincount(idx, weights=weights.to(self._f64), minlength=n)

    def scatter_max(self, idx, x, n: int):
        out = self.xp.full((n,), -math.inf, dtype=self._f64, device=self.device)
        return out.scatter_reduce_(0, idx, x.to(self._f64), "amax", include_self=True)

    def unique_inverse(self, key):
        return self.xp.unique(key, sorted=True, return_inverse=True)

    def finish(self, aggs: dict, counts: set[str]) -> dict:
        t = self.xp
        keys = list(aggs)
        lazy = [k for k in keys if isinstance(aggs[k], t.Tensor)]
        vals = dict(aggs)
        if lazy:  # one transfer for every deferred scalar
            host = t.stack([aggs[k].to(self._f64) for k in lazy]).cpu().tolist()
            vals.update(zip(lazy, host))
        return super().finish(vals, counts)


class HostCopy:
    """Device tensors on their way to host memory: one ``non_blocking`` copy per dtype into pinned (page-locked)
    memory, all queued on the current stream behind the work that produces them, and one CUDA event after them.
    ``wait()`` returns the numpy arrays; it blocks only if the event has not completed yet (``Event.query``), and
    counts each such block in ``HOST_WAITS`` (benchmarks/gpu_overhead.py reads it).

    Why: every ``.cpu()``, ``.item()``, boolean index or ``nonzero`` on a CUDA tensor makes the host wait for the
    device; the collector used to do dozens per step. Queued copies to pinned memory return at once, so the
    statistics of a step cost the host one wait (or none, when the GPU is already done). CPU tensors (tests) are
    read in place."""

    def __init__(self, named: dict):
        import torch

        names = [k for k, v in named.items() if v is not None]
        self._shapes = {k: tuple(named[k].shape) for k in names}
        self._host: dict | None = None
        self._event = None
        by_dt: dict = {}
        for k in names:
            by_dt.setdefault(named[k].dtype, []).append(k)
        self._groups = []   # (names, flat buffer of their values concatenated)
        for dt, keys in by_dt.items():
            flat = torch.cat([named[k].reshape(-1) for k in keys]) if len(keys) > 1 else named[keys[0]].reshape(-1)
            if flat.device.type == "cuda":
                buf = torch.empty(flat.shape, dtype=dt, pin_memory=True)
                buf.copy_(flat, non_blocking=True)
                flat = buf
                self._event = torch.cuda.Event() if self._event is None else self._event
            elif flat.device.type != "cpu":  # another accelerator: a plain copy per dtype (it waits)
                flat = flat.cpu()
            self._groups.append((keys, flat))
        if self._event is not None:
            self._event.record()   # after every copy: one event covers them all (same stream)

    def done(self) -> bool:
        """Whether the copies have landed (no wait)."""
        return self._event is None or self._event.query()

    def wait(self) -> dict:
        """The tensors as numpy arrays by name, views into the host buffers (one blocking wait at most)."""
        if self._host is None:
            if self._event is not None and not self._event.query():
                HOST_WAITS[0] += 1
                self._event.synchronize()
            self._host = {}
            for keys, buf in self._groups:
                arr, o = buf.numpy(), 0
                for k in keys:
                    n = int(np.prod(self._shapes[k], dtype=np.int64))
                    self._host[k] = arr[o:o + n].reshape(self._shapes[k])
                    o += n
        return self._host


HOST_WAITS = [0]  # blocking waits of HostCopy.wait (the host waited for the device), since the process started

_TORCH_DT: dict[str, Any] = {}


def is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def backend_for(*arrays) -> Backend:
    """TorchBackend on the device of the first torch tensor among ``arrays``, else NumpyBackend."""
    for a in arrays:
        if a is not None and is_torch(a):
            import torch

            if not _TORCH_DT:
                _TORCH_DT.update(float32=torch.float32, float64=torch.float64, int64=torch.int64,
                                 int32=torch.int32, int16=torch.int16, bool=torch.bool)
            return TorchBackend(a.device)
    return NumpyBackend()

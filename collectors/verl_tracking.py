"""verl's driver scalars, live: every ``verl.utils.tracking.Tracking.log(data, step)`` also goes to arldiag.

verl's trainer (``RayPPOTrainer.fit`` and the v1 ``trainer_base``, in the driver's TaskRunner process) logs each
step's scalars with one ``Tracking.log(data=metrics, step=global_steps)`` call: ``critic/score/mean``,
``response_length/*``, ``timing_s/*``, the reduced ``actor/*`` metrics and, on validation steps, ``val-core/*``.
``install()`` (run by the ``verl.plugins`` entry point, arldiag.collectors.verl_plugin, in every process that
imports verl) wraps that method once, without a fork: verl's own ``log`` runs first and unchanged (same backends,
same return value, same exceptions), then, when ``$ARLDIAG_RUN`` is set, the numeric values go to
``Collector.record_step(step, metrics=...)`` of one driver-side Collector per process, which

- writes them as the rank ``DRIVER_RANK`` (90000; the workers' loss recorder uses their torch.distributed rank,
  ``arldiag watch`` writes its alerts as 99999) into the same run store as the workers' per-token rows, so the
  ``steps`` view merges both per step (user metrics averaged over the ranks that logged them);
- resolves verl's names live (arldiag.aliases: ``critic/score/mean`` -> ``task_score``, ``actor/entropy`` ->
  ``entropy``, ``response_length/clip_ratio`` -> ``truncated_frac``, ``val-core/*/acc/mean@1`` -> ``val_score``);
- runs the Monitor of arldiag.toml (``monitor_of(arldiag.settings.active())``: its detectors, risk and alert sinks),
  so alerts are raised on the driver as the steps are logged.

The Collector is opened on the first ``log`` call (the workers import the plugin too but never call it, so they
open none) and closed by ``Tracking.finish`` (verl's v1 TaskRunner calls it when training ends; ``__del__`` calls
it otherwise) and at exit. arldiag's side never raises into verl: a failure warns once and verl goes on.
``ARLDIAG_VERL_TRACKING=0`` turns this off.
"""
from __future__ import annotations

import atexit
import datetime as _dt
import functools
import numbers
import os
import threading
from typing import Any, Mapping

from arldiag import settings
from arldiag.collectors.collector import Collector
from arldiag.collectors.guard import Guard
from arldiag.monitor import monitor_of
from arldiag.store.location import StoreRoot

RUN_ENV = "ARLDIAG_RUN"
OFF_ENV = "ARLDIAG_VERL_TRACKING"  # "0" (or "off", "false"): do not record verl's driver scalars
DRIVER_RANK = 90_000  # part-file rank of the driver's step rows (workers: 0..world-1; arldiag watch: 99999)
_WRAPPED = "__arldiag_wrapped__"
_MARK = "_arldiag_driver_run"  # set on a Tracking object that logged: the collector generation it logged to


def _off() -> bool:
    return os.environ.get(OFF_ENV, "").strip().lower() in ("0", "off", "false", "no")


def scalars(data: Any) -> dict[str, float]:
    """The numeric values of a logged dict (numbers, numpy scalars, one-element arrays and tensors) as floats;
    anything else (strings, lists, tables, bools) is dropped."""
    out: dict[str, float] = {}
    if not isinstance(data, Mapping):
        return out
    for k, v in data.items():
        if isinstance(v, bool):
            continue
        if isinstance(v, numbers.Real):  # int, float, numpy scalars
            out[str(k)] = float(v)
            continue
        size = getattr(v, "size", None)
        n = v.numel() if callable(getattr(v, "numel", None)) else (size if isinstance(size, int) else None)
        if n == 1 and hasattr(v, "item"):
            try:
                x = v.item()
            except Exception:  # noqa: BLE001 - not a value arldiag can read
                continue
            if isinstance(x, numbers.Real) and not isinstance(x, bool):
                out[str(k)] = float(x)
    return out


class DriverRecorder:
    """One per process: the driver-side Collector (rank ``DRIVER_RANK``) with the Monitor of arldiag.toml, opened
    at ``run_dir`` (default ``$ARLDIAG_RUN``) on the first ``record``."""

    def __init__(self, run_dir: str | None = None) -> None:
        self.run_dir = run_dir
        self.collector: Any = None
        self._open_dir: str | None = None
        self._last_step: int | None = None
        self._lock = threading.RLock()
        self._guard = Guard()  # warns once per place; the driver's recording never stops training
        self._failed_dirs: set[str] = set()
        self._gen = 0  # one per opened collector: a Tracking object carries the one it logged to (_MARK)
        self._atexit = False

    # ------------------------------------------------------------------ warnings
    def warn_once(self, key: str, msg: str) -> None:
        self._guard.warn_once(key, msg, stacklevel=4)

    # ------------------------------------------------------------------ the collector
    def target(self) -> str | None:
        """The run folder the next record goes to (``run_dir``, else ``$ARLDIAG_RUN``), None when unset."""
        return self.run_dir or os.environ.get(RUN_ENV) or None

    def _open(self) -> Any:
        run_dir = self.target()
        if self.collector is not None and run_dir != self._open_dir:  # $ARLDIAG_RUN changed: a new run
            self.close()
        if self.collector is not None or not run_dir or run_dir in self._failed_dirs:
            return self.collector
        try:
            monitor, kwargs = None, {}
            try:
                conf = settings.active()
                monitor = monitor_of(conf)
                kwargs = conf.collector_kwargs()
            except Exception as exc:  # noqa: BLE001 - a bad arldiag.toml must not cost the scalars
                self.warn_once("settings", f"arldiag: verl driver: arldiag.toml could not be applied "
                                           f"({type(exc).__name__}: {exc}); verl's scalars are recorded without "
                                           "a Monitor")
            kwargs.pop("rank", None)
            self.collector = Collector(run_dir, config={"framework": "verl", "driver": "verl Tracking.log"},
                                       rank=DRIVER_RANK, monitor=monitor, **kwargs)
            self._open_dir = run_dir
            self._last_step = None
            self._gen += 1
            self._manifest_if_missing(self.collector)
        except Exception as exc:  # noqa: BLE001
            self.collector = None
            self._failed_dirs.add(run_dir)
            self.warn_once(f"open {run_dir}", f"arldiag: verl driver: cannot record verl's scalars at {run_dir} "
                                              f"({type(exc).__name__}: {exc}); verl goes on unchanged")
            return None
        if not self._atexit:
            self._atexit = True
            atexit.register(self.close)
        return self.collector

    @staticmethod
    def _manifest_if_missing(col: Any) -> None:
        """Only rank 0 writes run.json, and the workers' rank 0 opens its collector at its first loss call, after
        the driver's first log (verl validates before training): the driver writes it when there is none yet (the
        worker's rank 0 then rewrites it, keeping run_id and created), so the run is readable from its first step
        (and without the loss mode at all)."""
        if getattr(col, "writer", None) is None:  # the store is not writable: the Collector has warned
            return

        loc = StoreRoot(col.root)
        m = loc.read_json("run.json")
        if m is None:
            loc.write_json("run.json", col.manifest)
        elif m.get("status") == "finished":  # logging to a finished run again (a resumed driver): it runs again
            m["status"] = "running"
            m.pop("finished", None)
            loc.write_json("run.json", m)

    @staticmethod
    def _mark_finished(col: Any) -> None:
        """verl's training has ended (Tracking.finish or exit): run.json says so (whoever wrote it), so readers
        (``arldiag watch``) evaluate the last step. Ray may end the workers without running their exit handlers."""
        if getattr(col, "writer", None) is None:
            return

        loc = StoreRoot(col.root)
        m = loc.read_json("run.json")
        if m is not None and m.get("status") != "finished":
            m["status"] = "finished"
            m["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat()
            loc.write_json("run.json", m)

    # ------------------------------------------------------------------ hooks
    def record(self, data: Any, step: Any, tracking: Any = None) -> None:
        """One ``Tracking.log(data, step)`` call: its numeric values as the step's metrics."""
        with self._lock:
            col = self._open()
            if col is None:
                return
            if tracking is not None:
                try:
                    setattr(tracking, _MARK, self._gen)
                except Exception:  # noqa: BLE001 - not taggable (slots): the run is then closed at exit
                    pass
            metrics = scalars(data)
            step = int(step)
            monitor = getattr(col, "monitor", None)
            if monitor is not None and self._last_step is not None and step <= self._last_step:
                # a second call for a step already logged (a custom loop): stored (the steps view merges the rows),
                # not evaluated again: the Monitor's steps must increase
                col.monitor = None
                try:
                    col.record_step(step, metrics)
                finally:
                    col.monitor = monitor
                return
            col.record_step(step, metrics)
            self._last_step = step

    def finish(self, tracking: Any = None) -> None:
        """``Tracking.finish``: close the collector when that Tracking logged to it (another one's ``__del__``
        must not end this run)."""
        with self._lock:
            if self.collector is None:
                return
            if tracking is not None and getattr(tracking, _MARK, None) != self._gen:
                return
            self.close()

    def close(self) -> None:
        """Finalise the last step, publish the rows, close the Monitor's sinks and mark the run finished."""
        with self._lock:
            col, self.collector = self.collector, None
            self._open_dir, self._last_step = None, None
            if col is None:
                return
            try:
                col.close()
                self._mark_finished(col)
            except Exception as exc:  # noqa: BLE001
                self.warn_once("close", f"arldiag: verl driver: closing the run at {col.root} failed "
                                        f"({type(exc).__name__}: {exc})")


DRIVER = DriverRecorder()


def _call_args(args: tuple, kwargs: dict) -> tuple[Any, Any, Any]:
    """(data, step, backend) of a ``Tracking.log(data, step, backend=None)`` call, positional or by name."""
    data = kwargs["data"] if "data" in kwargs else (args[0] if args else None)
    step = kwargs["step"] if "step" in kwargs else (args[1] if len(args) > 1 else None)
    backend = kwargs["backend"] if "backend" in kwargs else (args[2] if len(args) > 2 else None)
    return data, step, backend


def _on_log(tracking: Any, data: Any, step: Any, backend: Any) -> None:
    try:
        if _off() or step is None:
            return
        if backend is not None and "arldiag" not in backend:
            return  # a call meant for some backends only (verl's own calls log to all: backend=None)
        DRIVER.record(data, step, tracking)
    except Exception as exc:  # noqa: BLE001 - arldiag never breaks verl's logging
        DRIVER.warn_once(f"log {type(exc).__name__}", f"arldiag: verl driver: recording step {step!r} failed "
                                                      f"({type(exc).__name__}: {exc}); verl goes on unchanged")


def _on_finish(tracking: Any) -> None:
    try:
        DRIVER.finish(tracking)
    except Exception as exc:  # noqa: BLE001
        DRIVER.warn_once("finish", f"arldiag: verl driver: finish failed ({type(exc).__name__}: {exc})")


def install(cls: Any = None) -> bool:
    """Wrap ``verl.utils.tracking.Tracking.log`` (and ``finish``, when it has one) once; True when it wrapped now,
    False when it was wrapped already."""
    if cls is None:
        from verl.utils.tracking import Tracking as cls
    if getattr(cls.log, _WRAPPED, False):
        return False
    orig_log = cls.log

    @functools.wraps(orig_log)
    def log(self, *args, **kwargs):
        data = step = backend = None
        try:
            if not _off() and DRIVER.target() is not None:  # else: verl's log alone, nothing copied
                data, step, backend = _call_args(args, kwargs)
                if isinstance(data, Mapping):
                    data = dict(data)  # the values as logged, whatever a backend does to the dict
        except Exception:  # noqa: BLE001 - verl's own call decides what a bad call does
            data = step = backend = None
        try:
            return orig_log(self, *args, **kwargs)
        finally:
            if step is not None:
                _on_log(self, data, step, backend)

    setattr(log, _WRAPPED, True)
    log.__wrapped_by_arldiag__ = orig_log
    cls.log = log

    orig_finish = getattr(cls, "finish", None)
    if callable(orig_finish) and not getattr(orig_finish, _WRAPPED, False):
        @functools.wraps(orig_finish)
        def finish(self, *args, **kwargs):
            try:
                return orig_finish(self, *args, **kwargs)
            finally:
                _on_finish(self)

        setattr(finish, _WRAPPED, True)
        finish.__wrapped_by_arldiag__ = orig_finish
        cls.finish = finish
    return True


__all__ = ["DRIVER", "DRIVER_RANK", "DriverRecorder", "install", "scalars"]

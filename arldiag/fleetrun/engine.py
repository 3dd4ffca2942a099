"""Where per-run tasks run: in this process (``local``) or as one Ray task per run (``ray``), behind one interface.

``engine.imap(fn, items)`` yields ``(index, result)`` as tasks finish and ``engine.map`` returns the results in
the items' order; ``fn`` is a module-level function (a Ray worker imports it by name) taking one item and returning
a JSON-able row. A task that raises, or a Ray worker that dies (out of memory, a lost node), becomes
``on_error(item, exc)``'s row: one run's failure never stops the fleet. A progress bar (arldiag.progress) counts
finished runs on stderr.

Which engine: the ``--engine`` option, else $ARLDIAG_ENGINE, else local. The ray engine joins the cluster at
$ARLDIAG_RAY_ADDRESS when set (``ray://head:10001`` or ``auto``), else a Ray already initialised in this process, else
Ray's own default (a cluster started on this node by ``ray start``, or $RAY_ADDRESS; otherwise a local one).
"""
from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Iterator, Sequence

from arldiag.progress import bar

ENGINES = ("local", "ray")
ENGINE_ENV = "ARLDIAG_ENGINE"
ADDRESS_ENV = "ARLDIAG_RAY_ADDRESS"
# environment a remote worker needs to read the same runs the same way (object-store credentials and endpoint,
# arldiag's settings); a worker on another node does not inherit the driver's environment
FORWARDED_PREFIXES = ("ARLDIAG_", "AWS_", "GOOGLE_", "FSSPEC_")


def engine_name(requested: str | None = None) -> str:
    name = (requested or os.environ.get(ENGINE_ENV) or "local").strip().lower()
    if name not in ENGINES:
        src = "--engine" if requested else f"${ENGINE_ENV}"
        raise ValueError(f"{src}: unknown engine {name!r}; choose from {', '.join(ENGINES)}")
    return name


def add_engine_argument(parser) -> None:
    """The --engine option of the fleet commands."""
    parser.add_argument("--engine", choices=ENGINES, default=None,
                        help=f"run one task per run here (local) or on Ray (default: ${ENGINE_ENV} or local; "
                             f"Ray joins ${ADDRESS_ENV} or the cluster on this node)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _error_row(item: Any, exc: BaseException) -> dict:
    return {"item": str(item), "error": f"{type(exc).__name__}: {exc}"}


class LocalEngine:
    name = "local"

    def __init__(self, progress: bool = True):
        self.progress = progress

    def imap(self, fn: Callable, items: Sequence, on_error: Callable = _error_row,
             desc: str = "runs") -> Iterator[tuple[int, Any]]:
        with bar(total=len(items), desc=desc, unit="run", disable=not self.progress, leave=False) as b:
            for i, item in enumerate(items):
                try:
                    out = fn(item)
                except Exception as exc:  # noqa: BLE001 - the run's row says what failed
                    out = on_error(item, exc)
                b.update(1)
                yield i, out

    def map(self, fn: Callable, items: Sequence, on_error: Callable = _error_row, desc: str = "runs") -> list:
        out: list = [None] * len(items)
        for i, r in self.imap(fn, items, on_error, desc):
            out[i] = r
        return out

    def close(self) -> None:
        return None


def _call(fn: Callable, item: Any) -> Any:
    """What a Ray worker runs: the task function itself (its exception travels back to the driver)."""
    return fn(item)


def forwarded_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_PREFIXES)}


class RayEngine(LocalEngine):
    name = "ray"

    def __init__(self, progress: bool = True, address: str | None = None, num_cpus_per_task: float = 1.0,
                 max_in_flight: int | None = None):
        # Ray is imported here, not at module level: `import arldiag` and the local engine never load it
        try:
            import ray
        except ImportError as exc:
            raise ModuleNotFoundError("the ray engine needs ray: pip install 'arldiag[ray]'", name="ray") from exc
        super().__init__(progress)
        self.ray = ray
        self._started = False
        if not ray.is_initialized():
            address = address or os.environ.get(ADDRESS_ENV) or None
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                     runtime_env={"env_vars": forwarded_env()})
            self._started = True
        self.num_cpus = num_cpus_per_task
        # tasks in flight at once: enough to keep every CPU busy, few enough that results (one run's rows each)
        # do not pile up in the object store; the rest are submitted as these finish
        self.max_in_flight = max_in_flight or max(4, 4 * int(ray.cluster_resources().get("CPU", 1)))
        self._remote = ray.remote(_call)

    def imap(self, fn: Callable, items: Sequence, on_error: Callable = _error_row,
             desc: str = "runs") -> Iterator[tuple[int, Any]]:
        ray = self.ray
        opts = self._remote.options(num_cpus=self.num_cpus, max_retries=1, retry_exceptions=False)
        fn_ref = ray.put(fn)  # the function once in the object store, not pickled with every task
        pending: dict[Any, int] = {}
        todo = iter(enumerate(items))
        with bar(total=len(items), desc=f"{desc} (ray)", unit="run", disable=not self.progress, leave=False) as b:
            while True:
                while len(pending) < self.max_in_flight:
                    nxt = next(todo, None)
                    if nxt is None:
                        break
                    pending[opts.remote(fn_ref, nxt[1])] = nxt[0]
                if not pending:
                    return
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    i = pending.pop(ref)
                    try:
                        out = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - a task error or a dead worker: the run's row says so
                        out = on_error(items[i], getattr(exc, "cause", None) or exc)
                    b.update(1)
                    yield i, out

    def close(self) -> None:
        if self._started:
            self.ray.shutdown()


def get_engine(requested: str | None = None, progress: bool = True, **kw: Any) -> LocalEngine:
    name = engine_name(requested)
    return RayEngine(progress=progress, **kw) if name == "ray" else LocalEngine(progress=progress)


def run_all(fn: Callable, items: Iterable, engine: str | None = None, on_error: Callable = _error_row,
            progress: bool = True, desc: str = "runs") -> list:
    """``fn`` over ``items`` on the chosen engine, results in order (the engine is closed afterwards)."""
    eng = get_engine(engine, progress)
    try:
        return eng.map(fn, list(items), on_error, desc)
    finally:
        eng.close()

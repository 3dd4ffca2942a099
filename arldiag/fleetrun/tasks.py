"""Per-run tasks: each takes a RunRef (arldiag.fleetrun.locate) and returns what the local command computes for that
run, so the same function runs in this process or in a Ray worker and the joined output is the same JSON.

A task opens its one run on its own DuckDB connection (memory bounded by one run, not the fleet) and closes it; a
local folder and an ``s3://`` URL go through the same store code (arldiag.store.reader). A run that cannot be read
is an error row (``error_row``), never an exception that stops the fleet.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from arldiag.detectors import analyse
from arldiag.evaluation.evaluate import score_one, select_split
from arldiag.evaluation.scoring import ScoreConfig
from arldiag.fleet import error_row, path_row
from arldiag.fleetrun.locate import RunRef
from arldiag.store.location import is_url
from arldiag.store.reader import Run, read_manifest


def open_one(ref: RunRef):
    """The run of ``ref`` as an open Run named ``ref.name`` (the name open_run gives it among all the runs)."""
    if is_url(ref.path):
        import fsspec

        fs, p = fsspec.core.url_to_fs(ref.path)
        return Run({ref.name: ref.path}, {ref.name: read_manifest(p, fs)}, fs=fs)
    return Run({ref.name: Path(ref.path)}, {ref.name: read_manifest(Path(ref.path))})


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# ------------------------------------------------------------------------------------------------------- ls
def ls_row(ref: RunRef) -> dict[str, Any]:
    """`arldiag ls`'s row of the run (arldiag.fleet.path_row: the cached summary when the run did not change)."""
    row, exc = path_row(ref.path, ref.label)
    if exc is not None:
        row["_open_failed"] = True  # the command raises when every run failed to open (as fleet_table does)
    return row


def ls_error(ref: RunRef, exc: BaseException) -> dict[str, Any]:
    """The row of a run whose task itself failed (a worker lost, out of memory)."""
    return error_row(ref.label, ref.path, exc, "read")


# --------------------------------------------------------------------------------------------------- detect
def detect_result(ref: RunRef, detectors: list[str] | None = None) -> dict[str, Any]:
    """`arldiag detect`'s findings (Finding objects) and alert timeline rows of the run."""
    try:
        run = open_one(ref)
    except (OSError, ValueError) as exc:
        return detect_error(ref, exc)
    try:
        findings, _, timeline = analyse(run, detectors)
    finally:
        run.close()
    return {"name": ref.name, "findings": findings,
            "timeline": [tuple(r) for r in timeline.itertuples(index=False)], "error": None}


def detect_error(ref: RunRef, exc: BaseException) -> dict[str, Any]:
    return {"name": ref.name, "findings": [], "timeline": [], "error": error_text(exc)}


# ---------------------------------------------------------------------------------------------- eval-detect
def eval_row(ref: RunRef, options: dict) -> dict[str, Any] | None:
    """`arldiag eval-detect`'s row of the run; None when --split leaves it out. ``options``: min_lead, alarm_gap,
    window, precursors, split, risk (already resolved), labels."""
    run = open_one(ref)
    try:
        if ref.name not in select_split(run, options.get("split")):
            return None
        cfg = ScoreConfig(min_lead=options["min_lead"], alarm_gap=options["alarm_gap"], window=options["window"])
        return score_one(run, ref.name, cfg, options["risk"], options.get("precursors", 0), options.get("split"),
                         options.get("labels"))
    finally:
        run.close()


def eval_error(ref: RunRef, exc: BaseException) -> dict[str, Any]:
    return {"run": ref.name, "error": error_text(exc)}


# ---------------------------------------------------------------------------------------------------- reports
def report_text(ref: RunRef, fmt: str = "md", max_points: int = 1500) -> dict[str, Any]:
    """The run's post-mortem report rendered as ``fmt`` (the text; the driver writes it, so a remote worker needs
    no access to the output folder)."""
    # pandas: `import arldiag.fleetrun.tasks` (ls, detect, eval-detect and every Ray worker) loads no pandas
    from arldiag.report.build import build_report
    from arldiag.report.cli import render

    run = open_one(ref)
    try:
        text = render(build_report(run, progress=False, max_points=max_points), fmt)
    finally:
        run.close()
    return {"run": ref.label, "name": ref.name, "path": ref.path, "text": text, "error": None}


def report_error(ref: RunRef, exc: BaseException) -> dict[str, Any]:
    return {"run": ref.label, "name": ref.name, "path": ref.path, "text": None, "error": error_text(exc)}


class call:
    """A picklable task with its extra arguments: ``call("eval_row", options)(ref)`` is ``eval_row(ref, options)``
    (a module-level name, so a Ray worker imports it rather than unpickling code)."""

    def __init__(self, task: str, *args: Any):
        if task not in TASKS:
            raise ValueError(f"unknown fleet task {task!r}; choose from {', '.join(TASKS)}")
        self.task, self.args = task, args

    def __call__(self, ref: RunRef) -> Any:
        return globals()[self.task](ref, *self.args)


TASKS = ("ls_row", "detect_result", "eval_row", "report_text")

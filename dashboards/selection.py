"""Which run the run view opens on: the run the URL names (``?run=NAME``, a view that can be shared), else the worst
run of the fleet (arldiag.verdict.WORST_FIRST, the order the fleet table sorts by), and the verdict banner's words.

Pure functions of the URL's query string and the fleet rows (dashboards.fleet.FleetRows.rows()): the callbacks
that call them live in dashboards.callbacks.
"""
from __future__ import annotations

from typing import Mapping, Sequence
from urllib.parse import parse_qs

from arldiag.levels import rank
from arldiag.verdict import verdict_rank


def url_run(search: str | None) -> str | None:
    """The run named by a query string such as ``?run=sweep/seed0`` (the first ``run`` given); None without one."""
    values = parse_qs(str(search or "").lstrip("?")).get("run") or []
    return next((v for v in values if v), None)


def worst_key(row: Mapping) -> tuple[int, int, int]:
    """Sort key, larger = worse: the verdict (WORST_FIRST), then the alert state now, then the worst state."""
    return (verdict_rank(row.get("verdict")), rank(row.get("state") or "", -1), rank(row.get("max_state") or "", -1))


def worst_run(rows: Sequence[Mapping], pending: int = 0) -> str | None:
    """The id of the worst run among ``rows`` (ties: the first, i.e. the most recently written); None while
    ``pending`` rows are still being computed (the worst may be among them) or while no run has a verdict yet
    (a live root whose runs have written no step: opening one would show an empty page)."""
    if pending:
        return None
    judged = [r for r in rows if r.get("steps") and verdict_rank(r.get("verdict")) >= 0]
    return max(judged, key=worst_key)["id"] if judged else None  # max keeps the first of equal keys


def banner_text(row: Mapping | None) -> tuple[str, str]:
    """(verdict word, reason) the run view's banner shows for a fleet row: the row's own verdict and reason (the
    same as `arldiag ls` and the report), or what is still missing."""
    if row is None:
        return "", "reading the run ..."
    word = row.get("verdict")
    if word == "error":
        return "error", str(row.get("verdict_reason") or row.get("error") or "the run could not be read")
    if not row.get("steps"):
        return "", "no step recorded yet: the verdict comes with the first steps"
    if verdict_rank(word) < 0:
        return "", "computing the verdict ..."
    return str(word), str(row.get("verdict_reason") or "")

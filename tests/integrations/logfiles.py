"""Helpers of the tests that write a trainer's log and import it: a CSV of rows, and a quiet `arldiag import`."""
import contextlib
import csv
import io
import os
from pathlib import Path

from arldiag.commands.import_steps import import_steps

# the real development runs: beside the repository (../shared/real_runs), or where ARLDIAG_REAL_RUNS says (a git
# worktree elsewhere)
REAL = Path(os.environ.get("ARLDIAG_REAL_RUNS") or Path(__file__).resolve().parents[3] / "shared" / "real_runs")


def write_csv(path: Path, rows: list[dict]) -> None:
    """Rows (dicts, possibly with different keys) as a header-row CSV; floats written exactly (repr)."""
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        w.writerows({k: repr(v) if isinstance(v, float) else v for k, v in r.items()} for r in rows)


def import_log(path: Path, out: Path) -> str:
    """`arldiag import` of ``path`` into ``out``; returns what it printed (stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        import_steps(str(path), str(out))
    return err.getvalue()

"""Readers of other tools' logs, for `arldiag import FORMAT PATH --out RUN` (arldiag/commands/import_steps.py is
the command line; this package is the library).

One module per format family declares its ``IMPORTERS`` (``base.Importer``: name, kind steps|rollout, read, guess,
step_column); ``MODULES`` below lists those modules in the order help and error messages list the formats.
``steps.py`` turns a step importer's rows into a step table under arldiag's names (``arldiag/aliases.py``).
A new format: its module (added to ``MODULES``) and its test, plus a section of docs/integrations/importers.md.
"""
from __future__ import annotations

from pathlib import Path

from arldiag.importers import csv_jsonl, tensorboard, trl, verl, wandb
from arldiag.importers.base import Importer, Rows  # noqa: F401 (API)

# the formats' modules, in the order the formats are listed (tests/integrations/test_importer_registry.py checks
# that every module of this folder with IMPORTERS is here)
MODULES = (csv_jsonl, verl, trl, tensorboard, wandb)


def _collect() -> dict[str, Importer]:
    out: dict[str, Importer] = {}
    for mod in MODULES:
        for imp in mod.IMPORTERS:
            if imp.name in out:
                raise ValueError(f"importer {imp.name!r} is declared twice")
            out[imp.name] = imp
    # steps formats first, rollout formats after (the order of `arldiag import --help`)
    return {n: i for k in ("steps", "rollout") for n, i in out.items() if i.kind == k}


IMPORTERS: dict[str, Importer] = _collect()
FORMATS = tuple(IMPORTERS)
STEP_FORMATS = tuple(n for n, i in IMPORTERS.items() if i.kind == "steps")


def guess_format(path: Path) -> str:
    """The first importer whose ``guess`` accepts ``path``; an error asking for FORMAT otherwise."""
    for imp in IMPORTERS.values():
        if imp.guess is not None and imp.guess(path):
            return imp.name
    raise ValueError(f"format: cannot tell the format of {str(path)!r}; give it: arldiag import FORMAT PATH")

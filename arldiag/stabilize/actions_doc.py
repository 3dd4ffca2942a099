"""Render docs/stabilize.md's table of actions from their declarations (stabilize/kinds.py: each ActionSpec's
summary, parameters, limits and the method a trainer implements) and its table of what each trainer supports (each
trainer's controls: ``supports`` and ``notes``), so a new action documents itself.

    python -m arldiag.stabilize.actions_doc --write   # tests/stabilize/test_action_declarations.py fails when stale
"""
from __future__ import annotations

import importlib
from pathlib import Path

from arldiag.docblocks import main, replace_block
from arldiag.stabilize.kinds import ACTIONS
from arldiag.stabilize.spec import ActionSpec

DOC = Path(__file__).resolve().parents[2] / "docs" / "stabilize.md"
MARKERS = {"actions": ("<!-- actions:start -->", "<!-- actions:end -->"),
           "trainers": ("<!-- trainers:start -->", "<!-- trainers:end -->")}
# the trainers' controls (a Stabilizable each): column title -> "module:class" (imported when rendering; none
# imports torch, TRL or verl at module level)
TRAINERS = {"reference trainer (`arldiag train`)": "arldiag.trainer.stabilize:TrainerControls",
            "TRL `GRPOTrainer`": "arldiag.collectors.trl_stabilize:TRLControls",
            "verl": "arldiag.collectors.verl_loss:VerlControls"}


def row(s: ActionSpec) -> str:
    params = "; ".join(f"`{k}`: {doc}" for k, doc in s.params.items()) or "none"
    limits = "; ".join(f"`{lim.name}` = {lim.default!r}: {lim.doc}" for lim in s.limits) or "-"
    return f"| `{s.kind}` | {s.summary} | {params} | {limits} | `{s.method}` |"


def render() -> str:
    """The table of actions: one row per action, in application order."""
    return "\n".join(["| action | what it does | parameters | limits (`[stabilize]`) | trainer method |",
                      "|---|---|---|---|---|", *(row(s) for s in ACTIONS.values())])


def controls() -> dict[str, type]:
    """Column title -> the trainer's controls class (TRAINERS)."""
    out = {}
    for title, where in TRAINERS.items():
        module, _, name = where.partition(":")
        out[title] = getattr(importlib.import_module(module), name)
    return out


def render_trainers() -> str:
    """The table of trainers: per action, whether each trainer's controls support it, and how (or why not)."""
    cols = controls()

    def cell(cls: type, kind: str) -> str:
        note = getattr(cls, "notes", {}).get(kind)
        yes = "yes" if kind in cls.supports else "no"
        return f"{yes}: {note}" if note else yes

    return "\n".join(["| action | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|",
                      *(f"| {kind} | " + " | ".join(cell(c, kind) for c in cols.values()) + " |" for kind in ACTIONS)])


def rewrite(text: str) -> str:
    """``text`` (docs/stabilize.md) with both tables between their markers rendered anew."""
    for key, body in (("actions", render()), ("trainers", render_trainers())):
        text = replace_block(text, *MARKERS[key], body, "docs/stabilize.md")
    return text


if __name__ == "__main__":
    raise SystemExit(main(DOC, rewrite, render))

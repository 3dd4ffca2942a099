"""Render the catalog of docs/detectors.md from the detectors' declarations (``Detector``: title, summary, inputs,
rule_doc, params and their docs, explanation, recommendation, source, dimension, loop_role), so a new detector
documents itself.

    python -m arldiag.detectors.catalog_doc --write   # tests/detectors/test_docs_detectors.py fails when stale
"""
from __future__ import annotations

from pathlib import Path

from arldiag.detectors.base import Detector, LOOP_ROLES
from arldiag.detectors.registry import REGISTRY
from arldiag.docblocks import main, replace_block

DOC = Path(__file__).resolve().parents[2] / "docs" / "detectors.md"
START, END = "<!-- catalog:start -->", "<!-- catalog:end -->"


def _code(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


def section(d: Detector) -> str:
    also = [c for c in d.columns if c not in d.inputs]
    lines = [f"### `{d.name}`: {d.title}", d.summary, "",
             f"- **Inputs** (any of): {_code(d.inputs)}" + (f"; also reads {_code(also)}" if also else "")]
    if d.rule_doc:
        lines.append(f"- **Rule**: {d.rule_doc}")
    if d.params:
        lines.append("- **Defaults**: `" + ", ".join(f"{k}={v!r}" for k, v in d.params.items()) + "`")
        lines.append("- **Parameters**: " + "; ".join(f"`{k}`: {d.param_doc(k)}" for k in d.params))
    lines += [f"- **Why it matters**: {d.explanation}", f"- **Recommendation**: {d.recommendation}",
              f"- **Source**: {d.source}"]
    if d.dimension:
        lines.append(f"- **Report dimension**: {d.dimension.replace('_', ' ')}")
    if d.loop_roles:
        lines.append("- **Closed-loop role**: " + "; ".join(f"{r.replace('_', '-')} ({LOOP_ROLES[r]})"
                                                           for r in d.loop_roles))
    return "\n".join(lines)


def render() -> str:
    """The text between the catalog markers: one section per registered detector, in registry order."""
    return "\n\n".join(section(d) for d in REGISTRY.values())


def rewrite(text: str) -> str:
    """``text`` (docs/detectors.md) with the catalog between its markers replaced by ``render()``."""
    return replace_block(text, START, END, render(), "docs/detectors.md")


if __name__ == "__main__":
    raise SystemExit(main(DOC, rewrite, render))

"""Markdown rendering of a Report, for pasting into an issue tracker: walks the sections' blocks (blocks.py); a
figure becomes its ``alt`` blocks (tables and summary lines), folded blocks are shown in full."""
from __future__ import annotations

from typing import Any

from arldiag.report import blocks as B
from arldiag.report.sections import build_sections


def _cell(x: Any) -> str:
    return inline(x).replace("|", "\\|").replace("\n", " ")


def inline(x: Any) -> str:
    """Inline content as Markdown; "\\n" in a list is a space (a table row or a list item is one line)."""
    if isinstance(x, B.Span):
        t = f"`{x.text}`" if x.code else str("" if x.text is None else x.text)
        return f"**{t}**" if x.strong else t
    if isinstance(x, (list, tuple)):
        return "".join(" " if p == "\n" else inline(p) for p in x)
    return str("" if x is None else x)


def table(head: list, rows: list[list]) -> list[str]:
    return (["| " + " | ".join(_cell(h.value if isinstance(h, B.Cell) else h) for h in head) + " |",
             "|" + "---|" * len(head)]
            + ["| " + " | ".join(_cell(c.value if isinstance(c, B.Cell) else c) for c in r) + " |" for r in rows]
            + [""])


def blocks(bs) -> list[str]:
    out: list[str] = []
    for b in bs:
        if "md" in b.formats:
            out += block(b)
    return out


def block(b: B.Block) -> list[str]:
    if isinstance(b, (B.Text, B.Note)):
        return [inline(b.text), ""] if b.text else []
    if isinstance(b, B.Bullets):
        if not b.items:
            return []
        lines = []
        for k, i in enumerate(b.items, start=1):
            mark, indent = (f"{k}.", "   ") if b.ordered else ("-", "  ")
            text, sub, label = (i.text, i.sub, i.sub_label) if isinstance(i, B.Item) else (i, [], "")
            lines.append(f"{mark} {inline(text)}")
            lines += [f"{indent}- {label.lower() + ': ' if label else ''}{inline(s)}" for s in sub]
        return lines + [""]
    if isinstance(b, B.Table):
        return table(b.head, b.rows)
    if isinstance(b, B.Figure):
        return blocks(b.alt)
    if isinstance(b, B.Heading):
        return ["#" * b.level + " " + inline(b.text), ""]
    if isinstance(b, (B.Folded, B.Box)):
        return blocks(b.blocks)
    if isinstance(b, B.Card):
        return table(["", b.name], [["status", b.status], *b.rows]) + [b.summary, ""]
    if isinstance(b, B.Pre):
        return ["```", b.text, "```", ""]
    if isinstance(b, B.Tokens):
        return [" ".join(f"`{lab}`" for lab in b.labels), ""]
    raise TypeError(f"no Markdown for block {type(b).__name__}")


def render_markdown(report) -> str:
    rep = report.main
    L = [f"# arldiag report: {rep.name}", "", f"_generated {report.generated} by arldiag {report.version}_", ""]
    for s in build_sections(report):
        if "md" in s.formats:
            L += [f"## {s.title}", ""] + blocks(s.blocks)
    return "\n".join(L) + "\n"

"""The vocabulary a report section is written in. A section's ``build(report)`` returns a ``Section`` of blocks;
the renderers (render/html.py, render/markdown.py) walk the blocks, so a section says *what* it shows once and every
format shows it in its own way. JSON (render/json.py) walks the sections' ``data`` instead: the documented fields a
tool reads.

Inline content (a Text's text, a table cell, a list item) is a string or a list of strings and Spans; "\\n" in such a
list is a line break. Formats that cannot show something get an alternative: a Figure's ``alt`` blocks are what a
format without figures (Markdown) shows instead, and any block can be limited to some formats (``formats``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence, Union

ALL = ("html", "md")


@dataclass
class Span:
    """Inline text with a style: ``strong`` (bold; **x** in Markdown), ``cls`` (an HTML class, e.g. sev-critical),
    ``code`` (monospace)."""
    text: Any
    strong: bool = False
    cls: str = ""
    code: bool = False


Inline = Union[str, Span, Sequence[Union[str, Span]]]


@dataclass
class Block:
    formats: tuple[str, ...] = field(default=ALL, kw_only=True)  # the formats that show this block


@dataclass
class Text(Block):
    """A paragraph; ``muted`` is secondary text (grey in HTML)."""
    text: Inline
    muted: bool = False


@dataclass
class Note(Block):
    """What the run lacks for this part of the report (nothing is drawn when ``text`` is empty)."""
    text: str | None


@dataclass
class Item:
    """A list item with an optional labelled sub-list (a recommendation and its evidence)."""
    text: Inline
    sub: list[Inline] = field(default_factory=list)
    sub_label: str = ""


@dataclass
class Bullets(Block):
    items: list[Union[Inline, Item]]
    ordered: bool = False


@dataclass
class Cell:
    """A table cell with an HTML class (a severity colour)."""
    value: Inline
    cls: str = ""


@dataclass
class Table(Block):
    """``head`` is the header row; a row is a list of cells (str, number, Inline or Cell). ``row_classes``: an HTML
    class per row; ``header_column``: the first column is a header (a key/value table)."""
    head: list[Any]
    rows: list[list[Any]]
    row_classes: list[str] | None = None
    header_column: bool = False
    cls: str = ""


@dataclass
class Figure(Block):
    """A plotly figure (None: nothing to draw); ``alt`` is what a format without figures shows instead."""
    figure: Any
    alt: list[Block] = field(default_factory=list)


@dataclass
class Heading(Block):
    """A sub-heading inside a section (h3, or h4 with level=4); ``anchor`` is its id."""
    text: Inline
    level: int = 3
    anchor: str = ""


@dataclass
class Folded(Block):
    """Blocks a reader opens on demand (HTML <details>); shown in full where a format cannot fold."""
    summary: str
    blocks: list[Block]


@dataclass
class Box(Block):
    """A group of blocks laid out together (HTML: a div of class ``cls``: "two" columns, "verdicts" cards)."""
    blocks: list[Block]
    cls: str = ""


@dataclass
class Card(Block):
    """One run's verdict: its name, status (in ``color``), a key/value table and a summary line."""
    name: str
    status: str
    color: str
    rows: list[tuple[str, Any]]
    summary: str


@dataclass
class Tokens(Block):
    """A sequence's tokens coloured by log ratio: blue r < 1, red r > 1, full colour at |log r| = ``scale``;
    ``titles`` are the hover texts."""
    labels: list[str]
    values: list[float]
    titles: list[str]
    scale: float


@dataclass
class Pre(Block):
    """Recorded text shown as is (a sequence's text)."""
    text: str


@dataclass
class Section:
    """One part of the report: ``id`` is its anchor (and the nav link), ``blocks`` what it shows."""
    id: str
    title: str
    blocks: list[Block]
    nav: str = ""                    # the nav link's text ("": not in the nav)
    formats: tuple[str, ...] = ALL   # the formats that show this section

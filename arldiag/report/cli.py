"""`arldiag report RUN [--baseline RUN2] [-o FILE] [--format html|md|json]`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from arldiag.progress import bar as progress_bar

FORMATS = ("html", "md", "json")
SUFFIX = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="run folder (or a root/glob holding exactly one run)")
    parser.add_argument("--baseline", help="a second run shown side by side")
    parser.add_argument("-o", "--output", help="output file (default: report.<format>; '-' for stdout)")
    parser.add_argument("--format", choices=FORMATS, help="html (default, or from the -o suffix), md or json")
    parser.add_argument("--max-points", type=int, default=1500,
                        help="points per plotted series after min-max downsampling (default 1500)")
    parser.add_argument("--tokenizer", help="local tokenizer.json or model folder to decode offender token ids "
                                            "(never downloaded; default: RUN/tokenizer.json when present)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def render(report: Any, fmt: str, progress: Any = None) -> str:
    if fmt == "html":
        from arldiag.report.html import render_html

        return render_html(report, progress)
    if fmt == "md":
        from arldiag.report.markdown import render_markdown

        return render_markdown(report)
    if fmt == "json":
        from arldiag.report.jsonout import render_json

        return render_json(report)
    raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")


def write_report(run: Any, output: str | None = None, fmt: str | None = None, baseline: Any = None,
                 progress: bool = True, **kwargs: Any) -> str:
    """Build and write a report; returns the output path ('-' for stdout). kwargs go to build_report."""
    from arldiag.report.build import build_report

    if fmt is None:
        fmt = SUFFIX.get(Path(output).suffix.lower(), "html") if output and output != "-" else "html"
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    report = build_report(run, baseline=baseline, progress=progress, **kwargs)
    with progress_bar(total=5, desc=f"render {fmt}", file=sys.stderr, disable=not progress or fmt != "html",
              leave=False) as bar:
        text = render(report, fmt, bar)
    output = output or f"report.{fmt}"
    if output == "-":
        sys.stdout.write(text)
    else:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(text, encoding="utf-8")
    return output


def main(args: argparse.Namespace) -> int:
    try:
        out = write_report(args.run, args.output, args.format, baseline=args.baseline,
                           progress=not args.no_progress, max_points=args.max_points, tokenizer=args.tokenizer)
    except (ValueError, FileNotFoundError) as exc:  # bad input: a message, not a traceback
        print(f"arldiag report: error: {exc}", file=sys.stderr)
        return 2
    if out != "-":
        size = Path(out).stat().st_size
        print(f"wrote {out} ({size / 1e6:.2f} MB)", file=sys.stderr)
    return 0

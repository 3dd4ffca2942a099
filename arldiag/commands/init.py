"""`arldiag init [PATH] [--force]`: write an arldiag.toml with every default and its meaning."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from arldiag.config_defaults import render_default_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", default="arldiag.toml", help="file to write (default: arldiag.toml)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")


def main(args: argparse.Namespace) -> int:
    p = Path(args.path)
    if p.exists() and not args.force:
        print(f"arldiag init: error: path: {str(p)!r} exists; pass --force to overwrite", file=sys.stderr)
        return 2
    p.write_text(render_default_file(), encoding="utf-8")
    print(f"wrote {p} (every default; load it with arldiag.settings.load())", file=sys.stderr)
    return 0

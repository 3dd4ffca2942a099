"""`arldiag` command line: one small dispatcher; each subcommand lives in its own module.

A subcommand module exposes ``add_arguments(parser)`` and ``main(args) -> int``. Modules are imported only when
their command runs, so `arldiag --help` stays fast and `arldiag train` never imports DuckDB or Dash.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from arldiag import __version__
from arldiag.settings import CONFIG_ENV, config_path

# name -> (module, one-line help). Built-ins are registered here, the same way a plugin would be.
COMMANDS: dict[str, tuple[str, str]] = {
    "info": ("arldiag.commands.info", "print a run's manifest and table row counts"),
    "ls": ("arldiag.commands.ls", "table of every run under a root with its state and verdict"),
    "query": ("arldiag.commands.query", "run SQL over a run's DuckDB views"),
    "import": ("arldiag.commands.import_steps", "import logs (CSV/JSONL, verl, TRL, TensorBoard, wandb) into a run store"),
    "init": ("arldiag.commands.init", "write an arldiag.toml with every default and its meaning"),
    "compact": ("arldiag.commands.compact", "merge a finished run's parts into one file per table and rank"),
    "synth": ("arldiag.commands.synth", "write a synthetic run of any size (optionally collapsing)"),
    "verify": ("arldiag.commands.verify", "list damaged or orphaned parts of a run store (exit 1 if any)"),
    "train": ("arldiag.trainer.cli", "train with the reference trainer (SAMPO and baselines)"),
    "detect": ("arldiag.commands.detect", "run the collapse detectors over a run"),
    "diff": ("arldiag.commands.diff", "where two runs part and what moved first (run against run)"),
    "watch": ("arldiag.commands.watch", "follow a run being written and raise alerts"),
    "eval-detect": ("arldiag.commands.eval_detect", "detection benchmark: lead times and false alarms"),
    "calibrate": ("arldiag.commands.calibrate", "fit the step-scalar alert state on labelled dev runs"),
    "report": ("arldiag.report.cli", "write a post-mortem report (html, md, json)"),
    "dashboard": ("arldiag.dashboards.cli", "serve the live Dash dashboard over a runs root"),
    "reports": ("arldiag.commands.reports", "write the report of every run under roots (locally or on Ray)"),
    "fleet-stats": ("arldiag.commands.fleet_stats", "token statistics across every run of a fleet (DuckDB or Ray)"),
}


def _top_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="arldiag",
        description="Diagnostics for agentic RL training runs.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n" + "\n".join(f"  {n:<12} {h}" for n, (_, h) in COMMANDS.items())
        + "\n\nRun `arldiag COMMAND --help` for a command's options.",
    )
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("command", nargs="?", help="one of the commands below")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        top = _top_parser()
        ns, _ = top.parse_known_args(argv)
        if ns.version:
            print(__version__)
            return 0
        if ns.command is not None and ns.command not in COMMANDS:
            top.error(f"unknown command {ns.command!r}; choose from {', '.join(COMMANDS)}")
        top.print_help()
        return 0 if not argv else 2
    name, rest = argv[0], argv[1:]
    try:
        module = importlib.import_module(COMMANDS[name][0])
    except ModuleNotFoundError as exc:  # e.g. `arldiag dashboard` on the base install: the extra to add
        return _missing_extra(name, exc)
    parser = argparse.ArgumentParser(prog=f"arldiag {name}", description=COMMANDS[name][1])
    module.add_arguments(parser)
    if not any(a.dest == "config" for a in parser._actions):
        parser.add_argument("--config", metavar="FILE", default=None,
                            help="arldiag.toml to apply (default: ./arldiag.toml or $ARLDIAG_CONFIG)")
    args = parser.parse_args(rest)
    previous = os.environ.get("ARLDIAG_CONFIG")
    if getattr(args, "config", None):  # one configuration for the whole command: settings.active() reads it
        if not os.path.isfile(args.config):
            print(f"arldiag {name}: error: config: {args.config!r} does not exist", file=sys.stderr)
            return 2
        os.environ["ARLDIAG_CONFIG"] = args.config
    warnings.formatwarning = _one_line_warning
    _announce_config(name)
    try:
        rc = int(module.main(args) or 0)
        sys.stdout.flush()  # a reader that left shows up here, inside the handler below
        return rc
    except BrokenPipeError:  # `arldiag detect RUN | head`: the reader left; exit quietly (Python docs, "SIGPIPE")
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the interpreter's final flush of stdout does not fail
        return 1
    except ModuleNotFoundError as exc:
        return _missing_extra(name, exc)
    except Exception as exc:  # noqa: BLE001 - filtered by _user_error, re-raised otherwise
        if not _user_error(exc) or os.environ.get("ARLDIAG_DEBUG"):
            raise
        print(f"arldiag {name}: error: {exc}", file=sys.stderr)
        return 2
    finally:  # main() called in-process (tests, notebooks) leaves the environment as it found it
        if getattr(args, "config", None):
            if previous is None:
                os.environ.pop("ARLDIAG_CONFIG", None)
            else:
                os.environ["ARLDIAG_CONFIG"] = previous


# the optional modules a command may need -> the extra that installs them (pyproject.toml); the base install reads
# and diagnoses logs (import, detect, report --format md/json, ls, eval-detect, verify) without any of them
EXTRAS = {"plotly": "report", "tokenizers": "report", "dash": "dashboard", "torch": "trainer",
          "transformers": "trainer", "scipy": "analysis", "tensorboard": "import", "wandb": "wandb",
          "fsspec": "s3", "s3fs": "s3", "trl": "trl", "ray": "ray"}


def _missing_extra(command: str, exc: ModuleNotFoundError) -> int:
    """One line naming the extra that provides the missing module, exit code 2; a module no extra provides is a
    bug and raises."""
    top = (exc.name or "").split(".")[0]
    if top not in EXTRAS or os.environ.get("ARLDIAG_DEBUG"):
        raise exc
    print(f"arldiag {command}: needs {top}, which is not installed: pip install 'arldiag[{EXTRAS[top]}]'",
          file=sys.stderr)
    return 2


def _announce_config(command: str) -> None:
    """Name the arldiag.toml a command applies (./arldiag.toml is read without being asked for, so the same command
    can judge differently in another folder); `arldiag init` writes one and reads none."""
    path = config_path()
    if path and command != "init":
        how = "--config or $ARLDIAG_CONFIG" if os.environ.get(CONFIG_ENV) else "found in the current folder"
        print(f"arldiag {command}: config {path} ({how})", file=sys.stderr)


def _user_error(exc: BaseException) -> bool:
    """Errors that describe bad input (a missing or broken run, a bad argument value, an unreadable file): the user
    gets their one-line message, not a traceback (ARLDIAG_DEBUG=1 shows it)."""
    if isinstance(exc, (OSError, ValueError)):
        return True
    # DuckDB's IO errors (a Parquet file changed under a query) are input errors too; its module is not imported
    # here, so the class is matched by its module
    return type(exc).__module__.startswith("duckdb") and type(exc).__name__ in ("IOException", "InvalidInputException")


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    # a CLI user gets the message, not the source line that raised it
    return f"arldiag: warning: {message}\n"


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

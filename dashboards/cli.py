"""`arldiag dashboard RUNS_ROOT [--port 8050] [--host 127.0.0.1] [--token TOKEN]`."""
from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

from arldiag.dashboards.app import create_app
from arldiag.dashboards.security import is_loopback, new_token
from arldiag.dashboards.source import MAX_DEPTH, discover_runs
from arldiag.store.reader import read_manifest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", type=Path, help="folder holding run directories (searched 3 levels deep)")
    parser.add_argument("--port", type=int, default=8050)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind; anything but a loopback address requires a token")
    parser.add_argument("--token", default=None,
                        help="access token (generated and printed when --host is not loopback and none is given)")
    parser.add_argument("--refresh", type=float, default=2.0, help="live refresh period in seconds")


def main(args: argparse.Namespace) -> int:
    if args.root.exists() and not args.root.is_dir():
        print(f"arldiag dashboard: error: {args.root} is a file, not a folder of runs", file=sys.stderr)
        return 2
    names = discover_runs(args.root)
    if not names:  # started before the trainer: the page waits and picks the runs up as they are written
        what = "does not exist yet" if not args.root.exists() else "holds no run yet"
        print(f"arldiag dashboard: {args.root} {what}: waiting for runs under {args.root.resolve()} (a folder "
              f"with a run.json, up to {MAX_DEPTH} levels down)", file=sys.stderr, flush=True)
    broken = []
    for n in names:  # a broken run.json is named now, not as an HTTP 500 later
        try:
            read_manifest(args.root / n)
        except ValueError as exc:
            broken.append(str(exc))
    if names and len(broken) == len(names):
        print(f"arldiag dashboard: error: no readable run under {args.root}: {broken[0]}", file=sys.stderr)
        return 2
    for msg in broken:
        print(f"arldiag dashboard: warning: {msg}", file=sys.stderr)
    token = args.token
    if not is_loopback(args.host) and not token:
        token = new_token()
    app = create_app(args.root, token=token, refresh_ms=max(200, int(args.refresh * 1000)))
    # a wildcard bind is reached through this machine's name, not through "0.0.0.0"
    shown = socket.gethostname() if args.host in ("0.0.0.0", "::", "") else args.host
    url = f"http://{shown}:{args.port}/" + (f"?token={token}" if token else "")
    print(f"arldiag dashboard over {args.root.resolve()} at {url}", flush=True)
    app.run(host=args.host, port=args.port, debug=False)
    return 0

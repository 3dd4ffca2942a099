"""Safety rules of the dashboard: which runs a request may name, and who may talk to the server.

- Run names are relative paths inside the runs root. A name is resolved only if it is relative, has no ``..`` part,
  and its real path (symlinks followed) stays inside the real root and holds a run.json. The browser only ever
  sends such names and plain numbers; SQL is built server-side from fixed column lists.
- Serving on anything but a loopback address needs a token. The token is checked on every request by a Flask
  ``before_request`` hook: ``?token=...`` is accepted once and swapped for an HttpOnly cookie.
"""
from __future__ import annotations

import hmac
import ipaddress
import secrets
from pathlib import Path, PurePosixPath
from urllib.parse import urlencode

COOKIE = "arldiag_token"
LOCAL_HOSTS = ("localhost",)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost'; False for 0.0.0.0, '' and every routable address."""
    if host in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_urlsafe(24)


def resolve_run(root: Path | str, name: str) -> Path:
    """Real path of the run called ``name`` under ``root``; ValueError for anything that could escape the root.

    ``name`` is what the browser sent: a POSIX relative path such as ``"exp1"`` or ``"sweep/seed0"`` (``"."`` when the
    root itself is a run).
    """
    if not isinstance(name, str) or not name or "\x00" in name or "\\" in name:
        raise ValueError(f"run name must be a non-empty relative path, got {name!r}")
    p = PurePosixPath(name)
    if p.is_absolute() or name.startswith("~") or ".." in p.parts:
        raise ValueError(f"run name {name!r} must be relative to the runs root and must not contain '..'")
    real_root = Path(root).resolve(strict=True)
    target = (real_root / p).resolve()  # follows symlinks: a link pointing outside is caught just below
    if target != real_root and real_root not in target.parents:
        raise ValueError(f"run name {name!r} resolves outside the runs root")
    if not (target / "run.json").is_file():
        raise ValueError(f"run name {name!r} is not a run (no run.json)")
    return target


def token_ok(given: str | None, token: str) -> bool:
    return bool(given) and hmac.compare_digest(str(given).encode(), token.encode())


def install_token_guard(server, token: str) -> None:
    """Refuse every request (pages, assets, callbacks) that carries neither the token cookie nor ``?token=``."""
    from flask import redirect, request

    @server.before_request
    def _check_token():  # noqa: ANN202 - Flask hook
        if token_ok(request.cookies.get(COOKIE), token):
            return None
        if token_ok(request.args.get("token"), token):
            # Swap the query token for a cookie so it leaves the address bar (and browser history) at once.
            query = urlencode([(k, v) for k, v in request.args.items(multi=True) if k != "token"])
            resp = redirect(request.path + (f"?{query}" if query else ""), code=302)
            resp.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
            return resp
        return ("arldiag dashboard: missing or wrong token (open the URL printed at start-up)", 403)

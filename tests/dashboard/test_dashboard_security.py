"""Safety: run names stay inside the root, a token guards non-loopback serving, the CLI binds loopback by default."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from arldiag.dashboards.security import COOKIE, is_loopback, resolve_run
from arldiag.dashboards.source import RunSource, discover_runs


@pytest.mark.parametrize("name", ["..", "../alpha", "alpha/../..", "/etc", "/", "~", "~/x", "", "a\\..\\b",
                                  "sweep/../../x", "alpha\x00"])
def test_resolve_run_rejects_escaping_names(runs_root: Path, name: str) -> None:
    with pytest.raises(ValueError):
        resolve_run(runs_root, name)


def test_resolve_run_accepts_runs_inside_the_root(runs_root: Path) -> None:
    assert resolve_run(runs_root, "alpha") == (runs_root / "alpha").resolve()
    assert resolve_run(runs_root, "sweep/beta") == (runs_root / "sweep" / "beta").resolve()
    with pytest.raises(ValueError, match="not a run"):
        resolve_run(runs_root, "sweep")  # a folder without run.json


def test_symlink_out_of_the_root_is_rejected(runs_root: Path, tmp_path_factory) -> None:
    outside = tmp_path_factory.mktemp("outside")
    (outside / "run.json").write_text("{}")
    os.symlink(outside, runs_root / "escape")
    with pytest.raises(ValueError, match="outside"):
        resolve_run(runs_root, "escape")
    assert "escape" not in discover_runs(runs_root)  # discovery does not follow links either
    assert RunSource(runs_root).valid(["escape", "../alpha", "alpha", "/etc"]) == ["alpha"]


def test_discover_runs_lists_nested_runs(runs_root: Path) -> None:
    assert sorted(discover_runs(runs_root)) == ["alpha", "sweep/beta"]


@pytest.mark.parametrize("host,expected", [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True),
                                           ("localhost", True), ("0.0.0.0", False), ("::", False),
                                           ("192.168.1.7", False), ("example.org", False), ("", False)])
def test_is_loopback(host: str, expected: bool) -> None:
    assert is_loopback(host) is expected


def test_token_is_required_on_every_request(runs_root: Path) -> None:
    from arldiag.dashboards.app import create_app

    client = create_app(runs_root, token="s3cret").server.test_client()
    assert client.get("/").status_code == 403
    assert client.get("/?token=wrong").status_code == 403
    assert client.post("/_dash-update-component", json={}).status_code == 403
    assert client.get("/_dash-layout").status_code == 403
    r = client.get("/?token=s3cret&x=1")
    assert r.status_code == 302 and "token" not in r.headers["Location"] and "x=1" in r.headers["Location"]
    assert COOKIE in r.headers.get("Set-Cookie", "") and "HttpOnly" in r.headers["Set-Cookie"]
    # the test client keeps the cookie: later requests pass without ?token=
    assert client.get("/").status_code == 200
    assert client.get("/_dash-layout").status_code == 200


def test_no_token_on_loopback_serves_directly(runs_root: Path) -> None:
    from arldiag.dashboards.app import create_app

    assert create_app(runs_root).server.test_client().get("/").status_code == 200


def _run_cli(monkeypatch, capsys, argv):
    import dash

    from arldiag import cli

    seen = {}
    monkeypatch.setattr(dash.Dash, "run", lambda self, **kw: seen.update(kw, app=self))
    assert cli.main(["dashboard", *argv]) == 0
    return seen, capsys.readouterr().out


def test_cli_binds_loopback_by_default(runs_root, monkeypatch, capsys) -> None:
    seen, out = _run_cli(monkeypatch, capsys, [str(runs_root), "--port", "8123"])
    assert seen["host"] == "127.0.0.1" and seen["port"] == 8123
    assert "token=" not in out
    assert seen["app"].server.test_client().get("/").status_code == 200


def test_cli_other_host_generates_and_checks_a_token(runs_root, monkeypatch, capsys) -> None:
    seen, out = _run_cli(monkeypatch, capsys, [str(runs_root), "--host", "0.0.0.0"])
    assert seen["host"] == "0.0.0.0"
    token = out.strip().split("?token=")[1]
    assert len(token) >= 20
    client = seen["app"].server.test_client()
    assert client.get("/").status_code == 403
    assert client.get(f"/?token={token}").status_code == 302
    assert client.get("/").status_code == 200


def test_cli_explicit_token(runs_root, monkeypatch, capsys) -> None:
    seen, out = _run_cli(monkeypatch, capsys, [str(runs_root), "--host", "10.1.2.3", "--token", "tok123"])
    assert "?token=tok123" in out
    assert seen["app"].server.test_client().get("/?token=tok123").status_code == 302


def test_callbacks_ignore_names_outside_the_root(runs_root: Path) -> None:
    """A forged callback request naming '../..' gets the 'no run selected' answer, not a file outside the root."""
    from arldiag.dashboards.app import create_app

    client = create_app(runs_root).server.test_client()
    body = {"output": "..view-kl.style...g-kl.figure..", "outputs": [{"id": "view-kl", "property": "style"},
                                                                    {"id": "g-kl", "property": "figure"}],
            "inputs": [{"id": "tabs", "property": "value", "value": "kl"},
                       {"id": "run-select", "property": "value", "value": ["../..", "/etc"]},
                       {"id": "data-version", "property": "data", "value": 0}],
            "changedPropIds": ["tabs.value"], "state": []}
    r = client.post("/_dash-update-component", json=body)
    assert r.status_code == 200, r.data[:500]
    assert b"no run selected" in r.data

"""App factory: ``create_app(root, token=None)`` -> a Dash app over every run under ``root``."""
from __future__ import annotations

from pathlib import Path

from arldiag.dashboards.security import install_token_guard
from arldiag.dashboards.source import RunSource

DEFAULT_REFRESH_MS = 2000


def create_app(root: Path | str, token: str | None = None, refresh_ms: int = DEFAULT_REFRESH_MS, opener=None):
    """Build the dashboard. ``token``: when given, every request must carry it (``?token=`` once, then a cookie).
    ``refresh_ms``: live-refresh period. ``opener``: ``path -> Run`` (defaults to ``arldiag.open_run``)."""
    import dash

    from arldiag.dashboards import callbacks, layout
    from arldiag.dashboards.fleet import FleetRows

    if refresh_ms <= 0:
        raise ValueError(f"refresh_ms must be positive, got {refresh_ms}")
    source = RunSource(root, opener=opener)
    app = dash.Dash(
        __name__, title="arldiag", assets_folder=str(Path(__file__).parent / "assets"),
        suppress_callback_exceptions=False, update_title=None,
        enable_mcp=False,  # no extra endpoints beyond the page and its callbacks
    )
    app.layout = lambda: layout.build_layout(source, refresh_ms)  # a function: the run list is fresh per page load
    fleet = FleetRows(source, opener=opener)  # the table the page opens on, over the same runs and opener
    callbacks.register(app, source, fleet)
    if token:
        install_token_guard(app.server, token)
    app.arldiag_source = source  # for tests and the benchmark
    app.arldiag_fleet = fleet
    return app

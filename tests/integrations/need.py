"""Integration tests skip when the framework is not installed, except in CI (ARLDIAG_REQUIRE_INTEGRATIONS=1, set by
.ci/run), where a missing framework is a failure: none of them may be skipped there."""
import importlib
import os

import pytest


def need(module: str):
    if os.environ.get("ARLDIAG_REQUIRE_INTEGRATIONS") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module)

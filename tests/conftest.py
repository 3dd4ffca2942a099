"""Fixtures shared by several test folders.

A real S3-compatible server on 127.0.0.1 for the object-storage tests (tests/core) and the fleet engines
(tests/fleet_engine): moto's standalone server in its own process (``python -m moto.server``), reached through s3fs
exactly as a bucket on AWS would be. Skips without moto/s3fs, except in CI (ARLDIAG_REQUIRE_INTEGRATIONS=1) where it
fails (integrations/need.py)."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from integrations.need import need


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint():
    need("moto.server")
    need("s3fs")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto server did not start on {url}")
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(10)

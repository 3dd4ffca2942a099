"""Fixtures of the core tests.

A real S3-compatible server on 127.0.0.1 for the object-storage tests: moto's standalone server in its own
process (``python -m moto.server``), reached through s3fs exactly as a bucket on AWS would be. The client side is
configured the standard way (AWS_ENDPOINT_URL and credentials in the environment), so nothing in arldiag knows it
talks to a test server. Skips without moto/s3fs, except in CI (ARLDIAG_REQUIRE_INTEGRATIONS=1) where it fails."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest


def need(module: str):
    import importlib

    if os.environ.get("ARLDIAG_REQUIRE_INTEGRATIONS") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module)


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


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    """A fresh bucket; yields its ``s3://`` URL. The environment points every S3 client at the local server."""
    import uuid

    import fsspec

    for k, v in {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ENDPOINT_URL_S3": s3_endpoint,
                 "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    fsspec.AbstractFileSystem.clear_instance_cache()  # s3fs instances cache their endpoint: start clean
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    bucket = f"arldiag-{uuid.uuid4().hex[:12]}"
    fs = fsspec.filesystem("s3")
    fs.mkdir(bucket)
    yield f"s3://{bucket}"
    s3fs.S3FileSystem.clear_instance_cache()

"""Fixtures of the core tests: a fresh bucket on the session's S3 server (``s3_endpoint``, tests/conftest.py).

The client side is configured the standard way (AWS_ENDPOINT_URL and credentials in the environment), so nothing in
arldiag knows it talks to a test server."""
from __future__ import annotations

import pytest


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

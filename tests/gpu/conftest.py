"""The device the tests of this folder run on: CUDA when torch sees a GPU, else they skip (marker ``cuda``).
``ARLDIAG_TEST_DEVICE=cpu`` runs the same test bodies on CPU tensors, with the collector taking its device path for
them (collectors/collector.py ``_on_device``), so they are developed and kept honest without a GPU."""
from __future__ import annotations

import os

import pytest


def test_device() -> str | None:
    want = os.environ.get("ARLDIAG_TEST_DEVICE")
    if want:
        return want
    try:
        import torch
    except ImportError:
        return None
    return "cuda" if torch.cuda.is_available() else None


test_device.__test__ = False  # a helper, not a test


@pytest.fixture
def device(monkeypatch) -> str:
    dev = test_device()
    if dev is None:
        pytest.skip("no CUDA device (set ARLDIAG_TEST_DEVICE=cpu to run these bodies on CPU tensors)")
    if dev == "cpu":  # CPU tensors take the collector's device path, as CUDA tensors do
        from arldiag.backends import is_torch
        from arldiag.collectors import collector

        monkeypatch.setattr(collector, "_on_device", is_torch)
    return dev

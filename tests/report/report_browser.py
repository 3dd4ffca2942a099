"""Headless Chromium helpers for the report's browser tests (Debian chromium + chromedriver via selenium)."""
from __future__ import annotations

import shutil
import struct
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-dev-shm-usage")


def chromium_available() -> bool:
    return Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()


def start_driver(width: int = 1280, height: int = 1600):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for a in ARGS:
        opts.add_argument(a)
    profile = tempfile.mkdtemp(prefix="arldiag-report-chromium-")
    opts.add_argument(f"--user-data-dir={profile}")
    opts.add_argument(f"--window-size={width},{height}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    drv._arldiag_profile = profile
    return drv


def stop_driver(drv) -> None:
    try:
        drv.quit()
    finally:
        shutil.rmtree(getattr(drv, "_arldiag_profile", ""), ignore_errors=True)


def wait_for(drv, js: str, timeout: float = 30.0, poll: float = 0.2):
    """Poll a JS expression until it returns a truthy value; returns it (or the last value on timeout)."""
    end = time.time() + timeout
    val = None
    while time.time() < end:
        val = drv.execute_script(f"return {js}")
        if val:
            return val
        time.sleep(poll)
    return val


def decode_png(data: bytes) -> np.ndarray:
    """Minimal PNG decoder (8-bit RGB/RGBA, non-interlaced; what Chromium writes) -> [H, W, C] uint8.
    Written here to keep the test free of an image library; filters per the PNG spec, section 9."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, width = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or color not in (2, 6) or interlace:
                raise ValueError(f"unsupported PNG (depth {depth}, colour type {color}, interlace {interlace})")
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8)
    stride = width * channels
    rows = raw.reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.int32)
    prev = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        f, line = rows[y, 0], rows[y, 1:].astype(np.int32)
        if f == 0:
            cur = line
        elif f == 2:  # up
            cur = (line + prev) & 0xFF
        elif f == 1:  # sub: a running sum along the row, per channel
            cur = (np.cumsum(line.reshape(-1, channels), axis=0) & 0xFF).reshape(-1)
        else:  # average / paeth depend on the reconstructed left neighbour: go byte by byte
            cur = np.zeros(stride, dtype=np.int32)
            for x in range(stride):
                a = cur[x - channels] if x >= channels else 0
                b = prev[x]
                c = prev[x - channels] if x >= channels else 0
                if f == 1:
                    pred = a
                elif f == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[x] = (line[x] + pred) & 0xFF
        out[y] = cur
        prev = cur
    return out.reshape(height, width, channels).astype(np.uint8)


def screenshot(drv, element_id: str | None = None, scale: float = 0.5) -> np.ndarray:
    """A downscaled PNG screenshot of one element (or of the page top), decoded -> [H, W, C] uint8."""
    import base64

    if element_id is None:
        x, y, w, h = drv.execute_script("return [0, 0, document.documentElement.scrollWidth, "
                                        "Math.min(document.documentElement.scrollHeight, 4000)]")
    else:
        x, y, w, h = drv.execute_script(
            "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
            "return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]", element_id)
    shot = drv.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": float(x), "y": float(y), "width": float(w), "height": float(h), "scale": scale}})
    return decode_png(base64.b64decode(shot["data"]))

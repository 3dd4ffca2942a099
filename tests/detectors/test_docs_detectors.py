"""docs/detectors.md documents every registered detector with its current defaults."""
from pathlib import Path

from arldiag.detectors import REGISTRY

DOC = Path(__file__).resolve().parents[2] / "docs" / "detectors.md"


def test_every_detector_documented_with_defaults():
    text = DOC.read_text()
    for name, d in REGISTRY.items():
        assert f"### `{name}`" in text, name
        defaults = "`" + ", ".join(f"{k}={v!r}" for k, v in d.params.items()) + "`"
        assert defaults in text, f"{name}: defaults in docs/detectors.md are out of date"
        for c in d.inputs:
            assert f"`{c}`" in text

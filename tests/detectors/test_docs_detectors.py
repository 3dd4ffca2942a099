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


def test_catalog_is_rendered_from_the_declarations():
    from arldiag.detectors.catalog_doc import rewrite

    text = DOC.read_text()
    assert text == rewrite(text), "docs/detectors.md's catalog is stale: python -m arldiag.detectors.catalog_doc --write"


def test_a_detector_declares_its_parameters_docs_and_dimension():
    import pytest

    from arldiag.detectors.base import Detector

    rule = lambda w, state, p: None  # noqa: E731
    Detector(name="x", title="X", inputs=("entropy",), rule=rule, params={"smooth": 3})  # a shared parameter name
    with pytest.raises(ValueError, match=r"document parameter\(s\) \['my_knob'\]"):
        Detector(name="x", title="X", inputs=("entropy",), rule=rule, params={"my_knob": 1})
    Detector(name="x", title="X", inputs=("entropy",), rule=rule, params={"my_knob": 1},
             param_docs={"my_knob": "what it turns"})
    with pytest.raises(ValueError, match="dimension must be one of"):
        Detector(name="x", title="X", inputs=("entropy",), rule=rule, dimension="vibes")
    for d in REGISTRY.values():  # every shipped detector: summary, rule, remedies
        assert d.summary and d.rule_doc and d.remedies, d.name

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


def test_a_detector_declares_its_closed_loop_role():
    import pytest

    from arldiag.detectors.base import LOOP_ROLES, Detector
    from arldiag.detectors.catalog_doc import section
    from arldiag.stabilize.policies import BROKEN, ENTROPY, LENGTH, OFF_POLICY

    rule = lambda w, state, p: None  # noqa: E731
    assert Detector(name="x", title="X", inputs=("entropy",), rule=rule).loop_roles == ()
    both = Detector(name="x", title="X", inputs=("entropy",), rule=rule, loop_role=("off_policy", "broken"))
    assert both.loop_roles == ("off_policy", "broken")
    for bad in ("vibes", ("off_policy", "vibes"), ()):
        with pytest.raises(ValueError, match="loop_role must be None, one of"):
            Detector(name="x", title="X", inputs=("entropy",), rule=rule, loop_role=bad)
    with pytest.raises(ValueError, match="loop_priority must be an int"):
        Detector(name="x", title="X", inputs=("entropy",), rule=rule, loop_role="broken", loop_priority=0.5)
    # the policies' tuples come from the declarations, in the order their ties were broken in before the roles
    # moved onto the detectors (a different order would name a different cause in the actions table)
    assert OFF_POLICY == ("neg_adv_low_is", "ppo_kl_spike", "clip_pressure", "kl_concentration", "grad_norm_spike",
                          "entropy_blowup", "nonfinite", "kl_ref_drift")
    assert BROKEN == ("success_collapse", "format_collapse", "nonfinite")
    assert "- **Closed-loop role**: off-policy (" in section(REGISTRY["ppo_kl_spike"])
    assert "off-policy" in section(REGISTRY["nonfinite"]) and "; broken (" in section(REGISTRY["nonfinite"])
    assert ENTROPY == ("entropy_blowup",) and LENGTH == ("length_growth",)
    assert "- **Closed-loop role**: length (" in section(REGISTRY["length_growth"])
    assert "Closed-loop role" not in section(REGISTRY["zero_std_groups"])
    assert set(LOOP_ROLES) == {"off_policy", "broken", "entropy", "length"}

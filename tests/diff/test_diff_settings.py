"""The settings two runs differ in (arldiag/diff/settings.py): run.json flattened to dotted keys, identity keys out."""
from arldiag.diff.settings import IDENTITY_KEYS, flatten, setting_delta


def test_flatten_nests_into_dotted_keys():
    assert flatten({"config": {"lr": 1e-4, "band": [0.2, 0.28], "loop": {}}, "clip": (0.2, 0.2)}) == \
        {"config.lr": 1e-4, "config.band": [0.2, 0.28], "config.loop": {}, "clip": (0.2, 0.2)}


def test_delta_lists_only_settings_that_differ():
    a = {"run_id": "x", "name": "a", "created": "t0", "clip": [0.2, 0.2],
         "config": {"lr": 1e-4, "seed": 1, "nalis_mask": False, "steps": 200, "out": "/tmp/a"}}
    b = {"run_id": "y", "name": "b", "created": "t1", "clip": (0.2, 0.2),
         "config": {"lr": 2e-4, "seed": 1.0, "nalis_mask": 0, "epochs": 2, "out": "/tmp/b"}}
    assert setting_delta(a, b) == [("config.epochs", None, 2), ("config.lr", 1e-4, 2e-4),
                                   ("config.nalis_mask", False, 0), ("config.steps", 200, None)]
    assert setting_delta(a, a) == []
    assert {"run_id", "name", "created", "config.out"} <= IDENTITY_KEYS

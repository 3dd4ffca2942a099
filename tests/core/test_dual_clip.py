"""run.json's dual_clip_c comes from the run's own config (the Collector's default used to leak: run.json said
3.0 for reference-trainer runs whose config has 0.0), and c <= 1 (off) counts no dual-clipped token."""
import json

import numpy as np
import pytest

import arldiag
from collectors.collector import resolve_dual_clip_c


def _update(col, ratio, adv):
    lpo = np.full((1, ratio.size), -1.0, np.float32)
    lp = (lpo + np.log(ratio)).astype(np.float32)
    col.record_update(0, logp=lp, logp_old=lpo, advantages=np.asarray([adv], np.float32),
                      response_mask=np.ones_like(lp, bool), sample_ids=[0])
    return col.record_step(0)


@pytest.mark.parametrize("config, arg, expected", [({"dual_clip_c": 0.0}, None, 0.0), ({}, None, 3.0),
                                                    ({"clip_ratio_c": 10.0}, None, 10.0),
                                                    ({"dual_clip_c": 0.0}, 2.0, 2.0)])
def test_run_json_dual_clip_from_config(tmp_path, config, arg, expected):
    assert resolve_dual_clip_c(arg, config) == expected
    kw = {} if arg is None else {"dual_clip_c": arg}
    with arldiag.Collector(tmp_path / "r", config=config, token_sample_rate=0.0, **kw):
        pass
    assert json.loads((tmp_path / "r" / "run.json").read_text())["dual_clip_c"] == expected


def test_dual_clip_fraction_follows_c(tmp_path):
    ratio = np.array([0.5, 1.0, 2.0, 4.0, 5.0], np.float32)  # A < 0: the dual clip binds where r > c
    with arldiag.Collector(tmp_path / "on", config={"dual_clip_c": 3.0}, token_sample_rate=0.0) as col:
        m = _update(col, ratio, -1.0)
    assert m["pg_clipfrac_lower"] == pytest.approx(np.mean(ratio > 3.0))  # 2 of 5 tokens
    with arldiag.Collector(tmp_path / "off", config={"dual_clip_c": 0.0}, token_sample_rate=0.0) as col:
        m = _update(col, ratio, -1.0)
    assert m["pg_clipfrac_lower"] == 0.0

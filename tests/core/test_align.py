"""collectors/align.py: an update aligned with its rollout is a new object; the inputs handed in stay as they were
(they may be the trainer's own arrays or a staged copy another statistics pass reads)."""
from __future__ import annotations

import numpy as np

from arldiag.collectors.align import RolloutCache, align
from arldiag.stats import UpdateInputs


def _rollout() -> RolloutCache:
    # samples 7 (3 tokens), 8 (2 tokens), 9 (1 token); rollout log-probs and ids per masked token, in order
    r = RolloutCache()
    r.add(np.array([7, 8, 9]), {"reward": np.array([1.0, 0.0, 0.5]), "group_id": np.array([1, 1, 2])},
          np.array([-0.1, -0.2, -0.3, -1.1, -1.2, -2.0], np.float32), np.array([5, 6, 7, 8, 9, 4]),
          np.array([3, 2, 1]), None)
    return r


def test_align_returns_a_new_update_and_leaves_its_input_unchanged():
    mask = np.array([[1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 1, 0]], bool)  # sample 8: 3 tokens here, 2 at rollout
    lp = np.zeros((4, 3), np.float32)
    ids = np.array([[5, 6, 7], [8, 9, 3], [4, 0, 0], [1, 2, 0]])
    inp = UpdateInputs(lp, lp, np.ones(4, np.float32), mask, token_ids=ids)
    sid = np.array([7, 8, 9, 42])  # 42: a sample the rollout did not mention
    a = align(3, [(0, inp, sid)], _rollout())
    assert a.inp is not inp
    assert inp.rollout_flat_logp is None and inp.rollout_flat_token_ids is None and inp.retok_extra is None
    assert a.inp.logp is inp.logp and a.inp.mask is inp.mask  # the arrays are shared, not copied
    # same token count (samples 7 and 9): the rollout's values at the same positions; sample 8 differs by one token
    np.testing.assert_array_equal(a.inp.rollout_flat_logp,
                                  np.array([-0.1, -0.2, -0.3, np.nan, np.nan, np.nan, -2.0, np.nan, np.nan],
                                           np.float32))
    assert a.inp.rollout_flat_token_ids.tolist() == [5, 6, 7, -1, -1, -1, 4, -1, -1]
    assert a.inp.retok_extra.tolist() == [-1, 1, -1, -1]
    assert a.cols["group_id"].tolist() == [1, 1, 2, -1]
    np.testing.assert_array_equal(a.cols["reward"], [1.0, 0.0, 0.5, np.nan])
    assert a.step == 3 and a.update == 0 and a.sizes == [4]


def test_align_without_anything_to_add_keeps_the_same_inputs():
    mask = np.ones((2, 2), bool)
    lp = np.zeros((2, 2), np.float32)
    inp = UpdateInputs(lp, lp, np.ones(2, np.float32), mask, logp_rollout=lp)  # the trainer gave lp_roll itself
    a = align(0, [(1, inp, np.array([100, 101]))], _rollout())
    assert a.inp is inp  # nothing of the rollout's per token to add: the same object, unchanged
    assert a.cols["group_id"].tolist() == [-1, -1] and np.isnan(a.cols["reward"]).all()  # samples it did not see

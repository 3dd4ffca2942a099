"""collectors/rollout_stats.py: the step aggregates and group rows of record_rollout calls, one or many at once."""
from __future__ import annotations

import math

import numpy as np

from arldiag.collectors.rollout_stats import RolloutCall, _unique_keys, rollout_stats


def test_one_call_by_hand():
    # two groups of three samples; trajectories = samples; rewards: group 0 varies, group 1 all 1 (zero std)
    sid = np.array([10, 11, 12, 13, 14, 15])
    ps = {"group_id": np.array([5, 5, 5, 9, 9, 9]), "reward": np.array([1.0, 0.0, np.nan, 1.0, 1.0, 1.0]),
          "format_valid": np.array([1, 1, 0, 1, 1, 1], bool), "truncated": np.array([0, 0, 1, 0, 0, 0], bool),
          "success": np.array([1, 0, 0, 1, 1, 1], bool)}
    (a,), g = rollout_stats([RolloutCall(7, sid, ps, np.array([3, 4, 9, 2, 2, 5]))], rank=2)
    assert a == {"n_roll": 6, "n_roll_reward": 5, "sum_reward": 4.0, "sum_reward_sq": 4.0, "n_format_known": 6,
                 "n_format_valid": 5, "n_trunc_known": 6, "n_truncated": 1, "n_resp_len": 6, "sum_resp_len": 25.0,
                 "max_resp_len": 9.0, "min_resp_len": 2.0, "n_traj": 6, "n_traj_success": 4, "n_groups": 2,
                 "n_groups_zero_std": 1, "sum_group_reward_std": a["sum_group_reward_std"]}
    # group 5: returns 1, 0, 0 (NaN counts as 0 in the return): population std of the three
    assert math.isclose(a["sum_group_reward_std"], np.std([1.0, 0.0, 0.0]))
    assert g["step"].tolist() == [7, 7] and g["rank"].tolist() == [2, 2] and g["group_id"].tolist() == [5, 9]
    assert g["n_samples"].tolist() == [3, 3] and g["n_trajectories"].tolist() == [3, 3]
    assert np.allclose(g["reward_mean"], [1 / 3, 1.0]) and g["zero_std"].tolist() == [False, True]
    assert np.allclose(g["success_frac"], [1 / 3, 1.0]) and np.allclose(g["format_valid_frac"], [2 / 3, 1.0])


def test_trajectories_sum_their_samples_rewards():
    # one group, two trajectories of two samples each: returns 1 + 1 = 2 and 0 + 1 = 1
    ps = {"group_id": np.zeros(4, np.int64), "trajectory_id": np.array([0, 0, 1, 1]),
          "reward": np.array([1.0, 1.0, 0.0, 1.0]), "success": np.array([0, 1, 0, 0], bool)}
    (a,), g = rollout_stats([RolloutCall(0, np.arange(4), ps, None)], rank=0)
    assert a["n_traj"] == 2 and a["n_traj_success"] == 1 and "n_resp_len" not in a
    assert g["n_trajectories"].tolist() == [2] and np.allclose(g["reward_mean"], [1.5])
    assert math.isclose(a["sum_group_reward_std"], np.std([2.0, 1.0]))


def test_many_calls_equal_one_at_a_time():
    """The segmented pass gives each call the aggregates and group rows it gets alone (group ids repeat across
    calls, as when every step numbers its groups from 0)."""
    rng = np.random.default_rng(2)
    for _ in range(50):
        calls = []
        for c in range(int(rng.integers(1, 6))):
            B = int(rng.integers(1, 9))
            ps = {"group_id": rng.integers(0, 3, B), "reward": np.where(rng.random(B) < 0.2, np.nan, rng.random(B)),
                  "success": rng.random(B) < 0.5, "format_valid": rng.random(B) < 0.5}
            calls.append(RolloutCall(c // 2, np.arange(B), ps, rng.integers(1, 9, B)))
        together, groups = rollout_stats(calls, 0)
        alone = [rollout_stats([c], 0) for c in calls]
        for a, (b, _) in zip(together, alone):
            assert a.keys() == b[0].keys()
            assert all(math.isclose(a[k], b[0][k], rel_tol=1e-12, abs_tol=1e-12) for k in a)
        for name in groups:
            assert np.allclose(np.concatenate([g[name] for _, g in alone]), groups[name], equal_nan=True), name


def test_unique_keys_match_numpy_unique_of_the_rows():
    rng = np.random.default_rng(3)
    for n in (0, 1, 8, 200):
        a, b = rng.integers(0, 5, n), rng.integers(-3, 4, n)
        (first, second), inv = _unique_keys(a, b)
        up, want_inv = np.unique(np.stack([a, b], 1).reshape(n, 2), axis=0, return_inverse=True)
        assert np.array_equal(first, up[:, 0]) and np.array_equal(second, up[:, 1])
        assert np.array_equal(inv, want_inv.reshape(-1))

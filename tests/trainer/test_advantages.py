"""Advantage estimators and dynamic filtering on hand-worked examples."""
from __future__ import annotations

import numpy as np
import pytest

from arldiag.trainer.advantages import (discounted_returns, dynamic_filter_keep, gigpo_advantages,
                                        gigpo_step_advantages, grpo_advantages)


def test_grpo_group_zscore_worked_example():
    # group 0: returns 1 and 3 -> mean 2, unbiased std sqrt(2) -> -+1/sqrt(2); group 1 all equal -> 0;
    # group 2 is a single episode -> 0
    A = grpo_advantages(np.array([1.0, 3.0, 2.0, 2.0, 5.0]), np.array([0, 0, 1, 1, 2]))
    np.testing.assert_allclose(A, [-0.70710653, 0.70710653, 0.0, 0.0, 0.0], atol=1e-6)


def test_grpo_three_member_group():
    A = grpo_advantages(np.array([0.0, 1.0, 5.0]), np.array([7, 7, 7]))
    # mean 2, deviations -2, -1, 3, unbiased var (4+1+9)/2 = 7
    np.testing.assert_allclose(A, np.array([-2.0, -1.0, 3.0]) / (np.sqrt(7.0) + 1e-6))


def test_discounted_returns():
    np.testing.assert_allclose(discounted_returns([-0.1, -0.1, 10.9], 0.5), [2.575, 5.35, 10.9])
    assert discounted_returns([], 0.95).shape == (0,)


def test_gigpo_anchor_clusters_worked_example():
    # group 0: episode A visits s0, s1, s2 and solves; episode B visits s0, s3; episode D visits s0 once.
    # group 1: episode C also starts from a state rendered "s0", but clusters never cross groups.
    gamma = 0.5
    G_A = discounted_returns([-0.1, -0.1, 10.9], gamma)   # [2.575, 5.35, 10.9]
    G_B = discounted_returns([-0.1, -0.1], gamma)         # [-0.15, -0.1]
    G_D = discounted_returns([1.0], gamma)                # [1.0]
    G_C = discounted_returns([1.0], gamma)
    step_returns = np.concatenate([G_A, G_B, G_D, G_C])
    groups = np.array([0, 0, 0, 0, 0, 0, 1])
    anchors = ["s0", "s1", "s2", "s0", "s3", "s0", "s0"]
    A_step = gigpo_step_advantages(step_returns, groups, anchors)
    # cluster (0, s0) = {2.575, -0.15, 1.0}: mean 1.141667, unbiased std 1.368013
    expected = np.zeros(7)
    expected[[0, 3, 5]] = [1.047749, -0.944192, -0.103557]
    # s1, s2, s3 are singleton clusters, and (1, s0) is a singleton too: advantage 0
    np.testing.assert_allclose(A_step, expected, atol=1e-5)


def test_gigpo_combined_advantage():
    A = gigpo_advantages(np.array([0.5, 0.5, -0.5]), np.array([1.0, 0.0, -2.0]), omega=0.5)
    np.testing.assert_allclose(A, [1.0, 0.5, -1.5])


def test_gigpo_length_mismatch_raises():
    with pytest.raises(ValueError, match="same length"):
        gigpo_step_advantages(np.zeros(2), np.zeros(3), ["a", "b"])


def test_dynamic_filter_drops_uniform_groups_after_cold_start():
    returns = np.array([1.0, 1.0, 0.0, 2.0, -1.5, -1.5])
    groups = np.array([0, 0, 1, 1, 2, 2])
    assert dynamic_filter_keep(returns, groups, step=10, cold_start_steps=5).tolist() == [False, False, True, True,
                                                                                         False, False]
    assert dynamic_filter_keep(returns, groups, step=4, cold_start_steps=5).all()


def _episode(group, rewards, anchors, valid=None):
    from arldiag.trainer.rollout import Episode, Turn

    valid = valid or [True] * len(rewards)
    ep = Episode(task_id=group, group_index=group, prompt_ids=[1])
    for r, a, v in zip(rewards, anchors, valid):
        ep.turns.append(Turn([1], [2], [2], [0.0], [], r, v, False, a))
    return ep


def test_loop_turn_advantages_grpo_and_gigpo():
    from arldiag.trainer.config import make_config
    from arldiag.trainer.loop import episode_advantages

    eps = [_episode(0, [-0.1, 10.9], ["s0", "s1"]), _episode(0, [-0.1, -0.1], ["s0", "s2"], valid=[True, False])]
    # format penalty 0.5 on the invalid turn: returns 10.8 and -0.7
    cfg = make_config("grpo", format_penalty=0.5)
    per_turn, returns = episode_advantages(eps, cfg)
    np.testing.assert_allclose(returns, [10.8, -0.7])
    a = 1 / np.sqrt(2)  # two-member z-score
    np.testing.assert_allclose(per_turn[0], [a, a], atol=1e-6)
    np.testing.assert_allclose(per_turn[1], [-a, -a], atol=1e-6)
    # GiGPO (gamma 0.5, omega 1): only the shared anchor s0 forms a cluster: G = -0.1 + 0.5 * 10.9 = 5.35 vs
    # -0.1 + 0.5 * (-0.6) = -0.4 -> +-1/sqrt(2); the later turns are singletons -> step advantage 0
    cfg = make_config("sampo", format_penalty=0.5, gamma=0.5, omega=1.0)
    per_turn, _ = episode_advantages(eps, cfg)
    np.testing.assert_allclose(per_turn[0], [2 * a, a], atol=1e-5)
    np.testing.assert_allclose(per_turn[1], [-2 * a, -a], atol=1e-5)

"""A trivial environment for the trainer's own tests (the real ones live in arldiag.trainer.envs)."""
from __future__ import annotations

import pytest

from arldiag.trainer.envs.base import StepResult


class ToyEnv:
    """Say the target word. Reward = share of the response's words equal to the target, valid or not (so rewards
    vary within a group even for a random policy); valid iff every word is yes/no; two turns; optional tool output
    "ok"."""

    name = "toy"

    def __init__(self, max_turns: int = 2, tool: bool = False):
        self.max_turns, self.tool = max_turns, tool
        self.turn, self.target, self.done = 0, "yes", False

    def reset(self, seed: int) -> None:
        self.turn, self.target, self.done = 0, ("yes", "no")[seed % 2], False

    def observation(self) -> str:
        return f"say {self.target} \n turn {self.turn}"

    def anchor(self) -> str:
        return f"turn {self.turn}"

    def step(self, response: str) -> StepResult:
        words = [w for w in response.split(" ") if w]
        self.turn += 1
        valid = bool(words) and all(w in ("yes", "no") for w in words)
        reward = words.count(self.target) / max(1, len(words))
        self.done = self.turn >= self.max_turns
        return StepResult(reward=reward, done=self.done, valid=valid, success=self.done and reward > 0.5,
                          tool_output="ok" if self.tool and not self.done else "")

    def solver_response(self) -> str:
        return f"{self.target} {self.target}"

    @staticmethod
    def vocabulary():
        return ["say", "yes", "no", "\n", "turn", "0", "1", "2", "3", "ok"]


@pytest.fixture
def toy_factory():
    return lambda: ToyEnv()


@pytest.fixture
def toy_tool_factory():
    return lambda: ToyEnv(tool=True)

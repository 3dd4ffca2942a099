"""The small interface every multi-turn environment of the reference trainer implements.

An episode is a sequence of turns. At each turn the policy sees ``observation()`` (plain text, already holding
whatever history the environment chooses to show, e.g. Sokoban's last two observation/action pairs), writes a
response, and ``step(response)`` parses it, moves the environment and returns a ``StepResult``.

Tool-use environments may also return ``tool_output``: text the environment inserts into the context after the
policy's response (a calculator's answer, say). The trainer tokenises it and masks it out of the loss
(response_mask = 0), as AT^2PO and verl-agent do for tool/environment tokens.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True)
class StepResult:
    reward: float          # the environment's reward for this turn (format penalty included)
    done: bool             # the episode ended (solved, failed, or out of turns)
    valid: bool            # the response parsed as a well-formed action (format validity)
    success: bool          # the task is solved (only meaningful when done)
    tool_output: str = ""  # text inserted after the response, masked out of the loss ("" for none)


class Env(Protocol):
    name: str
    max_turns: int

    def reset(self, seed: int) -> None:
        """Start a new episode; the same seed gives the same task (levels are generated, never downloaded)."""

    def observation(self) -> str:
        """The text prompt the policy sees at the current turn."""

    def anchor(self) -> str:
        """A string identifying the current environment state (GiGPO anchor observation, e.g. the grid)."""

    def step(self, response: str) -> StepResult:
        """Parse the policy's response, apply it, and report the outcome."""

    def solver_response(self) -> str:
        """A well-formed optimal response for the current state (demonstrations for behaviour cloning)."""

    @staticmethod
    def vocabulary() -> Sequence[str]:
        """Every word/symbol the env's observations, responses and tool outputs can contain.

        The reference trainer builds its local word-level tokenizer from this list (no hub download)."""

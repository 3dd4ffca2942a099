"""Multi-turn environments of the reference trainer, by name.

Text contract for the trainer's word-level tokenizer: every observation, solver response and tool output is a
sequence of words from the env's ``vocabulary()`` separated by single spaces; the newline character is a word of
its own (always surrounded by spaces), so ``split_words`` (split on " ") keeps it while ``str.split()`` drops it.
"""
from __future__ import annotations

from .base import Env, StepResult
from .calculator import CalculatorEnv
from .sokoban import SokobanEnv

ENVS: dict[str, type] = {"sokoban": SokobanEnv, "calculator": CalculatorEnv}


def make_env(name: str, **kw) -> Env:
    """A fresh (not yet reset) environment; keyword arguments go to its constructor (max_turns=..., ...)."""
    if name not in ENVS:
        raise ValueError(f"name must be one of {sorted(ENVS)}, got {name!r}")
    return ENVS[name](**kw)


def split_words(text: str) -> list[str]:
    """The words of an env text: split on spaces, newline characters kept as words."""
    return [w for w in text.split(" ") if w]


__all__ = ["ENVS", "Env", "StepResult", "CalculatorEnv", "SokobanEnv", "make_env", "split_words"]

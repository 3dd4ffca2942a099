"""A tool-use arithmetic task: evaluate ``a op b op c`` with a calculator tool, then answer.

Structure (unlike Sokoban, the environment talks back inside the context): each turn the policy writes either
  ``<tool> a op b </tool>``  one binary operation (op in + - *); the environment replies with the tool output
                              ``<result> r </result> \\n``, which the trainer inserts after the response and masks out
                              of the loss (response_mask = 0, as AT^2PO / verl-agent do for tool tokens), or
  ``<answer> n </answer>``    which ends the episode: reward +1 and success if n is the value of the expression
                              (usual precedence: * before + and -, left to right otherwise), reward 0 otherwise.
Anything else is a format error: reward -0.1, valid=False, nothing changes. Tool calls earn 0. Every response uses up
one turn; after ``max_turns`` (4) turns without an answer the episode ends with success False.

Numbers are written one digit per word ("1 2" is twelve) and a negative number starts with the word "-"
("- 7"); parsing removes all whitespace first, so "1 2" and "12" are the same number.

The observation is the task followed by every tool call so far (in canonical spelling) and its result, so
observation() after a tool call equals the previous observation + " " + the canonical call + " " + tool_output:
a trainer that keeps one growing context and one that rebuilds the prompt each turn see the same words.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .base import StepResult

OPS = ("+", "-", "*")
CORRECT_REWARD = 1.0
WRONG_REWARD = 0.0
TOOL_REWARD = 0.0
INVALID_REWARD = -0.1
NL = "\n"  # a word of its own: always written with a space on each side

INSTRUCTION_HEAD = "compute"
INSTRUCTION_TAIL = ". call <tool> a op b </tool> for one operation , then reply <answer> n </answer>"

_NUM = r"(-?[0-9]{1,9})"
_TOOL_RE = re.compile(rf"<tool>{_NUM}([-+*]){_NUM}</tool>")
_ANSWER_RE = re.compile(rf"<answer>{_NUM}</answer>")
_WHITESPACE_RE = re.compile(r"\s+")


def spell_number(n: int) -> str:
    """An integer as words: one word per digit, a leading "-" word when negative (-12 -> "- 1 2")."""
    digits = " ".join(str(abs(n)))
    return f"- {digits}" if n < 0 else digits


def apply_op(a: int, op: str, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    raise ValueError(f"op must be one of {OPS}, got {op!r}")


@dataclass(frozen=True)
class Task:
    numbers: tuple[int, int, int]
    ops: tuple[str, str]

    def text(self) -> str:
        a, b, c = (spell_number(n) for n in self.numbers)
        return f"{a} {self.ops[0]} {b} {self.ops[1]} {c}"

    def plan(self) -> list[tuple[int, str, int]]:
        """The two tool calls in precedence order: b op2 c first when only op2 is a multiplication."""
        a, b, c = self.numbers
        op1, op2 = self.ops
        if op2 == "*" and op1 != "*":
            bc = apply_op(b, op2, c)
            return [(b, op2, c), (a, op1, bc)]
        ab = apply_op(a, op1, b)
        return [(a, op1, b), (ab, op2, c)]

    def value(self) -> int:
        a, op, b = self.plan()[-1]
        return apply_op(a, op, b)


def generate_task(seed: int, max_operand: int = 12) -> Task:
    rng = np.random.default_rng(seed)
    numbers = tuple(int(n) for n in rng.integers(1, max_operand + 1, size=3))
    ops = tuple(OPS[int(i)] for i in rng.integers(0, len(OPS), size=2))
    return Task(numbers, ops)  # type: ignore[arg-type]


def tool_call_text(a: int, op: str, b: int) -> str:
    return f"<tool> {spell_number(a)} {op} {spell_number(b)} </tool>"


def answer_text(n: int) -> str:
    return f"<answer> {spell_number(n)} </answer>"


def result_text(n: int) -> str:
    return f"<result> {spell_number(n)} </result> {NL}"


def parse_response(response: str) -> Optional[tuple]:
    """("tool", a, op, b), ("answer", n), or None when the format is wrong (whitespace is ignored)."""
    text = _WHITESPACE_RE.sub("", response)
    m = _TOOL_RE.fullmatch(text)
    if m:
        return ("tool", int(m.group(1)), m.group(2), int(m.group(3)))
    m = _ANSWER_RE.fullmatch(text)
    if m:
        return ("answer", int(m.group(1)))
    return None


class CalculatorEnv:
    """Multi-turn calculator tool use; implements arldiag.trainer.envs.base.Env."""

    name = "calculator"

    def __init__(self, max_turns: int = 4, max_operand: int = 12):
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if max_operand < 1:
            raise ValueError(f"max_operand must be >= 1, got {max_operand}")
        self.max_turns = max_turns
        self.max_operand = max_operand
        self.task: Optional[Task] = None
        self.turn = 0
        self.done = False
        self.calls: list[tuple[tuple[int, str, int], int]] = []  # ((a, op, b), result) of every tool call so far

    def reset(self, seed: int) -> None:
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.reset_task(generate_task(int(seed), self.max_operand))

    def reset_task(self, task: Task) -> None:
        """Start an episode on a given task (tests, hand-made curricula)."""
        self.task, self.turn, self.done, self.calls = task, 0, False, []

    def _require_task(self) -> Task:
        if self.task is None:
            raise RuntimeError("call reset(seed) before using the environment")
        return self.task

    def _history(self) -> str:
        return "".join(f" {tool_call_text(*call)} {result_text(r)}" for call, r in self.calls)

    def observation(self) -> str:
        return f"{INSTRUCTION_HEAD} {self._require_task().text()} {INSTRUCTION_TAIL} {NL}" + self._history()

    def anchor(self) -> str:
        # GiGPO anchor: the task and the tool results so far (the instruction is the same for every state)
        return self._require_task().text() + self._history()

    def step(self, response: str) -> StepResult:
        task = self._require_task()
        if self.done:
            raise RuntimeError("the episode is over; call reset(seed)")
        self.turn += 1
        out_of_turns = self.turn >= self.max_turns
        parsed = parse_response(response)
        if parsed is None:
            self.done = out_of_turns
            return StepResult(reward=INVALID_REWARD, done=self.done, valid=False, success=False)
        if parsed[0] == "answer":
            success = parsed[1] == task.value()
            self.done = True
            return StepResult(reward=CORRECT_REWARD if success else WRONG_REWARD, done=True, valid=True,
                              success=success)
        _, a, op, b = parsed
        result = apply_op(a, op, b)
        self.calls.append(((a, op, b), result))
        self.done = out_of_turns
        return StepResult(reward=TOOL_REWARD, done=self.done, valid=True, success=False,
                          tool_output=result_text(result))

    def solver_response(self) -> str:
        """The next call of the precedence-order plan that has not been made yet, then the answer."""
        task = self._require_task()
        made = {call for call, _ in self.calls}
        for call in task.plan():
            if call not in made:
                return tool_call_text(*call)
        return answer_text(task.value())

    @staticmethod
    def vocabulary() -> Sequence[str]:
        words = [INSTRUCTION_HEAD, NL, *OPS, "<tool>", "</tool>", "<result>", "</result>", "<answer>", "</answer>"]
        words += INSTRUCTION_TAIL.split(" ") + [str(d) for d in range(10)]
        return list(dict.fromkeys(words))

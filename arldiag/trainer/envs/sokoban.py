"""Sokoban as ARLArena / verl-agent train on it: a 6x6 room (outer walls included), one box, up to 15 turns.

Rules and rewards follow gym-sokoban, which verl-agent wraps:
  every turn costs -0.1; pushing a box onto a target adds +1, pushing one off a target adds -1, and the turn that
  puts every box on a target adds +10 and ends the episode (so the solving push earns -0.1 + 1 + 10 = 10.9).
  Walking into a wall, or pushing a box into a wall or another box, leaves everything in place (still -0.1).
  A response that does not parse (format error) earns -0.1, does not move anything and reports valid=False; it
  still uses up one of the 15 turns.

Text is written for a word-level tokenizer: every observation and response is a space-separated sequence of words
from ``vocabulary()``; line breaks are the newline character written as a word of its own (" \\n ").
Symbols: ``#`` wall, ``_`` floor, ``O`` target, ``X`` box, ``√`` box on target, ``P`` player, ``S`` player on target.
The response format is ``<think> ... </think> <action> up|down|left|right </action>``.

Levels are generated from a seed (numpy Generator): random interior walls, then random target, box and player
cells, kept only when the BFS solver (``solve``) finds a solution of ``min_moves``..``max_moves`` moves, so every
generated level is solvable and never starts solved.
"""
from __future__ import annotations

import functools
import re
from collections import deque
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .base import StepResult

Cell = tuple[int, int]

DIRECTIONS: dict[str, Cell] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

# gym-sokoban reward constants (verl-agent keeps them unchanged)
STEP_PENALTY = -0.1
BOX_ON_TARGET = 1.0
BOX_OFF_TARGET = -1.0
SOLVED_BONUS = 10.0
INVALID_REWARD = -0.1

WALL, FLOOR, TARGET, BOX, BOX_ON, PLAYER, PLAYER_ON = "#", "_", "O", "X", "√", "P", "S"
NL = "\n"  # a word of its own: always written with a space on each side

INSTRUCTION = ("push the box X onto the target O . you are P . reply "
               "<think> ... </think> <action> up | down | left | right </action>")
_THINK_WORDS = ("push", "box", "walk", "stuck")
# full: ARLArena's prompt (instruction, turn counter, the last history_length observation/action pairs, the grid);
# short: the interior grid only (for fast CPU training; the response format is the same)
OBS_LAYOUTS = ("full", "short")

# Whitespace is removed before matching, so "< think >" and "<think>" are the same; the think text may be anything
# that contains no tag, and the action must be exactly one direction.
_RESPONSE_RE = re.compile(
    r"<think>(?:(?!</?think>|</?action>).)*</think><action>(up|down|left|right)</action>", re.DOTALL | re.IGNORECASE)
_WHITESPACE_RE = re.compile(r"\s+")


def spell_number(n: int) -> str:
    """A non-negative integer as space-separated digits (12 -> "1 2"), one word per digit."""
    return " ".join(str(n))


@dataclass(frozen=True)
class Level:
    """A Sokoban state: the fixed room plus where the boxes and the player are."""
    height: int
    width: int
    walls: frozenset[Cell]
    targets: frozenset[Cell]
    boxes: frozenset[Cell]
    player: Cell

    @staticmethod
    def parse(rows: Sequence[str]) -> "Level":
        """Build a level from rows of symbols without spaces, e.g. ["######", "#P_XO#", ...]."""
        if not rows or any(len(r) != len(rows[0]) for r in rows):
            raise ValueError("rows must be a non-empty list of equally long strings")
        walls, targets, boxes, players = set(), set(), set(), []
        for r, row in enumerate(rows):
            for c, ch in enumerate(row):
                if ch == WALL:
                    walls.add((r, c))
                elif ch in (TARGET, BOX_ON, PLAYER_ON):
                    targets.add((r, c))
                if ch in (BOX, BOX_ON):
                    boxes.add((r, c))
                elif ch in (PLAYER, PLAYER_ON):
                    players.append((r, c))
                elif ch not in (WALL, FLOOR, TARGET):
                    raise ValueError(f"rows: unknown symbol {ch!r}")
        if len(players) != 1:
            raise ValueError(f"rows must hold exactly one player, found {len(players)}")
        if len(boxes) != len(targets) or not boxes:
            raise ValueError(f"rows must hold as many boxes as targets (>= 1): {len(boxes)} boxes, {len(targets)} targets")
        return Level(len(rows), len(rows[0]), frozenset(walls), frozenset(targets), frozenset(boxes), players[0])

    def symbol(self, cell: Cell) -> str:
        if cell in self.walls:
            return WALL
        on_target = cell in self.targets
        if cell in self.boxes:
            return BOX_ON if on_target else BOX
        if cell == self.player:
            return PLAYER_ON if on_target else PLAYER
        return TARGET if on_target else FLOOR

    def render(self, interior: bool = False) -> str:
        """The grid as words: cells separated by spaces, rows by the newline word. ``interior`` leaves out the outer
        wall ring (always walls)."""
        k = 1 if interior else 0
        return f" {NL} ".join(" ".join(self.symbol((r, c)) for c in range(k, self.width - k))
                              for r in range(k, self.height - k))

    def solved(self) -> bool:
        return self.boxes == self.targets

    def move(self, direction: str) -> tuple["Level", Optional[Cell], Optional[Cell]]:
        """Apply one move. Returns (new level, box cell before the push, box cell after) or (self, None, None)
        when nothing moved; a blocked move returns the level unchanged."""
        dr, dc = DIRECTIONS[direction]
        nxt = (self.player[0] + dr, self.player[1] + dc)
        if nxt in self.walls:
            return self, None, None
        if nxt not in self.boxes:
            return Level(self.height, self.width, self.walls, self.targets, self.boxes, nxt), None, None
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if beyond in self.walls or beyond in self.boxes:
            return self, None, None
        boxes = (self.boxes - {nxt}) | {beyond}
        return Level(self.height, self.width, self.walls, self.targets, boxes, nxt), nxt, beyond


def solve(level: Level) -> Optional[list[str]]:
    """Shortest move sequence that puts every box on a target (BFS over (player, boxes) states), or None.

    Directions are tried in the fixed order up, down, left, right, so the answer is deterministic."""
    if level.solved():
        return []
    start = (level.player, level.boxes)
    parent: dict = {start: None}
    queue = deque([level])
    while queue:
        cur = queue.popleft()
        for d in DIRECTIONS:
            nxt, _, _ = cur.move(d)
            key = (nxt.player, nxt.boxes)
            if key in parent:
                continue
            parent[key] = ((cur.player, cur.boxes), d)
            if nxt.solved():
                path = []
                while parent[key] is not None:
                    key, step = parent[key]
                    path.append(step)
                return path[::-1]
            queue.append(nxt)
    return None


def parse_action(response: str) -> Optional[str]:
    """The direction named by a well-formed response, or None when the format is wrong."""
    m = _RESPONSE_RE.fullmatch(_WHITESPACE_RE.sub("", response))
    return m.group(1).lower() if m else None


def format_response(think: str, direction: str) -> str:
    return f"<think> {think} </think> <action> {direction} </action>"


@functools.lru_cache(maxsize=4096)  # a step plays each task group_size times; the eval set every few steps
def generate_level(seed: int, size: int = 6, num_boxes: int = 1, max_walls: int = 2,
                   min_moves: int = 2, max_moves: int = 8, max_tries: int = 10_000) -> Level:
    """A random solvable level, the same for the same arguments.

    Interior walls are kept only if the floor stays connected; the level is accepted when its shortest solution
    has min_moves..max_moves moves (short solutions keep the task learnable by a tiny model)."""
    rng = np.random.default_rng(seed)
    border = {(r, c) for r in range(size) for c in range(size) if r in (0, size - 1) or c in (0, size - 1)}
    interior = [(r, c) for r in range(1, size - 1) for c in range(1, size - 1)]
    for _ in range(max_tries):
        n_walls = int(rng.integers(0, max_walls + 1))
        picks = rng.permutation(len(interior))
        inner_walls = {interior[i] for i in picks[:n_walls]}
        floor = [interior[i] for i in sorted(picks[n_walls:])]
        if len(floor) < 2 * num_boxes + 1 or not _connected(floor):
            continue
        cells = [floor[i] for i in rng.permutation(len(floor))[: 2 * num_boxes + 1]]
        targets, boxes = frozenset(cells[:num_boxes]), frozenset(cells[num_boxes:2 * num_boxes])
        level = Level(size, size, frozenset(border | inner_walls), targets, boxes, cells[-1])
        if level.boxes & level.targets:
            continue  # never start with a box already on a target
        path = solve(level)
        if path is not None and min_moves <= len(path) <= max_moves:
            return level
    raise ValueError(f"no level with {min_moves}..{max_moves} moves found in {max_tries} tries (seed={seed})")


def _connected(floor: list[Cell]) -> bool:
    cells = set(floor)
    seen, stack = {floor[0]}, [floor[0]]
    while stack:
        r, c = stack.pop()
        for dr, dc in DIRECTIONS.values():
            n = (r + dr, c + dc)
            if n in cells and n not in seen:
                seen.add(n)
                stack.append(n)
    return len(seen) == len(cells)


class SokobanEnv:
    """Multi-turn Sokoban; implements arldiag.trainer.envs.base.Env."""

    name = "sokoban"

    def __init__(self, max_turns: int = 15, history_length: int = 2, num_boxes: int = 1, max_walls: int = 2,
                 min_moves: int = 2, max_moves: int = 8, room_size: int = 6, obs_layout: str = "full"):
        if obs_layout not in OBS_LAYOUTS:
            raise ValueError(f"obs_layout must be one of {', '.join(OBS_LAYOUTS)}, got {obs_layout!r}")
        if room_size < 4:
            raise ValueError(f"room_size must be >= 4 (outer walls included), got {room_size}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if history_length < 0:
            raise ValueError(f"history_length must be >= 0, got {history_length}")
        if num_boxes < 1:
            raise ValueError(f"num_boxes must be >= 1, got {num_boxes}")
        if max_walls < 0:
            raise ValueError(f"max_walls must be >= 0, got {max_walls}")
        if not 1 <= min_moves <= max_moves:
            raise ValueError(f"min_moves/max_moves must satisfy 1 <= min_moves <= max_moves, got {min_moves}, {max_moves}")
        self.max_turns = max_turns
        self.history_length = history_length
        self.num_boxes = num_boxes
        self.max_walls = max_walls
        self.min_moves = min_moves
        self.max_moves = max_moves
        self.room_size = room_size
        self.obs_layout = obs_layout
        self.level: Optional[Level] = None
        self.turn = 0             # turns taken so far
        self.done = False
        self.history: list[tuple[str, str]] = []  # (grid before the turn, action word) for every turn taken

    def reset(self, seed: int) -> None:
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.reset_level(generate_level(int(seed), size=self.room_size, num_boxes=self.num_boxes,
                                        max_walls=self.max_walls, min_moves=self.min_moves, max_moves=self.max_moves))

    def reset_level(self, level: Level) -> None:
        """Start an episode from a given level (tests, hand-made curricula)."""
        self.level, self.turn, self.done, self.history = level, 0, False, []

    def _require_level(self) -> Level:
        if self.level is None:
            raise RuntimeError("call reset(seed) before using the environment")
        return self.level

    def anchor(self) -> str:
        return self._require_level().render()

    def observation(self) -> str:
        if self.obs_layout == "short":
            # The interior grid alone (~20 words instead of ~180): Sokoban is fully observable from the grid, so the
            # instruction, turn counter and history only make every sample longer (most of a step's compute).
            return self._require_level().render(interior=True) + f" {NL}"
        grid = self._require_level().render()
        parts = [INSTRUCTION, f"turn {spell_number(self.turn + 1)} of {spell_number(self.max_turns)}"]
        shown = self.history[-self.history_length:] if self.history_length else []
        for past_grid, action in shown:
            parts += ["observation", past_grid, f"action {action}"]
        parts += ["current observation", grid]
        return f" {NL} ".join(parts) + f" {NL}"

    def step(self, response: str) -> StepResult:
        level = self._require_level()
        if self.done:
            raise RuntimeError("the episode is over; call reset(seed)")
        self.turn += 1
        direction = parse_action(response)
        self.history.append((level.render(), direction or "invalid"))
        if direction is None:
            self.done = self.turn >= self.max_turns
            return StepResult(reward=INVALID_REWARD, done=self.done, valid=False, success=False)
        new, box_from, box_to = level.move(direction)
        reward = STEP_PENALTY
        if box_to is not None:
            if box_to in new.targets and box_from not in new.targets:
                reward += BOX_ON_TARGET
            elif box_from in new.targets and box_to not in new.targets:
                reward += BOX_OFF_TARGET
        success = new.solved()
        if success:
            reward += SOLVED_BONUS
        self.level = new
        self.done = success or self.turn >= self.max_turns
        return StepResult(reward=reward, done=self.done, valid=True, success=success)

    def solver_response(self) -> str:
        level = self._require_level()
        path = solve(level)
        if not path:  # unsolvable (a box pushed into a corner) or already solved: any well-formed move
            return format_response("stuck", "up")
        return self._move_response(level, path[0])

    def random_response(self, rng: np.random.Generator) -> str:
        """A well-formed response with a uniformly random direction (noisy demonstrations for behaviour cloning)."""
        return self._move_response(self._require_level(), list(DIRECTIONS)[int(rng.integers(len(DIRECTIONS)))])

    @staticmethod
    def _move_response(level: Level, d: str) -> str:
        dr, dc = DIRECTIONS[d]
        pushes = (level.player[0] + dr, level.player[1] + dc) in level.boxes
        return format_response(f"push box {d}" if pushes else f"walk {d}", d)

    @staticmethod
    def vocabulary() -> Sequence[str]:
        words = [WALL, FLOOR, TARGET, BOX, BOX_ON, PLAYER, PLAYER_ON, NL, "invalid", "turn", "of", "observation",
                 "current", "action"]
        words += INSTRUCTION.split(" ") + list(DIRECTIONS) + list(_THINK_WORDS) + [str(d) for d in range(10)]
        return list(dict.fromkeys(words))  # unique, order kept

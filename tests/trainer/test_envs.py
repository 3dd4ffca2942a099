"""Rules of the reference trainer's environments, checked on hand-worked levels and tasks."""
import numpy as np
import pytest

from arldiag.trainer.envs import ENVS, CalculatorEnv, SokobanEnv, make_env, split_words
from arldiag.trainer.envs.calculator import Task
from arldiag.trainer.envs.sokoban import INSTRUCTION, Level, generate_level, parse_action, solve

NL = "\n"


def words_grid(rows):
    """Independent rendering of a hand-written grid: cells separated by spaces, rows by the newline word."""
    return f" {NL} ".join(" ".join(row) for row in rows)


def act(d, think="go"):
    return f"<think> {think} </think> <action> {d} </action>"


def sokoban(rows, **kw):
    env = SokobanEnv(**kw)
    env.reset_level(Level.parse(rows))
    return env


# player (1,1), box (2,2), target (3,3)
L1 = ["######",
      "#P___#",
      "#_X__#",
      "#__O_#",
      "#____#",
      "######"]


# ---------------------------------------------------------------- Sokoban: moves


def test_level_parse_and_render_roundtrip():
    assert sokoban(L1).anchor() == words_grid(L1)
    # S: player on a target, √: box on a target
    solved = ["######", "#_S__#", "#XX__#", "#___√#", "#__O_#", "######"]
    level = Level.parse(solved)
    assert level.player == (1, 2) and level.boxes == {(2, 1), (2, 2), (3, 4)} and level.targets == {(1, 2), (3, 4), (4, 3)}
    assert level.render() == words_grid(solved)


@pytest.mark.parametrize("rows", [
    [], ["###", "##"], ["#PX#"], ["#PXOO#"], ["#PPXO#"], ["#_XO_#"], ["#PXOZ#"],
])
def test_level_parse_rejects_bad_rows(rows):
    with pytest.raises(ValueError, match="rows"):
        Level.parse(rows)


def test_wall_blocks_player():
    env = sokoban(L1)
    for d in ("up", "left"):  # (0,1) and (1,0) are walls
        r = env.step(act(d))
        assert r.reward == pytest.approx(-0.1) and r.valid and not r.done and not r.success
        assert env.anchor() == words_grid(L1)


def test_plain_move_costs_step_penalty():
    env = sokoban(L1)
    r = env.step(act("right"))
    assert r.reward == pytest.approx(-0.1) and r.valid and not r.done
    assert env.anchor() == words_grid(["######", "#_P__#", "#_X__#", "#__O_#", "#____#", "######"])


def test_push_box_then_solve():
    env = sokoban(L1)
    env.step(act("right"))
    r = env.step(act("down"))  # pushes the box from (2,2) to (3,2): not a target
    assert r.reward == pytest.approx(-0.1) and not r.done
    assert env.anchor() == words_grid(["######", "#____#", "#_P__#", "#_XO_#", "#____#", "######"])
    env.step(act("left"))
    env.step(act("down"))
    r = env.step(act("right"))  # box onto the target, the only box: -0.1 + 1 + 10
    assert r.reward == pytest.approx(10.9) and r.done and r.success and r.valid
    assert env.anchor() == words_grid(["######", "#____#", "#____#", "#_P√_#", "#____#", "######"])
    with pytest.raises(RuntimeError):
        env.step(act("up"))


def test_box_blocked_by_wall():
    rows = ["######", "#__PX#", "#____#", "#__O_#", "#____#", "######"]
    env = sokoban(rows)
    r = env.step(act("right"))
    assert r.reward == pytest.approx(-0.1) and r.valid and not r.done
    assert env.anchor() == words_grid(rows)


def test_box_blocked_by_other_box():
    rows = ["######", "#PXX_#", "#____#", "#_OO_#", "#____#", "######"]
    env = sokoban(rows)
    r = env.step(act("right"))
    assert r.reward == pytest.approx(-0.1) and r.valid
    assert env.anchor() == words_grid(rows)


def test_box_onto_and_off_target_rewards():
    rows = ["######", "#PXO_#", "#____#", "#_X_O#", "#____#", "######"]
    env = sokoban(rows)
    r = env.step(act("right"))  # onto (1,3), other box still off: -0.1 + 1
    assert r.reward == pytest.approx(0.9) and not r.done and not r.success
    assert env.anchor() == words_grid(["######", "#_P√_#", "#____#", "#_X_O#", "#____#", "######"])
    r = env.step(act("right"))  # off the target again: -0.1 - 1
    assert r.reward == pytest.approx(-1.1) and not r.done
    assert env.anchor() == words_grid(["######", "#__SX#", "#____#", "#_X_O#", "#____#", "######"])


# ---------------------------------------------------------------- Sokoban: format


@pytest.mark.parametrize("response", [
    "",
    "right",
    "<action> right </action>",                                   # no think
    "<think> go </think>",                                        # no action
    "<think> go </think> <action> jump </action>",                # not a direction
    "<think> go </think> <action> up down </action>",             # two directions
    "<action> up </action> <think> go </think>",                  # wrong order
    "<think> go <action> up </action>",                           # think not closed
    "<think> go </think> <action> up </action> extra",            # trailing text
    "please <think> go </think> <action> up </action>",           # leading text
    "<think> go </think> <action> up </action> <action> down </action>",
    "<think> a </think> <think> b </think> <action> up </action>",
    "<think> go </think> <action> up",
])
def test_invalid_response_penalised_and_no_move(response):
    env = sokoban(L1)
    env.step(act("right"))  # player at (1,2): down would push the box
    before = env.anchor()
    r = env.step(response)
    assert r.reward == pytest.approx(-0.1) and not r.valid and not r.done and not r.success and r.tool_output == ""
    assert env.anchor() == before
    assert parse_action(response) is None


@pytest.mark.parametrize("response,direction", [
    ("<think> go </think> <action> down </action>", "down"),
    ("<think></think><action>down</action>", "down"),
    ("  <think>\nbox is below\n</think>\n< action >  DOWN </action>  ", "down"),
    ("<think> x </think> <action> d o w n </action>", "down"),  # whitespace-insensitive, even inside words
])
def test_valid_response_whitespace_insensitive(response, direction):
    assert parse_action(response) == direction
    env = sokoban(L1)
    env.step(act("right"))
    r = env.step(response)
    assert r.valid and env.anchor() == words_grid(["######", "#____#", "#_P__#", "#_XO_#", "#____#", "######"])


@pytest.mark.parametrize("response", [act("up"), "garbage"])
def test_turn_limit(response):
    env = sokoban(L1)
    results = [env.step(response) for _ in range(15)]
    assert [r.done for r in results] == [False] * 14 + [True]
    assert not results[-1].success
    assert sum(r.reward for r in results) == pytest.approx(-1.5)
    with pytest.raises(RuntimeError):
        env.step(response)


def test_observation_shows_exactly_last_two_pairs():
    env = sokoban(L1)
    g0 = words_grid(L1)
    assert env.observation() == f"{INSTRUCTION} {NL} turn 1 of 1 5 {NL} current observation {NL} {g0} {NL}"
    g1 = words_grid(["######", "#_P__#", "#_X__#", "#__O_#", "#____#", "######"])
    g3 = words_grid(["######", "#____#", "#_P__#", "#_XO_#", "#____#", "######"])
    env.step(act("right"))
    assert env.observation() == (f"{INSTRUCTION} {NL} turn 2 of 1 5 {NL} observation {NL} {g0} {NL} action right {NL} "
                                 f"current observation {NL} {g1} {NL}")
    env.step("nonsense")
    env.step(act("down"))
    expected = (f"{INSTRUCTION} {NL} turn 4 of 1 5 {NL} "
                f"observation {NL} {g1} {NL} action invalid {NL} "
                f"observation {NL} {g1} {NL} action down {NL} "
                f"current observation {NL} {g3} {NL}")
    assert env.observation() == expected
    assert env.anchor() == g3


def test_anchor_identical_for_identical_states():
    env = sokoban(L1)
    start = env.anchor()
    env.step(act("right"))
    assert env.anchor() != start
    env.step(act("left"))
    assert env.anchor() == start


# ---------------------------------------------------------------- Sokoban: solver and generation


def test_solver_hand_worked():
    # one push right solves it
    env = sokoban(["######", "#PXO_#", "#____#", "#____#", "#____#", "######"])
    assert env.solver_response() == "<think> push box right </think> <action> right </action>"
    assert len(split_words(env.solver_response())) <= 12
    # L1 needs 5 moves either way: (right, down, left, down, right) or (down, right, up, right, down)
    level = Level.parse(L1)
    path = solve(level)
    assert len(path) == 5 and path[0] in ("right", "down")
    assert sokoban(L1).solver_response() == f"<think> walk {path[0]} </think> <action> {path[0]} </action>"


def test_solver_on_unsolvable_state_is_still_well_formed():
    env = sokoban(["######", "#_XP_#", "#____#", "#__O_#", "#____#", "######"])
    env.step(act("left"))  # box into the corner (1,1): dead
    assert solve(env.level) is None
    assert parse_action(env.solver_response()) in ("up", "down", "left", "right")


def test_generation_deterministic_and_varied():
    a, b = SokobanEnv(), SokobanEnv()
    obs = set()
    for seed in range(200):
        a.reset(seed)
        b.reset(seed)
        assert a.observation() == b.observation()
        obs.add(a.anchor())
    assert len(obs) > 150
    assert generate_level(7) == generate_level(7)


def test_generated_levels_solvable_by_stepping_solver():
    env = SokobanEnv()
    for seed in range(200):
        env.reset(seed)
        level = env.level
        assert not (level.boxes & level.targets)  # never starts solved
        assert len(level.walls) >= 20 and all(level.symbol((r, c)) == "#" for r in (0, 5) for c in range(6))
        n_opt = len(solve(level))
        assert 2 <= n_opt <= 8
        total = 0.0
        for turn in range(15):
            r = env.step(env.solver_response())
            assert r.valid
            total += r.reward
            if r.done:
                break
        assert r.success and turn + 1 == n_opt
        # every turn -0.1, the only box lands on its target once (+1) and the level is solved (+10)
        assert total == pytest.approx(-0.1 * n_opt + 11.0)


def test_sokoban_words_in_vocabulary():
    vocab = set(SokobanEnv.vocabulary())
    assert {"#", "_", "O", "X", "√", "P", "S", NL, "<think>", "</think>", "<action>", "</action>"} <= vocab
    rng = np.random.default_rng(0)
    env = SokobanEnv()
    junk = ["", "hello", "<think> go </think> <action> jump </action>"]
    for seed in range(50):
        env.reset(seed)
        texts = []
        done = False
        while not done:
            texts += [env.observation(), env.anchor(), env.solver_response()]
            u = rng.random()
            if u < 0.5:
                response = env.solver_response()
            elif u < 0.8:
                response = act(str(rng.choice(["up", "down", "left", "right"])))
            else:
                response = junk[int(rng.integers(len(junk)))]
            r = env.step(response)
            texts.append(r.tool_output)
            done = r.done
        texts.append(env.observation())
        for text in texts:
            assert set(split_words(text)) <= vocab, set(split_words(text)) - vocab


# ---------------------------------------------------------------- Calculator


def calc(numbers, ops, **kw):
    env = CalculatorEnv(**kw)
    env.reset_task(Task(tuple(numbers), tuple(ops)))
    return env


def test_calculator_tool_result_and_correct_answer():
    env = calc((12, 7, 3), ("*", "+"))  # 12 * 7 + 3 = 87
    r = env.step("<tool> 1 2 * 7 </tool>")
    assert r == type(r)(reward=0.0, done=False, valid=True, success=False, tool_output=f"<result> 8 4 </result> {NL}")
    r = env.step("<tool>84+3</tool>")  # whitespace-insensitive
    assert r.tool_output == f"<result> 8 7 </result> {NL}"
    r = env.step("<answer> 8 7 </answer>")
    assert r.reward == 1.0 and r.done and r.success and r.valid and r.tool_output == ""
    with pytest.raises(RuntimeError):
        env.step("<answer> 8 7 </answer>")


def test_calculator_answer_without_tools_and_wrong_answer():
    env = calc((2, 3, 4), ("+", "*"))  # 2 + 12 = 14
    r = env.step("<answer> 1 4 </answer>")
    assert r.reward == 1.0 and r.success
    env = calc((2, 3, 4), ("+", "*"))
    r = env.step("<answer> 2 0 </answer>")  # (2 + 3) * 4: wrong precedence
    assert r.reward == 0.0 and r.done and not r.success and r.valid


@pytest.mark.parametrize("call,output", [
    ("<tool> 3 - 1 0 </tool>", "<result> - 7 </result>"),
    ("<tool> - 7 * 2 </tool>", "<result> - 1 4 </result>"),
    ("<tool> 5 - - 5 </tool>", "<result> 1 0 </result>"),
    ("<tool> 9 9 + 1 </tool>", "<result> 1 0 0 </result>"),
])
def test_calculator_tool_arithmetic(call, output):
    env = calc((1, 1, 1), ("+", "+"))
    assert env.step(call).tool_output == f"{output} {NL}"


def test_calculator_negative_answer():
    env = calc((5, 2, 3), ("-", "*"))  # 5 - 6 = -1
    assert env.step("<answer> - 1 </answer>").success


@pytest.mark.parametrize("response", [
    "", "12*7", "<tool> 1 + 2 + 3 </tool>", "<tool> 8 / 2 </tool>", "<tool> 8 </tool>", "<answer> x </answer>",
    "<answer></answer>", "<answer> 1 </answer> extra", "<tool> 1 * 2 </tool> <answer> 2 </answer>",
    "<result> 3 </result>", "<tool> 1 * 2", "<answer> 1 2 </tool>",
])
def test_calculator_invalid_formats(response):
    env = calc((12, 7, 3), ("*", "+"))
    env.step("<tool> 1 2 * 7 </tool>")
    obs, anchor = env.observation(), env.anchor()
    r = env.step(response)
    assert r.reward == pytest.approx(-0.1) and not r.valid and not r.done and not r.success and r.tool_output == ""
    assert env.observation() == obs and env.anchor() == anchor


@pytest.mark.parametrize("response", ["<tool> 1 + 1 </tool>", "bad"])
def test_calculator_turn_limit(response):
    env = calc((12, 7, 3), ("*", "+"))
    results = [env.step(response) for _ in range(4)]
    assert [r.done for r in results] == [False, False, False, True]
    assert not any(r.success for r in results)
    with pytest.raises(RuntimeError):
        env.step("<answer> 8 7 </answer>")


def test_calculator_solver_precedence_order():
    env = calc((2, 3, 4), ("+", "*"))
    assert env.solver_response() == "<tool> 3 * 4 </tool>"
    env.step(env.solver_response())
    assert env.solver_response() == "<tool> 2 + 1 2 </tool>"
    env.step(env.solver_response())
    assert env.solver_response() == "<answer> 1 4 </answer>"
    env = calc((10, 4, 3), ("-", "-"))  # left to right: (10 - 4) - 3
    assert env.solver_response() == "<tool> 1 0 - 4 </tool>"
    env.step("<tool> 9 9 * 9 </tool>")  # an unrelated call does not disturb the plan
    assert env.solver_response() == "<tool> 1 0 - 4 </tool>"
    env.step(env.solver_response())
    assert env.solver_response() == "<tool> 6 - 3 </tool>"
    env = calc((5, 2, 3), ("*", "*"))
    assert env.solver_response() == "<tool> 5 * 2 </tool>"


def test_calculator_observation_grows_by_call_and_result():
    env = calc((12, 7, 3), ("*", "+"))
    obs0 = env.observation()
    assert obs0.startswith("compute 1 2 * 7 + 3 . ") and obs0.endswith(f" {NL}")
    r = env.step("<tool>12*7</tool>")
    assert env.observation() == f"{obs0} <tool> 1 2 * 7 </tool> {r.tool_output}"
    assert env.anchor() == f"1 2 * 7 + 3 <tool> 1 2 * 7 </tool> <result> 8 4 </result> {NL}"


def test_calculator_solver_solves_200_seeds():
    env = CalculatorEnv()
    tasks = set()
    for seed in range(200):
        env.reset(seed)
        a, b, c = env.task.numbers
        tasks.add(env.task)
        assert all(1 <= n <= 12 for n in env.task.numbers)
        # the value, computed independently with Python's own precedence rules
        expected = eval(f"{a} {env.task.ops[0]} {b} {env.task.ops[1]} {c}")
        rewards = []
        for _ in range(4):
            r = env.step(env.solver_response())
            rewards.append(r.reward)
            if r.done:
                break
        assert r.success and rewards == [0.0, 0.0, 1.0]
        assert env.task.value() == expected
    assert len(tasks) > 150
    e2 = CalculatorEnv()
    e2.reset(3)
    env.reset(3)
    assert e2.observation() == env.observation()


def test_calculator_words_in_vocabulary():
    vocab = set(CalculatorEnv.vocabulary())
    rng = np.random.default_rng(1)
    env = CalculatorEnv()
    for seed in range(50):
        env.reset(seed)
        texts, done = [], False
        while not done:
            texts += [env.observation(), env.anchor(), env.solver_response()]
            if rng.random() < 0.5:
                response = env.solver_response()
            else:
                x, y = (int(v) for v in rng.integers(-150, 150, size=2))
                response = f"<tool> {x} {'+-*'[int(rng.integers(3))]} {y} </tool>"
            r = env.step(response)
            texts.append(r.tool_output)
            done = r.done
        texts.append(env.observation())
        for text in texts:
            assert set(split_words(text)) <= vocab, set(split_words(text)) - vocab


# ---------------------------------------------------------------- registry


def test_registry():
    assert set(ENVS) == {"sokoban", "calculator"}
    env = make_env("sokoban", max_turns=3)
    assert isinstance(env, SokobanEnv) and env.max_turns == 3 and env.name == "sokoban"
    assert isinstance(make_env("calculator"), CalculatorEnv) and make_env("calculator").max_turns == 4
    with pytest.raises(ValueError, match="name"):
        make_env("alfworld")
    with pytest.raises(ValueError, match="seed"):
        make_env("sokoban").reset(-1)
    with pytest.raises(ValueError, match="max_turns"):
        make_env("calculator", max_turns=0)
    with pytest.raises(RuntimeError):
        make_env("sokoban").observation()

"""`arldiag diff` on the command line: the --json schema, exit codes, clear errors naming the argument."""
from __future__ import annotations

import json

import pytest

from arldiag.cli import main
from diff_runs import write_steps_run

KEYS = {"version", "run_a", "run_b", "settings", "steps", "compared", "parted", "first_metric", "first_step",
        "outcome", "outcome_step", "lead", "partings", "actions", "token_window", "tokens", "rule"}
PARTING_KEYS = {"metric", "step", "gap", "need", "noise_a", "noise_b", "mean_a", "mean_b", "strength", "points"}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli_diff")
    a = write_steps_run(root / "a", range(120), seed=1)
    b = write_steps_run(root / "b", range(120), seed=2,
                        planted=lambda m, s: 60.0 if m == "response_length_mean" and s >= 50 else 0.0)
    c = write_steps_run(root / "c", range(120), seed=3)
    return a, b, c


def test_json_schema_of_a_parting(pair, capsys):
    a, b, _ = pair
    assert main(["diff", str(a), str(b), "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert set(j) == KEYS and j["version"] == "1.0" and j["parted"] is True
    assert j["run_a"] == "a" and j["run_b"] == "b" and j["steps"] == [0, 119]
    assert j["first_metric"] == "response_length_mean" and 50 <= j["first_step"] < 55
    assert all(set(p) == PARTING_KEYS for p in j["partings"])
    assert [p["step"] for p in j["partings"]] == sorted(p["step"] for p in j["partings"])
    assert j["settings"] == [{"key": "config.seed", "a": 1, "b": 2}]
    assert j["rule"] == {"window": 5, "z": 3.0, "confirm": 6, "noise_min": 6, "rel_tol": 1e-9}


def test_json_and_text_when_nothing_parts(pair, capsys):
    a, _, c = pair
    assert main(["diff", str(a), str(c), "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["parted"] is False and j["partings"] == [] and j["first_metric"] is None and j["lead"] is None
    assert main(["diff", str(a), str(c)]) == 0
    assert "no parting found" in capsys.readouterr().out


def test_rule_options_reach_the_rule(pair, capsys):
    a, b, _ = pair
    assert main(["diff", str(a), str(b), "--json", "--window", "7", "--confirm", "8", "--z", "4"]) == 0
    assert json.loads(capsys.readouterr().out)["rule"]["window"] == 7
    assert main(["diff", str(a), str(b), "--window", "0"]) == 2
    assert "window" in capsys.readouterr().err


def test_bad_input_names_the_argument(pair, tmp_path, capsys):
    a, b, _ = pair
    assert main(["diff", str(tmp_path / "missing"), str(b)]) == 2
    err = capsys.readouterr().err
    assert "RUN_A" in err and "does not exist" in err
    f = tmp_path / "file.txt"
    f.write_text("x")
    assert main(["diff", str(a), str(f)]) == 2
    assert "RUN_B" in capsys.readouterr().err
    assert main(["diff", str(a), str(a.parent)]) == 2     # a root holding three runs
    err = capsys.readouterr().err
    assert "RUN_B" in err and "holds 3 runs" in err
    with pytest.raises(SystemExit):
        main(["diff", str(a)])                           # RUN_B missing: argparse's usage error

"""arldiag/importers: the registry (one module per format, each format documented) and the step table built from
a format's rows, on hand-worked inputs."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from arldiag import importers
from arldiag.importers import FORMATS, IMPORTERS, MODULES, STEP_FORMATS, guess_format
from arldiag.importers.base import Importer
from arldiag.importers.steps import apply_plan, as_number, find_step_column, load_steps, name_plan

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "arldiag" / "importers"


def test_every_format_module_is_listed():
    # a module of arldiag/importers/ that declares IMPORTERS but is missing from MODULES would be silently unused
    declaring = set()
    for f in PKG.glob("*.py"):
        tree = ast.parse(f.read_text())
        if any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "IMPORTERS" for t in n.targets)
               for n in tree.body) and f.stem != "__init__":
            declaring.add(f.stem)
    assert declaring == {m.__name__.rsplit(".", 1)[1] for m in MODULES}


def test_formats_order_kinds_and_docs():
    # the order help and error messages have always listed: step formats, then the rollout one
    assert FORMATS == ("csv", "jsonl", "verl-jsonl", "trl-state", "tensorboard", "wandb", "trl-completions")
    assert STEP_FORMATS == FORMATS[:-1]
    assert IMPORTERS["trl-completions"].kind == "rollout"
    assert IMPORTERS["wandb"].step_column == "_step"
    assert [n for n, i in IMPORTERS.items() if i.reads_folder] == ["tensorboard", "trl-completions"]
    doc = (ROOT / "docs" / "integrations" / "importers.md").read_text()
    assert not [n for n in FORMATS if f"`{n}`" not in doc], "a format without its row in docs/integrations/importers.md"
    with pytest.raises(ValueError, match="kind"):
        Importer("x", "table", lambda p: iter(()), "x")


@pytest.mark.parametrize("name,fmt", [("m.csv", "csv"), ("m.TSV", "csv"), ("m.jsonl", "jsonl"), ("m.ndjson", "jsonl"),
                                      ("m.json", "jsonl"), ("trainer_state.json", "trl-state"),
                                      ("events.out.tfevents.1.host", "tensorboard")])
def test_guess_format(name, fmt):
    assert guess_format(Path(name)) == fmt


def test_guess_format_unknown():
    with pytest.raises(ValueError, match="cannot tell the format of 'm.parquet'"):
        guess_format(Path("m.parquet"))


def test_as_number():
    assert [as_number(v) for v in ("1.5", " 2 ", "", "abc", None, True, "False", 3, [1], {"a": 1})] == \
        [1.5, 2.0, None, None, None, 1.0, 0.0, 3.0, None, None]
    assert as_number("nan") != as_number("nan")  # NaN is a number (kept; the detectors skip it)


def test_load_steps_joins_rows_and_reports_text_columns(tmp_path):
    f = tmp_path / "m.jsonl"
    rows = [{"step": 1, "actor": {"entropy": 0.5}, "note": "warmup"}, {"step": 1, "val/acc": 0.25},
            {"step": 2, "actor": {"entropy": 0.4}, "note": ""}, {"step": None, "summary": 1}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = load_steps(f, IMPORTERS["jsonl"], "step")
    assert got.steps == {1: {"actor/entropy": 0.5, "val/acc": 0.25}, 2: {"actor/entropy": 0.4}}
    assert got.never_numeric == {"note"} and got.stepless == 1


def test_find_step_column(tmp_path):
    f = tmp_path / "m.csv"
    f.write_text("global_step,reward\n1,0.5\n")
    assert find_step_column(f, IMPORTERS["csv"], "step") == ("global_step", "no 'step' column")
    f.write_text("step,global_step\n1,1\n")
    assert find_step_column(f, IMPORTERS["csv"], "step") == ("step", None)


def test_name_plan_and_apply_plan():
    cols = ["actor/entropy", "entropy", "critic/score/mean", "mine", "actor/pg_clipfrac"]
    plan, copies = name_plan(cols, {"mine": "my_metric"}, keep_names=False)
    # "entropy" already holds arldiag's name, so actor/entropy keeps its own; the user's rename applies; verl's
    # clip fraction is renamed; verl's score is copied to task_score (arldiag/aliases.py)
    assert plan == {"mine": "my_metric", "actor/pg_clipfrac": "pg_clipfrac"}
    assert copies == {"task_score": "critic/score/mean"}
    assert name_plan(["actor/entropy"], {}, keep_names=False)[0] == {"actor/entropy": "entropy"}
    steps = apply_plan({3: {"critic/score/mean": 0.5, "mine": 1.0}}, plan, copies)
    assert steps == {3: {"critic/score/mean": 0.5, "my_metric": 1.0, "task_score": 0.5}}
    assert name_plan(cols, {}, keep_names=True) == ({}, {"task_score": "critic/score/mean"})


def test_package_exports():
    assert importers.guess_format is guess_format and set(IMPORTERS) == set(FORMATS)

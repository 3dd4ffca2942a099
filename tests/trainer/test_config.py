"""TrainConfig, presets and the argparse built from the fields."""
from __future__ import annotations

import argparse
import dataclasses

import pytest

from arldiag.trainer.config import ALGOS, PRESETS, TrainConfig, add_config_arguments, config_from_args, make_config


def parse(argv):
    p = argparse.ArgumentParser()
    add_config_arguments(p)
    return config_from_args(p.parse_args(argv))


def test_every_field_is_documented_and_in_help():
    p = argparse.ArgumentParser()
    add_config_arguments(p)
    text = p.format_help()
    for f in dataclasses.fields(TrainConfig):
        assert f.metadata.get("help"), f.name
        assert "--" + f.name.replace("_", "-") in text


def test_presets_cover_every_algorithm():
    assert set(PRESETS) == set(ALGOS)
    sampo = make_config("sampo")
    assert (sampo.adv_estimator, sampo.dynamic_filter, sampo.kl_coef, sampo.loss_agg) == ("gigpo", True, 0.01,
                                                                                         "seq-mean-token-mean")
    assert sampo.resolved_nalis_mask() is True
    assert make_config("cispo").resolved_nalis_mask() is False
    assert (make_config("dapo").clip_low, make_config("dapo").clip_high) == (0.2, 0.28)
    assert make_config("gspo").clip_high == 4e-3


def test_command_line_overrides_preset_only_where_given():
    cfg = parse(["--algo", "cispo", "--lr", "3e-4", "--nalis-mask", "--n-minibatches", "8"])
    assert (cfg.algo, cfg.lr, cfg.n_minibatches, cfg.resolved_nalis_mask()) == ("cispo", 3e-4, 8, True)
    assert cfg.clip_low == 1.0  # preset value kept
    cfg = parse(["--algo", "sampo", "--no-dynamic-filter"])
    assert cfg.dynamic_filter is False and cfg.kl_coef == 0.01


def test_bad_values_raise_naming_the_field():
    with pytest.raises(ValueError, match="algo"):
        make_config("ppo")
    with pytest.raises(ValueError, match="lr"):
        make_config("grpo", lr=0.0)
    with pytest.raises(ValueError, match="loss_agg"):
        make_config("grpo", loss_agg="mean")
    with pytest.raises(ValueError, match="unknown config field"):
        make_config("grpo", learning_rate=1.0)
    with pytest.raises(ValueError, match="token_sample_rate"):
        make_config("grpo", token_sample_rate=2.0)


def test_train_subcommand_help_lists_knobs(capsys):
    from arldiag.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for opt in ("--lr", "--n-tasks", "--group-size", "--ppo-epochs", "--n-minibatches", "--clip-low", "--tau-pos",
                "--kl-coef", "--loss-agg", "--omega", "--gamma", "--dynamic-filter", "--cold-start-steps",
                "--nalis-mask", "--nalis-delta", "--format-penalty", "--max-turns", "--temperature", "--device",
                "--model", "--init", "--retokenize", "--rollout-dtype"):
        assert opt in out


def test_print_config(capsys):
    from arldiag.cli import main

    assert main(["train", "--algo", "gspo", "--print-config"]) == 0
    assert '"clip_high": 0.004' in capsys.readouterr().out

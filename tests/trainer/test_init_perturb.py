"""`--init-perturb REL` (config.init_perturb, policy.perturb_weights): the initial weights times 1 + REL x N(0, 1),
seeded, from a generator of its own; the test of whether a run's outcome survives another machine's last bits."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from arldiag.trainer.config import make_config
from arldiag.trainer.policy import TokenCodec, build_tiny_model, build_word_tokenizer, perturb_weights

SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"
sys.path.insert(0, str(SAMPLES))
import suite  # noqa: E402


def _model() -> torch.nn.Module:
    tokenizer = build_word_tokenizer(["a", "b", "c", "\n"])
    return build_tiny_model("tiny-qwen3", len(tokenizer), 32, 1, TokenCodec.from_tokenizer(tokenizer), seed=0)


def _weights(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {n: p.detach().numpy().copy() for n, p in model.named_parameters()}


def test_perturbation_is_the_seeded_relative_noise_rounded_once() -> None:
    model = _model()
    before = _weights(model)
    state = torch.random.get_rng_state()
    perturb_weights(model, 1e-7, seed=78)
    assert torch.equal(torch.random.get_rng_state(), state)  # the run's own sampling is untouched
    after = _weights(model)
    gen = torch.Generator().manual_seed(78)  # the same draws, in the order of model.parameters()
    changed = total = 0
    for name, p in model.named_parameters():
        z = torch.randn(p.shape, generator=gen, dtype=torch.float32).numpy().astype(np.float64)
        exact = before[name].astype(np.float64) * (1.0 + 1e-7 * z)  # float64: the perturbation before rounding
        # float32 keeps it to within half an ulp of the weight (plus the float32 product's own rounding)
        ulp = np.spacing(np.abs(before[name])).astype(np.float64)
        assert np.all(np.abs(after[name] - exact) <= ulp), name
        rel = np.abs(after[name].astype(np.float64) - before[name]) / np.maximum(np.abs(before[name]), 1e-30)
        assert rel.max() < 1e-6, name  # |z| < 6 for these few thousand draws, plus an ulp
        changed += int((after[name] != before[name]).sum())
        total += p.numel()
    assert 0.3 * total < changed < total  # most weights move by an ulp or two, small draws round away


def test_perturbation_is_reproducible_and_depends_on_the_seed() -> None:
    a, b, c = _model(), _model(), _model()
    perturb_weights(a, 1e-7, seed=1)
    perturb_weights(b, 1e-7, seed=1)
    perturb_weights(c, 1e-7, seed=2)
    wa, wb, wc = _weights(a), _weights(b), _weights(c)
    assert all(np.array_equal(wa[n], wb[n]) for n in wa)
    assert any(not np.array_equal(wa[n], wc[n]) for n in wa)


def test_zero_leaves_the_weights_alone() -> None:
    model = _model()
    before = _weights(model)
    perturb_weights(model, 0.0, seed=1)
    assert all(np.array_equal(before[n], w) for n, w in _weights(model).items())


def test_config_checks_the_perturbation_size() -> None:
    assert make_config("cispo").init_perturb == 0.0
    assert make_config("cispo", init_perturb=1e-7).init_perturb == 1e-7
    for bad in (-1e-7, 1.0):
        with pytest.raises(ValueError, match="init_perturb"):
            make_config("cispo", init_perturb=bad)


def test_suite_passes_the_perturbation_to_every_command(capsys) -> None:
    assert suite.main(["list", "--set", "lag", "--seeds", "78", "--init-perturb", "1e-7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(suite.LAG_RUNS)
    assert all(line.endswith("--reproducible --init-perturb 1e-07") for line in lines)
    assert suite.main(["list", "--set", "lag", "--seeds", "78"]) == 0
    assert "--init-perturb" not in capsys.readouterr().out

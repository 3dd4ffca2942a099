"""The reference trainer's one configuration object.

Every knob is a field of ``TrainConfig`` with its documentation in ``metadata["help"]``; the command line is built
from those fields (``add_config_arguments``), so the docs are written once. ``PRESETS[algo]`` holds each
algorithm's defaults (ALGORITHMS.md); values given on the command line override the preset.
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional, Union, get_args, get_origin, get_type_hints

from arldiag.stabilize import resolve_policy

ALGOS = ("grpo", "dapo", "gspo", "cispo", "sapo", "atpo", "sampo")
LOSS_AGGS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
ADV_ESTIMATORS = ("grpo", "gigpo")
# Algorithms whose clip acts on a sequence (or turn) ratio; the Collector is told their range as seq_clip.
SEQUENCE_CLIP_ALGOS = ("gspo", "atpo", "sampo")


def _f(default: Any, help: str, choices: tuple | None = None) -> Any:
    return field(default=default, metadata={"help": help, "choices": choices})


@dataclass
class TrainConfig:
    # --- what to train -------------------------------------------------------------------------------------------
    algo: str = _f("sampo", "algorithm; selects the loss and the preset defaults", ALGOS)
    env: str = _f("sokoban", "environment name (arldiag.trainer.envs registry)")
    steps: int = _f(200, "number of RL steps (one rollout batch + its updates per step)")
    out: str = _f("runs/run", "run store folder written through the Collector")
    name: Optional[str] = _f(None, "run name shown by readers (default: the out folder's name)")
    seed: int = _f(0, "seed for tasks, sampling and model initialisation")
    split: str = _f("auto", "suite split written to run.json (config.split): dev runs may tune detectors, heldout runs "
                    "only score them; auto: seeds 0-2 dev and 3-4 heldout, repeated per block of five (5-7 dev, 8-9 heldout)", ("auto", "dev", "heldout", "none"))
    # --- batch and optimisation ----------------------------------------------------------------------------------
    lr: float = _f(1e-4, "AdamW learning rate of the RL updates")
    weight_decay: float = _f(0.0, "AdamW decoupled weight decay of the RL updates")
    n_tasks: int = _f(8, "tasks (environment seeds) per step")
    group_size: int = _f(4, "rollouts per task (the GRPO group size G)")
    ppo_epochs: int = _f(1, "passes over each rollout batch")
    n_minibatches: int = _f(4, "mini-batches (optimizer updates) per epoch; off-policy degree = n_minibatches - 1")
    max_grad_norm: float = _f(1.0, "gradient-norm clip of each update (0 disables)")
    # --- loss ------------------------------------------------------------------------------------------------------
    clip_low: float = _f(0.2, "eps_low: lower clip bound is 1 - clip_low (token ratio, or sequence ratio for gspo/atpo/sampo)")
    clip_high: float = _f(0.2, "eps_high: upper clip bound is 1 + clip_high")
    dual_clip_c: float = _f(0.0, "dual-clip constant c for A<0 (grpo/dapo); 0 disables, 3 is the usual value")
    tau_pos: float = _f(1.0, "SAPO temperature for positive advantages")
    tau_neg: float = _f(1.05, "SAPO temperature for negative advantages")
    kl_coef: float = _f(0.0, "coefficient of the k3 KL loss to the frozen reference policy (0 disables)")
    ent_coef: float = _f(0.0, "entropy bonus: the loss subtracts ent_coef x the token entropy of the full next-token "
                         "distribution, aggregated like the loss (verl actor.entropy_coeff; 0 disables)")
    loss_agg: str = _f("token-mean", "how token losses are averaged into the batch loss", LOSS_AGGS)
    # --- advantages ------------------------------------------------------------------------------------------------
    adv_estimator: str = _f("grpo", "grpo: group z-score of episode returns; gigpo: plus anchor-state step advantages", ADV_ESTIMATORS)
    omega: float = _f(1.0, "GiGPO weight of the step advantage: A = A_episode + omega * A_step")
    gamma: float = _f(0.95, "GiGPO discount of the step return G_t = sum_k gamma^k r_{t+k}")
    dynamic_filter: bool = _f(False, "drop groups whose episode returns are all equal (DAPO dynamic sampling, no resampling)")
    cold_start_steps: int = _f(5, "steps at the start during which dynamic filtering keeps every group (ARLArena)")
    nalis_mask: Optional[bool] = _f(None, "negative-advantage low-IS sequence mask (any loss); default: on only for sampo")
    nalis_delta: float = _f(0.223, "mask a sample when mean A < 0 and mean(logp_old - logp) > delta (0.223: s_i < 0.8)")
    opsm_delta: Optional[float] = _f(None, "off-policy sequence mask of DeepSeek-V3.2 (ms-swift off_policy_sequence_mask_delta, "
                                     "slime --use-opsm --opsm-delta): drop a sample from the policy-gradient term when "
                                     "mean A < 0 and mean(logp_rollout - logp) > delta, logp_rollout being the sampler's "
                                     "own log-probs (the drift includes the rollout lag); unset: off")
    tis_cap: Optional[float] = _f(None, "truncated importance sampling (verl algorithm.rollout_correction.rollout_is=token "
                                  "with rollout_is_threshold; TRL vllm_importance_sampling_correction with "
                                  "vllm_importance_sampling_cap): weight every token's loss by min(pi_old / pi_sampler, "
                                  "C), correcting the sampler-trainer mismatch (here: the rollout lag); C = 2 is verl's "
                                  "and TRL's default; unset: off")
    mask_truncated: bool = _f(False, "leave responses that hit max_new_tokens out of the policy-gradient term (DAPO's "
                              "overlong filtering; TRL mask_truncated_completions); the KL anchor keeps them")
    format_penalty: float = _f(0.1, "extra penalty subtracted from a turn's reward when its response is not a valid "
                               "action (every algorithm: one reward definition, so a broken format still has a gradient)")
    # --- rollout ---------------------------------------------------------------------------------------------------
    max_turns: Optional[int] = _f(None, "turn limit per episode (default: the environment's)")
    max_new_tokens: int = _f(16, "response length limit per turn; a response hitting it is marked truncated")
    temperature: float = _f(1.0, "sampling temperature (the trainer's log-probs use the same temperature)")
    context: str = _f("auto", "turn: one sample per turn (prompt = observation); trajectory: one sample per episode with "
                      "environment/tool text inserted as masked tokens; auto: the environment's choice", ("auto", "turn", "trajectory"))
    retokenize: bool = _f(False, "decode sampled ids to text and encode again between turns (reproduces retokenization drift)")
    rollout_lag: int = _f(0, "the sampler uses the policy weights of this many steps ago (asynchronous trainers); "
                          "0: the current weights")
    logp_old_source: str = _f("auto", "logp_old of the IS ratio: recompute (the trainer's forward pass before the updates), "
                              "sampler (the sampler's own log-probs: off-policy by the lag and the sampler's precision), "
                              "auto (sampler when it is exactly the current float32 policy, which saves a pass; else "
                              "recompute)", ("auto", "recompute", "sampler"))
    rollout_dtype: str = _f("float32", "dtype of the sampler's weights; bfloat16 makes logp_rollout differ from the trainer's "
                            "logp_old (train/inference mismatch)", ("float32", "bfloat16", "float16"))
    # --- environment (None: the environment's default) ---------------------------------------------------------------
    obs_layout: Optional[str] = _f(None, "sokoban observation: full (instruction, turn, history, grid; ARLArena) or "
                                   "short (the interior grid only: ~20 prompt tokens instead of ~180)", ("full", "short"))
    history_length: Optional[int] = _f(None, "sokoban: past observation/action pairs shown in a full observation (2)")
    room_size: Optional[int] = _f(None, "sokoban: room side length including the outer walls (6)")
    max_walls: Optional[int] = _f(None, "sokoban: at most this many random interior walls (2)")
    min_moves: Optional[int] = _f(None, "sokoban: shortest solution of a generated level is at least this long (2)")
    max_moves: Optional[int] = _f(None, "sokoban: shortest solution of a generated level is at most this long (8)")
    # --- evaluation ------------------------------------------------------------------------------------------------
    eval_every: int = _f(10, "evaluate on the fixed evaluation set every this many steps (and at the first and last "
                         "step), logged as eval_success / eval_valid_format / eval_return; 0 disables")
    eval_tasks: int = _f(64, "size of the fixed evaluation set (the same task seeds for every run and seed)")
    eval_temperature: float = _f(1.0, "sampling temperature of the evaluation episodes (1: the policy being trained; "
                                 "0: greedy, which can loop where sampling escapes); its generator is seeded, so the "
                                 "same weights give the same score")
    # --- model -----------------------------------------------------------------------------------------------------
    model: str = _f("tiny-qwen3", "tiny-qwen3 | tiny-llama (built from a config, local word-level tokenizer) or a local "
                    "path to a pretrained causal LM and its tokenizer (never downloaded)")
    hidden_size: int = _f(128, "hidden size of the tiny model")
    n_layers: int = _f(2, "layers of the tiny model")
    device: str = _f("cpu", "torch device (cpu, cuda, cuda:1, ...)")
    threads: int = _f(0, "torch CPU threads (0: torch's default); 1 lets two runs share a 2-core machine")
    reproducible: bool = _f(False, "pinned numerics (arldiag/trainer/numerics.py): one thread, torch's, MKL's and "
                            "oneDNN's kernels held to the baseline x86-64 instruction set, deterministic algorithms, "
                            "at a speed cost. Guarantees the same bits on a machine with the same CPU vendor and the "
                            "same torch, transformers, numpy and glibc, whatever kernel level that CPU or the caller's "
                            "environment would pick; not across CPU vendors or versions (an AMD retrain of an Intel "
                            "run differed at step 0 by 1e-7), where a chaotic run agrees only in distribution over "
                            "seeds (docs/reference-trainer.md, 'What pinned numerics guarantee'). run.json records it "
                            "with a fingerprint of all of these (config.numerics); the suite's runs use it")
    init_perturb: float = _f(0.0, "multiply every initial weight (after the warm start is loaded) by 1 + init_perturb x "
                             "N(0, 1), the noise drawn from its own generator seeded by the run's seed: a relative "
                             "perturbation of the size another machine's kernels leave in the last bits (1e-7: "
                             "float32's unit roundoff is 6e-8), to test whether a run's outcome survives it; 0: off")
    init: str = _f("bc", "bc: behaviour-cloning warm start from solver trajectories (cached); scratch; or a checkpoint path")
    bc_episodes: int = _f(400, "solver episodes for behaviour cloning")
    bc_steps: int = _f(300, "behaviour-cloning optimizer steps")
    bc_lr: float = _f(3e-3, "behaviour-cloning learning rate")
    bc_noise: float = _f(0.5, "share of demonstration turns whose action is uniformly random instead of the solver's "
                         "(a weak warm start leaves RL room to learn; environments without random_response ignore it)")
    bc_seed: Optional[int] = _f(None, "seed of the behaviour-cloning warm start (its model initialisation, demonstrations "
                                "and batches); unset: the run's seed. Runs that share it share one warm start, which "
                                "the package may ship (arldiag/trainer/warm_starts: loaded, never retrained)")
    bc_cache: str = _f("~/.cache/arldiag/bc", "folder of cached behaviour-cloning checkpoints (a warm start the "
                       "package ships is loaded from the package instead)")
    # --- logging ---------------------------------------------------------------------------------------------------
    token_sample_rate: float = _f(0.05, "fraction of token rows the Collector keeps (sequence/step tables are complete)")
    save_model: bool = _f(False, "save the final policy under OUT/model")
    monitor: str = _f("off", "online collapse alerts while training: off | alert (console + the run's alerts table) "
                             "| stop (also stop the run when the alert state turns critical)",
                      ("off", "alert", "stop"))
    auto_stabilize: Optional[str] = _f(None, "act on the monitor's alerts while training (README, Auto-stabilize): off, "
                                       "a registered policy (default, conservative, levers) or module:function; the "
                                       "monitor runs in alert mode. Unset: the [stabilize] policy of arldiag.toml if "
                                       "that file sets one, else off")

    def resolved_nalis_mask(self) -> bool:
        return (self.algo == "sampo") if self.nalis_mask is None else bool(self.nalis_mask)

    def resolved_bc_seed(self) -> int:
        return self.seed if self.bc_seed is None else int(self.bc_seed)

    def resolved_split(self) -> str:
        if self.split != "auto":
            return self.split
        # seeds 0-2 dev and 3-4 held out, repeated in blocks of five (5-7 dev, 8-9 held out, ...): a suite grown
        # by more seeds keeps the 3:2 split without renaming the runs already scored
        return "dev" if self.seed % 5 < 3 else "heldout"

    def env_options(self) -> dict[str, Any]:
        """The environment constructor's keyword arguments this config sets (None fields keep the env default)."""
        names = ("max_turns", "obs_layout", "history_length", "room_size", "max_walls", "min_moves", "max_moves")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    def injected_faults(self) -> dict[str, str]:
        """{detector: why} for the faults this config plants on purpose. Stored in run.json (config.injected_faults)
        so that `arldiag eval-detect` scores such a run by whether those detectors fire, not as a stable run."""
        out = {}
        if self.rollout_dtype != "float32":
            out["mismatch_drift"] = f"the sampler runs in {self.rollout_dtype}, the trainer in float32"
        if self.retokenize:
            out["retok_drift"] = "sampled ids are decoded and re-encoded between turns"
        return out

    def validate(self) -> "TrainConfig":
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            if choices and getattr(self, f.name) is not None and getattr(self, f.name) not in choices:
                raise ValueError(f"{f.name}={getattr(self, f.name)!r}: choose from {', '.join(choices)}")
        positive = ("lr", "n_tasks", "group_size", "ppo_epochs", "n_minibatches", "max_new_tokens", "temperature",
                    "tau_pos", "tau_neg", "hidden_size", "n_layers")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not 0.0 <= self.token_sample_rate <= 1.0:
            raise ValueError(f"token_sample_rate must be in [0, 1], got {self.token_sample_rate!r}")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps!r}")
        for name in ("rollout_lag", "eval_every", "eval_tasks", "weight_decay", "eval_temperature", "format_penalty"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.auto_stabilize not in (None, "off"):
            resolve_policy(self.auto_stabilize)  # a one-line error for an unknown name or module:function
            if self.monitor == "stop":
                raise ValueError("auto_stabilize: use --monitor alert (or leave it off) with --auto-stabilize; "
                                 "the policy decides when to stop")
        if self.opsm_delta is not None and self.opsm_delta < 0:
            raise ValueError(f"opsm_delta must be >= 0 (or unset), got {self.opsm_delta!r}")
        if not self.ent_coef >= 0:
            raise ValueError(f"ent_coef must be >= 0, got {self.ent_coef!r}")
        if self.tis_cap is not None and not self.tis_cap > 0:
            raise ValueError(f"tis_cap must be > 0 (or unset), got {self.tis_cap!r}")
        if self.bc_seed is not None and self.bc_seed < 0:
            raise ValueError(f"bc_seed must be >= 0 (or unset), got {self.bc_seed!r}")
        if self.reproducible and (self.threads > 1 or self.device != "cpu"):
            raise ValueError(f"reproducible: pinned numerics run on one CPU thread, got threads={self.threads!r}, "
                             f"device={self.device!r}")
        if not 0.0 <= self.init_perturb < 1.0:
            raise ValueError(f"init_perturb must be in [0, 1), got {self.init_perturb!r}")
        if not 0.0 <= self.bc_noise <= 1.0:
            raise ValueError(f"bc_noise must be in [0, 1], got {self.bc_noise!r}")
        return self


# Per-algorithm defaults (ALGORITHMS.md). Clip ranges of gspo/atpo/sampo are ARLArena's script values.
PRESETS: dict[str, dict[str, Any]] = {
    "grpo": dict(clip_low=0.2, clip_high=0.2, dual_clip_c=3.0, loss_agg="token-mean", adv_estimator="grpo"),
    "dapo": dict(clip_low=0.2, clip_high=0.28, loss_agg="token-mean", adv_estimator="grpo", dynamic_filter=True),
    "gspo": dict(clip_low=3e-3, clip_high=4e-3, loss_agg="seq-mean-token-mean", adv_estimator="grpo"),
    "cispo": dict(clip_low=1.0, clip_high=0.2, loss_agg="token-mean", adv_estimator="grpo"),
    "sapo": dict(tau_pos=1.0, tau_neg=1.05, loss_agg="token-mean", adv_estimator="grpo"),
    "atpo": dict(clip_low=3e-3, clip_high=4e-3, loss_agg="seq-mean-token-mean", adv_estimator="grpo"),
    "sampo": dict(clip_low=3e-3, clip_high=4e-3, loss_agg="seq-mean-token-mean", adv_estimator="gigpo", omega=1.0,
                  gamma=0.95, dynamic_filter=True, cold_start_steps=5, nalis_mask=True, kl_coef=0.01),
}


def make_config(algo: str, **overrides: Any) -> TrainConfig:
    """The preset of ``algo`` with ``overrides`` applied (None values are ignored)."""
    if algo not in PRESETS:
        raise ValueError(f"algo={algo!r}: choose from {', '.join(ALGOS)}")
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = set(overrides) - names
    if unknown:
        raise ValueError(f"unknown config field(s): {', '.join(sorted(unknown))}")
    values = dict(PRESETS[algo])
    values.update({k: v for k, v in overrides.items() if v is not None})
    values["algo"] = algo
    return TrainConfig(**values).validate()


# --- argparse built from the fields ---------------------------------------------------------------------------------
def _base_type(tp: Any) -> Any:
    if get_origin(tp) is Union:
        args = [a for a in get_args(tp) if a is not type(None)]
        return args[0]
    return tp


def _parse_bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {text!r}")


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """One option per field: ``--n-tasks 8``; booleans take ``--flag`` / ``--no-flag``. Defaults are None so that
    only what the user typed overrides the preset (the help shows the dataclass default)."""
    hints = get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        tp = _base_type(hints[f.name])
        opt = "--" + f.name.replace("_", "-")
        helptext = f"{f.metadata['help']} (default: {f.default}; presets may change it)"
        if tp is bool:
            parser.add_argument(opt, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=helptext)
        else:
            parser.add_argument(opt, dest=f.name, type=tp, default=None, choices=f.metadata.get("choices"),
                                help=helptext)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    values = {n: getattr(args, n, None) for n in names}
    algo = values.pop("algo") or TrainConfig.algo
    return make_config(algo, **values)

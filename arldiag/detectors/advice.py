"""Recommendations that fit the run's configuration: no advice to add what the run already has.

Each detector declares its advice as a tuple of remedies (``Detector.remedies``); a remedy may name a *setting test*
on the run's config (run.json ``config`` plus its top-level ``algorithm``). When the test says the run already has
it ("max_grad_norm is set"), that remedy is replaced by what can still be done with it (e.g. "lower max_grad_norm
(now 1.0)") or left out.
The detector's own ``recommendation`` text (docs/detectors.md) stays the generic advice for an unknown config.

Standard library only: the online Monitor uses it inside the training process.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

Config = Mapping[str, Any]


def _num(cfg: Config, *keys: str) -> float | None:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def _algo(cfg: Config) -> str:
    return str(cfg.get("algo") or cfg.get("algorithm") or "").lower()


# ---- setting tests: (cfg) -> a short phrase naming the setting when the run already has it, else None
def grad_clip(cfg: Config) -> str | None:
    v = _num(cfg, "max_grad_norm", "grad_clip", "clip_grad_norm")
    return f"max_grad_norm {v:g}" if v is not None and v > 0 else None


def token_mean(cfg: Config) -> str | None:
    v = str(cfg.get("loss_agg") or cfg.get("loss_agg_mode") or "")
    return f"loss_agg {v}" if v == "token-mean" else None


def nalis_mask(cfg: Config) -> str | None:
    return f"nalis_mask on (delta {cfg.get('nalis_delta', '?')})" if cfg.get("nalis_mask") is True else None


def seq_clip(cfg: Config) -> str | None:
    return f"sequence-level clipping ({_algo(cfg)})" if _algo(cfg) in ("gspo", "sampo") else None


def kl_loss(cfg: Config) -> str | None:
    v = _num(cfg, "kl_coef", "kl_loss_coef")
    return f"kl_coef {v:g}" if v is not None and v > 0 else None


def clip_higher(cfg: Config) -> str | None:
    v = _num(cfg, "clip_high", "clip_ratio_high")
    return f"clip_high {v:g}" if v is not None and v >= 0.28 and _algo(cfg) not in ("gspo", "sampo") else None


def dynamic_filter(cfg: Config) -> str | None:
    return "dynamic_filter on" if cfg.get("dynamic_filter") is True else None


def gigpo(cfg: Config) -> str | None:
    return "adv_estimator gigpo" if str(cfg.get("adv_estimator") or "").lower() == "gigpo" else None


def format_penalty(cfg: Config) -> str | None:
    v = _num(cfg, "format_penalty")
    return f"format_penalty {v:g}" if v is not None and v > 0 else None


def token_in_token_out(cfg: Config) -> str | None:
    return "token ids passed through (retokenize off)" if cfg.get("retokenize") is False else None


def dual_clip(cfg: Config) -> str | None:
    v = _num(cfg, "dual_clip_c", "clip_ratio_c")
    return f"dual_clip_c {v:g}" if v is not None and v > 1 else None


def no_entropy_bonus(cfg: Config) -> str | None:
    """The run has an entropy coefficient of 0: no bonus to switch off (verl entropy_coeff, TRL entropy_coef)."""
    v = _num(cfg, "ent_coef", "entropy_coeff", "entropy_coef")
    return "no entropy bonus" if v is not None and v <= 0 else None


def clip_high_not_raised(cfg: Config) -> str | None:
    """eps_high is not raised (clip-higher off, or a sequence-level clip): nothing to bring back down."""
    v = _num(cfg, "clip_high", "clip_ratio_high", "epsilon_high")
    if _algo(cfg) in ("gspo", "sampo", "cispo"):  # their upper bound is not DAPO's clip-higher
        return f"{_algo(cfg)}'s own upper bound"
    return f"clip_high {v:g}" if v is not None and v < 0.28 else None


def truncation_masked(cfg: Config) -> str | None:
    on = cfg.get("mask_truncated") is True or cfg.get("mask_truncated_completions") is True
    return "truncated responses masked" if on else None


def always_on_correction(cfg: Config) -> str | None:
    """An off-policy correction on from step 0: truncated IS or the off-policy sequence mask (the reference
    trainer's tis_cap / opsm_delta, verl's rollout_correction, TRL's vllm_importance_sampling_correction)."""
    tis = _num(cfg, "tis_cap", "vllm_importance_sampling_cap", "tis_imp_ratio_cap")
    on = tis is not None and tis > 0 and cfg.get("vllm_importance_sampling_correction", True) is not False
    if cfg.get("rollout_is") in ("token", "sequence"):  # verl: the level switches it on, the threshold bounds it
        on, tis = True, _num(cfg, "rollout_is_threshold") or 2.0
    if on:
        return f"truncated IS (cap {tis:g})"
    opsm = _num(cfg, "opsm_delta", "off_policy_sequence_mask_delta")
    return f"off-policy sequence mask (delta {opsm:g})" if opsm is not None else None


# How each trainer is named in advice; a run's trainer (trainer_of) selects its own setting from a remedy's list.
TRAINERS = {"verl": "verl", "trl": "TRL", "reference": "the reference trainer", "ms-swift": "ms-swift",
            "slime": "slime"}
# log names only one trainer writes (an imported run's run.json ``config.renamed`` keeps the originals)
_TRAINER_PREFIXES = (("actor/", "verl"), ("critic/", "verl"), ("val-core/", "verl"), ("completions/", "trl"),
                     ("rewards/", "trl"), ("frac_reward_zero_std", "trl"))
_IMPORT_FORMATS = {"verl-jsonl": "verl", "trl-state": "trl", "trl-completions": "trl"}


def trainer_of(manifest: Mapping[str, Any] | None) -> str | None:
    """The trainer a run came from (a key of TRAINERS) or None when unknown: run.json's ``source`` / ``framework``
    (top level or in ``config``, as the live integrations write it), an import's format or the trainer-specific
    names it renamed, or the reference trainer's own config (``algo`` with an ``env``)."""
    m = manifest or {}
    cfg = m.get("config") if isinstance(m.get("config"), Mapping) else {}
    for v in (m.get("source"), m.get("framework"), cfg.get("source"), cfg.get("framework")):
        if isinstance(v, str) and v.lower() in TRAINERS:
            return v.lower()
    if cfg.get("import_format") in _IMPORT_FORMATS:
        return _IMPORT_FORMATS[cfg["import_format"]]
    renamed = cfg.get("renamed") if isinstance(cfg.get("renamed"), Mapping) else {}
    found = {t for name in renamed for prefix, t in _TRAINER_PREFIXES if str(name).startswith(prefix)}
    if len(found) == 1:
        return found.pop()
    return "reference" if "algo" in cfg and "env" in cfg else None


@dataclass(frozen=True)
class Remedy:
    text: str
    has: Callable[[Config], str | None] | None = None   # the run already has it when this returns a phrase
    instead: str | None = None                           # what to say then ({has} = the phrase); None: leave out
    # (trainer, its setting) pairs: a run of a known trainer is told its own setting, any other run all of them
    settings: tuple[tuple[str, str], ...] = ()

    def render(self, trainer: str | None) -> str:
        if not self.settings:
            return self.text
        own = [v for t, v in self.settings if t == trainer]
        if own:
            return f"{self.text} ({TRAINERS[trainer]} {own[0]})"
        if trainer is not None:  # a trainer without this setting: the remedy, without the others' settings
            return self.text
        return f"{self.text} ({'; '.join(f'{TRAINERS[t]} {v}' for t, v in self.settings)})"


# the most common remedy, shared by several detectors' declarations
LOWER_LR = Remedy("lower the learning rate")
# the closed loop's levers for an entropy that runs away and for responses at the length cap, each with
# the trainers' own setting and value; left out when the run already has it
ENTROPY_BONUS_OFF = Remedy("switch the entropy bonus off", no_entropy_bonus, None,
                           (("verl", "actor_rollout_ref.actor.entropy_coeff=0"), ("trl", "entropy_coef=0.0"),
                            ("reference", "--ent-coef 0")))
CLIP_HIGH_DOWN = Remedy("bring clip-high back to clip-low", clip_high_not_raised, None,
                        (("verl", "actor_rollout_ref.actor.clip_ratio_high=0.2"), ("trl", "epsilon_high=0.2"),
                         ("reference", "--clip-high 0.2")))
MASK_TRUNCATED = Remedy("leave truncated responses out of the policy gradient, DAPO's overlong filtering",
                        truncation_masked, None,
                        (("trl", "mask_truncated_completions=True"), ("reference", "--mask-truncated")))
# The lag set's comparison (sample_runs/README.md, "Always-on mitigations against the closed loop"): on its 10
# held-out seeds the masks on from step 0 ended higher than the closed loop (which switches the mask on only once the
# alert turns critical; median final eval success 0.75 and 0.73 against 0.61), the off-policy sequence mask highest,
# and truncated IS level with the loop (0.59). Each trainer's own setting, with its value; verl and TRL ship truncated
# IS rather than the sequence mask; what the closed loop (the reference trainer's) adds is said to its users.
# off-policy findings: a correction on from step 0 first, unless the run has one
CORRECT_FROM_START = Remedy(
    "switch on an off-policy correction from step 0: the off-policy sequence mask of DeepSeek-V3.2 or truncated IS",
    always_on_correction, None,
    (("ms-swift", "off_policy_sequence_mask_delta"), ("slime", "--use-opsm --opsm-delta"),
     ("verl", "truncated IS: algorithm.rollout_correction.rollout_is=token with rollout_is_threshold=2.0 and "
              "actor_rollout_ref.rollout.calculate_log_probs=True"),
     ("trl", "truncated IS: vllm_importance_sampling_correction=True with vllm_importance_sampling_cap=2.0"),
     ("reference", "--opsm-delta 0.03, or truncated IS --tis-cap 2; what the closed loop (--auto-stabilize "
                   "default) adds is a rollback and the mask for a run that did not start with them")))


def settings_of(manifest: Mapping[str, Any] | None) -> dict[str, Any]:
    """The settings advice reads: run.json ``config`` plus its top-level ``algorithm`` and ``dual_clip_c``."""
    m = manifest or {}
    out = dict(m.get("config") or {})
    if m.get("algorithm") and "algo" not in out:
        out["algo"] = m["algorithm"]
    trainer = trainer_of(m)
    if trainer is not None:  # advice names this trainer's settings only (Remedy.render)
        out.setdefault("trainer", trainer)
    return out


def with_actions(settings: Mapping[str, Any], outcomes: Iterable[Any]) -> dict[str, Any]:
    """The settings a run ended with: ``settings`` (its run.json config) with the ``after`` values of every
    auto-stabilize action applied in order (the actions table's ``outcome`` JSON, e.g. ``{"after": {"nalis_mask":
    true, "nalis_delta": 0.003}}``), so that advice does not recommend what the loop already switched on.
    Outcomes without an ``after`` mapping (a rollback, a stop) or that are not valid JSON change nothing."""
    out = dict(settings)
    for o in outcomes:
        if isinstance(o, str):
            try:
                o = json.loads(o)
            except ValueError:
                continue
        after = o.get("after") if isinstance(o, Mapping) else None
        if isinstance(after, Mapping):
            out.update(after)
    return out

"""Recommendations tied to findings: every recommendation names the finding(s) and the evidence it rests on.

The text is the finding's own ``recommendation`` (written by its detector); where a detector left it empty, a
default for its family is used (ARLArena / DAPO / verl remedies, ALGORITHMS.md). Identical advice from several
findings is merged, keeping every piece of evidence.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from arldiag.detectors.registry import advise
from arldiag.findings import Finding, level_steps, severity_rank
from arldiag.wording import plural

# (keyword in the detector name, default advice). First match wins; order from specific to general.
DEFAULT_ADVICE: tuple[tuple[str, str], ...] = (
    ("neg_adv", "Mask negative-advantage low-IS sequences (drop sample i when mean A < 0 and s_i < exp(-delta), "
                "ARLArena delta = 0.223) or switch to sequence-level clipping (GSPO / SAMPO)."),
    ("nalis", "Mask negative-advantage low-IS sequences (drop sample i when mean A < 0 and s_i < exp(-delta), "
              "ARLArena delta = 0.223) or switch to sequence-level clipping (GSPO / SAMPO)."),
    ("retok", "Feed the sampled token ids straight back to the trainer (token-in-token-out) instead of decoding and "
              "re-tokenizing between turns."),
    ("mismatch", "Correct the training-inference mismatch: truncated IS (TIS, weight min(rho, 2)) or MIS / IcePop "
                 "(drop tokens with rho outside [0.5, 5]); check the rollout engine's dtype."),
    ("clip", "Use sequence-level clipping (GSPO-style) or a tighter token clip range; tolerant losses (CISPO, SAPO) "
             "let out-of-band negative-advantage tokens keep pushing."),
    ("concentr", "A few sequences carry most of the policy-update KL: mask or down-weight them (KL-Cov / Clip-Cov) "
                 "and inspect the top offenders below."),
    ("entropy", "Entropy collapse: raise eps_high (clip-higher, DAPO 0.28) or apply Clip-Cov / KL-Cov to the "
                "top-Cov(logp, A) tokens; entropy blow-up: lower the learning rate or tighten the clip range."),
    ("grad", "Lower the learning rate or the gradient-norm clip; a grad-norm spike often follows out-of-band "
             "negative-advantage tokens."),
    ("kl", "Lower the learning rate or the number of mini-batches per step (the off-policy degree), or add / raise "
           "the k3 KL loss to the reference."),
    ("nonfinite", "Find the source of the NaN/Inf values (log-prob of masked tokens, fp16 overflow) before "
                  "anything else; they poison the gradient."),
    ("zero", "Enable dynamic filtering (drop groups whose rewards all agree), best with a rich advantage signal "
             "(GiGPO); with plain GRPO it can remove format-learning signal."),
    ("length", "Use an overlong penalty or seq-mean-token-mean aggregation; check the length limit."),
    ("trunc", "Use an overlong penalty or seq-mean-token-mean aggregation; check the length limit."),
    ("format", "Add a format penalty for unparseable actions and check the prompt template."),
    ("success", "The run collapsed: act on the earliest precursor listed above (restart from a checkpoint before "
                "its first step)."),
    ("reward", "The run collapsed: act on the earliest precursor listed above (restart from a checkpoint before "
               "its first step)."),
)


def default_advice(detector: str) -> str:
    d = detector.lower()
    for key, text in DEFAULT_ADVICE:
        if key in d:
            return text
    return "Inspect the evidence of this finding in the timeline and the offender sequences."


@dataclass
class Recommendation:
    text: str
    severity: str
    detectors: list[str]
    evidence: list[str]                  # one line per finding it rests on
    first_step: int | None
    run: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "severity": self.severity, "detectors": list(self.detectors),
                "evidence": list(self.evidence), "first_step": self.first_step, "run": self.run}


def _fmt(v: Any) -> str | None:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return None if not math.isfinite(v) else f"{v:.4g}"
    if isinstance(v, str) and len(v) <= 40:
        return v
    return None


def evidence_line(f: Finding, max_items: int = 4) -> str:
    """'<detector> (watch at S1, warning at S2) over N steps: <title>; key=value, ...' with the finding's scalar
    evidence (series and lists are left to the figures)."""
    head = f"{f.detector} ({level_steps(f)})"
    if f.steps:
        head += f" over {plural(len(f.steps), 'step')}"
    if f.title:
        head += f": {f.title}"
    scalars = [f"{k}={s}" for k, v in (f.evidence or {}).items() if (s := _fmt(v)) is not None][:max_items]
    return head + ("; " + ", ".join(scalars) if scalars else "")


def recommendations(findings: Sequence[Finding], config: Mapping[str, Any] | None = None) -> list[Recommendation]:
    """One recommendation per distinct advice among fired findings, most severe and earliest first. With the
    run's ``config`` (detectors.advice.settings_of of its run.json), the advice fits it: nothing the run already
    has (no "add gradient clipping" when max_grad_norm is set)."""
    fired = sorted((f for f in findings if f.fired),
                   key=lambda f: (-severity_rank(f.severity), f.first_step if f.first_step is not None else 1 << 62,
                                  f.detector))
    out: dict[str, Recommendation] = {}
    for f in fired:
        text = (f.recommendation or "").strip() or default_advice(f.detector)
        if config:
            text = advise(f.detector, config, text)
        rec = out.get(text)
        if rec is None:
            out[text] = Recommendation(text=text, severity=f.severity, detectors=[f.detector],
                                       evidence=[evidence_line(f)], first_step=f.first_step, run=f.run)
        else:
            rec.detectors.append(f.detector)
            rec.evidence.append(evidence_line(f))
            if f.first_step is not None and (rec.first_step is None or f.first_step < rec.first_step):
                rec.first_step = f.first_step
    return list(out.values())

"""The one registry of detectors, in catalog order (docs/detectors.md follows the same order)."""
from __future__ import annotations

from arldiag.detectors import entropy, floor, health, kl, mismatch, ratios, rollout, score
from arldiag.detectors.advice import Config
from arldiag.detectors.base import Detector

REGISTRY: dict[str, Detector] = {}


def register(detector: Detector) -> Detector:
    if detector.name in REGISTRY:
        raise ValueError(f"detector {detector.name!r} is already registered")
    REGISTRY[detector.name] = detector
    return detector


for _mod in (ratios, kl, entropy, health, rollout, score, floor, mismatch):
    for _d in _mod.DETECTORS:
        register(_d)


def resolve(names=None) -> list[Detector]:
    """names: None (all), or an iterable of registry names and/or Detector objects (custom configs)."""
    if names is None:
        return list(REGISTRY.values())
    if isinstance(names, (str, Detector)):
        names = [names]
    out = []
    for n in names:
        if isinstance(n, Detector):
            out.append(n)
        elif n in REGISTRY:
            out.append(REGISTRY[n])
        else:
            raise ValueError(f"names: unknown detector {n!r}; known: {', '.join(REGISTRY)}")
    return out


def configured(settings) -> list[Detector]:
    """The detectors an arldiag.settings.Settings enables, each with its [detectors.NAME] parameters."""
    out = []
    for name, vals in settings.values["detectors"].items():
        if vals["enabled"]:
            d = REGISTRY[name]
            params = {k: tuple(v) if isinstance(d.params[k], tuple) else v for k, v in vals.items() if k != "enabled"}
            out.append(d.with_params(**params))
    return out


def advise(detector: str, config: Config | None, default: str = "") -> str:
    """The detector's advice fitted to ``config``; ``default`` (its generic text) when the config is unknown or
    the detector has no remedy list."""
    d = REGISTRY.get(detector)
    remedies = d.remedies if d is not None else ()
    if not remedies or not config:
        return default
    parts, already = [], []
    trainer = config.get("trainer")
    for r in remedies:
        has = r.has(config) if r.has is not None else None
        if has is None:
            parts.append(r.render(trainer))
        else:
            already.append(has)
            if r.instead:
                parts.append(r.instead.format(has=has))
    if not parts:
        return default
    text = "; ".join(parts)
    text = text[0].upper() + text[1:] + "."
    if already:
        text += " (Already in this run's config: " + ", ".join(dict.fromkeys(already)) + ".)"
    return text

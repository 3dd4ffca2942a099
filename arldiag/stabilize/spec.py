"""What an action of the closed loop is: one ``ActionSpec`` declares everything the loop needs to know about it.

    ActionSpec(kind="lr_scale", order=4, summary="multiply the learning rate",
               params={"factor": "multiplier in (0, 1)"},
               limits=(Limit("max_lr_scalings", 3, "learning-rate scalings per run", ...), ...),
               settings=("lr",), method="set_lr",
               admit=admit_lr_scale,                  # (action, situation, limits) -> (params | None, why not)
               apply=lambda t, p, why: t.set_lr(p["lr"]))

The Stabilizer (runner.py) is generic over these: it orders a decision's actions by ``order``, asks ``admit`` for
the parameters to apply (or why not), calls ``apply`` on the trainer's controls, and builds its ``Limits`` from the
specs' ``limits``; ``arldiag.toml``'s ``[stabilize]`` keys and their comments come from the same ``Limit`` items.
A trainer supports an action by listing its kind in ``supports`` and implementing ``method`` (and reporting the
``settings`` keys its ``admit`` reads); tests/stabilize/test_action_declarations.py checks both for every
trainer's controls. Standard library only: it runs inside the training process.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from arldiag.stabilize.actions import Action, Situation


@dataclass(frozen=True)
class Limit:
    """One bound the Stabilizer enforces whatever the policy asks: a field of ``Limits`` and a key of
    arldiag.toml's ``[stabilize]`` section. ``ok(value)`` is the validity test, ``must`` what it requires, in words
    (the error reads "stabilize.NAME must MUST, got VALUE")."""
    name: str
    default: Any
    doc: str
    ok: Callable[[Any], bool] = lambda v: True
    must: str = ""

    def check(self, value: Any) -> None:
        if not self.ok(value):
            raise ValueError(f"stabilize.{self.name} must {self.must}, got {value!r}")


def count_limit(name: str, default: int, doc: str) -> Limit:
    """A per-run count (>= 0)."""
    return Limit(name, default, doc, ok=lambda v: v >= 0, must="be >= 0")


# admit(action, situation, limits) -> (the resolved parameters to apply, "") or (None, why not). Pure; it may raise
# KeyError / TypeError / ValueError on malformed parameters or settings (the Stabilizer refuses with the message).
Admit = Callable[["Action", "Situation", Any], "tuple[dict | None, str]"]
# apply(controls, resolved parameters, the policy's reason) -> what changed ({"before": ..., "after": ...})
Apply = Callable[[Any, Mapping[str, Any], str], dict]


@dataclass(frozen=True)
class ActionSpec:
    kind: str                        # the name a policy asks for and the actions table stores
    order: int                       # actions of one decision are applied in increasing order
    summary: str                     # what it does, one line (docs/stabilize.md's table)
    admit: Admit                     # may it run now, and with which parameters (idempotence, bounds)
    apply: Apply                     # how a trainer's controls carry it out
    method: str                      # the controls' method ``apply`` calls (what a trainer implements to support it)
    params: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # name -> doc (with default)
    limits: tuple[Limit, ...] = ()   # its bounds: fields of Limits, keys of [stabilize]
    settings: tuple[str, ...] = ()   # the keys of the controls' settings() its admit reads
    restores_checkpoint: bool = False  # the runner keeps calm checkpoints for it; applying it consumes the latest
    ends_run: bool = False           # applying it stops the run (Stabilizer.stopped)

    def __post_init__(self) -> None:
        if not self.kind or not self.kind.replace("_", "").isalnum():
            raise ValueError(f"action kind must be a non-empty identifier, got {self.kind!r}")
        if not self.summary:
            raise ValueError(f"action {self.kind!r}: summary is empty")
        if not (callable(self.admit) and callable(self.apply)):
            raise ValueError(f"action {self.kind!r}: admit and apply must be callable")
        if not self.method.isidentifier():
            raise ValueError(f"action {self.kind!r}: method must name the controls' method, got {self.method!r}")
        undocumented = sorted(k for k, doc in self.params.items() if not doc)
        if undocumented:
            raise ValueError(f"action {self.kind!r}: document parameter(s) {undocumented}")
        bad = [lim.name for lim in self.limits if not lim.doc]
        if bad:
            raise ValueError(f"action {self.kind!r}: document limit(s) {bad}")
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))


def collect(*specs: ActionSpec) -> dict[str, ActionSpec]:
    """kind -> spec, in application order; duplicate kinds, orders or limit names are an error (at import)."""
    out: dict[str, ActionSpec] = {}
    for s in sorted(specs, key=lambda s: s.order):
        if s.kind in out:
            raise ValueError(f"action {s.kind!r} is declared twice")
        out[s.kind] = s
    orders = [s.order for s in out.values()]
    if len(set(orders)) != len(orders):
        raise ValueError(f"actions need distinct orders, got {dict((s.kind, s.order) for s in out.values())}")
    return out


def make_limits(head: tuple[Limit, ...], specs: Mapping[str, ActionSpec], tail: tuple[Limit, ...]) -> type:
    """The frozen dataclass ``Limits``: the runner's own bounds (``head``, ``tail``) around every action's, in
    application order. Each field carries its doc (``metadata["doc"]``); ``__post_init__`` runs every check."""
    items = [*head, *(lim for s in specs.values() for lim in s.limits), *tail]
    names = [lim.name for lim in items]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"stabilize limits declared twice: {dup}")
    by_name = {lim.name: lim for lim in items}

    def __post_init__(self) -> None:
        for name, lim in by_name.items():
            lim.check(getattr(self, name))

    cls = dataclasses.make_dataclass(
        "Limits", [(lim.name, type(lim.default), dataclasses.field(default=lim.default, metadata={"doc": lim.doc}))
                   for lim in items],
        frozen=True, namespace={"__post_init__": __post_init__})
    cls.__doc__ = "Bounds a policy cannot lift (the Stabilizer enforces them):\n" + "\n".join(
        f"    {lim.name} = {lim.default!r}: {lim.doc}" for lim in items)
    return cls

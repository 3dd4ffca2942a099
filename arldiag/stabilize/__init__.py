"""Closed loop: act on the alert while the run can still be saved (issue 15).

A policy (``policies.py``) maps the alert state, the findings behind it, the trainer's settings and the actions
taken so far to actions; each action is one ``ActionSpec`` (``kinds.py``: its parameters, limits, when it is
admitted and how a trainer applies it); the ``Stabilizer`` (``runner.py``) admits them within limits and applies
them through a trainer's ``Stabilizable`` interface (``actions.py``). Standard library and the detector registry
only.
"""
from arldiag.stabilize.actions import ACTION_KINDS, Action, Firing, Policy, Situation, Stabilizable, Taken
from arldiag.stabilize.kinds import ACTIONS
from arldiag.stabilize.policies import POLICIES, register_policy, resolve_policy
from arldiag.stabilize.runner import APPLY, Limits, Stabilizer, admit, firings, limits_of
from arldiag.stabilize.spec import ActionSpec, Limit

__all__ = ["ACTIONS", "ACTION_KINDS", "APPLY", "Action", "ActionSpec", "Firing", "Limit", "Limits", "POLICIES",
           "Policy", "Situation", "Stabilizable", "Stabilizer", "Taken", "admit", "firings", "limits_of",
           "register_policy", "resolve_policy"]

"""Closed loop: act on the alert while the run can still be saved (issue 15).

A policy (``policies.py``) maps the alert state, the findings behind it, the trainer's settings and the actions
taken so far to actions (``actions.py``); the ``Stabilizer`` (``runner.py``) admits them within limits and applies
them through a trainer's ``Stabilizable`` interface. Standard library only.
"""
from arldiag.stabilize.actions import ACTION_KINDS, Action, Firing, Policy, Situation, Stabilizable, Taken
from arldiag.stabilize.policies import POLICIES, register_policy, resolve_policy
from arldiag.stabilize.runner import APPLY, Limits, Stabilizer, admit, firings

__all__ = ["ACTION_KINDS", "APPLY", "Action", "Firing", "Limits", "POLICIES", "Policy", "Situation", "Stabilizable",
           "Stabilizer", "Taken", "admit", "firings", "register_policy", "resolve_policy"]

"""Moved to ``arldiag.evaluation.calibrate_steps`` (the evaluation package); this path re-exports it for the code that imports it."""
from arldiag.evaluation.calibrate_steps import *  # noqa: F401,F403

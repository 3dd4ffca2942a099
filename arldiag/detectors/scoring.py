"""Moved to ``arldiag.evaluation.scoring`` (the evaluation package); this path re-exports it for the code that imports it."""
from arldiag.evaluation.scoring import *  # noqa: F401,F403

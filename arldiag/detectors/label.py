"""Moved to ``arldiag.evaluation.label`` (the evaluation package); this path re-exports it for the code that imports it."""
from arldiag.evaluation.label import *  # noqa: F401,F403

"""Moved to ``arldiag.evaluation.precursors`` (the evaluation package); this path re-exports it for the code that imports it."""
from arldiag.evaluation.precursors import *  # noqa: F401,F403

"""Fleets of runs: the per-run work of `ls`, `detect`, `eval-detect` and `reports` spread over an engine (the local
process or a Ray cluster), and cross-run token statistics (`fleet-stats`) merged part -> run -> fleet.

Modules (imports point down): engine (local | ray, one interface) -> tasks (run path -> the JSON row the local path
gives) -> locate (the runs under roots, local or s3://) ; stats (mergeable token statistics) ; summary_cache (the
run summary kept in the run folder, read by arldiag.fleet). Nothing here imports Ray or DuckDB at import time: Ray
loads when the ray engine starts, DuckDB inside a task.
"""

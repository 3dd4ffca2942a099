"""Render docs/schema.md, the run store glossary, from arldiag/schema.py (the single source of the column docs).

    python -m arldiag.schema_doc > docs/schema.md     # tests/core/test_docs.py fails when the file is stale
"""
from __future__ import annotations

from arldiag.schema import (ACTIONS, ALERTS, GROUPS, SCHEMA_VERSION, SEQUENCES, STEP_AGGS, STEP_METRICS, TOKENS, TURNS,
                            USER_METRIC_PREFIX)

INTRO = f"""# Run store glossary (schema {SCHEMA_VERSION})

Generated from `arldiag/schema.py` by `python -m arldiag.schema_doc`; do not edit by hand.

A run is a directory: `run.json` (manifest) and one folder per table holding Parquet parts
`rankRRRRR-partPPPPPP.parquet`, published atomically. `arldiag.open_run()` exposes each table as a DuckDB view
with a leading `run` column (the run's name). Formulas: `../shared/spec/ALGORITHMS.md`.
Notation: `lp` policy log-prob, `lp_old` behaviour log-prob recomputed by the trainer, `lp_roll` rollout-engine
log-prob, `lp_ref` reference log-prob, `A` advantage, `r = exp(lp - lp_old)` token IS ratio, `s_i` GSPO sequence
ratio, `eps_low/eps_high` the token band (manifest `clip`), `seq_eps_low/seq_eps_high` the sequence band
(manifest `seq_clip`).

## run.json
| key | meaning |
|---|---|
| `schema_version` | major.minor; readers refuse a newer major and read older ones |
| `run_id` | random id, kept when a run is resumed |
| `name` | run name (default: the directory name) |
| `created` / `finished` | ISO times (UTC) |
| `status` | `running` until the Collector closes, then `finished` |
| `algorithm` / `config` | the trainer's algorithm name and config |
| `clip` / `seq_clip` | token band and sequence band `[eps_low, eps_high]` |
| `neg_adv_delta` | delta of the negative-advantage low-IS mask |
| `dual_clip_c` | verl's dual-clip constant c |
| `token_sample_rate` | fraction of samples whose token rows are kept (hash of the sample id) |
| `collector_version`, `host`, `world_size` | provenance |
| `dropped_rows` | rows the writer had to drop after repeated write failures (absent when none) |
"""


def _table(title: str, cols) -> str:
    lines = [f"\n## `{title}`\n", "| column | type | meaning | unit |", "|---|---|---|---|"]
    lines.append("| `run` | string | run name (added by the reader) | |")
    for c in cols:
        lines.append(f"| `{c.name}` | {c.type} | {c.doc} | {c.unit} |")
    return "\n".join(lines)


def render() -> str:
    out = [INTRO]
    out.append(_table("tokens", TOKENS))
    out.append("\nToken rows are sampled: all tokens of a sample are kept when a hash of its id falls below "
               "`token_sample_rate`, and always for anomalous sequences (non-finite inputs, negative-advantage "
               "low-IS, top-1% KL contributors of the update); `sampled` tells them apart.\n")
    out.append(_table("sequences", SEQUENCES))
    out.append(_table("turns", TURNS))
    out.append(_table("groups", GROUPS))
    out.append(_table("alerts", ALERTS))
    out.append(_table("actions", ACTIONS))
    out.append("\n## `steps`\n\nOne row per (run, step): raw aggregates merged over updates and ranks "
               "(sum / max / min), then these metrics derived from them. Trainer metrics given to "
               "`record_step(metrics=...)` appear under their own names; one whose name is a derived metric fills "
               "that metric where arldiag recorded nothing and is also kept as `user/<name>`. The `mismatch_*` metrics "
               "whose `same as` is a trainer's name and that no aggregate feeds (`mismatch_log_abs_mean` ... "
               "`mismatch_masked_frac`) are filled only that way, from what the trainer logged "
               "(docs/integrations/importers.md \"Training-inference mismatch\").\n")
    out.append("| column | meaning | unit | same as |\n|---|---|---|---|")
    out.append("| `step` | training step | | |\n| `time` | when the step was finalised (UTC) | | |")
    for m in STEP_METRICS:
        same = "" if m.source == "arldiag" else m.source
        out.append(f"| `{m.name}` | {m.doc} | {m.unit} | {same} |")
    out.append(f"\n## `steps_raw`\n\nOne row per (run, step, rank) as written: `step`, `rank`, `time`, "
               f"user metrics as `{USER_METRIC_PREFIX}<name>`, and the mergeable aggregates:\n")
    out.append("| column | merge | meaning |\n|---|---|---|")
    for a in STEP_AGGS:
        out.append(f"| `{a.name}` | {a.merge} | {a.doc} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(render(), end="")

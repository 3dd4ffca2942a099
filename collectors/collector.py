"""The Collector: hooks a trainer calls to record stability statistics into a Parquet run store.

Light on purpose: numpy + pyarrow at import; torch is touched only when it is handed torch tensors; no DuckDB,
Dash or plotly; never a network call. Statistics are computed in the caller's thread (vectorised numpy, see
arldiag/stats.py); Parquet encoding and file I/O happen in a background writer thread (arldiag/store/writer.py).

Step aggregates are mergeable sums/counts/extrema (whylogs-style zero/update/merge), so several updates of a step
and several ranks of a job combine exactly in the reader.
"""
from __future__ import annotations

import datetime as _dt
import logging
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from arldiag import __version__
from arldiag.aliases import OWN_OUTCOMES, LiveResolver
from arldiag.schema import (SCHEMA_VERSION, STEP_AGGS, TABLE_COLUMNS, TABLES, USER_METRIC_PREFIX,
                            arrow_schema, derive_step_metrics)
from arldiag.stats import AGGS, Bands, UpdateInputs, compute_update, segmentable, splitmix_unit, top_share
from arldiag.store.location import StoreRoot, is_url
from arldiag.store.writer import PART_ROWS, StoreWriter
from arldiag.backends import is_torch
from arldiag.collectors.guard import Guard
from arldiag.collectors.convert import as_array, as_device_array, check_shape, row_counts
from arldiag.collectors.staging import owned, signature, stack
from arldiag.collectors.rollout_stats import ROLLOUT_AGGS, RolloutCall, rollout_stats
from arldiag.collectors.arrow_rows import (cached_schema, concat_columns, row_table as _row_table, rows_table,
                                          table as _table)

log = logging.getLogger("arldiag")

_MERGE = {a.name: a.merge for a in STEP_AGGS}
STEP_OWN_AGGS = ("n_updates", "kl_top_share")  # aggregates of the whole step (_finish_step)


def check_aggregates() -> None:
    """Every stored step aggregate (schema.STEP_AGGS) has exactly one producer: a formula (stats.AGGS, which refuses
    a name the schema lacks), the rollout statistics (rollout_stats.ROLLOUT_AGGS) or the step itself; a declared
    aggregate nothing computes would be a column of nulls. Run at import."""
    producers = [("stats.AGGS", tuple(AGGS)), ("rollout_stats.ROLLOUT_AGGS", ROLLOUT_AGGS),
                 ("collector.STEP_OWN_AGGS", STEP_OWN_AGGS)]
    seen: dict[str, str] = {}
    for where, names in producers:
        for n in names:
            if n in seen:
                raise ValueError(f"step aggregate {n!r} is produced twice ({seen[n]} and {where})")
            seen[n] = where
    declared = {a.name for a in STEP_AGGS}
    missing, extra = sorted(declared - set(seen)), sorted(set(seen) - declared)
    if missing:
        raise ValueError(f"step aggregates declared in schema.STEP_AGGS without a formula: {missing}")
    if extra:
        raise ValueError(f"step aggregates computed but not declared in schema.STEP_AGGS: {extra}")


check_aggregates()
# held rows (all tables) that make the collector convert and hand them over before the next publish: bounds the
# memory of the numpy columns kept between publishes on steps with many rows (the token rows of a large step)
HOLD_ROWS = 65_536
BATCH_STEPS = 32  # at most this many finished steps share one statistics pass (batch_s)


def merge_into(acc: dict[str, float], new: Mapping[str, float]) -> None:
    """Mergeable update of step aggregates (sum / max / min, by schema.STEP_AGGS)."""
    for k, v in new.items():
        if v is None or v != v:
            continue
        if k not in acc:
            acc[k] = v
        elif _MERGE[k] == "sum":
            acc[k] += v
        elif _MERGE[k] == "max":
            acc[k] = max(acc[k], v)
        else:
            acc[k] = min(acc[k], v)


class _RolloutCache:
    """What record_rollout said about each sample of the current step, looked up by sample id at update time."""

    def __init__(self) -> None:
        self.ids = np.empty(0, np.int64)      # sorted sample ids
        self.cols: dict[str, np.ndarray] = {}  # per-sample columns aligned with ids
        self.flat_logp = np.empty(0, np.float32)   # masked rollout log-probs, concatenated per sample
        self.flat_tok = np.empty(0, np.int64)      # masked rollout token ids (-1 unknown)
        self.offsets = np.empty(0, np.int64)
        self.lengths = np.empty(0, np.int64)
        self.texts: list | None = None

    def add(self, ids, cols, flat_logp, flat_tok, lengths, texts) -> None:
        if self.ids.size == 0 and not self.cols and self.texts is None:  # the step's first rollout (the usual case)
            self._first(ids, cols, flat_logp, flat_tok, lengths, texts)
            return
        order_new = np.argsort(ids, kind="stable")
        base = self.flat_logp.size
        offs = base + np.concatenate(([0], np.cumsum(lengths)[:-1])) if lengths.size else np.empty(0, np.int64)
        all_ids = np.concatenate([self.ids, ids[order_new]])
        order = np.argsort(all_ids, kind="stable")
        self.ids = all_ids[order]
        for k, v in cols.items():
            old = self.cols.get(k)
            if old is None:
                old = np.full(all_ids.size - ids.size, _missing(v.dtype), v.dtype)
            self.cols[k] = np.concatenate([old, v[order_new]])[order]
        for k in list(self.cols):
            if k not in cols:
                self.cols[k] = np.concatenate([self.cols[k], np.full(ids.size, _missing(self.cols[k].dtype),
                                                                     self.cols[k].dtype)])[order]
        self.flat_logp = np.concatenate([self.flat_logp, flat_logp])
        self.flat_tok = np.concatenate([self.flat_tok, flat_tok])
        self.offsets = np.concatenate([self.offsets, offs[order_new]])[order]
        self.lengths = np.concatenate([self.lengths, lengths[order_new]])[order]
        if texts is not None or self.texts is not None:
            old_t = self.texts if self.texts is not None else [None] * (all_ids.size - ids.size)
            new_t = [texts[i] for i in order_new] if texts is not None else [None] * ids.size
            merged = old_t + new_t
            self.texts = [merged[i] for i in order]

    def _first(self, ids, cols, flat_logp, flat_tok, lengths, texts) -> None:
        order = np.argsort(ids, kind="stable")
        self.ids = ids[order]
        self.cols = {k: v[order] for k, v in cols.items()}
        self.flat_logp, self.flat_tok = flat_logp, flat_tok
        offs = np.zeros(lengths.size, np.int64)
        np.cumsum(lengths[:-1], out=offs[1:])
        self.offsets, self.lengths = offs[order], lengths[order]
        if texts is not None:
            self.texts = [texts[i] for i in order]

    def lookup(self, sample_ids: np.ndarray) -> np.ndarray:
        """Index into the cache for each id, -1 when unknown."""
        if self.ids.size == 0:
            return np.full(sample_ids.shape, -1, np.int64)
        j = np.searchsorted(self.ids, sample_ids)
        j = np.minimum(j, self.ids.size - 1)
        return np.where(self.ids[j] == sample_ids, j, -1)


class _StepState:
    """What a step gathered: raw aggregates, update indices, per-sequence k3 sums, trainer metrics, deferred
    updates (``record_update(defer=True)``: (update, inputs, sample ids)), the rollout cache and the rollout calls
    not computed yet (batch_s); ``time``: when it was finalised (its step row)."""
    __slots__ = ("step", "aggs", "updates", "seq_k3", "user", "staged", "rollout", "rolls", "time")

    def __init__(self, step: int):
        self.step = step
        self.aggs: dict[str, float] = {}
        self.updates: set[int] = set()
        self.seq_k3: list[np.ndarray] = []
        self.user: dict[str, float] = {}
        self.staged: list[tuple[int, UpdateInputs, np.ndarray]] = []
        self.rollout = _RolloutCache()
        self.rolls: list[RolloutCall] = []
        self.time = 0


class _Prepared:
    """One step's staged updates, stacked and aligned with its rollout (Collector._prepare)."""
    __slots__ = ("step", "inp", "sid", "update", "sizes", "cols", "turn", "texts")

    def __init__(self, step, inp, sid, update, sizes, cols, turn, texts):
        self.step, self.inp, self.sid, self.update, self.sizes = step, inp, sid, update, sizes
        self.cols, self.turn, self.texts = cols, turn, texts


def _missing(dtype: np.dtype):
    if np.issubdtype(dtype, np.floating):
        return np.nan
    if np.issubdtype(dtype, np.bool_):
        return False
    return -1


def resolve_dual_clip_c(value: float | None, config: Mapping[str, Any] | None) -> float:
    """The dual-clip constant to record: the explicit argument, else the run config's own setting (``dual_clip_c``,
    verl ``clip_ratio_c``), else verl's default 3.0. Without this the default leaked into run.json for runs whose
    config disables dual-clip (c = 0)."""
    if value is not None:
        return float(value)
    for key in ("dual_clip_c", "clip_ratio_c"):
        v = (config or {}).get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return 3.0


class Collector:
    """Record per-token, per-sequence, per-turn and per-step statistics of an RL run into ``root``.

    Args:
        root: run directory (created), or an fsspec URL such as ``s3://bucket/team/run`` (docs/storage.md). A
            directory that already holds a run is appended to (resume).
        config: trainer/algorithm config, stored in run.json.
        clip: (eps_low, eps_high) of the token band [1 - eps_low, 1 + eps_high] (verl clip_ratio_low/high).
        seq_clip: (eps_low, eps_high) of the sequence/turn band (GSPO/ATPO), default ``clip``.
        name: run name (default: the directory name). algorithm: e.g. "cispo", stored in the manifest.
        rank, world_size: data-parallel rank of this process; each rank writes its own files.
        flush_every: publish buffered rows every this many finalised steps (a crash loses at most that much). The
            default 50 matters only for steps faster than 0.1 s (else ``flush_every_s`` comes first): a publish
            converts and writes one part per table, a cost per column more than per row, so fewer publishes cost
            less per step and leave fewer files (was 10: docs/integrations/overhead.md).
        flush_every_s: ... or once this many seconds passed since the last publish, whichever comes first, so a
            slow run is visible to ``arldiag watch`` and the dashboard within seconds (checked when a step ends).
        token_sample_rate: fraction of samples whose token rows are kept, chosen by a deterministic hash of
            the sample id; rows of anomalous sequences (non-finite, negative-advantage low-IS, top-1% KL) are
            always kept, with ``sampled = false``.
        neg_adv_delta: delta of the negative-advantage low-IS mask (ARLArena default 0.223, s_i < 0.8).
        dual_clip_c: verl clip_ratio_c for pg_clipfrac_lower; None (default) takes the run config's ``dual_clip_c``
            (or verl's ``clip_ratio_c``) when it has one, else verl's default 3.0. A value <= 1 means disabled.
        monitor: an online monitor (``bind(collector)``, ``on_step(step, metrics)``), e.g. arldiag.Monitor.
        strict: raise on the collector's own errors (write failures, monitor errors) instead of warning once.
        process_group: opt-in, a torch.distributed process group (or True for the default group): each finalised
            step's aggregates of all ranks are reduced to the group's rank 0, whose monitor and ``last_metrics``
            then describe the whole step (the other ranks skip their monitor). Every rank must finalise the same
            steps (record_step), as a collective call.
        batch_s: > 0: the statistics of finished steps whose updates were all deferred (``defer=True``) are computed
            together, for up to this many seconds' worth of steps (at most BATCH_STEPS), in one pass
            (stats.compute_update ``segments``): on steps of a few tens of ms their fixed cost (~1 ms of small numpy
            calls) is shared. The rows and statistics are those of one pass per step; ``record_step`` then returns
            ``{}``, and ``last_metrics``, the monitor and ``should_stop`` see a step up to ``batch_s`` later
            (``settle()`` computes the pending steps now). The TRL drop-in uses 0.5 s; off with a process group.
    """

    def __init__(self, root: str | os.PathLike, config: Mapping[str, Any] | None = None,
                 clip: Sequence[float] = (0.2, 0.2), seq_clip: Sequence[float] | None = None,
                 name: str | None = None, algorithm: str | None = None, rank: int = 0, world_size: int = 1,
                 flush_every: int = 50, flush_every_s: float = 5.0, token_sample_rate: float = 0.05,
                 neg_adv_delta: float = 0.223, dual_clip_c: float | None = None, monitor: Any = None,
                 strict: bool = False, queue_size: int = 64, process_group: Any = None, batch_s: float = 0.0):
        if len(tuple(clip)) != 2:
            raise ValueError(f"clip must be (eps_low, eps_high), got {clip!r}")
        if not 0.0 <= token_sample_rate <= 1.0:
            raise ValueError(f"token_sample_rate must be in [0, 1], got {token_sample_rate}")
        if flush_every < 1:
            raise ValueError(f"flush_every must be >= 1, got {flush_every}")
        if not flush_every_s > 0:
            raise ValueError(f"flush_every_s must be > 0 seconds, got {flush_every_s}")
        seq_clip = tuple(clip) if seq_clip is None else tuple(seq_clip)
        dual_clip_c = resolve_dual_clip_c(dual_clip_c, config)
        self._loc: StoreRoot | None = None
        self.root = root if is_url(root) else Path(root)
        self.rank, self.world_size = int(rank), int(world_size)
        self.strict = strict
        self.guard = Guard(strict)  # the error boundary of the collector and of the adapters that feed it
        self.flush_every = flush_every
        self.flush_every_s = float(flush_every_s)
        self._last_flush = time.monotonic()
        self.token_sample_rate = float(token_sample_rate)
        self.bands = Bands(float(clip[0]), float(clip[1]), float(seq_clip[0]), float(seq_clip[1]),
                           float(dual_clip_c), float(neg_adv_delta))
        self.monitor = monitor
        # verl / TRL / OpenRLHF names in record_step(metrics=...) also reach the detectors under arldiag's names,
        # and the logged task score as task_score (arldiag.aliases: the table `arldiag import` uses)
        self._aliases = LiveResolver(skip_sources=OWN_OUTCOMES)
        self._pg = (None, True) if process_group is True else (process_group, process_group is not None)
        self.should_stop = False
        self.stop_reason: str | None = None
        self._cur: _StepState | None = None  # the step being recorded
        # per-update rows (numpy columns) held until the next publish, then converted to one Arrow table per table:
        # the conversion's cost is mostly per column (~40 columns), so once per publish instead of once per update
        # or step (docs/integrations/overhead.md); the writer buffers until the publish anyway, so nothing is lost
        # that a crash would not have lost before
        self._held: dict[str, list[tuple[dict, int]]] = {}
        self._held_rows = 0
        # finalised steps' rows, converted to one Arrow table when they are published (a ~100-column row cost more
        # to convert on its own than its step's statistics on small steps); the trainer metric names seen, in order
        self._step_rows: list[dict[str, Any]] = []
        self._step_user: dict[str, None] = {}
        if not batch_s >= 0:
            raise ValueError(f"batch_s must be >= 0 seconds, got {batch_s}")
        self.batch_s = float(batch_s)
        self._pending: list[_StepState] = []  # finished steps whose statistics are not computed yet (batch_s)
        self._pending_since = 0.0
        self._steps_since_flush = 0
        self._closed = False
        self.last_metrics: dict[str, float] = {}
        self.writer: StoreWriter | None = None
        self.manifest = {
            "schema_version": SCHEMA_VERSION,
            "run_id": uuid.uuid4().hex,
            "name": name or (str(root).rstrip("/").rsplit("/", 1)[-1] if is_url(root) else self.root.resolve().name),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(),
            "algorithm": algorithm,
            "config": dict(config or {}),
            "clip": list(map(float, clip)),
            "seq_clip": list(map(float, seq_clip)),
            "neg_adv_delta": float(neg_adv_delta),
            "dual_clip_c": float(dual_clip_c),
            "token_sample_rate": self.token_sample_rate,
            "collector_version": __version__,
            "host": socket.gethostname(),
            "world_size": self.world_size,
            "status": "running",
        }
        try:
            self._loc = StoreRoot(root)
            self._loc.makedirs()
            old = self._loc.read_json("run.json")
            if old is not None:  # resume: keep identity, refresh status
                self.manifest.update(run_id=old.get("run_id", self.manifest["run_id"]),
                                     created=old.get("created", self.manifest["created"]))
            if self.rank == 0:
                self._loc.write_json("run.json", self.manifest)
            self.writer = StoreWriter(self._loc, self.rank, queue_size=queue_size, strict=strict)
        except Exception as exc:  # noqa: BLE001
            if strict:
                raise
            self.guard.warn_once("open", f"arldiag: cannot write the run store at {self.root} ({type(exc).__name__}: "
                                    f"{exc}); statistics are still computed for the monitor but not stored")
        if monitor is not None:
            self.guard.run("monitor", monitor.bind, self)

    # ------------------------------------------------------------------ public hooks
    def record_rollout(self, step: int, sample_ids, group_ids=None, turn_ids=None, token_ids=None,
                       response_mask=None, logp_rollout=None, rewards=None, format_valid=None, truncated=None,
                       success=None, trajectory_ids=None, texts: Sequence[str] | None = None) -> None:
        """Record what the rollout produced for ``step``: one entry per sample ([B]) or per token ([B, T])."""
        if self._after_close("record_rollout", step):
            return
        sid = as_array(sample_ids, "sample_ids", np.int64)
        if sid.ndim != 1:
            raise ValueError(f"sample_ids must be 1-D [B], got shape {sid.shape}")
        B = sid.shape[0]
        per_sample = {}
        for nm, val, dt in (("group_id", group_ids, np.int64), ("trajectory_id", trajectory_ids, np.int64),
                            ("reward", rewards, np.float64), ("format_valid", format_valid, np.bool_),
                            ("truncated", truncated, np.bool_), ("success", success, np.bool_)):
            arg = {"group_id": "group_ids", "trajectory_id": "trajectory_ids", "reward": "rewards"}.get(nm, nm)
            if val is not None:
                a = as_array(val, arg, dt)
                check_shape(arg, a, (B,), "sample_ids")
                per_sample[nm] = a
        turn = None
        if turn_ids is not None:
            turn = as_array(turn_ids, "turn_ids", np.int64)
            if turn.ndim == 1:
                check_shape("turn_ids", turn, (B,), "sample_ids")
                per_sample["turn"] = turn
        mask = tok = lpr = None
        if response_mask is not None:
            mask = as_array(response_mask, "response_mask", np.bool_)
            if mask.ndim != 2 or mask.shape[0] != B:
                raise ValueError(f"response_mask must be [B, T] with B = len(sample_ids) = {B}, got {mask.shape}")
            for nm, val in (("token_ids", token_ids), ("logp_rollout", logp_rollout)):
                if val is not None:
                    check_shape(nm, as_array(val, nm), mask.shape, "response_mask")
            tok = None if token_ids is None else as_array(token_ids, "token_ids", np.int64)
            lpr = None if logp_rollout is None else as_array(logp_rollout, "logp_rollout", np.float32)
            if turn is not None and turn.ndim == 2:
                check_shape("turn_ids", turn, mask.shape, "response_mask")
        elif token_ids is not None or logp_rollout is not None:
            raise ValueError("token_ids/logp_rollout need response_mask to say which tokens the policy generated")
        if texts is not None and len(texts) != B:
            raise ValueError(f"texts has {len(texts)} entries, sample_ids has {B}")
        self.guard.run("record_rollout", self._record_rollout, int(step), sid, per_sample, mask, tok, lpr, texts)

    def record_update(self, step: int, update: int = 0, *, logp, logp_old, advantages, response_mask,
                      logp_ref=None, logp_rollout=None, entropy=None, sample_ids=None, turn_ids=None,
                      token_ids=None, defer: bool = False) -> dict[str, float]:
        """Record one policy update (PPO epoch x mini-batch) of ``step``. Tensors: padded [B, T] with the loss
        mask ``response_mask``; ``advantages`` [B] or [B, T]; ``turn_ids`` [B] or [B, T]. Returns this update's
        raw aggregates (handy for logging).

        ``defer=True``: keep a copy of the inputs and compute the statistics when the step is finalised (or at
        ``flush``), in one pass over all the step's deferred updates (collectors/staging.py): the same rows and
        aggregates, for a fraction of the per-call cost when a step has many small micro-batches (the verl and TRL
        hooks use it). Returns ``{}`` then."""
        if self._after_close("record_update", step):
            return {}
        # accelerator tensors stay on their device: the statistics run there (arldiag/backends.py), no copy to the
        # host; CPU tensors become numpy views (no copy), on which the same statistics cost 2-3x less CPU time than
        # torch's per-op dispatch (benchmarks/integration_overhead.py)
        conv = as_device_array if is_torch(logp) and logp.device.type != "cpu" else as_array
        mask = conv(response_mask, "response_mask", np.bool_)
        if mask.ndim != 2:
            raise ValueError(f"response_mask must be 2-D [B, T], got shape {mask.shape}")
        B, T = mask.shape
        lp = conv(logp, "logp", np.float32)
        check_shape("logp", lp, mask.shape, "response_mask")
        lpo = conv(logp_old, "logp_old", np.float32)
        check_shape("logp_old", lpo, mask.shape, "response_mask")
        adv = conv(advantages, "advantages", np.float32)
        if adv.shape not in ((B,), (B, T)):
            raise ValueError(f"advantages must be [B] = ({B},) or [B, T] = {mask.shape}, got {adv.shape}")
        opt = {}
        for nm, val in (("logp_ref", logp_ref), ("logp_rollout", logp_rollout), ("entropy", entropy)):
            if val is not None:
                a = conv(val, nm, np.float32)
                check_shape(nm, a, mask.shape, "response_mask")
                opt[nm] = a
        tid = None
        if token_ids is not None:
            tid = conv(token_ids, "token_ids", np.int64)
            check_shape("token_ids", tid, mask.shape, "response_mask")
        turn = None
        if turn_ids is not None:
            turn = conv(turn_ids, "turn_ids", np.int64)
            if turn.shape not in ((B,), (B, T)):
                raise ValueError(f"turn_ids must be [B] = ({B},) or [B, T] = {mask.shape}, got {turn.shape}")
        sid = None
        if sample_ids is not None:
            # ids stay on the host: [B] values, used for lookups and token sampling there (numpy)
            sid = as_array(sample_ids, "sample_ids", np.int64)
            check_shape("sample_ids", sid, (B,), "response_mask rows")
        inp = UpdateInputs(lp, lpo, adv, mask, opt.get("logp_ref"), opt.get("logp_rollout"), opt.get("entropy"),
                           turn, tid)
        if defer:
            self.guard.run("record_update", self._stage, int(step), int(update), inp, sid)
            return {}
        out = self.guard.run("record_update", self._record_update, int(step), int(update), inp, sid)
        return out or {}

    def record_step(self, step: int, metrics: Mapping[str, Any] | None = None) -> dict[str, float]:
        """Attach trainer metrics (success_rate, grad_norm, lr, ...) to ``step`` and finalise it: its raw step row
        is queued for writing and the monitor is evaluated. Returns the step's metrics (derived + user), or ``{}``
        when ``batch_s`` lets the step wait for a batched statistics pass (``last_metrics`` has it after ``settle``)."""
        if self._after_close("record_step", step):
            return {}
        user = {}
        for k, v in (metrics or {}).items():
            try:
                user[str(k)] = float(as_array(v, f"metrics[{k!r}]", np.float64).reshape(-1)[0]) \
                    if not isinstance(v, (int, float)) else float(v)
            except (TypeError, ValueError, IndexError):
                raise ValueError(f"metrics[{k!r}] must be a number, got {type(v).__name__}") from None
        try:
            user = self._aliases(user)
        except Exception as exc:  # noqa: BLE001 - a name lookup must never stop the step from being recorded
            self.guard.warn_once("aliases", f"arldiag: metric name resolution failed ({exc!r}); names kept as logged")
        res = self.guard.run("record_step", self._record_step, int(step), user)
        return res or {}

    def record_alert(self, step: int, detector: str, severity: str, state: str = "", risk: float = float("nan"),
                     title: str = "", message: str = "", evidence: Mapping | None = None,
                     source: str = "online") -> None:
        """Append one row to the run's alerts table (used by monitors and alert sinks)."""
        import json

        row = {"step": int(step), "time": _now_us(), "detector": detector,
               "severity": severity, "state": state, "risk": float(risk), "title": title, "message": message,
               "evidence": json.dumps(evidence or {}, default=_json_default), "source": source}
        self._put("alerts", _row_table(cached_schema(("alerts",), lambda: arrow_schema("alerts")), row))

    def record_action(self, step: int, action: str, params: Mapping | None = None, detector: str = "",
                      state: str = "", risk: float = float("nan"), reason: str = "", policy: str = "",
                      outcome: Mapping | None = None, evidence: Mapping | None = None) -> None:
        """Append one row to the run's actions table (what arldiag.stabilize applied, and why)."""
        import json

        row = {"step": int(step), "time": _now_us(), "action": action,
               "params": json.dumps(params or {}, default=_json_default), "detector": detector, "state": state,
               "risk": float(risk), "reason": reason, "policy": policy,
               "outcome": json.dumps(outcome or {}, default=_json_default),
               "evidence": json.dumps(evidence or {}, default=_json_default)}
        self._put("actions", _row_table(cached_schema(("actions",), lambda: arrow_schema("actions")), row))
        note = getattr(self.monitor, "note_action", None)
        if note is not None:  # the online advice fits the settings the action left (Monitor.note_action)
            self.guard.run("monitor", note, outcome)

    def settle(self) -> None:
        """Compute and finalise the steps that ``batch_s`` left pending (their rows, step rows and the monitor)."""
        self.guard.run("record_step", self._settle)

    def request_stop(self, reason: str) -> None:
        """Ask the trainer to stop (it reads ``should_stop``)."""
        self.should_stop = True
        self.stop_reason = reason
        log.warning("arldiag: stop requested: %s", reason)

    def flush(self) -> None:
        """Finalise nothing; publish every buffered row now (deferred updates and pending steps are computed
        first)."""
        self.guard.run("record_step", self._settle)
        if self._cur is not None:
            self.guard.run("record_update", self._compute_step, self._cur)
        if self.writer is not None:
            self.guard.run("flush", self._release_held)
            self.guard.run("flush", self._release_steps)
            self.guard.run("flush", self.writer.flush, True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._cur is not None:
                self.guard.run("record_step", self._finalise_step)
            self.guard.run("record_step", self._settle)
            if self.writer is not None:
                self.guard.run("close", self._release_held)  # rows of a step whose finalising failed
                self.guard.run("close", self._release_steps)
                self.guard.run("close", self.writer.close)
                if self.rank == 0:
                    self.manifest["status"] = "finished"
                    self.manifest["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat()
                    if self.writer.dropped_rows:
                        self.manifest["dropped_rows"] = self.writer.dropped_rows
                    self.guard.run("close", self._loc.write_json, "run.json", self.manifest)
        finally:
            close = getattr(self.monitor, "close", None)
            if close is not None:
                self.guard.run("monitor", close)

    def __enter__(self) -> "Collector":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _after_close(self, where: str, step) -> bool:
        """True (after one warning) when the collector is closed: its writer has finished and run.json says
        "finished", so a late call cannot be recorded; it used to vanish without a word."""
        if not self._closed:
            return False
        msg = f"arldiag: {where}(step={step}) after close() is not recorded (the run {self.root} is finished)"
        if self.strict:
            raise RuntimeError(msg)
        self.guard.warn_once("after_close", msg)
        return True

    def _put(self, table: str, data: pa.Table) -> None:
        if self.writer is not None:  # write failures are reported (once) by the writer itself
            self.writer.put(table, data)

    def _hold(self, table: str, cols: dict, n: int) -> None:
        """Keep ``n`` rows of ``table`` (columns named as in its schema.TABLE_COLUMNS; fresh arrays, not changed
        afterwards) for the next publish (_release_held)."""
        if self.writer is not None and n:
            self._held.setdefault(table, []).append((cols, n))
            self._held_rows += n

    def _release_held(self) -> None:
        """Convert the held rows to one table per table (per set of columns given) and hand them to the writer."""
        held, self._held, self._held_rows = self._held, {}, 0
        for table in TABLES:  # the writer publishes in this order too: a step's rows before its step row
            parts = held.get(table)
            if not parts:
                continue
            by_cols: dict[tuple, list] = {}
            for cols, n in parts:
                by_cols.setdefault(tuple(cols), []).append((cols, n))
            tables = [_table(TABLE_COLUMNS[table], concat_columns([c for c, _ in same]), sum(n for _, n in same))
                      for same in by_cols.values()]
            self._put(table, pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0])

    def _release_steps(self) -> None:
        """Hand the held step rows to the writer as one table (schema: the raw columns + every trainer metric seen;
        a row without one of them has a null there, as the writer's concatenation of one-row tables gave)."""
        rows, self._step_rows = self._step_rows, []
        user, self._step_user = tuple(self._step_user), {}
        if rows:
            self._put("steps", rows_table(cached_schema(("steps",) + user, lambda: _steps_schema(user)), rows))

    def _enter_step(self, step: int) -> None:
        if self._cur is not None and step != self._cur.step:
            self._finalise_step()
        if self._cur is None:
            self._cur = _StepState(step)

    def _keys(self, n: int, step, update) -> dict[str, np.ndarray]:
        """Key columns of ``n`` rows; ``step`` and ``update`` are one value or one per row ([n])."""
        upd = np.full(n, update, np.int32) if np.ndim(update) == 0 else update.astype(np.int32, copy=False)
        st = np.full(n, step, np.int64) if np.ndim(step) == 0 else step.astype(np.int64, copy=False)
        return {"step": st, "update": upd, "rank": np.full(n, self.rank, np.int32)}

    def _record_rollout(self, step, sid, per_sample, mask, tok, lpr, texts) -> None:
        self._enter_step(step)
        st = self._cur
        self._compute_staged(st)  # deferred updates see the rollout cache as it was when they were recorded
        B = sid.shape[0]
        lengths = mask.sum(axis=1).astype(np.int64) if mask is not None else np.zeros(B, np.int64)
        if mask is not None:
            idx = np.flatnonzero(mask)
            flat_tok = tok.reshape(-1)[idx] if tok is not None else np.full(idx.size, -1, np.int64)
            flat_lp = lpr.reshape(-1)[idx] if lpr is not None else np.full(idx.size, np.nan, np.float32)
            per_sample["response_length"] = lengths.astype(np.int32)
        else:
            flat_tok, flat_lp = np.empty(0, np.int64), np.empty(0, np.float32)
        st.rollout.add(sid, per_sample, flat_lp, flat_tok, lengths, texts)

        lengths = lengths if mask is not None else None
        if self.batch_s > 0:  # computed with the step's statistics (with other steps' when it is batched): copies,
            # the arrays may be views of the trainer's buffers, which it can reuse before then
            st.rolls.append(RolloutCall(step, np.array(sid), {k: np.array(v) for k, v in per_sample.items()},
                                        lengths))
        else:
            self._rollout_calls([RolloutCall(step, sid, per_sample, lengths)], [st.aggs])

    def _rollout_calls(self, calls: list[RolloutCall], targets: list[dict]) -> None:
        """The aggregates of each rollout call merged into its step's aggregates (``targets``, one per call) and the
        group rows held; calls with the same columns in one pass (collectors/rollout_stats.py)."""
        by_cols: dict[tuple, list[int]] = {}
        for i, c in enumerate(calls):
            by_cols.setdefault((tuple(sorted(c.per_sample)), c.lengths is None), []).append(i)
        for idx in by_cols.values():
            aggs, groups = rollout_stats([calls[i] for i in idx], self.rank)
            for i, a in zip(idx, aggs):
                merge_into(targets[i], a)
            if groups is not None:
                self._hold("groups", groups, groups["group_id"].size)

    def _stage(self, step: int, update: int, inp: UpdateInputs, sid: np.ndarray | None) -> None:
        self._enter_step(step)
        sid = self._sample_ids(step, inp, sid)
        self._cur.staged.append((update, owned(inp), np.array(sid)))

    def _compute_step(self, st: "_StepState") -> None:
        """What a step recorded but did not compute yet: its rollout calls and its deferred updates."""
        rolls, st.rolls = st.rolls, []
        if rolls:
            self._rollout_calls(rolls, [st.aggs] * len(rolls))
        self._compute_staged(st)

    def _compute_staged(self, st: "_StepState") -> None:
        """Compute the deferred updates of ``st``: one pass per group of updates that gave the same inputs (in
        practice one per step)."""
        staged, st.staged = st.staged, []
        if not staged:
            return
        if "turn" in st.rollout.cols:  # per-turn samples take their turn ids per update (all rows known or none)
            batches = [[u] for u in staged]
        else:
            by_sig: dict[tuple, list] = {}
            for u in staged:
                by_sig.setdefault(signature(u[1]), []).append(u)
            batches = list(by_sig.values())
        self._compute([(st, b) for b in batches])

    @staticmethod
    def _sample_ids(step: int, inp: UpdateInputs, sid: np.ndarray | None) -> np.ndarray:
        if sid is None:  # unique within the update but not linkable to a rollout
            sid = (np.int64(step) << np.int64(32)) + np.arange(inp.mask.shape[0], dtype=np.int64)
        return sid

    def _record_update(self, step: int, update: int, inp: UpdateInputs, sid: np.ndarray | None) -> dict:
        self._enter_step(step)
        self._compute_staged(self._cur)  # rows keep the order of the calls
        return self._compute([(self._cur, [(update, inp, self._sample_ids(step, inp, sid))])])[0]

    def _compute(self, work: list[tuple["_StepState", list]]) -> list[dict]:
        """Statistics and rows of updates: (step, its updates) pairs, each pair's updates stacked
        (collectors/staging.py); pairs with alike inputs (same inputs given, same rollout columns) share one
        compute_update, split per pair (``segments``, stats._segment_aggs) when it can. Returns each pair's raw
        aggregates."""
        preps = [self._prepare(st.step, batch, st.rollout) for st, batch in work]
        out: list[dict] = [{}] * len(work)
        groups: dict[tuple, list[int]] = {}
        for i, pr in enumerate(preps):
            inp = pr.inp
            key = (signature(inp), inp.rollout_flat_logp is None, inp.rollout_flat_token_ids is None,
                   inp.retok_extra is None, tuple(pr.cols), pr.turn is None, pr.texts is None)
            groups.setdefault(key, []).append(i)
        for idx in groups.values():
            inps = [preps[i].inp for i in idx]
            inp = stack(inps) if len(idx) > 1 else inps[0]
            if len(idx) > 1:
                for f in ("rollout_flat_logp", "rollout_flat_token_ids", "retok_extra"):
                    if getattr(inps[0], f) is not None:
                        setattr(inp, f, np.concatenate([getattr(x, f) for x in inps]))
            if len(idx) == 1 or not segmentable(inp.mask, inp.turn_ids):
                for i in idx:  # one pass per pair
                    res = compute_update(preps[i].inp, self.bands)
                    out[i] = self._merge(work[i], res.aggs, res.seq_k3[res.nonempty])
                    self._emit_rows([preps[i]], res)
                continue
            sizes = [x.mask.shape[0] for x in inps]
            starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
            res = compute_update(inp, self.bands, segments=starts)
            k3 = res.seq_k3
            for i, a, lo, n in zip(idx, res.aggs, starts, sizes):
                out[i] = self._merge(work[i], a, k3[lo:lo + n][res.nonempty[lo:lo + n]])
            self._emit_rows([preps[i] for i in idx], res)
        return out

    @staticmethod
    def _merge(pair: tuple["_StepState", list], aggs: dict, seq_k3: np.ndarray) -> dict:
        st, batch = pair
        merge_into(st.aggs, aggs)
        st.updates.update(u[0] for u in batch)
        st.seq_k3.append(seq_k3)
        return aggs

    def _prepare(self, step: int, batch: list[tuple[int, UpdateInputs, np.ndarray]],
                 rollout: "_RolloutCache") -> "_Prepared":
        """The updates of ``batch`` stacked and aligned with what the rollout recorded for their samples: the
        rollout engine's log-probs and token ids per masked token, and the rollout's per-sample columns per row."""
        sizes = [b[1].mask.shape[0] for b in batch]
        inp = stack([b[1] for b in batch])
        sid = batch[0][2] if len(batch) == 1 else np.concatenate([b[2] for b in batch])
        update = batch[0][0] if len(batch) == 1 else np.repeat(np.array([b[0] for b in batch], np.int32), sizes)
        B = inp.mask.shape[0]
        j = rollout.lookup(sid)
        known = j >= 0
        # Align the rollout engine's log-probs / ids with the trainer's masked tokens (same count per sample).
        if known.any() and (inp.logp_rollout is None or inp.token_ids is not None):
            n_u = row_counts(inp.mask)  # masked tokens are row-major, so [B] counts give each token's row
            n_r = np.where(known, rollout.lengths[np.maximum(j, 0)], -1)
            same = known & (n_u == n_r)
            rows = np.repeat(np.arange(B), n_u)
            k = np.arange(rows.size) - np.concatenate(([0], np.cumsum(n_u)[:-1]))[rows]
            src = rollout.offsets[np.maximum(j, 0)][rows] + k
            ok = same[rows]
            if inp.logp_rollout is None and not np.all(np.isnan(rollout.flat_logp)):
                inp.rollout_flat_logp = np.where(ok, rollout.flat_logp[np.where(ok, src, 0)], np.nan) \
                    if rows.size else np.empty(0, np.float32)
            if inp.token_ids is not None and np.any(rollout.flat_tok >= 0):
                inp.rollout_flat_token_ids = np.where(ok, rollout.flat_tok[np.where(ok, src, 0)], -1) \
                    if rows.size else np.empty(0, np.int64)
                # samples whose lengths differ: a retokenization changed the token count (count the difference)
                diff_len = known & ~same
                inp.retok_extra = np.where(diff_len, np.abs(n_u - n_r), -1)
        if inp.turn_ids is None and "turn" in rollout.cols and known.all():
            inp.turn_ids = rollout.cols["turn"][j]  # per-turn samples: the rollout said which turn each is
        cols: dict[str, Any] = {}  # the rollout's columns of each row (null / NaN / -1 for an unknown sample)
        for name in ("group_id", "trajectory_id", "reward", "format_valid", "truncated", "success",
                     "response_length"):
            src_col = rollout.cols.get(name)
            if src_col is not None:
                v = src_col[np.maximum(j, 0)]
                if np.issubdtype(v.dtype, np.floating):
                    cols[name] = np.where(known, v, np.nan)
                elif name in ("group_id", "trajectory_id"):
                    cols[name] = np.where(known, v, -1)
                elif known.all():
                    cols[name] = v
                else:  # unknown sample: null, not a made-up value
                    cols[name] = np.ma.array(v, mask=~known)
        turn = None
        if "turn" in rollout.cols:
            turn = np.where(known, rollout.cols["turn"][np.maximum(j, 0)], -1).astype(np.int16)
        texts = None if rollout.texts is None else [rollout.texts[i] if i >= 0 else None for i in j.tolist()]
        return _Prepared(step, inp, sid, update, sizes, cols, turn, texts)

    def _emit_rows(self, preps: list["_Prepared"], res) -> None:
        """Hold the sequences, turns and tokens rows of ``preps`` (their rows stacked in this order in ``res``)."""
        if len(preps) == 1:
            pr = preps[0]
            B = pr.inp.mask.shape[0]
            step, update, sid, sizes, rcols, turn, texts = pr.step, pr.update, pr.sid, pr.sizes, pr.cols, pr.turn, \
                pr.texts
        else:
            Bs = [pr.inp.mask.shape[0] for pr in preps]
            B = sum(Bs)
            step = np.repeat(np.array([pr.step for pr in preps], np.int64), Bs)
            update = np.concatenate([np.broadcast_to(np.asarray(pr.update, np.int32), (n,)) for pr, n in zip(preps, Bs)])
            sid = np.concatenate([pr.sid for pr in preps])
            sizes = [n for pr in preps for n in pr.sizes]
            rcols = concat_columns([pr.cols for pr in preps])
            turn = None if preps[0].turn is None else np.concatenate([pr.turn for pr in preps])
            texts = None if preps[0].texts is None else [t for pr in preps for t in pr.texts]
        seq = res.seq
        cols = dict(seq)
        cols.update(self._keys(B, step, update))
        cols["sample_id"] = sid
        cols.update(rcols)
        if cols.get("turn") is not None and (seq["turn"] < 0).all() and turn is not None:
            cols["turn"] = turn
        keep = np.flatnonzero(res.nonempty)  # samples with no (finite) token carry no statistics
        if texts is not None:
            cols["text"] = [texts[i] for i in keep.tolist()]
        cols = {k: (v if isinstance(v, list) else np.asarray(v)[keep] if not isinstance(v, np.ma.MaskedArray)
                    else v[keep]) for k, v in cols.items()}
        self._hold("sequences", cols, keep.size)

        tr = res.turn
        if tr is not None and tr["row"].size:
            r = tr["row"]
            tcols = {k: v for k, v in tr.items() if k != "row"}
            tcols.update(self._keys(r.size, step if np.ndim(step) == 0 else step[r],
                                    update if np.ndim(update) == 0 else update[r]))
            tcols["sample_id"] = sid[r]
            self._hold("turns", tcols, r.size)

        self._put_tokens(step, update, sizes, sid, res)

    def _put_tokens(self, step, update, sizes, sid, res) -> None:
        """Token rows of the sampled, anomalous and top-1% KL samples; ``sizes``: rows per update of the batch."""
        rate = self.token_sample_rate
        seq_k3 = res.seq_k3
        B = sid.shape[0]
        sampled = splitmix_unit(sid) < rate if rate < 1.0 else np.ones(B, bool)
        keep = sampled | res.anomalous
        start = 0
        for nb in sizes:  # always keep the top-1% KL contributors of each update
            seg = seq_k3[start:start + nb]
            fin = np.isfinite(seg)
            if nb and fin.any():
                k = max(1, int(np.ceil(0.01 * nb)))
                keep[start + np.argpartition(np.where(fin, seg, -np.inf), nb - k)[nb - k:]] = True
            start += nb
        if not keep.any():
            return
        tok = res.token_rows(keep)  # only the kept rows leave the device
        r = tok["rows"]
        n = r.size
        cols = self._keys(n, step if np.ndim(step) == 0 else step[r], update if np.ndim(update) == 0 else update[r])
        cols.update(sample_id=sid[r], pos=tok["pos"].astype(np.int32), turn=tok["turn"], logp=tok["logp"],
                    logp_old=tok["logp_old"], advantage=tok["advantage"],
                    log_ratio=tok["log_ratio"].astype(np.float32), sampled=sampled[r])
        for name in ("logp_rollout", "logp_ref", "entropy"):
            if tok[name] is not None:
                cols[name] = tok[name].astype(np.float32, copy=False)
        for name in ("token_id", "token_id_rollout"):
            cols[name] = tok[name].astype(np.int32) if tok[name] is not None else np.full(n, -1, np.int32)
        self._hold("tokens", cols, n)

    def _record_step(self, step: int, user: dict[str, float]) -> dict[str, float]:
        self._enter_step(step)
        self._cur.user = user
        return self._finalise_step()

    def _finalise_step(self) -> dict[str, float]:
        st, self._cur = self._cur, None  # a new step starts clean whatever happens below
        if st is None:
            return {}
        st.time = _now_us()
        if self._batchable(st):
            if not self._pending:
                self._pending_since = time.monotonic()
            self._pending.append(st)
            if len(self._pending) >= BATCH_STEPS or time.monotonic() - self._pending_since >= self.batch_s:
                self._settle()
            return {}
        self._settle()  # earlier steps first
        self.guard.run("record_update", self._compute_step, st)
        return self._finish_step(st)

    def _batchable(self, st: "_StepState") -> bool:
        """Whether a finished step can wait for a batched statistics pass (batch_s): deferred updates of one kind,
        numpy inputs, no per-turn samples, no process group (its reduction is a collective call per step)."""
        if self.batch_s <= 0 or self._pg[1] or not st.staged or "turn" in st.rollout.cols:
            return False
        first = st.staged[0][1]
        if not isinstance(first.mask, np.ndarray) or first.turn_ids is not None:
            return False
        sig = signature(first)
        return all(signature(u[1]) == sig for u in st.staged[1:])

    def _settle(self) -> None:
        pend, self._pending = self._pending, []
        if not pend:
            return
        self.guard.run("record_update", self._compute_pending, pend)
        for st in pend:  # each on its own: one step's failure does not drop the steps after it
            self.guard.run("record_step", self._finish_step, st)

    def _compute_pending(self, pend: list["_StepState"]) -> None:
        """The pending steps' rollout calls in one pass, and their updates (one batch per step, _batchable) in
        one compute_update where alike."""
        rolls = [(c, st.aggs) for st in pend for c in st.rolls]
        if rolls:
            self._rollout_calls([c for c, _ in rolls], [a for _, a in rolls])
        work = [(st, st.staged) for st in pend]
        for st in pend:
            st.rolls, st.staged = [], []
        self._compute(work)

    def _finish_step(self, st: "_StepState") -> dict[str, float]:
        """The step row, the derived metrics, the publish and the monitor of a step whose statistics are in."""
        step = st.step
        aggs = st.aggs
        aggs["n_updates"] = len(st.updates)
        if st.seq_k3:
            aggs["kl_top_share"] = top_share(np.concatenate(st.seq_k3))
        user = st.user
        row = {"step": step, "rank": self.rank, "time": st.time}
        row.update({a.name: aggs.get(a.name) for a in STEP_AGGS})
        row.update({USER_METRIC_PREFIX + k: v for k, v in user.items()})
        if self._held_rows >= HOLD_ROWS:
            self._release_held()
        if self.writer is not None:
            self._step_rows.append(row)
            for k in user:
                self._step_user.setdefault(k)
            if len(self._step_rows) >= PART_ROWS["steps"]:  # the writer's part size: it publishes them at once
                self._release_held()
                self._release_steps()
        watch = True
        if self._pg[1]:  # the whole step on the group's rank 0 (collectors/distributed.py)
            from arldiag.collectors.distributed import reduce_step_aggs

            merged = reduce_step_aggs(aggs, self._pg[0])
            watch = merged is not None
            aggs = merged if watch else aggs
        metrics = derive_step_metrics(aggs)
        for k, v in user.items():  # same rule as the reader's steps view: a derived value wins, the trainer's
            if k in metrics:       # value fills it when arldiag recorded nothing, and stays as user/<name>
                if metrics[k] != metrics[k]:
                    metrics[k] = v
                metrics[f"user/{k}"] = v
            else:
                metrics[k] = v
        metrics["step"] = step
        self.last_metrics = metrics
        self._steps_since_flush += 1
        if self.writer is not None and (self._steps_since_flush >= self.flush_every
                                        or time.monotonic() - self._last_flush >= self.flush_every_s):
            self._steps_since_flush = 0
            self._last_flush = time.monotonic()
            self._release_held()
            self._release_steps()
            self.writer.flush()
        if self.monitor is not None and watch:
            self.guard.run("monitor", self.monitor.on_step, step, metrics)
        return metrics


def _steps_schema(user: Sequence[str]) -> pa.Schema:
    """The raw steps columns plus one float64 column per trainer metric."""
    schema = arrow_schema("steps")
    for k in user:
        schema = schema.append(pa.field(USER_METRIC_PREFIX + k, pa.float64()))
    return schema


def _now_us() -> int:
    return int(_dt.datetime.now(_dt.timezone.utc).timestamp() * 1_000_000)


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)

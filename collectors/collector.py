"""The Collector: hooks a trainer calls to record stability statistics into a Parquet run store.

Light on purpose: numpy + pyarrow at import; torch is touched only when it is handed torch tensors; no DuckDB,
Dash or plotly; never a network call. Statistics are computed in the caller's thread (vectorised numpy, see
arldiag/stats.py); Parquet encoding and file I/O happen in a background writer thread (arldiag/store/writer.py).

This module is the public face: arguments are validated here, then handed to the step engine (collectors/steps.py:
step state, rollout alignment in collectors/align.py, statistics passes) and the row buffer (collectors/rows.py:
held rows, token-row selection, publish cadence); ``guard`` (collectors/guard.py) is the error boundary of all of it.
"""
from __future__ import annotations

import datetime as _dt
import logging
import os
import socket
import uuid
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from arldiag import __version__
from arldiag.aliases import OWN_OUTCOMES, LiveResolver
from arldiag.backends import HostCopy, is_torch
from arldiag.collectors.arrow_rows import cached_schema, row_table as _row_table
from arldiag.collectors.convert import as_array, as_device_array, check_shape
from arldiag.collectors.guard import Guard
from arldiag.collectors.rows import RowBuffer
from arldiag.collectors.steps import StepEngine, now_us
from arldiag.schema import SCHEMA_VERSION, arrow_schema
from arldiag.stats import Bands, UpdateInputs
from arldiag.store.location import StoreRoot, is_url
from arldiag.store.writer import StoreWriter

log = logging.getLogger("arldiag")


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
        overlap: device (CUDA) tensors: a step's statistics are queued on the device at ``record_step`` and their
            results land on the host while the next step runs (at its first deferred update, whose work the GPU is
            busy with), so the host neither waits for them nor holds up the next step's kernels; ``record_step``
            then returns ``{}`` and ``last_metrics`` and the monitor see the step one step later (``settle()``
            lands it now). False (the default: the online monitor sees each step when it ends, so the alert floor's
            "by the collapse + 3 points" holds on a GPU too): the host waits once at ``record_step``
            (benchmarks/gpu_overhead.py measures both). Off with a process group (a collective call per step).
    """

    def __init__(self, root: str | os.PathLike, config: Mapping[str, Any] | None = None,
                 clip: Sequence[float] = (0.2, 0.2), seq_clip: Sequence[float] | None = None,
                 name: str | None = None, algorithm: str | None = None, rank: int = 0, world_size: int = 1,
                 flush_every: int = 50, flush_every_s: float = 5.0, token_sample_rate: float = 0.05,
                 neg_adv_delta: float = 0.223, dual_clip_c: float | None = None, monitor: Any = None,
                 strict: bool = False, queue_size: int = 64, process_group: Any = None, batch_s: float = 0.0,
                 overlap: bool = False):
        if len(tuple(clip)) != 2:
            raise ValueError(f"clip must be (eps_low, eps_high), got {clip!r}")
        if not 0.0 <= token_sample_rate <= 1.0:
            raise ValueError(f"token_sample_rate must be in [0, 1], got {token_sample_rate}")
        if flush_every < 1:
            raise ValueError(f"flush_every must be >= 1, got {flush_every}")
        if not flush_every_s > 0:
            raise ValueError(f"flush_every_s must be > 0 seconds, got {flush_every_s}")
        if not batch_s >= 0:
            raise ValueError(f"batch_s must be >= 0 seconds, got {batch_s}")
        seq_clip = tuple(clip) if seq_clip is None else tuple(seq_clip)
        dual_clip_c = resolve_dual_clip_c(dual_clip_c, config)
        self._loc: StoreRoot | None = None
        self.root = root if is_url(root) else Path(root)
        self.rank, self.world_size = int(rank), int(world_size)
        self.strict = strict
        self.guard = Guard(strict)  # the error boundary of the collector and of the adapters that feed it
        self.flush_every, self.flush_every_s = flush_every, float(flush_every_s)
        self.token_sample_rate = float(token_sample_rate)
        self.bands = Bands(float(clip[0]), float(clip[1]), float(seq_clip[0]), float(seq_clip[1]),
                           float(dual_clip_c), float(neg_adv_delta))
        self.monitor = monitor
        # verl / TRL / OpenRLHF names in record_step(metrics=...) also reach the detectors under arldiag's names,
        # and the logged task score as task_score (arldiag.aliases: the table `arldiag import` uses), read from ONE
        # column per run: chosen at the first step with a candidate, kept in run.json ``score_sources``
        self._aliases = LiveResolver(skip_sources=OWN_OUTCOMES, sources=given_score_sources(config))
        self.batch_s = float(batch_s)
        self.should_stop = False
        self.stop_reason: str | None = None
        self._closed = False
        self.last_metrics: dict[str, float] = {}
        self.writer: StoreWriter | None = None
        name = name or (str(root).rstrip("/").rsplit("/", 1)[-1] if is_url(root) else self.root.resolve().name)
        self.manifest = _manifest(name, algorithm, config, clip, seq_clip, neg_adv_delta, dual_clip_c,
                                  self.token_sample_rate, self.world_size)
        try:
            self._loc = StoreRoot(root)
            self._loc.makedirs()
            old = self._loc.read_json("run.json")
            if old is not None:  # resume: keep identity, refresh status
                self.manifest.update(run_id=old.get("run_id", self.manifest["run_id"]),
                                     created=old.get("created", self.manifest["created"]))
                # a resumed run reads its score from the column it was read from before
                self._aliases.sources = {**dict(old.get("score_sources") or {}), **self._aliases.sources}
            self.manifest["score_sources"] = dict(self._aliases.sources)
            if self.rank == 0:
                self._loc.write_json("run.json", self.manifest)
            self.writer = StoreWriter(self._loc, self.rank, queue_size=queue_size, strict=strict)
        except Exception as exc:  # noqa: BLE001
            if strict:
                raise
            self.guard.warn_once("open", f"arldiag: cannot write the run store at {self.root} ({type(exc).__name__}: "
                                         f"{exc}); statistics are still computed for the monitor but not stored")
        self._rows = RowBuffer(self.writer, self.rank, self.token_sample_rate, flush_every, self.flush_every_s)
        pg = (None, True) if process_group is True else (process_group, process_group is not None)
        self._steps = StepEngine(self.rank, self.bands, self._rows, self.guard, self.batch_s, pg, self._step_done)
        self._steps.overlap = bool(overlap) and not pg[1]
        if monitor is not None:
            self.guard.run("monitor", monitor.bind, self)

    # ------------------------------------------------------------------ public hooks
    def record_rollout(self, step: int, sample_ids, group_ids=None, turn_ids=None, token_ids=None,
                       response_mask=None, logp_rollout=None, rewards=None, format_valid=None, truncated=None,
                       success=None, trajectory_ids=None, texts: Sequence[str] | None = None) -> None:
        """Record what the rollout produced for ``step``: one entry per sample ([B]) or per token ([B, T])."""
        if self._after_close("record_rollout", step):
            return
        args = dict(sample_ids=sample_ids, group_ids=group_ids, turn_ids=turn_ids, token_ids=token_ids,
                    response_mask=response_mask, logp_rollout=logp_rollout, rewards=rewards,
                    format_valid=format_valid, truncated=truncated, success=success, trajectory_ids=trajectory_ids)
        if any(_on_device(v) for v in args.values()):
            _rollout_args(**args, texts=texts, conv=as_device_array)  # a bad argument fails here, at the call
            self.guard.run("record_rollout", self._defer_rollout, int(step), args, texts)
            return
        sid, per_sample, mask, tok, lpr = _rollout_args(sample_ids, group_ids, turn_ids, token_ids, response_mask,
                                                        logp_rollout, rewards, format_valid, truncated, success,
                                                        trajectory_ids, texts)
        self.guard.run("record_rollout", self._steps.record_rollout, int(step), sid, per_sample, mask, tok, lpr, texts)

    def _defer_rollout(self, step: int, args: dict, texts) -> None:
        """A rollout handed as device tensors: their copy to the host is queued now (one HostCopy) and the rollout
        is recorded when the step's statistics need it (StepEngine.resolve), by when the copy has landed: no host
        wait here, where a ``.cpu()`` per tensor used to wait for the GPU each."""
        dev = {k: as_device_array(v, k, _ROLLOUT_DTYPES[k]) for k, v in args.items() if _on_device(v)}
        copy = HostCopy(dev)

        def add(st) -> None:
            host = dict(args, **copy.wait())
            sid, per_sample, mask, tok, lpr = _rollout_args(**host, texts=texts)
            self._steps.add_rollout(st, step, sid, per_sample, mask, tok, lpr, texts)
        self._steps.defer_rollout(step, add)

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
        inp, sid = _update_args(logp, logp_old, advantages, response_mask, logp_ref, logp_rollout, entropy,
                                sample_ids, turn_ids, token_ids)
        if defer:
            self.guard.run("record_update", self._steps.stage, int(step), int(update), inp, sid)
            return {}
        out = self.guard.run("record_update", self._steps.record_update, int(step), int(update), inp, sid)
        return out or {}

    def record_step(self, step: int, metrics: Mapping[str, Any] | None = None) -> dict[str, float]:
        """Attach trainer metrics (success_rate, grad_norm, lr, ...) to ``step`` and finalise it: its raw step row
        is queued for writing and the monitor is evaluated. Returns the step's metrics (derived + user), or ``{}``
        when ``batch_s`` lets the step wait for a batched statistics pass, or ``overlap`` lets a step of device
        tensors land during the next one (``last_metrics`` has it after ``settle``). Metrics may be device scalars:
        they are read with the step's results, in the same wait."""
        if self._after_close("record_step", step):
            return {}
        metrics = dict(metrics or {})
        dev = {k: v.detach().reshape(-1)[:1].float() for k, v in metrics.items() if _on_device(v)}
        if dev:  # device metrics (verl's loss metrics): one queued copy, read when the step's results are
            copy = HostCopy(dev)
            user: Any = lambda: self._user_metrics(dict(metrics, **copy.wait()))  # noqa: E731
        else:
            user = self._user_metrics(metrics)
        res = self.guard.run("record_step", self._steps.record_step, int(step), user)
        return res or {}

    def record_alert(self, step: int, detector: str, severity: str, state: str = "", risk: float = float("nan"),
                     title: str = "", message: str = "", evidence: Mapping | None = None,
                     source: str = "online") -> None:
        """Append one row to the run's alerts table (used by monitors and alert sinks)."""
        import json

        row = {"step": int(step), "time": now_us(), "detector": detector,
               "severity": severity, "state": state, "risk": float(risk), "title": title, "message": message,
               "evidence": json.dumps(evidence or {}, default=_json_default), "source": source}
        self._rows.put("alerts", _row_table(cached_schema(("alerts",), lambda: arrow_schema("alerts")), row))

    def record_action(self, step: int, action: str, params: Mapping | None = None, detector: str = "",
                      state: str = "", risk: float = float("nan"), reason: str = "", policy: str = "",
                      outcome: Mapping | None = None, evidence: Mapping | None = None) -> None:
        """Append one row to the run's actions table (what arldiag.stabilize applied, and why)."""
        import json

        row = {"step": int(step), "time": now_us(), "action": action,
               "params": json.dumps(params or {}, default=_json_default), "detector": detector, "state": state,
               "risk": float(risk), "reason": reason, "policy": policy,
               "outcome": json.dumps(outcome or {}, default=_json_default),
               "evidence": json.dumps(evidence or {}, default=_json_default)}
        self._rows.put("actions", _row_table(cached_schema(("actions",), lambda: arrow_schema("actions")), row))
        note = getattr(self.monitor, "note_action", None)
        if note is not None:  # the online advice fits the settings the action left (Monitor.note_action)
            self.guard.run("monitor", note, outcome)

    def _user_metrics(self, metrics: Mapping[str, Any]) -> dict[str, float]:
        """record_step's trainer metrics as floats under arldiag's names (aliases); a newly chosen score column is
        kept in run.json."""
        user = {}
        for k, v in metrics.items():
            try:
                user[str(k)] = float(as_array(v, f"metrics[{k!r}]", np.float64).reshape(-1)[0]) \
                    if not isinstance(v, (int, float)) else float(v)
            except (TypeError, ValueError, IndexError):
                raise ValueError(f"metrics[{k!r}] must be a number, got {type(v).__name__}") from None
        try:
            user = self._aliases(user)
        except Exception as exc:  # noqa: BLE001 - a name lookup must never stop the step from being recorded
            self.guard.warn_once("aliases", f"arldiag: metric name resolution failed ({exc!r}); names kept as logged")
        if self._aliases.sources != self.manifest.get("score_sources"):  # a score column was just chosen: keep it
            self.manifest["score_sources"] = dict(self._aliases.sources)
            if self.rank == 0 and self.writer is not None:  # no store opened: its one warning was given at open
                self.guard.run("run.json", self._loc.write_json, "run.json", self.manifest)
        return user

    def settle(self) -> None:
        """Compute and finalise the steps that ``batch_s`` left pending (their rows, step rows and the monitor)."""
        self.guard.run("record_step", self._steps.settle)

    def request_stop(self, reason: str) -> None:
        """Ask the trainer to stop (it reads ``should_stop``)."""
        self.should_stop = True
        self.stop_reason = reason
        log.warning("arldiag: stop requested: %s", reason)

    def flush(self) -> None:
        """Finalise nothing; publish every buffered row now (deferred updates and pending steps are computed
        first)."""
        self.guard.run("record_step", self._steps.settle)
        if self._steps.cur is not None:
            self.guard.run("record_update", self._steps.compute_step, self._steps.cur)
            self.guard.run("record_update", self._steps.land_step, self._steps.cur)
        if self.writer is not None:
            self.guard.run("flush", self._rows.release_held)
            self.guard.run("flush", self._rows.release_steps)
            self.guard.run("flush", self.writer.flush, True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._steps.cur is not None:
                self.guard.run("record_step", self._steps.finalise)
            self.guard.run("record_step", self._steps.settle)
            if self.writer is not None:
                self.guard.run("close", self._rows.release_held)  # rows of a step whose finalising failed
                self.guard.run("close", self._rows.release_steps)
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
    def _step_done(self, step: int, metrics: dict[str, float], watch: bool) -> None:
        """A finalised step (StepEngine.finish_step): its metrics, the publish cadence, the monitor."""
        self.last_metrics = metrics
        self._rows.step_done()
        if self.monitor is not None and watch:
            self.guard.run("monitor", self.monitor.on_step, step, metrics)

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


_ROLLOUT_DTYPES = {"sample_ids": np.int64, "group_ids": np.int64, "trajectory_ids": np.int64, "turn_ids": np.int64,
                   "token_ids": np.int64, "response_mask": np.bool_, "logp_rollout": np.float32,
                   "rewards": np.float64, "format_valid": np.bool_, "truncated": np.bool_, "success": np.bool_}


def _on_device(x) -> bool:
    """A torch tensor on an accelerator (reading it on the host would wait for the device)."""
    return is_torch(x) and x.device.type != "cpu"


def _rollout_args(sample_ids, group_ids, turn_ids, token_ids, response_mask, logp_rollout, rewards, format_valid,
                  truncated, success, trajectory_ids, texts, conv=as_array):
    """record_rollout's arguments validated: sample ids [B], the per-sample columns, and the [B, T] mask, token ids
    and rollout log-probs (or None). ``conv``: as_device_array checks device tensors without reading them."""
    sid = conv(sample_ids, "sample_ids", np.int64)
    if sid.ndim != 1:
        raise ValueError(f"sample_ids must be 1-D [B], got shape {sid.shape}")
    B = sid.shape[0]
    per_sample = {}
    for nm, val, dt in (("group_id", group_ids, np.int64), ("trajectory_id", trajectory_ids, np.int64),
                        ("reward", rewards, np.float64), ("format_valid", format_valid, np.bool_),
                        ("truncated", truncated, np.bool_), ("success", success, np.bool_)):
        arg = {"group_id": "group_ids", "trajectory_id": "trajectory_ids", "reward": "rewards"}.get(nm, nm)
        if val is not None:
            a = conv(val, arg, dt)
            check_shape(arg, a, (B,), "sample_ids")
            per_sample[nm] = a
    turn = None
    if turn_ids is not None:
        turn = conv(turn_ids, "turn_ids", np.int64)
        if turn.ndim == 1:
            check_shape("turn_ids", turn, (B,), "sample_ids")
            per_sample["turn"] = turn
    mask = tok = lpr = None
    if response_mask is not None:
        mask = conv(response_mask, "response_mask", np.bool_)
        if mask.ndim != 2 or mask.shape[0] != B:
            raise ValueError(f"response_mask must be [B, T] with B = len(sample_ids) = {B}, got {mask.shape}")
        for nm, val in (("token_ids", token_ids), ("logp_rollout", logp_rollout)):
            if val is not None:
                check_shape(nm, val if is_torch(val) else as_array(val, nm), mask.shape, "response_mask")
        tok = None if token_ids is None else conv(token_ids, "token_ids", np.int64)
        lpr = None if logp_rollout is None else conv(logp_rollout, "logp_rollout", np.float32)
        if turn is not None and turn.ndim == 2:
            check_shape("turn_ids", turn, mask.shape, "response_mask")
    elif token_ids is not None or logp_rollout is not None:
        raise ValueError("token_ids/logp_rollout need response_mask to say which tokens the policy generated")
    if texts is not None and len(texts) != B:
        raise ValueError(f"texts has {len(texts)} entries, sample_ids has {B}")
    return sid, per_sample, mask, tok, lpr


def _update_args(logp, logp_old, advantages, response_mask, logp_ref, logp_rollout, entropy, sample_ids, turn_ids,
                 token_ids) -> tuple[UpdateInputs, np.ndarray | None]:
    """record_update's arguments validated: the update's inputs and its sample ids [B] (or None)."""
    # accelerator tensors stay on their device: the statistics run there (arldiag/backends.py), no copy to the
    # host; CPU tensors become numpy views (no copy), on which the same statistics cost 2-3x less CPU time than
    # torch's per-op dispatch (benchmarks/integration_overhead.py)
    conv = as_device_array if _on_device(logp) else as_array
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
        # ids on a device stay there (read with the statistics' one copy, collectors/align.py); else numpy [B]
        sid = as_device_array(sample_ids, "sample_ids", np.int64) if conv is as_device_array and \
            _on_device(sample_ids) else as_array(sample_ids, "sample_ids", np.int64)
        check_shape("sample_ids", sid, (B,), "response_mask rows")
    inp = UpdateInputs(lp, lpo, adv, mask, opt.get("logp_ref"), opt.get("logp_rollout"), opt.get("entropy"),
                       turn, tid)
    return inp, sid


def given_score_sources(config: Mapping[str, Any] | None) -> dict[str, str | None]:
    """The score columns a caller already chose: ``arldiag import`` chooses over the whole file and stores them as
    config ``task_score_from`` / ``val_score_from`` (None: the log has no such score), so no step picks another."""
    out = {}
    for to, key in (("task_score", "task_score_from"), ("val_score", "val_score_from")):
        if key in (config or {}):
            v = config[key]
            out[to] = v if isinstance(v, str) else None
    return out


def _manifest(name, algorithm, config, clip, seq_clip, neg_adv_delta, dual_clip_c, token_sample_rate,
              world_size) -> dict[str, Any]:
    """run.json of a new run (a resumed run keeps its run_id and created time)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": uuid.uuid4().hex,
        "name": name,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "algorithm": algorithm,
        "config": dict(config or {}),
        "clip": list(map(float, clip)),
        "seq_clip": list(map(float, seq_clip)),
        "neg_adv_delta": float(neg_adv_delta),
        "dual_clip_c": float(dual_clip_c),
        "token_sample_rate": token_sample_rate,
        "collector_version": __version__,
        "host": socket.gethostname(),
        "world_size": world_size,
        "status": "running",
    }


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)

"""The step engine behind the Collector: the state of the step being recorded (StepState), the rollout cache and
the updates of each step, the statistics passes (one per update, one per step's deferred updates, or one for a
batch of finished steps: ``batch_s``), and the finalising of a step (its raw step row, its derived metrics).

Step aggregates are mergeable sums/counts/extrema (whylogs-style zero/update/merge), so several updates of a step
and several ranks of a job combine exactly in the reader.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import time
from typing import Callable, Mapping

import numpy as np

from arldiag.backends import is_torch
from arldiag.collectors.align import RolloutCache, align
from arldiag.collectors.distributed import reduce_step_aggs
from arldiag.collectors.guard import Guard
from arldiag.collectors.rollout_stats import ROLLOUT_AGGS, RolloutCall, rollout_stats
from arldiag.collectors.rows import RowBuffer
from arldiag.collectors.staging import on_host, owned, signature, stack
from arldiag.schema import STEP_AGGS, USER_METRIC_PREFIX, derive_step_metrics
from arldiag.stats import AGGS, Bands, UpdateInputs, UpdateStats, compute_update, segmentable, top_share

_MERGE = {a.name: a.merge for a in STEP_AGGS}
BATCH_STEPS = 32  # at most this many finished steps share one statistics pass (batch_s)
STEP_OWN_AGGS = ("n_updates", "kl_top_share")  # aggregates of the whole step (StepEngine.finish_step)


def check_aggregates() -> None:
    """Every stored step aggregate (schema.STEP_AGGS) has exactly one producer: a formula (stats.AGGS, which refuses
    a name the schema lacks), the rollout statistics (rollout_stats.ROLLOUT_AGGS) or the step itself; a declared
    aggregate nothing computes would be a column of nulls. Run at import."""
    producers = [("stats.AGGS", tuple(AGGS)), ("rollout_stats.ROLLOUT_AGGS", ROLLOUT_AGGS),
                 ("steps.STEP_OWN_AGGS", STEP_OWN_AGGS)]
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


class StepState:
    """What a step gathered: raw aggregates, update indices, per-sequence k3 sums, trainer metrics, deferred
    updates (``record_update(defer=True)``: (update, inputs, sample ids)), the rollout cache and the rollout calls
    not computed yet (batch_s); ``time``: when it was finalised (its step row)."""
    __slots__ = ("step", "aggs", "updates", "seq_k3", "user", "staged", "rollout", "rolls", "time", "deferred",
                 "inflight")

    def __init__(self, step: int):
        self.step = step
        self.aggs: dict[str, float] = {}
        self.updates: set[int] = set()
        self.seq_k3: list[np.ndarray] = []
        self.user: dict[str, float] = {}
        self.staged: list[tuple[int, UpdateInputs, np.ndarray]] = []
        self.rollout = RolloutCache()
        self.rolls: list[RolloutCall] = []
        self.time = 0
        # rollouts handed as device tensors, on their way to the host (Collector._defer_rollout): each adds itself
        # to the step (``fn(st)``) when the step's statistics need the rollout cache (StepEngine.resolve)
        self.deferred: list[Callable[["StepState"], None]] = []
        # device passes whose results are still on their way to the host (StepEngine.overlap): (PendingStats,
        # AlignedUpdate, (step, its updates)) each, landed by StepEngine.drain
        self.inflight: list[tuple] = []


class StepEngine:
    """Records the steps of one rank: ``record_rollout`` / ``stage`` / ``record_update`` / ``record_step`` take
    validated inputs (Collector); rows go to ``rows``; each finalised step's metrics go to ``on_step(step, metrics,
    watch)`` (``watch``: False on the ranks of a process group other than its rank 0); failures inside a pass are
    caught by ``guard`` where one step's trouble must not drop another's."""

    def __init__(self, rank: int, bands: Bands, rows: RowBuffer, guard: Guard, batch_s: float, pg: tuple,
                 on_step: Callable[[int, dict, bool], None]):
        self.rank, self.bands, self.rows, self.guard, self.batch_s, self.pg = rank, bands, rows, guard, batch_s, pg
        self.on_step = on_step
        self.cur: StepState | None = None  # the step being recorded
        self.pending: list[StepState] = []  # finished steps whose statistics are not computed yet (batch_s)
        # where the statistics of device tensors run: "device" (torch there, one copy of the results) or "host"
        # (one copy of the inputs, then numpy); benchmarks/gpu_overhead.py measures both
        self.stats_on = "device"
        # device tensors: a finished step's results land on the host (rows, step row, monitor) while the next step
        # runs (drain), instead of the host waiting for them at record_step (Collector ``overlap``)
        self.overlap = False
        self.inflight: list[StepState] = []   # finished steps with device passes in flight, oldest first
        self.pending_since = 0.0

    def enter(self, step: int) -> None:
        if self.cur is not None and step != self.cur.step:
            self.finalise()
        if self.cur is None:
            self.cur = StepState(step)

    def record_rollout(self, step, sid, per_sample, mask, tok, lpr, texts) -> None:
        self.enter(step)
        st = self.cur
        self.compute_staged(st)  # deferred updates see the rollout cache as it was when they were recorded
        self.add_rollout(st, step, sid, per_sample, mask, tok, lpr, texts)

    def defer_rollout(self, step: int, add: Callable[[StepState], None]) -> None:
        """A rollout whose tensors are still being copied to the host: ``add(st)`` records it when the step needs
        it (resolve), so the copy costs the host no wait of its own."""
        self.enter(step)
        self.compute_staged(self.cur)  # updates recorded before it do not see it
        self.cur.deferred.append(add)

    def resolve(self, st: StepState) -> None:
        """Add the step's deferred rollouts (in their order) to its cache."""
        adds, st.deferred = st.deferred, []
        for add in adds:
            add(st)

    def add_rollout(self, st: StepState, step, sid, per_sample, mask, tok, lpr, texts) -> None:
        """The rollout cache and the rollout statistics of one record_rollout call (host arrays)."""
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
            self.rollout_calls([RolloutCall(step, sid, per_sample, lengths)], [st.aggs])

    def rollout_calls(self, calls: list[RolloutCall], targets: list[dict]) -> None:
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
                self.rows.hold("groups", groups, groups["group_id"].size)

    def stage(self, step: int, update: int, inp: UpdateInputs, sid: np.ndarray | None) -> None:
        self.enter(step)
        sid = self.sample_ids(step, inp, sid)
        self.cur.staged.append((update, owned(inp), sid.clone() if is_torch(sid) else np.array(sid)))
        # the trainer has queued this micro-batch's work on the device: a good time for the host to finish the
        # last step (its copy has landed by now; nothing waits here if it has not)
        self.drain(block=False)

    def compute_step(self, st: StepState) -> None:
        """What a step recorded but did not compute yet: its rollout calls and its deferred updates."""
        self.resolve(st)
        rolls, st.rolls = st.rolls, []
        if rolls:
            self.rollout_calls(rolls, [st.aggs] * len(rolls))
        self.compute_staged(st)

    def compute_staged(self, st: StepState) -> None:
        """Compute the deferred updates of ``st``: one pass per group of updates that gave the same inputs (in
        practice one per step)."""
        self.resolve(st)
        staged, st.staged = st.staged, []
        if not staged:
            return
        if self.stats_on == "host" and any(is_torch(u[1].mask) for u in staged):
            staged = on_host(staged)
        if "turn" in st.rollout.cols:  # per-turn samples take their turn ids per update (all rows known or none)
            batches = [[u] for u in staged]
        else:
            by_sig: dict[tuple, list] = {}
            for u in staged:
                by_sig.setdefault(signature(u[1]), []).append(u)
            batches = list(by_sig.values())
        self.compute([(st, b) for b in batches], later=self.overlap)

    @staticmethod
    def sample_ids(step: int, inp: UpdateInputs, sid: np.ndarray | None) -> np.ndarray:
        if sid is None:  # unique within the update but not linkable to a rollout
            sid = (np.int64(step) << np.int64(32)) + np.arange(inp.mask.shape[0], dtype=np.int64)
        return sid

    def record_update(self, step: int, update: int, inp: UpdateInputs, sid: np.ndarray | None) -> dict:
        self.enter(step)
        self.compute_staged(self.cur)  # rows keep the order of the calls
        return self.compute([(self.cur, [(update, inp, self.sample_ids(step, inp, sid))])])[0]

    def compute(self, work: list[tuple[StepState, list]], later: bool = False) -> list[dict]:
        """Statistics and rows of updates: (step, its updates) pairs, each pair's updates stacked
        (collectors/staging.py); pairs with alike inputs (same inputs given, same rollout columns) share one
        compute_update, split per pair (``segments``, stats._segment_aggs) when it can. Returns each pair's raw
        aggregates. ``later``: a device pass's results are left in flight (StepState.inflight; {} returned)."""
        preps = [align(st.step, batch, st.rollout) for st, batch in work]
        out: list[dict] = [{}] * len(work)
        groups: dict[tuple, list[int]] = {}
        for i, pr in enumerate(preps):
            inp = pr.inp
            key = (signature(inp), inp.rollout_flat_logp is None, inp.rollout_flat_token_ids is None,
                   inp.retok_extra is None, tuple(pr.cols or ()), pr.turn is None, pr.texts is None,
                   i if is_torch(inp.mask) else -1)  # device pairs: one pass each (one host copy per pass)
            groups.setdefault(key, []).append(i)
        for idx in groups.values():
            inps = [preps[i].inp for i in idx]
            inp = inps[0] if len(idx) == 1 else dataclasses.replace(stack(inps), **{
                f: np.concatenate([getattr(x, f) for x in inps])
                for f in ("rollout_flat_logp", "rollout_flat_token_ids", "retok_extra") if getattr(inps[0], f) is not None})
            if len(idx) == 1 or not segmentable(inp.mask, inp.turn_ids):
                for i in idx:  # one pass per pair
                    # device tensors: the pass's device ids come back with its results, which may stay in flight
                    kw = dict(extra=preps[i].device_ids, wait=not later) if is_torch(preps[i].inp.mask) else {}
                    res = compute_update(preps[i].inp, self.bands, **kw)
                    if not isinstance(res, UpdateStats):  # in flight: landed by drain
                        work[i][0].inflight.append((res, preps[i], work[i]))
                        continue
                    out[i] = self.land(res, preps[i], work[i])
                continue
            sizes = [x.mask.shape[0] for x in inps]
            starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
            res = compute_update(inp, self.bands, segments=starts)
            k3 = res.seq_k3
            for i, a, lo, n in zip(idx, res.aggs, starts, sizes):
                out[i] = self.merge(work[i], a, k3[lo:lo + n][res.nonempty[lo:lo + n]])
            self.rows.emit([preps[i] for i in idx], res)
        return out

    def land(self, res: UpdateStats, prep, pair: tuple[StepState, list]) -> dict:
        """A pass's results on the host: the rows (with the sample ids and rollout columns of an update aligned on
        the device) and the step's aggregates."""
        if prep.device_ids is not None:
            res.drop_rollout(prep.resolve(res.extra))
        out = self.merge(pair, res.aggs, res.seq_k3[res.nonempty])
        self.rows.emit([prep], res)
        return out

    def land_step(self, st: StepState) -> None:
        """Land the passes of a step not finished yet (Collector.flush: its rows now)."""
        items, st.inflight = st.inflight, []
        for p, prep, pair in items:
            self.land(p.result(), prep, pair)

    def drain(self, block: bool) -> None:
        """Finish the steps in flight, oldest first: land their passes and write their step rows (finish_step).
        ``block=False`` stops at the first step whose copies have not landed (no host wait)."""
        while self.inflight:
            st = self.inflight[0]
            if not block and not all(p.done() for p, _, _ in st.inflight):
                return
            self.inflight.pop(0)
            items, st.inflight = st.inflight, []
            for p, prep, pair in items:
                self.guard.run("record_update", lambda: self.land(p.result(), prep, pair))
            self.guard.run("record_step", self.finish_step, st)

    @staticmethod
    def merge(pair: tuple[StepState, list], aggs: dict, seq_k3: np.ndarray) -> dict:
        st, batch = pair
        merge_into(st.aggs, aggs)
        st.updates.update(u[0] for u in batch)
        st.seq_k3.append(seq_k3)
        return aggs

    def record_step(self, step: int, user: dict[str, float]) -> dict[str, float]:
        self.enter(step)
        self.cur.user = user
        return self.finalise()

    def finalise(self) -> dict[str, float]:
        st, self.cur = self.cur, None  # a new step starts clean whatever happens below
        if st is None:
            return {}
        st.time = now_us()
        self.guard.run("record_rollout", self.resolve, st)
        if self.batchable(st):
            if not self.pending:
                self.pending_since = time.monotonic()
            self.pending.append(st)
            if len(self.pending) >= BATCH_STEPS or time.monotonic() - self.pending_since >= self.batch_s:
                self.settle()
            return {}
        self.settle()  # earlier steps first
        self.guard.run("record_update", self.compute_step, st)
        if st.inflight:  # its results land while the next step runs (drain)
            self.inflight.append(st)
            return {}
        return self.finish_step(st)

    def batchable(self, st: StepState) -> bool:
        """Whether a finished step can wait for a batched statistics pass (batch_s): deferred updates of one kind,
        numpy inputs, no per-turn samples, no process group (its reduction is a collective call per step)."""
        if self.batch_s <= 0 or self.pg[1] or not st.staged or "turn" in st.rollout.cols:
            return False
        first = st.staged[0][1]
        if not isinstance(first.mask, np.ndarray) or first.turn_ids is not None:
            return False
        sig = signature(first)
        return all(signature(u[1]) == sig for u in st.staged[1:])

    def settle(self) -> None:
        self.drain(block=True)
        pend, self.pending = self.pending, []
        if not pend:
            return
        self.guard.run("record_update", self.compute_pending, pend)
        for st in pend:  # each on its own: one step's failure does not drop the steps after it
            self.guard.run("record_step", self.finish_step, st)

    def compute_pending(self, pend: list[StepState]) -> None:
        """The pending steps' rollout calls in one pass, and their updates (one batch per step, _batchable) in
        one compute_update where alike."""
        rolls = [(c, st.aggs) for st in pend for c in st.rolls]
        if rolls:
            self.rollout_calls([c for c, _ in rolls], [a for _, a in rolls])
        work = [(st, st.staged) for st in pend]
        for st in pend:
            st.rolls, st.staged = [], []
        self.compute(work)

    def finish_step(self, st: StepState) -> dict[str, float]:
        """The step row, the derived metrics and ``on_step`` (publish, monitor) of a step whose statistics are in."""
        step = st.step
        aggs = st.aggs
        aggs["n_updates"] = len(st.updates)
        if st.seq_k3:
            aggs["kl_top_share"] = top_share(np.concatenate(st.seq_k3))
        user = st.user() if callable(st.user) else st.user  # device metrics: read now (Collector.record_step)
        row = {"step": step, "rank": self.rank, "time": st.time}
        row.update({a.name: aggs.get(a.name) for a in STEP_AGGS})
        row.update({USER_METRIC_PREFIX + k: v for k, v in user.items()})
        self.rows.add_step(row, user)
        watch = True
        if self.pg[1]:  # the whole step on the group's rank 0 (collectors/distributed.py)

            merged = reduce_step_aggs(aggs, self.pg[0])
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
        self.on_step(step, metrics, watch)
        return metrics


def now_us() -> int:
    return int(_dt.datetime.now(_dt.timezone.utc).timestamp() * 1_000_000)

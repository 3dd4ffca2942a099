"""`arldiag watch RUN`: follow a run that is still being written and raise alerts (out-of-process Monitor).

Each poll re-scans the store (``run.refresh()``), reads only the steps after the last evaluated one and feeds them
to the same Monitor the trainer can run in-process, so the per-step cost stays flat. A step is evaluated once it is
complete: every step of a single-rank run, or, with several ranks, once a later step exists or the run finished.

Resumable: the last evaluated step is kept in ``<run>/.arldiag-watch.json``; without that file it is re-derived
from the alerts table (the last step of an alert with source "watch"). On resume the steps up to it are replayed
silently to rebuild the detectors' bounded state, so no alert is raised twice.
"""
from __future__ import annotations

import sys
import time

from arldiag.alerts import RunAlertWriter, WebhookSink
from arldiag.levels import SEVERITIES
from arldiag.monitor import Monitor
from arldiag.store.location import StoreRoot, join
from arldiag.store.reader import open_run

STATE_FILE = ".arldiag-watch.json"


def add_arguments(p) -> None:
    p.add_argument("run", help="run directory (or a root / glob: every run under it is watched)")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between polls (default 10)")
    p.add_argument("--max-seconds", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--once", action="store_true", help="evaluate what is there now, then exit")
    p.add_argument("--no-store", action="store_true",
                   help="read-only: write neither alerts into the run's alerts table nor the resume state file")
    p.add_argument("--webhook", default=None, help="POST alerts (warning and above) as JSON to this URL")
    p.add_argument("--min-severity", default="watch", choices=list(SEVERITIES),
                   help="lowest severity printed on the console")
    p.add_argument("--restart", action="store_true", help="ignore the saved position and evaluate from step 0")
    p.add_argument("--wait", action="store_true",
                   help="wait for the run to appear (its run.json) instead of failing; for a watch started "
                        "before the trainer")
    p.add_argument("--quiet", action="store_true", help="do not print what watch is waiting for")


WAIT_NOTE_EVERY_S = 30.0  # the first waiting line is printed at once, then at most this often


class Watcher:
    """Follows one run name of an open Run."""

    def __init__(self, run, name: str, sinks, restart: bool = False, min_severity: str = "watch",
                 save_state: bool = True) -> None:
        self.run, self.name = run, name
        self.loc = StoreRoot(run.paths[name])  # a local folder or an s3:// prefix: the state file lives there
        self.monitor = Monitor(sinks=sinks, source="watch", run=name, min_severity=min_severity)
        self.save_state = save_state
        self.resume_step = None if restart else self._saved_step()
        self.evaluated = 0

    def _saved_step(self) -> int | None:
        try:
            return int(self.loc.read_json(STATE_FILE)["last_step"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        try:  # re-derive from the alerts this command wrote before
            lit = "'" + self.name.replace("'", "''") + "'"
            v = self.run.sql(f"select max(step) from alerts where run = {lit} and source = 'watch'").fetchall()[0][0]
            return None if v is None else int(v)
        except Exception:  # noqa: BLE001 - no alerts table yet
            return None

    def _save(self) -> None:
        last = self.monitor.last_step
        if last is None or not self.save_state:
            return
        try:
            self.loc.write_json(STATE_FILE, {"last_step": last, "run": self.name, "time": time.time()})
        except OSError:
            pass  # read-only store: resume falls back to the alerts table

    def waiting_for(self) -> str:
        """What this watcher waits for, in words (printed while no new step arrives)."""
        steps_dir = join(str(self.loc), "steps")
        if not any(n.endswith(".parquet") for n in self.loc.list_names("steps")):
            return (f"the first steps part in {steps_dir} (the collector publishes every flush_every steps or "
                    "flush_every_s seconds, whichever comes first)")
        last = self.monitor.last_step
        return (f"steps after step {last}" if last is not None else "a complete step") + \
            f" (run status {self.run.manifests.get(self.name, {}).get('status', '?')})"

    def finished(self) -> bool:
        return self.run.manifests.get(self.name, {}).get("status") == "finished"

    def poll(self) -> int:
        """Evaluate the complete steps not evaluated yet; returns how many."""
        ev = self.monitor.evaluator
        have = set(self.run.columns("steps"))
        cols = ["step"] + [c for c in ev.window.columns if c in have and c != "step"]
        lit = "'" + self.name.replace("'", "''") + "'"
        after = -1 if ev.last_step is None else ev.last_step
        sel = ", ".join('"' + c + '"' for c in dict.fromkeys(cols))
        df = self.run.sql(f"select {sel} from steps where run = {lit} and step > {after} order by step").df()
        if not len(df):
            return 0
        world = int(self.run.manifests.get(self.name, {}).get("world_size", 1) or 1)
        if world > 1 and not self.finished():
            df = df[df["step"] < df["step"].max()]
        n = 0
        for rec in df.to_dict("records"):
            step = int(rec["step"])
            if self.resume_step is not None and step <= self.resume_step:
                ev.update(step, rec)  # replay: rebuild state, alerts were raised by the previous watch
            else:
                self.monitor.on_step(step, rec)
                n += 1
        self.evaluated += n
        self._save()
        return n


def main(args) -> int:
    if args.interval <= 0:
        raise ValueError(f"--interval must be > 0, got {args.interval}")
    t0 = time.monotonic()
    note = _Notes(args.quiet, t0)
    run = None
    while run is None:
        try:
            run = open_run(args.run)
        except FileNotFoundError:
            if not args.wait:
                raise
            note.say(f"waiting for run.json in {args.run}")
            if args.once or (args.max_seconds is not None and
                             time.monotonic() - t0 + args.interval > args.max_seconds):
                return 0
            time.sleep(args.interval)
    writers, watchers = [], []
    for name in run.names:
        sinks: list = ["console"]
        if not args.no_store:
            w = RunAlertWriter(run.paths[name])
            writers.append(w)
            sinks.append(w)
        if args.webhook:
            sinks.append(WebhookSink(args.webhook))
        watchers.append(Watcher(run, name, sinks, args.restart, args.min_severity, save_state=not args.no_store))
    try:
        while True:
            run.refresh()
            new = sum(w.poll() for w in watchers)
            if new:
                note.reset()
            elif not all(w.finished() for w in watchers):
                note.say("; ".join(f"{w.name}: waiting for {w.waiting_for()}" for w in watchers
                                   if not w.finished()))
            for wr in writers:
                wr.flush()
            if args.once or all(w.finished() for w in watchers):
                break
            if args.max_seconds is not None and time.monotonic() - t0 + args.interval > args.max_seconds:
                break
            time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    finally:
        for w in watchers:
            w.monitor.close()
        for wr in writers:
            wr.close()
    for w in watchers:
        print(f"[arldiag] {w.name}: evaluated {w.evaluated} new steps up to step {w.monitor.last_step}; "
              f"state {w.monitor.state}")
    return 0


class _Notes:
    """Rate-limited "waiting for ..." lines on stderr, with the seconds waited so far."""

    def __init__(self, quiet: bool, t0: float) -> None:
        self.quiet, self.since, self.last = quiet, t0, None

    def reset(self) -> None:
        self.since, self.last = time.monotonic(), None

    def say(self, what: str) -> None:
        now = time.monotonic()
        if self.quiet or (self.last is not None and now - self.last < WAIT_NOTE_EVERY_S):
            return
        self.last = now
        print(f"[arldiag] {what} ({now - self.since:.0f}s)", file=sys.stderr, flush=True)

"""The watch loop's tick: sample as the read plan asks, measure the stall, hand a due one to
the hang episodes, look for warnings, and diagnose the job once it ended.

The only module (with the node loop and the commands) that wires stages together. It must never
harm the job: every stage's failure is caught here, logged once, and watching goes on; no
signal is sent unless ``on_hang: terminate`` is configured (NOTE [ Escalation ladder ] in
watchdog/watch/hang_episodes.py).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time
import traceback
from typing import Callable, Dict, List, Optional, Set

from .. import detect
from ..collect import pyspy, read_plan
from ..collect.sampler import NodeShare, Sampler
from ..collect.warning_stacks import WarningStacks
from ..config import Config
from ..types import InsideView, RankId, ReportWritten, Sample, Stall, WatcherStatus
from . import act, tick_log
from .alert import Alerts
from .exit_look import ExitLook, JobTraces, survivors
from .hang_episodes import ApartExamination, HangEpisodes, JobHandles
from .job import Outcome, WatchedJob, log, say
from .live_look import LiveLook
from .publish import Publisher
from .stall_words import LoaderWitness, criterion, stopped_text


class Watcher:
    """Watches one job until it ends (or ``stop`` is set): the loop's tick and its wiring; a due
    stall goes to :class:`~watchdog.watch.hang_episodes.HangEpisodes`, warnings to
    :class:`~watchdog.watch.live_look.LiveLook`, the job's end to :meth:`after_exit`.

    Args:
        config: validated settings.
        job: the job's parameters (:class:`~watchdog.watch.job.WatchedJob`).
        rank: who the training process this watcher watches as its main is, under a multi-rank
            launcher (:class:`~watchdog.watch.node_loop.NodeLoop`); ``None``: no rank.
        examine: ``False`` samples only, for the job-level report after it ends (the launcher
            of a multi-rank job: its ranks have watchers of their own).
        peers: the other ranks whose DataLoader is stalled now, one line each
            (:meth:`.node_loop.NodeLoop.loader_stalls`): a rank stalled outside its loader while
            another's loader is stuck is waiting for that rank, and says so instead of reporting.
        peer_loaders: the other ranks' main iterators now (:meth:`.node_loop.NodeLoop.loaders_of_ranks`).
        alerts: runs ``on_*_exec`` after each report (shared by the watchers of one job).
        examine_apart: examine a due stall in a thread of its own, started at the end of the
            tick that found it (:attr:`examining` while it runs), instead of within the tick: a
            rank's watcher, stepped with the other ranks' by one loop, which must not wait for
            its py-spy dumps.
        share: what its sampler shares with the node's other samplers (:class:`NodeShare`).
    """

    def __init__(
        self,
        config: Config,
        job: WatchedJob,
        rank: Optional[RankId] = None,
        examine: bool = True,
        peers: Callable[[], List[str]] = list,
        peer_loaders: Callable[[], tuple] = tuple,
        alerts: Optional[Alerts] = None,
        examine_apart: bool = False,
        share: Optional[NodeShare] = None,
    ) -> None:
        self.config = config
        self.job = job
        self.rank = rank
        self.examine = examine
        self.alerts = alerts or Alerts.of(config.alerts, log)
        number, rank_vars = (rank.number, rank.vars) if rank is not None else ("", ())
        self._status = WatcherStatus(rank=number, root_pid=job.root_pid, rank_vars=rank_vars)
        self.on_report: Callable[[ReportWritten], None] = lambda written: None
        self._apart = ApartExamination(self._examine, f"examine-rank-{number}") if examine_apart else None
        self.outcome = Outcome()
        self.sampler = Sampler(
            job.root_pid, config.memory_read_base_interval_s, job.inside, share, on_error=self.internal_error
        )
        self.tracker = detect.ProgressTracker(config.cpu_progress_s)
        self.births = detect.WorkerBirths()
        self.timeline: collections.deque = collections.deque(maxlen=config.timeline_samples)
        self.host_cpus = os.cpu_count() or 1
        self.pyspy = pyspy.find_pyspy(config.py_spy.path)  # its path; None: not found
        stacks = WarningStacks(self.pyspy if config.py_spy.at_warning else None)
        self.publisher = Publisher(config, job, rank, self.alerts, self.pyspy, say, log, self._reported)
        self.live = LiveLook(stacks, self._publish, self.host_cpus, worker_clock=config.metrics.port is not None)
        traces = JobTraces(job.root_pid)
        self.ending = ExitLook(traces, job.stderr_tail, self.host_cpus, stacks, self.live.warned, self._publish, log)
        handles = JobHandles(
            sampler=self.sampler,
            tracker=self.tracker,
            births=self.births,
            traces=traces,
            timeline=lambda: tuple(self.timeline),
            pyspy=self.pyspy,
            job=job,
            rank=rank,
            peers=peers,
            peer_loaders=peer_loaders,
            publish=self._publish,
            say_once=self._say_once,
            log=log,
            host_cpus=self.host_cpus,
        )
        self.hangs = HangEpisodes(config, handles)
        self._said: Dict[str, float] = {}
        self._stall_s: Optional[float] = None  # seconds since the loader path moved, at the last tick
        self.loader_seen = LoaderWitness(job.inside is not None and job.inside.folder is not None)
        self._errors_logged: Set[str] = set()
        self._cadence = read_plan.Cadence.for_config(config)
        self._plan = read_plan.FULL_TICK
        self._plan_state = read_plan.PlanState()
        self._last_look = time.monotonic()  # when warnings were last looked for

    def _reported(self, written: ReportWritten) -> None:
        self._refresh_status()  # what the report was (a hang in the loader) before anyone is told
        self.on_report(written)

    def _refresh_status(self) -> None:
        """Store what this watcher saw last (:meth:`status`): after each tick and examination, before a report."""
        latest = self.timeline[-1] if self.timeline else None
        st, hangs, live = self._status, self.hangs, self.live
        now = (latest, self._stall_s, hangs.last_kind, hangs.in_loader, live.input_verdict, live.worker_seconds)
        if now != (st.sample, st.stall_s, st.last_hang_kind, st.hang_in_loader, st.input_verdict, st.worker_seconds):
            self._status = dataclasses.replace(
                st,
                sample=latest,
                stall_s=self._stall_s,
                last_hang_kind=hangs.last_kind,
                hang_in_loader=hangs.in_loader,
                delivered=self.tracker.delivered,
                input_verdict=live.input_verdict,
                worker_seconds=live.worker_seconds,
            )

    def status(self) -> WatcherStatus:
        """What this watcher last saw (:class:`WatcherStatus`); safe to call from any thread."""
        return self._status

    def end_job(self) -> str:
        """End the job's processes now (SIGTERM, SIGKILL after ``terminate_grace_s``; the tree
        of the latest sample, their descendants, the own process group and session,
        :func:`act.terminate_tree`): the end of a bounded run (``dlwatch run
        --stop-after-batches``). Returns what was done, one line."""
        latest = self.timeline[-1].processes if self.timeline else ()
        members = self.sampler.root_identity() + [p.ident for p in latest]
        job = self.job
        grace = self.config.terminate_grace_s
        return act.terminate_tree(members, grace, job.own_group, job.job_ended, own_session=job.own_session)

    def internal_error(self, where: str) -> None:
        """Log the exception being handled, once per ``where``, as dlwatch's own failure
        (watching goes on): call it from an ``except`` block."""
        if where not in self._errors_logged:
            self._errors_logged.add(where)
            last = traceback.format_exc(limit=3).strip().splitlines()[-1]
            log(f"internal error while {where} (watching goes on): {last}")

    @property
    def examining(self) -> bool:
        """Whether an examination started apart (``examine_apart``) still runs."""
        return self._apart is not None and self._apart.running

    def join_examination(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` s for an examination started apart; whether none runs now."""
        return self._apart is None or self._apart.join(timeout_s)

    def step(self) -> None:
        """One tick: sample, and examine, report or warn when due; nothing, unlogged, when the read
        plan skips it (NOTE [ Lean ticks ]). Never raises. With ``DLWATCH_TICK_LOG`` set, one line
        per tick to that file (:func:`tick_log.log_tick`). With ``examine_apart``, an examination
        due starts in its thread once the tick is over; do not step again while :attr:`examining`."""
        if self._plan.skip:
            self._plan = read_plan.after_skip(self._plan_state, self._cadence, time.monotonic(), self._last_look)
            return
        tick_log.timed(self._safe_tick, lambda: (self.timeline[-1] if self.timeline else None, self.outcome.reports))
        if self._apart is not None:
            self._apart.start_due()

    def _safe_tick(self) -> None:
        try:
            self._tick()
        except Exception:  # never let the watchdog's failure reach the job
            self.internal_error("sampling")
        self._after_examination()

    def _after_examination(self) -> None:
        self.outcome.terminated = self.hangs.terminated
        self.outcome.resolved = self.hangs.resolved_reports
        self._refresh_status()

    def _examine(self, sample: Sample, stall: Stall) -> None:
        """Examine the due ``stall`` at ``sample`` (:meth:`HangEpisodes.examine`); never raises."""
        try:
            self.hangs.examine(sample, stall)
        except Exception:
            self.internal_error("examining a stall")
        self._after_examination()

    def _tick(self) -> None:
        sample = self.sampler.sample(self._plan)
        self._plan_state = read_plan.after_sample(self._plan_state, sample, self.host_cpus, self._plan)
        self._plan = read_plan.FULL_TICK
        main = sample.main
        if main is None:
            return
        view = sample.inside or InsideView()
        self.timeline.append(sample)
        self.ending.traces.note(sample, self.sampler.memory_cgroup)
        self.births.update(sample)
        self.loader_seen.note(sample)
        if not self.examine:
            return
        self.tracker.update(sample)
        self._judge(sample, view)
        delivered = bool(sample.loaders) and self.tracker.last_batch_mono == sample.t_mono
        look = self._last_look  # after the judging: a look for warnings made at this tick is not due at the next
        self._plan = read_plan.next_plan(self._plan_state, self._cadence, time.monotonic(), delivered, look)

    def _judge(self, sample: Sample, view: InsideView) -> None:
        """Measure the stall at ``sample`` (the tracker has it) and examine it when due, or look
        for warnings when one is due and ``sample`` is a full one (``view``: the inside view
        read with it)."""
        if self.tracker.stopped:
            self._say_once("stopped", stopped_text(self.tracker.stopped))
            return
        self._said.pop("stopped", None)
        if sample.lean:
            # NOTE [ Lean ticks ]: a stall is measured, not judged (0: a batch or sample counted now)
            self._stall_s = 0.0 if self.tracker.last_batch_mono == sample.t_mono else self.tracker.stall_s(sample)
            if self._stall_s is not None:
                self.hangs.moved(sample)
            return
        stall = self.tracker.stall(sample)
        self._stall_s = None if stall is None else stall.stall_s
        if stall is None:
            return
        self.hangs.moved(sample)
        cfg = self.config
        rule = detect.rhythm(sample, cfg.stall_timeout_s, cfg.stall_min_s, cfg.stall_p99_factor)
        # judged on threads read (NOTE [ Thread reads ]), never on a lean sample's old ones
        trigger = self.hangs.due(stall, sample.t_mono, rule) if sample.threads_read and not sample.lean else None
        if trigger is not None and self.loader_seen.idle_script(sample, self._say_once):
            # The inside view would have seen a DataLoader iterator: there is none yet, and no
            # worker. dlwatch judges DataLoader loops; an idle script is no hung loader.
            self.hangs.not_judged(sample.t_mono)
            self._say_once(
                "no-loader",
                f"pid {stall.main_pid} has not moved for {stall.stall_s:.0f} s and has created no DataLoader "
                "iterator yet (the inside view saw none): not judged until it does",
                every_s=3600.0,
            )
        elif trigger is not None and not self.job.job_ended():
            why = criterion(trigger, rule, self.tracker.measure, cfg, bool(sample.loaders))
            due = dataclasses.replace(stall, trigger=trigger, criterion=why)
            if self._apart is not None:
                self._apart.due = (sample, due)  # started once this tick is over (step)
            else:
                self._examine(sample, due)
        elif not sample.lean and sample.t_mono - self._last_look >= cfg.warning_interval_s:
            self._last_look = sample.t_mono
            try:
                self.live.look(sample, tuple(self.timeline), view)
            except Exception:
                self.internal_error("looking for warnings")

    def _say_once(self, key: str, message: str, every_s: float = 600.0) -> None:
        now = time.monotonic()
        if now - self._said.get(key, float("-inf")) >= every_s:
            self._said[key] = now
            log(message)

    def after_exit(self, exit_code: Optional[int], terminated: bool = False, signalled: Optional[int] = None) -> None:
        """Report the job that ended with ``exit_code`` (:meth:`ExitLook.look`: ``terminated``
        by dlwatch, or after dlwatch forwarded it the signal ``signalled``), record the open hang
        reports' outcome, and say which of its processes outlived it (:func:`survivors`)."""
        try:
            self.ending.look(tuple(self.timeline), self.sampler.views.read, exit_code, terminated, signalled)
        except Exception:
            self.internal_error("diagnosing the job's exit")
        self.hangs.job_ended(exit_code, signalled)
        self.outcome.resolved = self.hangs.resolved_reports
        line = survivors(self.timeline[-1].processes if self.timeline else ())
        if line is not None:
            log(line)

    def _publish(
        self, facts, diagnoses, action: str, suffix: str, summary_only: bool = False, note: str = ""
    ) -> Optional[str]:
        """Publish one report (:meth:`Publisher.publish`), counted in the outcome; its folder (``None``: unwritten)."""
        path = self.publisher.publish(facts, diagnoses, action, suffix, summary_only, note)
        if path is not None:
            self.outcome.reports.append(path)
        return path

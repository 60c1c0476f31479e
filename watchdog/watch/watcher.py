"""The watch loop: sample, detect, and on a stall confirm, dump, diagnose, report and act.

The only module (with the CLI) that wires stages together. It must never harm the job: every
stage's failure is caught here, logged once, and watching goes on; no signal is sent unless
``on_hang: terminate`` is configured.

NOTE [ Escalation ladder ]
1. Every ``interval_s``: cheap psutil and ``/proc`` reads (no ptrace), including each loader
   thread's kernel wait (``/proc/PID/task/TID/syscall``).
2. When a trigger comes due (NOTE [ Hang criterion ] in detect/progress.py): every thread's wait is read
   twice, 0.25 s apart; Python-only py-spy dumps of main and the workers; the holders of pipes
   that threads wait on. :func:`detect.assess` then proves the hang (NOTE [ Deadlock proof ]),
   reports it as suspected, or dismisses it (the stall clock restarts).
3. A hang: py-spy dumps main and every worker in parallel (native frames when configured), and
   the report is written.
4. With ``on_hang: terminate`` the job's own processes (its tree, and its process group under
   ``dlwatch run``) get SIGTERM, then SIGKILL after ``terminate_grace_s``, only when the hang is
   proven (NOTE [ Deadlock proof ] in detect/proof.py); outside the loader only when
   ``terminate_outside_loader`` is true or main itself is proven stuck. A suspected hang is
   reported and left alone, however long it lasts (``busy_stall_timeout_s`` only examines and
   reports). The opt-in ``terminate_unproven_after_s`` also ends an unproven loader stall
   without a batch for that long, but never while a process of the job moves or a worker
   computes (``detect.still_moving``). The same
   unchanged hang is not reported twice, except once more when a proof or the busy-stall
   ceiling comes due after a suspected report; a suspected hang that resolves by itself is said
   to, and one at the same place is reported again only once it lasts twice as long as the
   longest that resolved (``detect.Episode``: one episode, one report).

Under the batch and main-wait measures (NOTE [ Hang criterion ]) step 3 begins with a second
Python-only dump of the workers 2 s after the first, to name a line a worker polls at; it also
reads ``/proc/locks`` and follows each blocked worker's wait chain (``collect.chain``).
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Set, Tuple

from .. import detect
from ..collect import discovery, procfs, pyspy
from ..collect.inside import InsideReader
from ..collect.sampler import THREADS_CPU_SHARE, Sampler, cpu_share
from ..collect.warning_stacks import WarningStacks
from ..config import Config
from ..diagnose import diagnose, throughput
from ..types import (
    MODE_LIVE,
    SEVERITY_WARNING,
    Facts,
    InsideView,
    Launch,
    Measure,
    ProcessRole,
    ReportWritten,
    Sample,
    Stall,
    WatcherStatus,
)
from . import act
from .alert import Alerts
from .exit_look import JobTraces, exit_facts, exit_findings, survivors
from .hang_episodes import HangEpisodes, JobHandles
from .publish import Publisher

# Seconds between two warnings of the same kind (a new process set each epoch would repeat them).
_WARNING_COOLDOWN_S = 600.0
# Seconds a crash report waits for a warning's stacks still being taken (WarningStacks).
WARNING_STACKS_WAIT_S = 3.0


# A file to which every tick appends its timing (``dlwatch probe overhead`` sets it); unset: none.
_TICK_LOG = os.environ.get("DLWATCH_TICK_LOG", "")


# [the tick log, opened once and shared by the loop and the examinations' threads; when it was last flushed]
_TICK_FILE: list = []
_TICK_FLUSH_S = 1.0
_TICK_LOCK = threading.Lock()


def _log_tick(path: str, wall: float, elapsed_s: float, cpu_s: float, processes: int, reports: int, lean: bool) -> None:
    """Append ``WALL ELAPSED_MS CPU_MS PROCESSES REPORTS KIND`` to ``path``: when the tick began
    (``time.time()``, seconds), its wall-clock and this thread's CPU time in milliseconds, the
    processes in its sample, the reports it wrote and its sample's kind (``lean`` or ``full``,
    NOTE [ Lean ticks ]). The file is opened at the first line and kept open, and written at
    most every ``_TICK_FLUSH_S`` (and at exit): the log measures the ticks, and should cost them
    neither an open nor a write each. A file that cannot be written is ignored."""
    kind = "lean" if lean else "full"
    line = f"{wall:.3f} {elapsed_s * 1e3:.3f} {cpu_s * 1e3:.3f} {processes} {reports} {kind}\n"
    with _TICK_LOCK:
        try:
            if not _TICK_FILE:
                _TICK_FILE.append(open(path, "a", encoding="ascii"))
                _TICK_FILE.append(float("-inf"))
                atexit.register(_flush_ticks)
            _TICK_FILE[0].write(line)
            if wall - _TICK_FILE[1] >= _TICK_FLUSH_S:
                _TICK_FILE[0].flush()
                _TICK_FILE[1] = wall
        except OSError:
            pass


def _flush_ticks() -> None:
    """Write out the tick log's last lines (at exit)."""
    with _TICK_LOCK:
        try:
            _TICK_FILE[0].flush()
        except (OSError, IndexError, ValueError):
            pass


def _stopped_text(pids: Tuple[int, ...]) -> str:
    """Why the job's stopped processes are not hung: waiting for terminal input (stopped in the
    background of their terminal, :meth:`~watchdog.collect.procfs.ProcStat.stopped_for_terminal`)
    or paused (SIGSTOP, a debugger)."""
    tty = [pid for pid in pids if (st := procfs.proc_stat(pid)) is not None and st.stopped_for_terminal()]
    paused = [pid for pid in pids if pid not in tty]
    out = []
    if tty:
        out.append(
            f"pid(s) {', '.join(map(str, tty))} stopped waiting for terminal input (SIGTTIN/SIGTTOU: they read or "
            "wrote their terminal from the background): bring the job to the foreground (fg) to answer, or give it "
            "no terminal when it runs unattended (stdin=subprocess.DEVNULL, `unzip -o`, `< /dev/null`)"
        )
    if paused:
        out.append(f"pid(s) {', '.join(map(str, paused))} stopped (state T: SIGSTOP or a debugger): paused")
    return "; ".join(out) + "; not hung, the stall clock waits"


def _batch_counts(loaders) -> Tuple[Tuple[int, int], ...]:
    """``((iterator, batches), ...)`` of ``loaders`` (:class:`LoaderView`)."""
    return tuple((v.iterator, v.batches) for v in loaders)


def criterion(
    trigger: detect.Trigger, rule: Optional[detect.Rhythm], measure: Measure, cfg: Config, has_loaders: bool
) -> str:
    """Which stall rule fired, and why, for the report (NOTE [ Batch rhythm ] in detect/progress.py):
    ``trigger`` as :meth:`detect.Episode.due` gave it, ``rule`` the loader's rhythm when one
    was measured, ``measure`` the tracker's measure of progress, ``has_loaders`` whether the
    inside view saw an iterator in the latest sample."""
    if trigger == detect.TRIGGER_RHYTHM and rule is not None:
        return rule.criterion
    if trigger == detect.TRIGGER_BUSY:
        return f"no batch for busy_stall_timeout_s ({cfg.busy_stall_timeout_s:g} s)"
    if trigger == detect.TRIGGER_PROOF:
        return (
            "every thread of a process in an untimed private-futex wait, unchanged, "
            f"for stall_timeout_s ({cfg.stall_timeout_s:g} s)"
        )
    if measure == Measure.BATCHES:
        return (
            f"no batch delivered and no sample reached for by a worker for stall_timeout_s "
            f"({cfg.stall_timeout_s:g} s) while main waits in __next__ (the inside view's measure)"
        )
    if measure == Measure.MAIN_WAIT:
        return (
            f"main's iterating thread waited like the DataLoader's batch poll, reading nothing, for "
            f"stall_timeout_s ({cfg.stall_timeout_s:g} s) (the main-wait measure: no inside view)"
        )
    why = "no inside view" if not has_loaders else "main not waiting on a worker, or too few batches for a rhythm"
    return f"no progress of the loader path for stall_timeout_s ({cfg.stall_timeout_s:g} s) (the fixed timeout: {why})"


def say(text: str) -> None:
    """Write ``text`` to stderr; a stderr that cannot be written (a full disk, a closed pipe)
    is ignored: reports and the job matter more than our messages."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def log(message: str) -> None:
    """One line on stderr, prefixed ``dlwatch:`` (see :func:`say`)."""
    say(f"dlwatch: {message}\n")


@dataclass
class Outcome:
    """What watching a job produced: report folders written, whether the job was ended for a
    hang (``terminated``), and why watching stopped before the job ended (``stopped``: the
    reason a run's bound gave, :class:`~watchdog.commands.verify.RunBound`; ``None``: it did not);
    ``resolved`` the hang reports among ``reports`` that resolved by themselves."""

    reports: List[str] = field(default_factory=list)
    terminated: bool = False
    stopped: Optional[str] = None
    resolved: List[str] = field(default_factory=list)

    @property
    def failures(self) -> List[str]:
        """The reports that say something went wrong: every report but the hang reports that
        resolved by themselves (``outcome.json``: ``resolved``; a slow wait, not a hang).
        ``attach`` exits ``Exit.HANG_REPORTED`` when there is one, else ``Exit.OK``."""
        done = set(self.resolved)
        return [r for r in self.reports if r not in done]


class Watcher:
    """Watches one job until it ends (or ``stop`` is set): the loop and its wiring; a due stall
    goes to :class:`~watchdog.watch.hang_episodes.HangEpisodes`, the job's end to :meth:`after_exit`.

    Args:
        config: validated settings.
        root_pid: the job's root process.
        own_group: the job's process group when dlwatch created it for the job alone
            (``dlwatch run``), signalled on terminate besides the job's tree; ``None`` for
            ``attach``, whose job may share its group with the shell that started it.
        job_ended: returns True once the job is gone.
        stderr_tail: returns the last bytes of the job's stderr (``dlwatch run`` only).
        job_cmdline: the command that started the job, for reports written before main was seen.
        inside: reader of the job's own DataLoader records (``None``: no inside view).
        rank: the rank variables (``RANK``, ``WORLD_SIZE``, …) of the training process this
            watcher watches as its main, under a multi-rank launcher (:class:`~watchdog.watch.node_loop.JobWatcher`).
        examine: ``False`` samples only, for the job-level report after it ends (the launcher
            of a multi-rank job: its ranks have watchers of their own).
        alerts: runs ``on_*_exec`` after each report (shared by the watchers of one job).
        peer_loaders: the other ranks' main iterators now (:meth:`.node_loop.JobWatcher.loaders_of_ranks`).
        peers: the other ranks whose DataLoader is stalled now, one line each
            (:meth:`.node_loop.JobWatcher.loader_stalls`): a rank stalled outside its loader while another's
            loader is stuck is waiting for that rank, and says so instead of reporting a hang.
        launch: how the job was started, written into each report for ``dlwatch verify``.
        examine_apart: examine a due stall in a thread of its own, started at the end of the
            tick that found it (:attr:`examining` while it runs), instead of within the tick: a
            rank's watcher, stepped with the other ranks' by one loop
            (:class:`~watchdog.watch.node_loop.JobWatcher`), which must not wait for its py-spy dumps.
    """

    def __init__(
        self,
        config: Config,
        root_pid: int,
        own_group: Optional[int],
        job_ended: Callable[[], bool],
        stderr_tail: Callable[[], str] = lambda: "",
        job_cmdline: Optional[List[str]] = None,
        inside: Optional[InsideReader] = None,
        rank: Optional[Dict[str, str]] = None,
        examine: bool = True,
        peers: Callable[[], List[str]] = list,
        peer_loaders: Callable[[], tuple] = tuple,
        alerts: Optional[Alerts] = None,
        launch: Optional[Launch] = None,
        examine_apart: bool = False,
    ) -> None:
        self.config = config
        self.root_pid = root_pid
        self.job_ended = job_ended
        self.stderr_tail = stderr_tail
        self.inside = inside or InsideReader(None, "no inside view (not enabled for this job)")
        self.rank = dict(rank) if rank else None
        self.examine = examine
        self.alerts = alerts or Alerts(
            {k: getattr(config.alerts, k) for k in ("on_hang_exec", "on_crash_exec", "on_warning_exec")},
            config.alerts.exec_timeout_s,
            log,
        )
        self._status = WatcherStatus(
            rank=str((self.rank or {}).get("RANK", "")),
            root_pid=root_pid,
            rank_vars=tuple(sorted((str(k), str(v)) for k, v in (self.rank or {}).items())),
        )
        self.on_report: Callable[[ReportWritten], None] = lambda written: None
        # Set from outside (watchdog.watch.node_loop): the loaders and workers' sample counts of borrowed
        # pids, from the samples of the watchers that read them (see _full_view).
        self.borrowed_view: Callable[[Set[int]], Tuple[tuple, tuple]] = lambda pids: ((), ())
        self._examine_apart = examine_apart
        self._due_examination: Optional[Tuple[Sample, Stall]] = None
        self._examination: Optional[threading.Thread] = None
        self.outcome = Outcome()
        self.sampler = Sampler(root_pid, config.memory_read_base_interval_s)
        self.tracker = detect.ProgressTracker(config.cpu_progress_s)
        self.births = detect.WorkerBirths()
        self.timeline: collections.deque = collections.deque(maxlen=config.timeline_samples)
        self.traces = JobTraces(root_pid)
        self.host_cpus = os.cpu_count() or 1
        self.pyspy = pyspy.find_pyspy(config.py_spy.path)  # its path; None: not found
        self.warning_stacks = WarningStacks(self.pyspy if config.py_spy.at_warning else None)
        self.publisher = Publisher(
            config,
            root_pid,
            list(job_cmdline or []),
            self.rank,
            self.alerts,
            self.pyspy,
            say,
            log,
            self._reported,
            launch,
        )
        self.hangs = HangEpisodes(
            config,
            JobHandles(
                sampler=self.sampler,
                tracker=self.tracker,
                births=self.births,
                traces=self.traces,
                timeline=lambda: tuple(self.timeline),
                pyspy=self.pyspy,
                own_group=own_group,
                job_ended=job_ended,
                stderr_tail=stderr_tail,
                rank=self.rank,
                peers=peers,
                peer_loaders=peer_loaders,
                inside_view=self._inside_view,
                publish=self._publish,
                say_once=self._say_once,
                log=log,
                host_cpus=self.host_cpus,
            ),
        )
        self._said: Dict[str, float] = {}
        self._stall_s: Optional[float] = None  # seconds since the loader path moved, at the last tick
        self._saw_loader = False  # a DataLoader iterator (inside view) or worker was ever seen
        self._recording = False  # main's recorder wrote its record (the inside view runs in main)
        self._errors_logged: Set[str] = set()
        self._warned: Dict[str, Tuple[float, frozenset]] = {}
        self._worker_clock = throughput.WorkerClock()
        self._last_live_look = time.monotonic()
        # NOTE [ Lean ticks ]: while the inside view shows the loader delivering (a batch or a
        # sample counted at this tick), the next tick is lean (Sampler.sample(lean=True): main's
        # children, /dev/shm and the available memory; the last sample's processes kept while
        # main has the same children): a job that delivers is not hung, and what else may move
        # (RSS, descriptors, a worker's state) waits for the next full sample. One comes at least
        # every _full_every_s, when a look for warnings is due, when main gained or lost a child,
        # and at the first tick after one that delivered nothing, so a stall is measured on
        # full ones.
        self._lean_next = False
        self._full_at = float("-inf")
        self._full_every_s = min(config.warning_interval_s, config.stall_timeout_s / 2)
        # NOTE [ Thread reads ] in watchdog/collect/sampler.py: the next full sample reads no
        # thread while a batch was counted at this tick, the tree left its CPUs idle (below
        # THREADS_CPU_SHARE of them used between the last two full samples) and threads were
        # read less than stall_timeout_s / 4 ago.
        self._threads_next = True
        self._last_full: Optional[Sample] = None
        self._cpu_busy = True
        self._threads_at = float("-inf")  # when a full sample last read threads

    def _reported(self, written: ReportWritten) -> None:
        self._refresh_status()  # what the report was (a hang in the loader) before anyone is told
        self.on_report(written)

    def _refresh_status(self) -> None:
        """Store what this watcher saw last (:meth:`status`): at the end of each tick, of each
        examination and before a report is announced."""
        latest = self.timeline[-1] if self.timeline else None
        st, hangs = self._status, self.hangs
        now = (latest, self._stall_s, hangs.last_kind, hangs.in_loader)
        if now != (st.sample, st.stall_s, st.last_hang_kind, st.hang_in_loader):
            self._status = dataclasses.replace(
                st,
                sample=latest,
                stall_s=self._stall_s,
                last_hang_kind=hangs.last_kind,
                hang_in_loader=hangs.in_loader,
                delivered=self.tracker.delivered,
            )

    def status(self) -> WatcherStatus:
        """What this watcher last saw (:class:`WatcherStatus`); safe to call from any thread."""
        return self._status

    def set_roles(self, roles: Dict[int, ProcessRole], examine: bool) -> None:
        """Name processes by pid in the samples from now on (``roles``: the launcher and the
        ranks of a multi-rank job, :class:`~watchdog.watch.node_loop.JobWatcher`), and examine stalls or
        only sample (``examine``)."""
        self.sampler.role_overrides = dict(roles)
        self.examine = examine

    def end_job(self) -> str:
        """End the job's processes now (SIGTERM, SIGKILL after ``terminate_grace_s``; the tree
        of the latest sample and the own process group, :func:`act.terminate_tree`): the end of
        a bounded run (``dlwatch run --stop-after-batches``). Returns what was done, one line."""
        latest = self.timeline[-1].processes if self.timeline else ()
        members = self.sampler.root_identity() + [p.ident for p in latest]
        return act.terminate_tree(members, self.config.terminate_grace_s, self.hangs.job.own_group, self.job_ended)

    def waits_for_peer(self, peer: str, stall_s: float, where: str = "") -> None:
        """Say that this rank stalled ``stall_s`` seconds waiting for another rank, ``peer``
        (:meth:`HangEpisodes.waits_for_peer`): the job's watcher calls it when that rank's
        hang was reported first."""
        self.hangs.waits_for_peer(peer, stall_s, where)

    def internal_error(self, where: str) -> None:
        """Log the exception being handled, once per ``where``, as dlwatch's own failure
        (watching goes on): call it from an ``except`` block."""
        if where not in self._errors_logged:
            self._errors_logged.add(where)
            log(
                f"internal error while {where} (watching goes on): "
                f"{traceback.format_exc(limit=3).strip().splitlines()[-1]}"
            )

    @property
    def examining(self) -> bool:
        """Whether an examination started apart (``examine_apart``) still runs: the watcher
        must not be stepped meanwhile."""
        return self._examination is not None and self._examination.is_alive()

    def join_examination(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for an examination started apart to end; returns
        whether none runs now."""
        if self._examination is not None:
            self._examination.join(max(0.0, timeout_s))
        return not self.examining

    def step(self) -> None:
        """One tick: sample, and examine, report or warn when due. Never raises. With
        ``DLWATCH_TICK_LOG`` set, one line per tick goes to that file (:func:`_log_tick`).
        With ``examine_apart``, an examination found due starts in its thread once the tick is
        over; do not step again while :attr:`examining`."""
        if _TICK_LOG:
            wall, t0, c0, n0 = time.time(), time.perf_counter(), time.thread_time(), len(self.outcome.reports)
        try:
            self._tick()
        except Exception:  # never let the watchdog's failure reach the job
            self.internal_error("sampling")
        self.outcome.terminated = self.hangs.terminated
        self.outcome.resolved = self.hangs.resolved_reports
        self._refresh_status()
        if _TICK_LOG:
            n = len(self.timeline[-1].processes) if self.timeline else 0
            _log_tick(
                _TICK_LOG,
                wall,
                time.perf_counter() - t0,
                time.thread_time() - c0,
                n,
                len(self.outcome.reports) - n0,
                self.sampler.lean,
            )
        if self._due_examination is not None:
            sample, stall = self._due_examination
            self._due_examination = None
            name = f"examine-rank-{(self.rank or {}).get('RANK', '')}"
            thread = threading.Thread(target=self._examine, args=(sample, stall), name=name, daemon=True)
            try:
                thread.start()
                self._examination = thread
            except RuntimeError:  # no thread to be had (RLIMIT_NPROC): examined here, late rather than never
                self._examine(sample, stall)

    def _examine(self, sample: Sample, stall: Stall) -> None:
        """Examine the due ``stall`` at ``sample`` (:meth:`HangEpisodes.examine`); never raises."""
        try:
            self.hangs.examine(sample, stall)
        except Exception:
            self.internal_error("examining a stall")
        self.outcome.terminated = self.hangs.terminated
        self.outcome.resolved = self.hangs.resolved_reports
        self._refresh_status()

    def _inside_view(self, pids=None, forks: bool = True, counters: bool = False) -> InsideView:
        try:
            return self.inside.read(pids, forks, counters)
        except Exception:
            self.internal_error("reading the inside view")
            return InsideView(note="the inside view could not be read")

    def _tick(self) -> None:
        sample = self.sampler.sample(lean=self._lean_next, threads=self._threads_next)
        self._lean_next = False
        self._threads_next = True
        if not self.sampler.lean:
            self._full_at = sample.t_mono
            self._cpu_busy = self._cpu_busy_since(self._last_full, sample)
            self._last_full = sample
            if sample.threads_read:
                self._threads_at = sample.t_mono
        main = sample.main
        if main is None:
            return
        if self.sampler.lean:
            view = self._counters_view(sample, main.pid)
        else:
            view = self._full_view(sample)
        if view.loaders or view.fetches:
            sample = dataclasses.replace(sample, loaders=view.loaders, fetches=view.fetches)
        self.timeline.append(sample)
        self.traces.note(sample, self.sampler.memory_cgroup)
        self.births.update(sample)
        self._saw_loader = self._saw_loader or bool(sample.loaders) or bool(sample.workers)
        self._recording = self._recording or main.pid in view.recording
        if not self.examine:
            return
        self.tracker.update(sample)
        self._judge(sample, view)
        # after the judging: a look for warnings made at this tick is not due at the next
        next_t = sample.t_mono + self.config.interval_s  # about when the next tick samples
        delivered = bool(sample.loaders) and self.tracker.last_batch_mono == sample.t_mono
        self._lean_next = (
            delivered
            and next_t - self._full_at < self._full_every_s
            and next_t - self._last_live_look < self.config.warning_interval_s  # a look is due on a full one
        )
        # threads at least every stall_timeout_s / 4 even so: a deadlock proof (NOTE [ Deadlock
        # proof ]) of a worker whose batches main does not wait for yet needs its snapshots
        self._threads_next = (
            not delivered or self._cpu_busy or next_t - self._threads_at >= self.config.stall_timeout_s / 4
        )

    def _full_view(self, sample: Sample) -> InsideView:
        """The inside view of a full sample's processes; those the sampler borrowed from the
        ranks' samplers (:attr:`Sampler.borrowed_pids`) have their loaders and workers' counts
        from the same ranks' latest samples (:attr:`borrowed_view`), not read again."""
        borrowed = self.sampler.borrowed_pids
        view = self._inside_view([p.pid for p in sample.processes if p.pid not in borrowed], forks=False)
        if borrowed:
            loaders, fetches = self.borrowed_view(borrowed)
            view = dataclasses.replace(view, loaders=view.loaders + loaders, fetches=view.fetches + fetches)
        return view

    def _counters_view(self, sample: Sample, main_pid: int) -> InsideView:
        """The inside view's counters at a lean tick (NOTE [ Lean ticks ]): main's loaders
        first; when their batch counts moved since the last sample (a batch reached main: no
        stall to measure), the workers' sample counts are the last sample's, not read (a
        worker's progress is then dated at the next tick that reads them, at most
        ``_full_every_s`` later: later than it was, never earlier); else every process's."""
        last = self.timeline[-1] if self.timeline else None
        if last is not None and last.loaders and all(v.pid == main_pid for v in last.loaders):
            own = self._inside_view([main_pid], forks=False, counters=True)
            if own.loaders and _batch_counts(own.loaders) != _batch_counts(last.loaders):
                return dataclasses.replace(own, fetches=last.fetches)
        return self._inside_view([p.pid for p in sample.processes], forks=False, counters=True)

    def _cpu_busy_since(self, before: Optional[Sample], after: Sample) -> bool:
        """Whether the tree used ``THREADS_CPU_SHARE`` or more of its usable CPUs (main's
        affinity and cgroup quota, else the host's) between the full samples ``before`` and
        ``after``; ``True`` when that is not known (NOTE [ Thread reads ])."""
        main = after.main
        if before is None or main is None:
            return True
        usable = min([float(x) for x in (main.cpu_affinity, main.cpu_quota) if x] or [float(self.host_cpus)])
        share = cpu_share(before, after, usable)
        return share is None or share >= THREADS_CPU_SHARE

    def _judge(self, sample: Sample, view: InsideView) -> None:
        """Measure the stall at ``sample`` (the tracker has it) and examine it when due, or look
        for warnings when one is due and ``sample`` is a full one (``view``: the inside view
        read with it)."""
        if self.tracker.stopped:
            self._say_once("stopped", _stopped_text(self.tracker.stopped))
            return
        self._said.pop("stopped", None)
        if self.sampler.lean and self.tracker.last_batch_mono == sample.t_mono:
            # NOTE [ Lean ticks ]: a batch or a sample counted at this tick; no stall to
            # measure (a lean sample's processes are the last full one's: nothing else moved)
            self._stall_s = 0.0
            self.hangs.moved(sample)
            return
        stall = self.tracker.stall(sample)
        self._stall_s = None if stall is None else stall.stall_s
        if stall is None:
            return
        self.hangs.moved(sample)
        cfg = self.config
        rule = detect.rhythm(sample, cfg.stall_timeout_s, cfg.stall_min_s, cfg.stall_p99_factor)
        # a stall is judged on threads read (the next tick reads them: NOTE [ Thread reads ])
        trigger = self.hangs.due(stall, sample.t_mono, rule) if sample.threads_read else None
        if (
            trigger is not None
            and self.inside.folder is not None
            and not self._saw_loader
            and self._no_loader_yet(sample)
        ):
            # The inside view would have seen a DataLoader iterator: there is none yet, and no
            # worker. dlwatch judges DataLoader loops; an idle script is no hung loader.
            self.hangs.not_judged(sample.t_mono)
            self._say_once(
                "no-loader",
                f"pid {stall.main_pid} has not moved for {stall.stall_s:.0f} s and has created no DataLoader "
                "iterator yet (the inside view saw none): not judged until it does",
                every_s=3600.0,
            )
        elif trigger is not None and not self.job_ended():
            why = criterion(trigger, rule, self.tracker.measure, cfg, bool(sample.loaders))
            due = dataclasses.replace(stall, trigger=trigger, criterion=why)
            if self._examine_apart:
                self._due_examination = (sample, due)  # started once this tick is over (step)
            else:
                self._examine(sample, due)
        elif not self.sampler.lean and sample.t_mono - self._last_live_look >= self.config.warning_interval_s:
            self._last_live_look = sample.t_mono
            try:
                self._look_for_warnings(sample, view)
            except Exception:
                self.internal_error("looking for warnings")

    def _no_loader_yet(self, sample: Sample) -> bool:
        """Whether the job can have no DataLoader yet: main's recorder runs and saw no iterator,
        or main has not imported torch (no ``libtorch`` mapped). A recorder that never started in
        a main that imported torch (an interpreter run with ``-I`` or ``-S``, a job that replaced
        its environment) proves nothing: the stall is judged, and that is said once."""
        main = sample.main
        if self._recording or main is None or discovery.has_loaded_torch(main.pid) is False:
            return True
        self._say_once(
            "deaf-recorder",
            f"pid {main.pid} imported torch but its inside view recorded nothing (the hook did not load in it): "
            "judged from outside",
            every_s=3600.0,
        )
        return False

    def _say_once(self, key: str, message: str, every_s: float = 600.0) -> None:
        now = time.monotonic()
        if now - self._said.get(key, float("-inf")) >= every_s:
            self._said[key] = now
            log(message)

    def _look_for_warnings(self, sample: Sample, view: InsideView) -> None:
        """Diagnose the live job at ``sample`` (a full one) with ``view``, the inside view this
        tick read (whole: not a lean tick's counters), and publish each new warning."""
        facts = Facts(
            mode=MODE_LIVE, sample=sample, timeline=tuple(self.timeline), host_cpus=self.host_cpus, inside=view
        )
        self._worker_clock.update(facts.timeline)  # NOTE [ Input-bound verdict ]: from samples taken
        self._status = dataclasses.replace(
            self._status, input_verdict=throughput.judge(facts), worker_seconds=self._worker_clock.totals()
        )
        for d in diagnose(facts):
            if d.severity != SEVERITY_WARNING:
                continue
            last = self._warned.get(d.kind)
            pids = frozenset(d.pids)
            if last is not None and (last[1] == pids or sample.t_mono - last[0] < _WARNING_COOLDOWN_S):
                continue  # at most once per kind and process set, and not more often than the cooldown
            self._warned[d.kind] = (sample.t_mono, pids)
            self.warning_stacks.take(d.pids, d.kind)
            self._publish(facts, (d,), "report", f"warning-{d.kind}", summary_only=True)

    def after_exit(self, exit_code: Optional[int], terminated: bool = False, signalled: Optional[int] = None) -> None:
        """Look at a job that ended: a non-zero ``exit_code`` is diagnosed from the stderr tail
        and the timeline (a crash report when a crash rule fires); after any exit the files the
        job left in ``/dev/shm`` are reported (``shm_leaked``), and what the inside view saw of
        its data (``iterable_replicated``, ``rng_duplicated``). Nothing is written when nothing
        is found. No crash is diagnosed when the watchdog ended the job (``terminated``) or
        forwarded it the signal ``signalled`` (SIGINT, SIGTERM, SIGHUP sent to ``dlwatch run``):
        its workers dying then is what the signal did, not a fault to explain. Then records the
        open hang reports' outcome and says which of its processes outlived it
        (:func:`exit_look.survivors`)."""
        try:
            leftovers = self.traces.shm_leftovers(log)
            crashed = bool(exit_code) and not terminated and signalled is None
            if bool(exit_code) and signalled is not None and not terminated:
                log(
                    f"the job exited with code {exit_code} after the {signal.Signals(signalled).name} "
                    "dlwatch forwarded to it: not diagnosed as a crash"
                )
            if not terminated or leftovers:
                timeline, view = tuple(self.timeline), self._inside_view()
                self.warning_stacks.wait(WARNING_STACKS_WAIT_S)
                facts = exit_facts(
                    self.traces, timeline, crashed, exit_code, leftovers, self.stderr_tail, view, self.host_cpus
                )
                facts = dataclasses.replace(facts, earlier_stacks=self.warning_stacks.taken())
                found = exit_findings(facts, self._warned)
                if found is not None:
                    facts, diagnoses, kind = found
                    self._publish(facts, diagnoses, "none (the job had already exited)", kind)
        except Exception:
            self.internal_error("diagnosing the job's exit")
        self.hangs.job_ended(exit_code, signalled)
        self.outcome.resolved = self.hangs.resolved_reports
        line = survivors(self.timeline[-1].processes if self.timeline else ())
        if line is not None:
            log(line)

    def _publish(
        self, facts: Facts, diagnoses, action: str, suffix: str, summary_only: bool = False, note: str = ""
    ) -> Optional[str]:
        """Publish one report (:meth:`Publisher.publish`) and count it in the outcome; returns
        its folder, or ``None`` when it could not be written."""
        path = self.publisher.publish(facts, diagnoses, action, suffix, summary_only, note)
        if path is not None:
            self.outcome.reports.append(path)
        return path

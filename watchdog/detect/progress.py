"""Progress: is the job still moving? The marks a stall is measured from, the measure
(batches, main's wait, or activity), the batch rhythm and the triggers of an examination; pure
functions of samples.

NOTE [ Hang criterion ]
The *loader path* is main's iterating thread (``tid == pid``), every thread of every DataLoader
worker, workers that are still starting (a spawned worker re-imports torch for seconds) and
every descendant of a worker (a decoder started by ``subprocess.run`` in ``__getitem__``): a
worker progresses when it or any of its descendants does. Starting workers and descendants
count by their work only (I/O, or CPU at ``BUSY_SHARE`` of a core or more), never by wake-ups:
a spawned process that is not a worker at all (a distributed peer polling its sockets) must not
pass for the loader's progress. The same measure says whether anything in the job's tree worked. Roles are decided in
``collect.discovery``. A loader-path thread made progress since its last mark when:

* its I/O byte count moved (``rchar + wchar``: a batch through a pipe or socket, a file read);
* its CPU time moved by at least ``cpu_progress_s``;
* it woke up (voluntary context switches rose) from a wait that is not one of PyTorch's own
  idle polls. PyTorch's waiting loops (main's ``_try_get_data``, an idle worker's
  ``index_queue.get``, the pin-memory thread) wake every ``MP_STATUS_CHECK_INTERVAL`` (5 s) in a
  poll of about 5 s or a timed futex wait; any other timed wait (a sleep, a socket's 30 s
  timeout) is the user's code and a wake from it is movement. Where the kernel wait alone is
  ambiguous (a timed futex, a 5 s poll), the frames of the last examination decide
  (:meth:`ProgressTracker.trust_timed_waits`). An untimed wait only ends when something ends
  it, so a wake from one is movement too.

With the inside view (``dlwatch run``'s hook, or ``attach --hook-dir``) and main inside
``__next__`` waiting for a batch a worker owns, the *batch measure* applies instead
(:func:`batch_measure`, ``Stall.measure``): the loader moves only when main receives a batch or
a worker reaches for a new sample (``Sample.fetches``, counted by the recorder in the
fetcher). Threads' CPU, I/O and wake-ups are then no progress: they explain why no batch comes
(a worker polling a lock file or a shared counter, a SQLite busy handler retrying an ``INSERT``)
and decide at the examination whether a sample is being worked on (:func:`working`: a slow
sample, dismissed) or the loader only waits (a suspected hang). Starting workers and workers'
children still count by their work; at the examination, a starting worker (a spawn or
forkserver child still importing) that used CPU or waited runnable for one is the loader moving
(:func:`~watchdog.detect.assessment.starting_workers`: "workers starting", dismissed), and under
every measure a loader process runnable for half the window (``/proc/PID/schedstat``) works.
A Dataset with ``__getitems__`` (a batched fetch) is reached for once per batch, not per
sample: its progress is a batch begun.

Without the inside view, the *main-wait measure* (``Measure.MAIN_WAIT``,
:meth:`ProgressTracker._main_waits`) is the batch measure seen from outside: main's iterating
thread, at every sample since some moment, in a wait that may be PyTorch's 5 s batch poll, its
process moving no byte (a batch is a pipe read in main, then the next index a pipe write) and
its thread using no CPU to speak of: no batch came since that moment, and the loader's threads'
activity is no progress, as under the batch measure. At the examination main's stack must show
it inside the iterator's wait (:func:`confirm`); otherwise the activity measure's checks
decide. A worker that sleeps at one line for each sample looks the same as one that polls there
forever: only the inside view's sample counts tell them apart.

Workers appearing or exiting count as progress. A stopped job (state T: SIGSTOP, a debugger)
is paused, not hung: while any loader-path process is stopped the stall clock stands still.
After py-spy attaches (which makes threads switch), marks are re-based without counting
progress.

Four triggers lead to an examination (``Stall.trigger``):

* ``stall_timeout`` — the loader path made no progress for ``stall_timeout_s``;
* ``proof`` — a worker or main has had every thread in an untimed wait on a private futex for
  ``stall_timeout_s``, whatever else moves (a busy logger thread in main, a summary-writer
  process): see
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Deque, Dict, Iterable, List, Optional, Set, Tuple

from .. import frames, states
from ..types import (
    BUSY_SHARE,
    LOADER_ROLES,
    ROLE_MAIN,
    ROLE_STARTING,
    ROLE_WORKER,
    ROLE_WORKER_CHILD,
    Frame,
    LoaderView,
    LoaderWork,
    Measure,
    ProcessSample,
    ProcId,
    Sample,
    Stall,
    ThreadSample,
    Trigger,
    WaitKind,
    WaitOp,
)

# Voluntary switches one periodic wake-up may cost (measured: ~3 under GIL contention); used
# only where the kernel wait cannot be read (no ptrace-read permission).
WAKE_SWITCH_ALLOWANCE = 4


# Seconds of a stall's most recent part over which the loader's work is measured (at most half
# the stall): a burst when main began to wait (workers fetching their first samples) is not
# work on a sample still under way.
WORK_WINDOW_S = 10.0

# With the batch measure, a loader-path process that did at least this much I/O a second during
# a stall is working on a sample (a slow read or download, a rate-limited API), not polling: a
# poller's retries read a lock file, a database page or a counter (about a kilobyte a second
# measured here for SQLite's busy handler and a 7 ms counter poll).
WORK_IO_BYTES_PER_S = 64 << 10

# A loader-path process on a CPU or runnable waiting for one (run-queue wait, /proc/PID/schedstat)
# for at least this share of a stall's work window computes: 20 busy processes on 2 cores give
# a computing worker a tenth of a core, but it is runnable all the time; a poller that sleeps
# between tries is runnable a few percent of the time even so.
RUNNABLE_SHARE = 0.5

# Under the main-wait measure a loader process waking at least this often a second in a timed
# wait of the job's code polls; one waking less often waits for a slow sample (seconds per
# object), which only the inside view's sample counts could tell from a slow poll.
POLL_WAKES_PER_S = 2.0

TRIGGER_STALL = Trigger.STALL
TRIGGER_PROOF = Trigger.PROOF
TRIGGER_BUSY = Trigger.BUSY
TRIGGER_RHYTHM = Trigger.RHYTHM

# Intervals between batches an iterator must have before its p99 sets the stall (NOTE [ Batch rhythm ]).
MIN_INTERVALS = 20


@dataclass
class _Mark:
    t_mono: float
    cpu_s: float
    vol: int
    io: Optional[int]


@dataclass
class _MainWait:
    """Main's iterating thread in a wait like PyTorch's batch poll since ``since`` (monotonic
    seconds), with its thread's CPU and I/O bytes (its process's ``rchar + wchar`` and the
    thread's own; ``process_io`` the process's alone) then (the main-wait measure)."""

    key: Tuple[ProcId, int]
    since: float
    cpu_s: float
    io: int
    process_io: int  # the process's alone: a sample without threads compares this one


def _may_be_inert(t: ThreadSample) -> bool:
    """A thread waiting in accept(2), as multiprocessing's resource-sharer thread does; frames
    decide at the examination whether it really is that thread."""
    return t.wait is not None and t.wait.kind is WaitKind.FD and t.wait.op is WaitOp.ACCEPT


def _io_of(p: ProcessSample) -> Optional[int]:
    """A process's I/O bytes (``rchar + wchar``), or ``None`` when unreadable."""
    return None if p.read_chars is None or p.write_chars is None else p.read_chars + p.write_chars


def batch_measure(sample: Sample) -> bool:
    """Whether the batch measure applies (NOTE [ Hang criterion ]): the inside view shows main
    inside ``__next__`` waiting for a batch a worker owns, and at least one worker of the sample
    counts its samples (``Sample.fetches``)."""
    main = sample.main
    if main is None or not sample.fetches:
        return False
    waiting = any(v.pid == main.pid and v.waiting_since is not None and v.waiting_worker >= 0 for v in sample.loaders)
    if not waiting:
        return False
    workers = {p.pid for p in sample.processes if p.role == ROLE_WORKER}
    return any(f.pid in workers for f in sample.fetches)


def _loader_threads(p: ProcessSample) -> List[ThreadSample]:
    if p.role == ROLE_MAIN:
        return [t for t in p.threads if t.tid == p.pid]
    return list(p.threads)


class ProgressTracker:
    """Tracks progress marks across samples (see NOTE [ Hang criterion ]).

    Args:
        cpu_progress_s: CPU seconds since a mark that count as progress.
        wake_interval_s: the period of PyTorch's liveness wake-ups, in seconds.
    """

    def __init__(self, cpu_progress_s: float, wake_interval_s: float = frames.MP_STATUS_CHECK_INTERVAL_S) -> None:
        self.cpu_progress_s = cpu_progress_s
        self.wake_interval_s = wake_interval_s
        self._marks: Dict[Tuple[ProcId, int], _Mark] = {}
        self._proc_marks: Dict[ProcId, _Mark] = {}
        self._pid_progress: Dict[ProcId, float] = {}
        self._stuck_since: Dict[ProcId, Tuple[float, tuple]] = {}
        self._trusted: Dict[Tuple[ProcId, int], tuple] = {}
        self._last_progress: Optional[float] = None
        self._last_delivery: Optional[float] = None
        self._last_batch = float("-inf")  # when a batch count or a worker's sample count last rose
        self._last_tree_work: Optional[float] = None
        self._members: frozenset = frozenset()
        self._tokens: Dict[Tuple[int, int], int] = {}  # batch and sample counts (the batch measure)
        # batches main received, by loader site, over every iterator seen: see delivered
        self._delivered: Dict[Optional[Frame], int] = {}
        self._counted: Dict[Tuple[int, int], int] = {}  # (pid, iterator): its batches counted
        self._last_processes: Tuple[ProcessSample, ...] = ()  # the last sample's, folded in whole
        # (t, CPU s, I/O bytes, wakes, run-queue wait s) of each loader-path process over the
        # last WORK_WINDOW_S seconds
        self._recent: Dict[ProcId, Deque[Tuple[float, float, Optional[int], int, Optional[float]]]] = {}
        self.measure = Measure.ACTIVITY
        self.stopped: Tuple[int, ...] = ()
        self._main_wait: Optional[_MainWait] = None
        self._last_restart = float("-inf")

    # --- what counts as progress ------------------------------------------------------------

    @staticmethod
    def _did_io(mark: _Mark, io: Optional[int]) -> bool:
        return io is not None and mark.io is not None and io != mark.io

    def _woke(self, key, mark: _Mark, t: ThreadSample, now: float) -> bool:
        if t.voluntary_ctxt_switches <= mark.vol:
            return False
        w = t.wait
        if w is None or w.kind is WaitKind.UNKNOWN:  # no permission to read the wait
            allowance = WAKE_SWITCH_ALLOWANCE * (1 + (now - mark.t_mono) / self.wake_interval_s)
            return t.voluntary_ctxt_switches - mark.vol > allowance
        if self._trusted.get(key) == w.signature:
            return True  # the examination saw the user's code in this very wait
        if w.kind is WaitKind.RUNNING or states.may_be_loader_idle_poll(w):
            return False
        return w.kind not in (WaitKind.ZOMBIE, WaitKind.OTHER)

    def _worked(self, mark: _Mark, t: ThreadSample, now: float) -> bool:
        """Whether the CPU ``t`` used since ``mark`` counts as progress: ``cpu_progress_s``, and,
        for a thread back in one of PyTorch's idle liveness polls, also ``BUSY_SHARE`` of a core
        since the mark. Each of those polls' wake-ups (every 5 s, ``_try_get_data`` in
        torch/utils/data/dataloader.py checking its workers) costs main a few ms; they add up
        to ``cpu_progress_s`` within a minute on a busy machine, and a hung loader would seem to
        deliver a batch then."""
        used = t.cpu_s - mark.cpu_s
        if used < self.cpu_progress_s:
            return False
        return not states.may_be_loader_idle_poll(t.wait) or used >= BUSY_SHARE * (now - mark.t_mono)

    def _moved(self, key, mark: _Mark, t: ThreadSample, now: float) -> bool:
        return self._did_io(mark, t.io_bytes) or self._worked(mark, t, now) or self._woke(key, mark, t, now)

    def _proc_moved(self, key: ProcId, p: ProcessSample, now: float) -> bool:
        io = _io_of(p)
        mark = self._proc_marks.get(key)
        worked = mark is not None and p.cpu_s - mark.cpu_s >= max(self.cpu_progress_s, BUSY_SHARE * (now - mark.t_mono))
        if mark is None or self._did_io(mark, io) or worked:
            self._proc_marks[key] = _Mark(now, p.cpu_s, 0, io)
            return mark is not None
        return False

    # --- the batch measure -------------------------------------------------------------------

    def _count_batches(self, sample: Sample) -> Set[int]:
        """Fold in the inside view's counts (batches main received, samples each worker reached
        for); returns the pids whose count rose since the last sample (main's for a batch)."""
        main = sample.main
        counts: Dict[Tuple[int, int], int] = {}  # (pid, iterator; -1 for a worker's samples): count
        for v in sample.loaders:
            if main is not None and v.pid == main.pid:
                counts[(v.pid, v.iterator)] = v.batches
                self._count_delivered(v)
        if sample.loaders:
            live = {k for k in counts if k[1] >= 0}
            self._counted = {k: n for k, n in self._counted.items() if k in live}
        for f in sample.fetches:
            counts[(f.pid, -1)] = f.samples
        rose = {k[0] for k, n in counts.items() if self._tokens.get(k) not in (None, n)}
        self._tokens = counts
        return rose

    def _count_delivered(self, v: LoaderView) -> None:
        """Add the batches ``v`` (one of main's iterators) delivered since it was last counted
        to its site's total; an iterator first seen counts whole."""
        key = (v.pid, v.iterator)
        before = self._counted.get(key, 0)
        if v.batches > before:
            self._delivered[v.site] = self._delivered.get(v.site, 0) + v.batches - before
            self._counted[key] = v.batches

    @property
    def delivered(self) -> Tuple[Tuple[Optional[Frame], int], ...]:
        """``((site, batches), ...)``: the batches main's iterators delivered while watched,
        summed by the DataLoader's site (where its iterator was made; ``None``: not recorded),
        over every iterator the inside view showed: unlike an iterator's own count, which starts
        again at 0 each epoch, it only grows. Counted from the inside view's samples; an
        iterator's slot outlives it by the recorder's ring of slots (``SLOTS`` in
        watchdog/bootstrap/_dlwatch_inside.py), so its last batches are seen at the next sample."""
        return tuple(self._delivered.items())

    # --- the main-wait measure ---------------------------------------------------------------

    def _main_waits(self, main: ProcessSample, now: float) -> Optional[float]:
        """Since when main's iterating thread has waited for a batch as seen from outside, or
        ``None`` (NOTE [ Hang criterion ]): at every sample in a wait that may be PyTorch's 5 s
        batch poll (:func:`states.may_be_loader_idle_poll`; running for an instant, an
        unreadable wait or a restarted one does not end it) and not one the frames showed in
        the job's own code, while the whole
        process read and wrote no byte (a batch reaches main through a pipe read, by main or by
        its pin-memory thread, and main then sends the next index: ``_try_get_data`` and
        ``_try_put_index`` in torch/utils/data/dataloader.py, ``_pin_memory_loop`` in
        torch/utils/data/_utils/pin_memory.py) and the thread used less
        than ``max(cpu_progress_s, BUSY_SHARE of a core)``. ``None`` also on the sample that
        begins such a wait."""
        t = next((x for x in main.threads if x.tid == main.pid), None)
        key = (main.ident, main.pid)
        w = t.wait if t is not None else None
        # Running for an instant at a read, unreadable for one read, or resuming an interrupted
        # wait (restart_syscall(2), after py-spy's ptrace stop of an examination) leaves the
        # wait as it was: only a byte moved, CPU used or another wait of main's ends it.
        neutral = w is not None and (w.kind in (WaitKind.RUNNING, WaitKind.UNKNOWN) or w.op is WaitOp.RESTART)
        waits = w is not None and (
            (states.may_be_loader_idle_poll(w) and self._trusted.get(key) != w.signature) or neutral
        )
        process_io = _io_of(main)
        if t is None or not waits or process_io is None:
            self._main_wait = None
            return None
        io = process_io + (t.io_bytes or 0)
        last = self._main_wait
        if (
            last is None
            or last.key != key
            or io != last.io
            or t.cpu_s - last.cpu_s >= max(self.cpu_progress_s, BUSY_SHARE * (now - last.since))
        ):
            self._main_wait = _MainWait(key, now, t.cpu_s, io, process_io)
            return None
        return last.since

    def _main_waits_unread(self, main: ProcessSample) -> Optional[float]:
        """:meth:`_main_waits` at a sample that read no thread (NOTE [ Thread reads ] in
        watchdog/collect/read_plan.py: without the inside view, while the workers move): main's
        wait goes on while its process moved no byte (a batch is a pipe read), and ends
        otherwise; its thread's CPU is compared at the next sample that reads it, the only kind
        a stall is judged on. A wait only begun at the last read (not yet the measure) is kept
        for the next read to confirm."""
        last = self._main_wait
        if last is None or last.key != (main.ident, main.pid) or _io_of(main) != last.process_io:
            self._main_wait = None
            return None
        return last.since if self.measure == Measure.MAIN_WAIT else None

    # --- folding samples in ------------------------------------------------------------------

    def update(self, sample: Sample) -> None:
        """Fold one sample in; call once per sample, in time order."""
        now = sample.t_mono
        main = sample.main
        if main is None:
            return
        if self._update_lean(sample):
            return
        self._last_processes = sample.processes
        loader = {p.pid: p for p in sample.processes if p.role in LOADER_ROLES}
        self.stopped = tuple(pid for pid, p in loader.items() if p.state in ("T", "t"))
        members = loader_members(sample)
        rose = self._count_batches(sample)
        if rose:
            self._last_batch = now
        batches = batch_measure(sample)
        if batches or sample.loaders:
            waited = None
        elif sample.threads_read:
            waited = self._main_waits(main, now)
        else:
            waited = self._main_waits_unread(main)
        measure = Measure.BATCHES if batches else Measure.ACTIVITY if waited is None else Measure.MAIN_WAIT
        # main just began to wait in __next__, or a batch reached it after a main wait
        entered = batches and self.measure != Measure.BATCHES
        left = self.measure == Measure.MAIN_WAIT and measure != Measure.MAIN_WAIT
        began_waiting = measure == Measure.MAIN_WAIT and self.measure != Measure.MAIN_WAIT
        self.measure = measure
        batches = batches or waited is not None  # the measures alike from here: activity is no progress
        restart = self._last_progress is None or members != self._members or bool(self.stopped)
        if restart or rose or entered or left:
            # Workers came or went, a batch or a sample moved, main began to wait for one, or
            # the job is stopped (paused, not hung): the clock restarts.
            self._last_progress = self._last_delivery = self._last_restart = now
        elif began_waiting and waited is not None:
            # The stall is main's wait, from its start: the workers' activity meanwhile
            # counted under the activity measure, and is no progress now.
            self._last_progress = self._last_delivery = max(waited, self._last_restart)
        if restart:
            self._last_tree_work = now
            self._stuck_since.clear()
        self._members = members
        seen, live = set(), set()
        for p in sample.processes:
            pkey = p.ident
            live.add(pkey)
            proc_moved = self._proc_moved(pkey, p, now)
            if proc_moved:
                self._last_tree_work = now
            recent = self._recent.setdefault(pkey, collections.deque())
            if sample.threads_read:  # the wake-ups are every thread's: none without threads
                recent.append(
                    (now, p.cpu_s, _io_of(p), sum(t.voluntary_ctxt_switches for t in p.threads), p.runq_wait_s)
                )
                while len(recent) > 2 and recent[1][0] <= now - WORK_WINDOW_S:
                    recent.popleft()
            if p.role not in LOADER_ROLES:
                continue
            if p.role == ROLE_WORKER_CHILD:
                owner = loader.get(p.owner_pid) if p.owner_pid is not None else None
            else:
                owner = p
            okey = owner.ident if owner is not None else pkey
            self._pid_progress.setdefault(okey, now)
            moved = proc_moved and (
                p.role in (ROLE_WORKER_CHILD, ROLE_STARTING)
                # no thread read (NOTE [ Thread reads ] in watchdog/collect/read_plan.py): a
                # worker's every thread is on the loader's path, so its process moving is one moving
                or (p.role == ROLE_WORKER and not sample.threads_read and not batches)
            )
            for t in _loader_threads(p) if p.role != ROLE_STARTING else ():
                key = (pkey, t.tid)
                seen.add(key)
                mark = self._marks.get(key)
                if mark is None or self._moved(key, mark, t, now):
                    worked = mark is not None and p.role == ROLE_MAIN and self._worked(mark, t, now)
                    if not batches and (mark is None or worked or self._did_io(mark, t.io_bytes)):
                        self._last_delivery = now
                    self._marks[key] = _Mark(now, t.cpu_s, t.voluntary_ctxt_switches, t.io_bytes)
                    # With the batch measure a thread's activity explains a stall; it is no
                    # progress (a worker that polls forever is active forever).
                    moved = moved or not batches
            if p.pid in rose:
                moved = True
            if moved or self.stopped:
                self._pid_progress[okey] = now
                self._last_progress = now
            if sample.threads_read:  # else kept: the next read's snapshot says whether anything moved
                self._track_stuck(pkey, p, now)
        for key in list(self._marks) if sample.threads_read else ():
            if key not in seen:
                del self._marks[key]
                self._trusted.pop(key, None)
        for table in (self._pid_progress, self._proc_marks, self._stuck_since, self._recent):
            for pkey in list(table):
                if pkey not in live:
                    del table[pkey]

    def _update_lean(self, sample: Sample) -> bool:
        """Fold in a lean sample (NOTE [ Lean ticks ] in watchdog/collect/read_plan.py: the same tuple of
        process samples as the sample before, only the inside view's counts new) without the
        per-process pass, whose marks cannot move on samples that did not change; ``False``
        (nothing done) for any other sample, or when the measure would change or the job is
        stopped: :meth:`update` then folds it in whole."""
        if sample.processes is not self._last_processes or self.stopped:
            return False
        if not sample.loaders:
            # without the inside view (NOTE [ Thread reads ] in watchdog/collect/read_plan.py):
            # a lean sample has no counter and its full sample's processes, nothing to fold in
            return sample.lean

        measure = Measure.BATCHES if batch_measure(sample) else Measure.ACTIVITY
        if measure != self.measure:
            return False
        now = sample.t_mono
        rose = self._count_batches(sample)
        if rose:
            self._last_batch = self._last_progress = self._last_delivery = self._last_restart = now
            by_pid = {p.pid: p for p in sample.processes if p.role in LOADER_ROLES}
            for pid in rose:
                p = by_pid.get(pid)
                if p is not None:
                    self._pid_progress[p.ident] = now
        return True

    def _track_stuck(self, pkey: ProcId, p: ProcessSample, now: float) -> None:
        """A main or worker whose every thread waits on a private futex with no timeout, with
        no counter moving since: a candidate for NOTE [ Deadlock proof ]."""
        if p.role not in (ROLE_MAIN, ROLE_WORKER):
            return
        snapshot = tuple((t.tid, t.voluntary_ctxt_switches, t.cpu_s, t.wait.raw if t.wait else None) for t in p.threads)
        stuck = bool(p.threads) and all(
            t.wait is not None and t.wait.kind is WaitKind.FUTEX_PRIVATE for t in p.threads if not _may_be_inert(t)
        )
        stuck = stuck and any(t.wait is not None and t.wait.kind is WaitKind.FUTEX_PRIVATE for t in p.threads)
        known = self._stuck_since.get(pkey)
        if not stuck or (known is not None and known[1] != snapshot):
            self._stuck_since.pop(pkey, None)
            if stuck:
                self._stuck_since[pkey] = (now, snapshot)
        elif known is None:
            self._stuck_since[pkey] = (now, snapshot)

    def rebaseline(self, sample: Sample) -> None:
        """Move every mark's counters to ``sample`` without counting it as progress (after
        py-spy attached, which perturbs context switches and CPU)."""
        for p in sample.processes:
            pkey = p.ident
            pm = self._proc_marks.get(pkey)
            if pm is not None:
                self._proc_marks[pkey] = _Mark(pm.t_mono, p.cpu_s, 0, _io_of(p))
            for t in p.threads:
                key = (pkey, t.tid)
                mark = self._marks.get(key)
                if mark is not None:
                    self._marks[key] = _Mark(mark.t_mono, t.cpu_s, t.voluntary_ctxt_switches, t.io_bytes)

    def trust_timed_waits(self, entries: Iterable[Tuple[ProcId, int, tuple]]) -> None:
        """Remember ``(ProcId, tid, wait signature)`` of threads whose frames showed the user's
        code in a timed wait: while a thread stays in that same wait, its wake-ups count as
        progress (see NOTE [ Hang criterion ])."""
        for proc, tid, signature in entries:
            self._trusted[(proc, tid)] = signature

    def woke_during_stall(self, sample: Sample) -> Set[Tuple[int, int]]:
        """``(pid, tid)`` of loader-path threads whose voluntary context switches rose since
        their last mark without that counting as progress (woken from an ambiguous timed
        wait). Call before py-spy attaches."""
        out = set()
        for p in sample.processes:
            if p.role not in LOADER_ROLES:
                continue
            for t in _loader_threads(p):
                mark = self._marks.get((p.ident, t.tid))
                if mark is not None and t.voluntary_ctxt_switches > mark.vol:
                    out.add((p.pid, t.tid))
        return out

    def stall_s(self, sample: Sample) -> Optional[float]:
        """Seconds since the last progress as of ``sample`` (:attr:`Stall.stall_s`, without
        the rest of :meth:`stall`: a lean tick's measure), or ``None`` before main was seen."""
        if sample.main is None or self._last_progress is None:
            return None
        return sample.t_mono - self._last_progress

    def stall(self, sample: Sample) -> Optional[Stall]:
        """The current stall as of ``sample`` (``stall_s`` may be small), or ``None`` before
        main was seen."""
        main, stall_s = sample.main, self.stall_s(sample)
        if main is None or stall_s is None or self._last_progress is None:
            return None
        now = sample.t_mono
        ages = tuple(sorted((pkey[0], now - t) for pkey, t in self._pid_progress.items()))
        stuck = tuple(sorted((pkey[0], now - t) for pkey, (t, _snap) in self._stuck_since.items()))
        work, window = [], 0.0
        since = max(self._last_progress, now - min(WORK_WINDOW_S, (now - self._last_progress) / 2))
        for p in sample.processes:
            recent = self._recent.get(p.ident)
            if not recent:
                continue
            # The newest reading at or before the window's start (one is kept older than the
            # window), so that a window never shrinks below one sampling interval.
            t0, cpu0, io0, wakes0, runq0 = next((x for x in reversed(recent) if x[0] <= since), recent[0])
            io = _io_of(p)
            window = max(window, now - t0)
            wakes = sum(t.voluntary_ctxt_switches for t in p.threads)
            runq = p.runq_wait_s
            work.append(
                LoaderWork(
                    p.pid,
                    max(0.0, p.cpu_s - cpu0),
                    io - io0 if io is not None and io0 is not None else 0,
                    max(0, wakes - wakes0),
                    max(0.0, runq - runq0) if runq is not None and runq0 is not None else None,
                )
            )
        return Stall(
            work_window_s=window,
            measure=self.measure,
            loader_work=tuple(work),
            stall_s=stall_s,
            quiet_since_mono=self._last_progress,
            main_pid=main.pid,
            progress_age_s=ages,
            no_delivery_s=now - (now if self._last_delivery is None else self._last_delivery),
            tree_quiet_s=now - (now if self._last_tree_work is None else self._last_tree_work),
            stuck_s=stuck,
        )

    @property
    def last_delivery_mono(self) -> Optional[float]:
        """When main's iterating thread last worked or a worker last did I/O (``time.monotonic()``)."""
        return self._last_delivery

    @property
    def last_batch_mono(self) -> float:
        """When the inside view's counts last rose: a batch main received or a sample a worker
        reached for (``time.monotonic()``; ``-inf`` before any)."""
        return self._last_batch

    @property
    def members(self) -> frozenset:
        """The loader's members as of the last sample (:func:`loader_members`)."""
        return self._members


@dataclass(frozen=True)
class Rhythm:
    """The batch-rhythm stall rule for the iterator main waits on (NOTE [ Batch rhythm ]):
    ``timeout_s`` is the stall that counts, ``since`` when main entered ``__next__``
    (``time.monotonic()``), ``criterion`` the sentence for the report."""

    timeout_s: float
    since: float
    criterion: str


def rhythm(sample: Sample, stall_timeout_s: float, stall_min_s: float, factor: float) -> Optional[Rhythm]:
    """The batch-rhythm rule in force now, or ``None``: main is inside ``__next__`` of an
    iterator with at least ``MIN_INTERVALS`` intervals, waiting for a batch a worker owns (an
    epoch's end leaves no owner), and ``max(stall_min_s, factor × p99)`` is below
    ``stall_timeout_s``. With several such iterators, the most patient one's."""
    main = sample.main
    if main is None:
        return None
    found = [
        v
        for v in sample.loaders
        if v.pid == main.pid
        and v.waiting_since is not None
        and v.waiting_worker >= 0
        and v.intervals >= MIN_INTERVALS
        and v.interval_p99_s
    ]
    if not found:
        return None
    v = max(found, key=lambda x: x.interval_p99_s or 0.0)
    p99, since = v.interval_p99_s or 0.0, v.waiting_since
    timeout = max(stall_min_s, factor * p99)
    if timeout >= stall_timeout_s or since is None:  # since: never None, found holds only waiting iterators
        return None
    rule = (
        f"batch rhythm of {v.label}: p99 {p99 * 1000:.0f} ms between batches over {v.intervals} intervals, "
        f"so a stall counts after max(stall_min_s {stall_min_s:g} s, {factor:g} × p99) = {timeout:.1f} s "
        f"(stall_timeout_s {stall_timeout_s:g} s otherwise)"
    )
    return Rhythm(timeout, since, rule)


def due_trigger(
    stall: Stall,
    stall_timeout_s: float,
    busy_stall_timeout_s: float,
    quiet_floor_mono: float,
    now: float,
    rhythm_rule: Optional[Rhythm] = None,
    rhythm_floor_mono: float = float("-inf"),
) -> Optional[Trigger]:
    """Which trigger (NOTE [ Hang criterion ]) fires now, or ``None``. ``quiet_floor_mono`` is
    the last examination that found no hang: the loader's stall is counted from the later of it
    and the last progress. ``rhythm_rule`` (:func:`rhythm`) adds the earlier batch-rhythm
    trigger, counted from the later of the last progress, main's entry into ``__next__``, the
    last examination and ``rhythm_floor_mono`` (the last rhythm examination that proved nothing)."""
    if any(s >= stall_timeout_s for _pid, s in stall.stuck_s) and now - quiet_floor_mono >= stall_timeout_s:
        return TRIGGER_PROOF
    if stall.no_delivery_s >= busy_stall_timeout_s and now - quiet_floor_mono >= stall_timeout_s:
        return TRIGGER_BUSY
    if now - max(stall.quiet_since_mono, quiet_floor_mono) >= stall_timeout_s:
        return TRIGGER_STALL
    if rhythm_rule is not None:
        since = max(stall.quiet_since_mono, rhythm_rule.since, quiet_floor_mono, rhythm_floor_mono)
        if now - since >= rhythm_rule.timeout_s:
            return TRIGGER_RHYTHM
    return None


class WorkerBirths:
    """Remembers, for each worker, how many threads main had in the sample before the worker
    first appeared (a multi-threaded parent at fork time is the risk factor of every
    inherited-lock deadlock: only the forking thread exists in the child, CPython's ``os.fork``
    documentation). A lower bound: threads that
    lived between two samples are missed; the report adds the threads of main that are still
    alive and started before the worker (their start times)."""

    def __init__(self) -> None:
        self._prev_main_threads: Optional[int] = None
        self._known: Dict[int, int] = {}
        self._seen: set = set()

    def update(self, sample: Sample) -> None:
        """Fold one sample in. A worker already there at the first sample (``attach``) gets no
        count: main's threads then were counted after the fork."""
        main = sample.main
        if main is None:
            return
        live = {p.pid for p in sample.processes if p.role in (ROLE_WORKER, ROLE_STARTING)}
        for pid in live - self._seen:
            if self._prev_main_threads is not None:
                self._known[pid] = self._prev_main_threads
        self._seen = live
        for pid in list(self._known):
            if pid not in live:
                del self._known[pid]
        self._prev_main_threads = main.num_threads

    def as_tuple(self) -> Tuple[Tuple[int, int], ...]:
        """``(worker pid, main's thread count before it appeared)`` pairs."""
        return tuple(sorted(self._known.items()))


def loader_members(sample: Sample) -> frozenset:
    """The :class:`~watchdog.types.ProcId` of main and the workers: when it changes, the job moved."""
    return frozenset(p.ident for p in sample.processes if p.role in (ROLE_MAIN, ROLE_WORKER))

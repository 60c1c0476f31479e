"""Hang detection: is the job still moving, and can it ever move again? Pure functions of
samples, kernel waits and stacks.

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
children still count by their work. A Dataset with ``__getitems__`` (a batched fetch) is
reached for once per batch, not per sample: its progress is a batch begun.

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
  process): see NOTE [ Deadlock proof ];
* ``batch_rhythm`` — with the inside view (NOTE [ Batch rhythm ]): main has waited in
  ``__next__`` for a batch a worker owns, and the loader path made no progress, for
  ``max(stall_min_s, stall_p99_factor × p99 interval between batches)``, when that is shorter
  than ``stall_timeout_s``;
* ``busy_stall`` — no batch was delivered (main's iterating thread did no CPU or I/O, no worker
  did I/O) for ``busy_stall_timeout_s``: workers may burn CPU or wake forever without ever
  sending a batch. This is a suspicion, not a proof, and the ceiling for what cannot be told
  from a slow batch sooner: it is examined and reported, never by itself a reason to end the
  job (:func:`termination`: ``on_hang: terminate`` ends a job only on a proof; a first batch
  that builds an index for 330 s is that long and healthy).

The examination (:func:`assess`) classifies main's stack (:func:`confirm`), looks for a proof,
and dismisses a stall that can still move by itself: a loader-path thread in the user's code
in a timed wait that woke during the stall, main's bounded shutdown join, or work done anywhere
in the job's tree meanwhile. What is not dismissed is reported, as proven or suspected.

NOTE [ Batch rhythm ]
A loader that delivers a batch every 50 ms and then deadlocks should not need a 60 s timeout.
Once an iterator of main has at least ``MIN_INTERVALS`` intervals between batches (the first
batch of an epoch is not one), the stall that counts is ``max(stall_min_s, k × p99)`` with
``k = stall_p99_factor``, capped by ``stall_timeout_s`` (which alone applies before that, and
to a main not waiting in ``__next__``). Defaults from ``dlwatch probe rhythm`` on healthy
variants (docs/performance.md): the longest interval of a run was at most 4.8 × its p99 on an
idle machine, and 13.3 × once on a loaded one (a single pause; under steady load the tail is
flat, 1.0), so ``k = 30`` leaves a margin of 2.25, and ``stall_min_s = 10`` applies below a
p99 of 0.33 s. The rule only moves the
examination earlier: before ``stall_timeout_s`` only a *proven* hang is reported; a suspected
one waits for ``stall_timeout_s`` as before. A loader whose batches take 40 s has a p99 of
40 s or more, so its rule is the plain ``stall_timeout_s`` and the usual progress criterion.

NOTE [ Deadlock proof ]
``/proc/PID/task/TID/syscall`` shows the wait (``collect.waits``). A private futex can only be
woken by a thread of the same process (futex(2), ``FUTEX_PRIVATE_FLAG``). A pipe can only be
read by a holder of its read end and written by a holder of its write end; a child can only
exit by running. So a set of threads each in an untimed wait that only threads of the set can
end is stuck for good: no timeout will fire and nothing outside can wake it, barring signals
from outside. A process that catches a timer signal or holds POSIX timers may signal itself
(a Python handler runs in the main thread and may release what the others wait for), so its
threads are never part of a proof (``procfs.timer_wakeup``).
:func:`prove` finds the largest such set by removing, until nothing changes, every thread whose
wait some thread outside the set could end; a process whose every thread stays in the set can
never run again. A loader-level argument complements it: main waits inside the iterator for a
batch while every worker sits idle in PyTorch's own loop and nothing moved for the whole stall,
so no process holds or carries the batch main waits for (a batch lost by a queue feeder thread).
"""

from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass
from typing import Deque, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from . import dead_releaser, frames, manager_proof, states
from .collect.waits import LOCK_CALLS, READ_CALLS, WRITE_CALLS
from .types import (
    LOADER_ROLES,
    ROLE_MAIN,
    ROLE_STARTING,
    ROLE_WORKER,
    ROLE_WORKER_CHILD,
    Evidence,
    FileLock,
    Frame,
    HangVerdict,
    KernelWait,
    LoaderView,
    LoaderWork,
    LockHold,
    Measure,
    PipeEnds,
    Polling,
    ProcessSample,
    ProcessStack,
    ProcId,
    Proof,
    ProofKind,
    ProofLink,
    Sample,
    Stall,
    TextEnum,
    ThreadSample,
    Trigger,
    VerdictKind,
    WaitKind,
)

# Voluntary switches one periodic wake-up may cost (measured: ~3 under GIL contention); used
# only where the kernel wait cannot be read (no ptrace-read permission).
WAKE_SWITCH_ALLOWANCE = 4

# A whole process (a starting worker, a worker's child, anything in the job's tree) works when
# it used at least this share of one core since its mark: a decoder or an import of torch does,
# a background poller waking every 10 ms (gloo's loop: about 1.5% here) does not.
BUSY_SHARE = 0.05

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
    thread's own) then (the main-wait measure)."""

    key: Tuple[ProcId, int]
    since: float
    cpu_s: float
    io: int


def _may_be_inert(t: ThreadSample) -> bool:
    """A thread waiting in accept(2), as multiprocessing's resource-sharer thread does; frames
    decide at the examination whether it really is that thread."""
    return t.wait is not None and t.wait.kind is WaitKind.FD and t.wait.syscall in ("accept", "accept4")


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
        neutral = w is not None and (w.kind in (WaitKind.RUNNING, WaitKind.UNKNOWN) or w.syscall == "restart_syscall")
        waits = w is not None and (
            (states.may_be_loader_idle_poll(w) and self._trusted.get(key) != w.signature) or neutral
        )
        io = _io_of(main)
        if t is None or not waits or io is None:
            self._main_wait = None
            return None
        io += t.io_bytes or 0
        last = self._main_wait
        if (
            last is None
            or last.key != key
            or io != last.io
            or t.cpu_s - last.cpu_s >= max(self.cpu_progress_s, BUSY_SHARE * (now - last.since))
        ):
            self._main_wait = _MainWait(key, now, t.cpu_s, io)
            return None
        return last.since

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
        waited = None if batches or sample.loaders else self._main_waits(main, now)
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
            moved = proc_moved and p.role in (ROLE_WORKER_CHILD, ROLE_STARTING)
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
        """Fold in a lean sample (NOTE [ Lean ticks ] in watchdog/watch/watcher.py: the same tuple of
        process samples as the sample before, only the inside view's counts new) without the
        per-process pass, whose marks cannot move on samples that did not change; ``False``
        (nothing done) for any other sample, or when the measure would change or the job is
        stopped: :meth:`update` then folds it in whole."""
        if sample.processes is not self._last_processes or self.stopped or not sample.loaders:
            return False
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

    def stall(self, sample: Sample) -> Optional[Stall]:
        """The current stall as of ``sample`` (``stall_s`` may be small), or ``None`` before
        main was seen."""
        main = sample.main
        if main is None or self._last_progress is None:
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
            stall_s=now - self._last_progress,
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


def confirm(
    main_pid: int, main_stack: Optional[ProcessStack], main_threads: Tuple[ThreadSample, ...], worker_count: int
) -> HangVerdict:
    """Classify a stall from main's stack (or, without one, from ``/proc``).

    With a stack: a thread of main waiting for data (``_try_get_data``/``_get_data`` under
    ``__next__`` in ``torch/utils/data/dataloader.py``) or shutting the iterator down
    (``_shutdown_workers``) makes it a ``dataloader`` hang; otherwise ``outside_loader``.
    Without a stack the verdict is unconfirmed: workers alive and main's main thread asleep in
    a poll or futex wait (how ``_try_get_data`` waits) presume a ``dataloader`` hang.
    """
    if main_stack is not None and main_stack.ok:
        ordered = sorted(main_stack.threads, key=lambda t: t.tid != main_pid)
        for t in ordered:
            if frames.loader_wait_depth(t) is not None:
                return HangVerdict(
                    VerdictKind.DATALOADER, True, "the iterating thread waits for a batch in the DataLoader iterator", t
                )
        for t in ordered:
            if frames.has_frame(t, frames.LOADER_SHUTDOWN_FUNCS, frames.DATALOADER_FILE):
                return HangVerdict(
                    VerdictKind.DATALOADER, True, "the main process is shutting the DataLoader iterator down", t
                )
        main_thread = ordered[0] if ordered else None
        return HangVerdict(
            VerdictKind.OUTSIDE_LOADER, True, "the main thread is not inside a DataLoader iterator", main_thread
        )
    main_detail = next((t for t in main_threads if t.tid == main_pid), None)
    wchan = main_detail.wchan if main_detail else None
    family = frames.wchan_family(wchan)
    shown = wchan if family else "a wait channel the kernel hides (no permission)"
    if worker_count and family in ("poll", "futex", None):
        return HangVerdict(
            VerdictKind.DATALOADER, False, f"no stack; DataLoader workers exist and main's main thread waits in {shown}"
        )
    return HangVerdict(
        VerdictKind.OUTSIDE_LOADER,
        False,
        "no stack; " + ("no DataLoader workers" if not worker_count else f"main's main thread waits in {shown}"),
    )


# --- proofs ---------------------------------------------------------------------------------


_READS, _WRITES = READ_CALLS, WRITE_CALLS


def _link(pid: int, d: ThreadSample, why: str, name: Optional[str] = None) -> ProofLink:
    w = d.wait
    return ProofLink(pid, d.tid, name or d.name, w.detail if w else "unknown wait", why, (w.raw if w else None) or "")


def prove(
    details: Mapping[int, Sequence[ThreadSample]],
    children: Mapping[int, Sequence[int]],
    pipes: Optional[PipeEnds] = None,
    inert: Iterable[Tuple[int, int]] = (),
    names: Optional[Mapping[Tuple[int, int], str]] = None,
    wakeable: Optional[Mapping[int, str]] = None,
    lock_holds: Optional[Mapping[Tuple[int, int], LockHold]] = None,
    loader_waits: Optional[Mapping[Tuple[int, int], Tuple[int, ...]]] = None,
    roles: Optional[Mapping[int, str]] = None,
) -> Optional[Proof]:
    """The processes that can never run again, with the argument (NOTE [ Deadlock proof ]).

    Args:
        details: every readable process of the job: pid -> its threads with decoded waits.
        children: pid -> its child pids (for threads waiting in wait4/waitid).
        pipes: holders of the pipes that threads wait on; ``None`` when not collected.
        inert: ``(pid, tid)`` of threads whose frames show they can release nothing the others
            wait for, even when woken: multiprocessing's resource-sharer thread, which only
            hands out file descriptors (``frames.is_resource_sharer``).
        names: ``(pid, tid)`` to the thread's Python name (py-spy's), for the argument's lines.
        wakeable: pid to why that process might wake itself from a timer signal
            (``procfs.timer_wakeup``): none of its threads is part of a proof.
        lock_holds: ``(pid, fd)`` of a thread blocked in ``flock``/``fcntl`` to who can release
            the lock it waits for (``collect.chain.lock_holds``, from ``/proc/locks``): the wait
            stays in the set while every holder does; one not ``complete`` never does.
        loader_waits: ``(pid, tid)`` of a thread whose stack shows it in one of PyTorch's own
            waits for the loader's other side (:func:`loader_waits`: main's iterating thread or
            pin-memory thread waiting for a batch, a worker idle for its next index) to the pids
            that alone can end it: it stays while all of them do, whatever its kernel wait (the
            5 s polls only loop).
        roles: pid to its name in the cycle's sentence (:func:`role_words`: ``main``,
            ``worker 0``); a worker's idle wait joins only when its name begins with ``worker``.

    Returns ``None`` when no process is stuck for good.
    """
    waits: Dict[Tuple[int, int], ThreadSample] = {}
    for pid, threads in details.items():
        for d in threads:
            waits[(pid, d.tid)] = d

    def pipe_of(pid: int, d: ThreadSample) -> Optional[str]:
        w = d.wait
        if pipes is None or not pipes.complete or w is None or w.fd is None:
            return None
        target = pipes.targets.get((pid, w.fd), "")
        return target if target.startswith("pipe:") else None

    def pipe_ends(pid: int, d: ThreadSample) -> Tuple[Optional[str], str, Tuple[int, ...]]:
        """The pipe a thread reads or writes, the end that could wake it (``write`` for a
        reader), and the pids that hold that end."""
        pipe = pipe_of(pid, d)
        end = "write" if d.wait is not None and d.wait.syscall in _READS else "read"
        if pipes is None or pipe is None:
            return pipe, end, ()
        return pipe, end, (pipes.writers if end == "write" else pipes.readers).get(pipe, ())

    def lock_of(pid: int, d: ThreadSample) -> Optional[LockHold]:
        """Who can release the file lock the thread waits for, when all of them are known."""
        w = d.wait
        if lock_holds is None or w is None or w.syscall not in LOCK_CALLS or w.fd is None:
            return None
        hold = lock_holds.get((pid, w.fd))
        return hold if hold is not None and hold.complete and hold.holders else None

    # A wait in the loader's own loop joins only a cycle through a file lock: the waiter holds a
    # lock that a lock-waiting thread waits for (main holds what the workers wait for), or it is
    # a worker idle for the next index from such a holder. A main that merely waits for workers
    # stuck among themselves is not part of their cycle.
    lock_holders = {
        h for (pid, tid), d in waits.items() for hold in [lock_of(pid, d)] if hold is not None for h in hold.holders
    }
    loader = {
        key: others
        for key, others in (loader_waits or {}).items()
        if key[0] in lock_holders
        or ((roles or {}).get(key[0], "").startswith("worker") and len(others) == 1 and others[0] in lock_holders)
    }
    inert = set(inert)
    candidates = set()
    for (pid, tid), d in waits.items():
        w = d.wait
        if wakeable and pid in wakeable:
            continue
        if (pid, tid) in inert and w is not None and w.kind in (WaitKind.FD, WaitKind.FUTEX_PRIVATE, WaitKind.TIMED):
            candidates.add((pid, tid))
            continue
        if (pid, tid) in loader and loader[(pid, tid)] and w is not None and w.kind in _LOADER_WAIT_KINDS:
            candidates.add((pid, tid))
            continue
        if w is None:
            continue
        if w.kind is WaitKind.FUTEX_PRIVATE or (w.kind is WaitKind.CHILD and children.get(pid)):
            candidates.add((pid, tid))
        elif w.kind is WaitKind.FD and w.syscall in _READS | _WRITES and pipe_of(pid, d):
            candidates.add((pid, tid))
        elif w.kind is WaitKind.FD and lock_of(pid, d) is not None:
            candidates.add((pid, tid))

    def whole(pid: int, inside: Set[Tuple[int, int]]) -> bool:
        threads = details.get(pid, ())
        return bool(threads) and all((pid, d.tid) in inside for d in threads)

    changed = True
    while changed:
        changed = False
        for key in sorted(candidates):
            pid, tid = key
            d = waits[key]
            w = d.wait
            hold = lock_of(pid, d)
            if key in inert:
                keep = True
            elif w is None:  # never: a candidate's wait is known
                keep = False
            elif key in loader and loader[key]:
                keep = all(whole(o, candidates) for o in loader[key])
            elif hold is not None:
                keep = all(whole(o, candidates) for o in hold.holders)
            elif w.kind is WaitKind.FUTEX_PRIVATE:
                keep = whole(pid, candidates)
            elif w.kind is WaitKind.CHILD:
                keep = all(whole(c, candidates) for c in children.get(pid, ()))
            else:
                others = pipe_ends(pid, d)[2]
                keep = bool(others) and all(whole(o, candidates) for o in others)
            if not keep:
                candidates.discard(key)
                changed = True
    stuck = sorted(pid for pid in details if whole(pid, candidates))
    if loader and not any(lock_of(pid, d) is not None for pid in stuck for d in details[pid]):
        # The loader's own waits join a proof only through a cycle with a file lock (main holds
        # what the workers wait for); without one, the loader-level argument decides, after a
        # whole stall (prove_loader_idle).
        return prove(details, children, pipes, inert, names, wakeable, lock_holds, None, roles)
    if not stuck:
        return None
    links = []
    for pid in stuck:
        for d in details[pid]:
            w = d.wait
            if (pid, d.tid) in inert:
                why = (
                    "multiprocessing's resource-sharer thread only hands out file descriptors and releases nothing "
                    "the others wait for"
                )
            elif w is None:
                why = ""  # never: every thread of a stuck pid is a candidate, whose wait is known
            elif (pid, d.tid) in loader and loader[(pid, d.tid)]:
                why = (
                    f"it waits in PyTorch's own loop for pid(s) {', '.join(map(str, loader[(pid, d.tid)]))} "
                    "(a batch, or the next index), which alone can end that wait"
                )
            elif (hold := lock_of(pid, d)) is not None:
                why = (
                    f"fd {w.fd} is {hold.path}, locked ({', '.join(hold.locks)}) by pid(s) "
                    f"{', '.join(map(str, hold.holders))} only (/proc/locks; an flock lock by every holder of its "
                    "open file)"
                )
            elif w.kind is WaitKind.FUTEX_PRIVATE:
                why = "a private futex is woken only by a thread of the same process"
            elif w.kind is WaitKind.CHILD:
                why = f"its children {', '.join(map(str, children.get(pid, ())))} can never exit"
            else:
                pipe, end, holders = pipe_ends(pid, d)
                why = f"fd {w.fd} is {pipe}, whose {end} end only pid(s) {', '.join(map(str, holders))} hold"
            links.append(_link(pid, d, why, (names or {}).get((pid, d.tid))))
    conclusion = (
        f"every thread of pid(s) {', '.join(map(str, stuck))} waits with no timeout for a thread of this same set: "
        "none can ever run again"
    )
    if any(key in loader and key[0] in stuck for key in candidates):
        conclusion = conclusion.replace(
            "waits with no timeout for", "waits with no timeout (or in PyTorch's own loop, which only loops) for", 1
        )
    cycle = lock_cycle(stuck, details, lock_holds or {}, loader, roles or {})
    if cycle:
        conclusion = f"{cycle}: {conclusion}"
    return Proof(ProofKind.KERNEL, tuple(stuck), tuple(links), conclusion)


# Kernel waits in which a thread may sit in one of PyTorch's own loader loops (the 5 s polls
# and timed futex waits of ``_try_get_data``, ``index_queue.get``, the pin-memory thread).
_LOADER_WAIT_KINDS = frozenset({WaitKind.TIMED, WaitKind.FD, WaitKind.FUTEX_PRIVATE, WaitKind.FUTEX_SHARED})


def lock_cycle(
    stuck: Sequence[int],
    details: Mapping[int, Sequence[ThreadSample]],
    lock_holds: Mapping[Tuple[int, int], LockHold],
    loader: Mapping[Tuple[int, int], Tuple[int, ...]],
    roles: Mapping[int, str],
) -> str:
    """The cycle through file locks among the ``stuck`` processes, as one sentence ("worker pid
    A holds /x/a.lock and waits for /x/b.lock; worker pid B holds /x/b.lock and waits for
    /x/a.lock"), or ``""`` when no stuck thread waits for a file lock. A process waiting in the
    loader's own loop is named with what it waits for (main: the workers' batch)."""
    inside = set(stuck)
    waits: Dict[int, List[LockHold]] = {}
    for pid in stuck:
        for d in details.get(pid, ()):
            w = d.wait
            hold = (
                lock_holds.get((pid, w.fd)) if w is not None and w.fd is not None and w.syscall in LOCK_CALLS else None
            )
            if hold is not None and hold.complete and hold.path not in [h.path for h in waits.get(pid, [])]:
                waits.setdefault(pid, []).append(hold)
    if not waits:
        return ""
    held: Dict[int, List[str]] = {}
    for hs in waits.values():
        for h in hs:
            for holder in h.holders:
                if holder in inside and h.path not in held.setdefault(holder, []):
                    held[holder].append(h.path)
    parts = []
    for pid in stuck:
        who = f"{roles[pid]} (pid {pid})" if roles.get(pid) else f"pid {pid}"
        mine = held.get(pid, [])
        if pid in waits:
            text = f"waits for {', '.join(h.path for h in waits[pid])}"
        else:
            feeders = sorted({o for (p, _t), others in loader.items() if p == pid for o in others})
            if not feeders or not mine:
                continue
            text = f"waits in the DataLoader for pid(s) {', '.join(map(str, feeders))}"
        parts.append(f"{who} {'holds ' + ', '.join(mine) + ' and ' if mine else ''}{text}")
    return "; ".join(parts)


def role_words(sample: Sample) -> Dict[int, str]:
    """pid to its name in a proof's sentence: ``main``, ``worker N`` (N its worker id, the
    inside view's order of an iterator's workers) or ``worker``, and the role of any other."""
    out: Dict[int, str] = {}
    ids = {pid: i for v in sample.loaders for i, pid in enumerate(v.workers)}
    for p in sample.processes:
        if p.role == ROLE_MAIN:
            out[p.pid] = "main"
        elif p.role == ROLE_WORKER:
            out[p.pid] = f"worker {ids[p.pid]}" if p.pid in ids else "worker"
        else:
            out[p.pid] = str(p.role)
    return out


def loader_waits(sample: Sample, stacks: Mapping[int, ProcessStack]) -> Dict[Tuple[int, int], Tuple[int, ...]]:
    """The threads whose stacks show them in one of PyTorch's own waits for the loader's other
    side, with the pids that alone can end it (NOTE [ Deadlock proof ]): main's iterating
    thread waiting in ``__next__`` for a batch (``frames.loader_wait_depth``, no user code above
    it) and main's idle pin-memory thread wait for main's workers (a batch comes only from a
    worker; a worker's death ends the wait too, and a worker in the set cannot die by itself);
    a worker idle for its next index (``frames.is_idle_worker``) waits for main, which alone
    feeds its index queue. Left out: a main whose iterator has a ``timeout`` (its wait ends
    with an error; known from the inside view only), a main with a starting worker, and every
    process without a readable stack."""
    out: Dict[Tuple[int, int], Tuple[int, ...]] = {}
    main = sample.main
    if main is None or any(p.role == ROLE_STARTING for p in sample.processes):
        return out
    workers = tuple(sorted(w.pid for w in sample.workers if w.ppid == main.pid))
    if not workers:
        return out
    timed = False
    for v in sample.loaders:
        value = v.setting("timeout", 0) if v.pid == main.pid else 0
        # A timeout, or one that cannot be read as a number: main's wait may end by itself.
        timed = timed or not isinstance(value, (int, float)) or value > 0
    st = stacks.get(main.pid)
    if st is not None and st.ok and not timed:
        for t in st.threads:
            depth = frames.loader_wait_depth(t)
            idle_pin = frames.has_frame(t, frames.PIN_LOOP_FUNCS, frames.PIN_MEMORY_FILE) and states.is_loader_idle(t)
            if (depth is not None and frames.innermost_user_above(t, depth) is None) or idle_pin:
                out[(main.pid, t.tid)] = workers
    for pid in workers:
        st = stacks.get(pid)
        if st is None or not st.ok:
            continue
        for t in st.threads:
            if frames.is_idle_worker(t):
                out[(pid, t.tid)] = (main.pid,)
    return out


def relevant(proof: Optional[Proof], sample: Sample) -> Optional[Proof]:
    """``proof`` when it covers main or a DataLoader worker (a stuck helper process alone does
    not stop the job), else ``None``."""
    if proof is None:
        return None
    loader = {p.pid for p in sample.processes if p.role in (ROLE_MAIN, ROLE_WORKER)}
    return proof if loader & set(proof.pids) else None


def prove_loader_idle(
    verdict: HangVerdict,
    sample: Sample,
    stacks: Mapping[int, ProcessStack],
    stall: Stall,
    stall_timeout_s: float,
) -> Optional[Proof]:
    """The loader-level argument (NOTE [ Deadlock proof ]): main waits in the iterator for a
    batch, every worker's threads sit idle in PyTorch's own loops, main's pin-memory thread (if
    any) is idle, and no loader-path thread moved for the whole stall. ``None`` otherwise."""
    if not verdict.in_loader or verdict.thread is None or frames.loader_wait_depth(verdict.thread) is None:
        return None
    workers = sample.workers
    if not workers or stall.stall_s < stall_timeout_s or any(p.role == ROLE_STARTING for p in sample.processes):
        return None
    main = sample.main
    main_stack = stacks.get(main.pid) if main else None
    if main is None or main_stack is None or not main_stack.ok:
        return None
    for t in main_stack.threads:
        if frames.has_frame(t, frames.PIN_LOOP_FUNCS, frames.PIN_MEMORY_FILE) and not states.is_loader_idle(t):
            return None
    live = {w.pid for w in workers}
    if any(
        pid not in live
        for v in sample.loaders
        if v.pid == main.pid and v.waiting_since is not None
        for pid in v.workers
    ):
        return None  # a worker of the iterator main waits on is no longer one (gone, or another program now)
    links = [
        ProofLink(main.pid, None, "main", "the iterating thread waits for the next batch in the DataLoader iterator")
    ]
    for w in workers:
        st = stacks.get(w.pid)
        if st is None or not st.ok or not st.threads:
            return None
        if not all(states.is_loader_idle(t) for t in st.threads):
            return None
        links.append(
            ProofLink(
                w.pid,
                None,
                "worker",
                "every thread idle in PyTorch's loop (index_queue.get / queue feeder), holding no task",
            )
        )
    conclusion = (
        f"no loader thread did CPU work or I/O for {stall.stall_s:.0f} s: no process holds or carries the batch main "
        "waits for, so it never comes"
    )
    return Proof(ProofKind.LOADER_IDLE, tuple(w.pid for w in workers), tuple(links), conclusion)


def in_bounded_shutdown(verdict: HangVerdict) -> bool:
    """True when main's stack shows PyTorch's shutdown joining a worker process
    (``_shutdown_workers`` -> ``BaseProcess.join``): it joins each worker with
    ``timeout=MP_STATUS_CHECK_INTERVAL`` and then terminates it (dataloader.py,
    pytorch/pytorch#39869), so a worker stuck at exit holds main for at most 5 s. Joining the
    pin-memory thread (``Thread.join``) has no timeout and is not bounded."""
    t = verdict.thread
    if t is None or not frames.has_frame(t, frames.LOADER_SHUTDOWN_FUNCS, frames.DATALOADER_FILE):
        return False
    return any(f.function == "BaseProcess.join" for f in t.frames)


def shutdown_bound_s(sample: Sample, stall_timeout_s: float) -> float:
    """The longest PyTorch's shutdown may hold main: 5 s per worker (and the pin thread), plus
    one stall timeout of slack, in seconds."""
    return (len(sample.workers) + 1) * frames.MP_STATUS_CHECK_INTERVAL_S + stall_timeout_s


@dataclass(frozen=True)
class Assessment:
    """The outcome of an examination: ``hang`` (report it) or not, and why.

    ``verdict`` classifies main's stall; ``proof`` is set when the job provably cannot move;
    ``reason`` says why a stall was dismissed (``hang`` False) or what triggered the report;
    ``timed_waits`` are threads in the user's timed waits, for
    :meth:`ProgressTracker.trust_timed_waits`.
    """

    hang: bool
    verdict: HangVerdict
    reason: str
    proof: Optional[Proof] = None
    timed_waits: Tuple[Tuple[ProcId, int, tuple], ...] = ()


def _thread_of(stack: Optional[ProcessStack], tid: int):
    if stack is None or not stack.ok:
        return None
    return next((t for t in stack.threads if t.tid == tid), None)


def assess(
    trigger: Optional[Trigger],
    sample: Sample,
    stall: Stall,
    verdict: HangVerdict,
    stacks: Mapping[int, ProcessStack],
    details: Mapping[int, Sequence[ThreadSample]],
    proof: Optional[Proof],
    woke: Set[Tuple[int, int]],
    stall_timeout_s: float,
    locks: Sequence[FileLock] = (),
    latest: Optional[Mapping[int, Sequence[ThreadSample]]] = None,
) -> Assessment:
    """Decide whether an examined stall is a hang (NOTE [ Hang criterion ]).

    Args:
        trigger: what led here (``TRIGGER_*``).
        sample: the sample that triggered it; ``stall`` its stall.
        verdict: :func:`confirm`'s classification of main's stack.
        stacks: Python stacks of main and the workers, by pid.
        details: ``/proc`` thread details (with decoded waits), by pid.
        proof: :func:`prove`'s or :func:`prove_loader_idle`'s result, if any.
        woke: threads that woke during the stall (:meth:`ProgressTracker.woke_during_stall`).
        stall_timeout_s: the configured stall timeout, seconds.
        locks: the locks other processes hold on files main or a worker has open
            (``procfs.file_locks``): a wait for a lock whose holder moves is slow, not stuck
            (:func:`lock_holder_moving`).
        latest: the second of the two reads of every thread (``Evidence.details``): a thread
            whose wait changed between them (``UNKNOWN`` in ``details``) and waits with a
            timeout in the job's code at the second is a timed waiter that just woke, which
            is what a slow sample looks like from outside (:func:`_slow_waker`).
    """
    if proof is not None and (proof.kind is not ProofKind.KERNEL or stall.main_pid in proof.pids):
        return Assessment(True, verdict, f"proven: {proof.conclusion}", proof)
    timed: List[Tuple[ProcessSample, ThreadSample, KernelWait, Frame]] = []  # with the wait and the user's frame
    for p in sample.processes:
        if p.role not in (ROLE_MAIN, ROLE_WORKER):
            continue
        now = {x.tid: x for x in (latest or {}).get(p.pid, ())}
        for d in details.get(p.pid, ()):
            if p.role == ROLE_MAIN and d.tid != p.pid:
                continue
            t = _thread_of(stacks.get(p.pid), d.tid)
            wait = d.wait
            if (wait is None or wait.kind is WaitKind.UNKNOWN) and d.tid in now:
                wait = now[d.tid].wait  # it changed between the reads: it woke, and waits again
            if wait is None or wait.kind is not WaitKind.TIMED or t is None or states.is_loader_idle(t):
                continue
            user = frames.waits_in_user_code(t)
            if user is not None:
                timed.append((p, d, wait, user))
    entries = tuple((p.ident, d.tid, wait.signature) for p, d, wait, _ in timed)
    measure = stall.measure
    if measure == Measure.MAIN_WAIT and not (
        verdict.confirmed_by_stack and verdict.in_loader and not in_bounded_shutdown(verdict)
    ):
        # Seen from outside, main only seemed to wait for a batch; its stack does not show it
        # in the iterator (or is unknown): the activity measure's checks decide.
        measure = Measure.ACTIVITY
    reading = (
        [line for line in working(sample, stall, details, io_only=True)]
        if measure in (Measure.BATCHES, Measure.MAIN_WAIT)
        else []
    )
    if trigger == TRIGGER_BUSY and reading:
        # The ceiling is for workers that burn CPU or wait and send nothing; one that reads or
        # downloads a sample still moves data (busy_stall_timeout_s: "no I/O").
        return Assessment(
            False,
            verdict,
            f"no batch for {stall.stall_s:.0f} s, but {reading[0]}: reading a sample, slow",
            None,
            entries,
        )
    if trigger == TRIGGER_BUSY:
        return Assessment(
            True,
            verdict,
            f"no batch was delivered for {stall.no_delivery_s:.0f} s (busy_stall_timeout_s)",
            None,
            entries,
        )
    held = lock_holder_moving(sample, stall, details, locks) if proof is None else None
    if held is not None:
        return Assessment(False, verdict, held, None, entries)
    if measure == Measure.MAIN_WAIT and proof is None:
        slow = _slow_waker(stall, [(p.pid, d.tid, user) for p, d, _, user in timed])
        if slow is not None:
            return Assessment(False, verdict, slow, None, entries)
    if measure in (Measure.BATCHES, Measure.MAIN_WAIT):
        return _assess_batches(sample, stall, verdict, details, proof, entries)
    for p, d, _, user in timed:
        if (p.pid, d.tid) in woke:
            return Assessment(
                False,
                verdict,
                f"pid {p.pid} thread {d.tid} waits with a timeout in the job's code at {frames.where(user)} and keeps "
                "waking: slow, not stuck",
                None,
                entries,
            )
    if in_bounded_shutdown(verdict) and stall.stall_s < shutdown_bound_s(sample, stall_timeout_s):
        return Assessment(
            False,
            verdict,
            "main joins DataLoader workers with a timeout at shutdown (_shutdown_workers: join(timeout=5), then "
            "terminate): bounded",
            None,
            entries,
        )
    if proof is not None:  # workers that can never run again, while main is not bounded by a shutdown join
        return Assessment(True, verdict, f"proven: {proof.conclusion}", proof, entries)
    if stall.tree_quiet_s < stall.stall_s - 1e-6:
        return Assessment(
            False,
            verdict,
            f"the loader is quiet but the job's process tree did work {stall.tree_quiet_s:.0f} s ago: busy elsewhere, "
            "not provably stuck",
            None,
            entries,
        )
    return Assessment(
        True,
        verdict,
        f"the loader made no progress for {stall.stall_s:.0f} s and nothing else in the job moved",
        None,
        entries,
    )


def working(
    sample: Sample, stall: Stall, details: Mapping[int, Sequence[ThreadSample]], io_only: bool = False
) -> List[str]:
    """The loader-path processes that worked on a sample during a stall under the batch or
    main-wait measure, one sentence each: half a core of CPU or more, ``WORK_IO_BYTES_PER_S`` of I/O or more,
    ``BUSY_SHARE`` of a core with a thread running at the examination's reads (eight workers
    that compute on two cores get a quarter of a core each), or runnable (on a CPU, or waiting
    on a run queue for one: ``LoaderWork.runq_wait_s`` from ``/proc/PID/schedstat``) for
    ``RUNNABLE_SHARE`` of the window or more: a worker computing on a machine loaded far past
    its cores gets a tiny CPU share, but it waits for a CPU, not for an event (NOTE [ Run-queue
    wait ] in watchdog/collect/sampler.py). A poller sleeps between its tries: its share stays
    small, it is rarely runnable, and its threads are asleep when read. With ``io_only``, only
    I/O counts (the busy-stall ceiling's question)."""
    out = []
    span = max(stall.work_window_s, 1e-6)
    for w in stall.loader_work:
        pid, cpu_s, io_bytes = w.pid, w.cpu_s, w.io_bytes
        p = sample.process(pid)
        if p is None or p.role not in LOADER_ROLES:
            continue
        share, rate = cpu_s / span, io_bytes / span
        running = any(d.state == "R" for d in details.get(pid, ()))
        waited = w.runq_wait_s or 0.0
        runnable = share + waited / span >= RUNNABLE_SHARE
        computing = not io_only and (share >= 0.5 or (share >= BUSY_SHARE and running) or runnable)
        if computing or rate >= WORK_IO_BYTES_PER_S:
            line = (
                f"{p.role} pid {pid} used {cpu_s:.1f} s of CPU and did {io_bytes / 2**20:.1f} MiB of I/O in the "
                f"last {stall.work_window_s:.0f} s"
            )
            if waited >= 0.05 * span:
                line += (
                    f", and waited {waited:.1f} s runnable for a CPU (/proc/PID/schedstat): computing on a loaded "
                    "machine"
                )
            out.append(line)
    return out


# Seconds before a stall began within which a helper's bad end counts as what the workers may
# wait for (:func:`ended_feeder`): a decoder killed just after its last frame ends a few batches later.
FEEDER_GRACE_S = 30.0
# Signals a process of the job gets from the job itself to end a helper on purpose (terminate(),
# Ctrl-C, a closed terminal): such an end is no failure of the helper.
_DELIBERATE_SIGNALS = frozenset({1, 2, 15})


def mp_helper(sample: Sample, rec) -> bool:
    """Whether exit record ``rec`` (:class:`~watchdog.types.ExitRecord`) is of a
    ``multiprocessing`` process of the job: a child of main or of a worker that ran main's
    command line (a fork) or multiprocessing's spawn or forkserver entry."""
    main = sample.main
    parents = {p.pid for p in sample.processes if p.role in (ROLE_MAIN, ROLE_WORKER)}
    if main is None or rec.ppid not in parents:
        return False
    return rec.cmdline == main.cmdline or any("multiprocessing" in arg for arg in rec.cmdline)


def ended_feeder(sample: Sample, stall: Stall) -> Optional[str]:
    """Why busy workers are not working on a sample (issue #34, "waits on the dead"): a process
    of the job other than main and its workers (a decoder, a producer: ``Sample.exits``) ended
    badly, killed by a signal the job does not send to end a helper on purpose (SIGKILL, the OOM
    killer's; SIGSEGV) or exiting with a non-zero code, no earlier than ``FEEDER_GRACE_S``
    before the stall began; and a ``multiprocessing`` process of the job (a child of main or of a
    worker running main's command line, as a fork does, or multiprocessing's spawn or forkserver
    entry), the only kind that feeds a multiprocessing queue: a ``git`` or ``nvidia-smi`` that
    main ran and that failed says nothing of the loader. A worker that spins on ``get_nowait()``
    for what such a process put burns a core and never returns a sample: from outside it looks
    like a long computation, and without this the busy-stall ceiling alone
    (``busy_stall_timeout_s``) would report it. The
    sentence for the assessment, or ``None``. It makes the stall a suspected hang, never a proof:
    which queue or file the loop waits for is not read from outside."""
    began = sample.t_mono - stall.stall_s
    for rec in reversed(sample.exits):
        if rec.ended_mono < began - FEEDER_GRACE_S or not mp_helper(sample, rec):
            continue
        if (rec.signal is not None and rec.signal not in _DELIBERATE_SIGNALS) or rec.exit_code:
            return (
                f"pid {rec.pid}, a process of the job other than main and its workers, {rec.how()} "
                f"{max(0.0, sample.t_mono - rec.ended_mono):.0f} s before the examination"
            )
    return None


def lock_holder_moving(
    sample: Sample, stall: Stall, details: Mapping[int, Sequence[ThreadSample]], locks: Sequence[FileLock]
) -> Optional[str]:
    """Why a stall is slow, not stuck, when a loader thread waits in ``flock``/``fcntl`` for a
    lock on a file that a process of the job holds (``/proc/locks``), and that holder moved in
    the stall's last ``work_window_s`` (any I/O, or ``BUSY_SHARE`` of a core): a downloader that
    holds a dataset's lock while the archive arrives (meta-pytorch/data#409). ``None`` when no
    such wait is found. A holder outside the job, or one that does not move, dismisses nothing.
    The holder's whole process is measured (``flock`` locks belong to an open file, not a
    thread): a busy logging thread of the holder passes for it moving; the busy-stall ceiling
    still reports such a stall."""
    work = {w.pid: (w.cpu_s, w.io_bytes) for w in stall.loader_work}
    span = max(stall.work_window_s, 1e-6)
    for pid, threads in sorted(details.items()):
        p = sample.process(pid)
        if p is None or p.role not in LOADER_ROLES:
            continue
        if not any(d.wait is not None and d.wait.syscall in LOCK_CALLS for d in threads):
            continue
        for lock in locks:
            holder = sample.process(lock.holder) if lock.opener == pid and lock.holder is not None else None
            cpu_io = work.get(holder.pid) if holder is not None else None
            if holder is None or cpu_io is None or (cpu_io[1] <= 0 and cpu_io[0] < BUSY_SHARE * span):
                continue
            return (
                f"pid {pid} waits for a lock on {lock.path} that pid {holder.pid} ({holder.role}) holds "
                f"({lock.kind} {lock.mode}), and pid {holder.pid} is moving ({cpu_io[1] / 1024:.0f} KiB of I/O, "
                f"{cpu_io[0]:.1f} s of CPU in the last {stall.work_window_s:.0f} s): slow, not stuck"
            )
    return None


def _slow_waker(stall: Stall, timed: Sequence[Tuple[int, int, Frame]]) -> Optional[str]:
    """Under the main-wait measure, why a stall is slow, not stuck: a loader thread in a timed
    wait in the job's own code (``timed``: pid, tid, its frame), in a process that woke at
    least once but fewer than ``POLL_WAKES_PER_S`` times a second over the stall's last
    ``work_window_s``. From outside, a sample that sleeps or waits seconds for a remote object
    looks like that; a poller retries faster (SQLite's busy handler about 10 times a second, a
    7 ms counter poll 140). ``None`` when no such thread is found."""
    span = max(stall.work_window_s, 1e-6)
    wakes = {w.pid: w.wakes for w in stall.loader_work}
    for pid, tid, frame in timed:
        n = wakes.get(pid)
        if n and n / span < POLL_WAKES_PER_S:
            return (
                f"pid {pid} thread {tid} waits with a timeout in the job's code at {frames.where(frame)} and woke "
                f"{n} time(s) in the last {stall.work_window_s:.0f} s: slower than a poll, a sample still under way "
                "(from outside; the inside view would count its samples)"
            )
    return None


def _assess_batches(
    sample: Sample,
    stall: Stall,
    verdict: HangVerdict,
    details: Mapping[int, Sequence[ThreadSample]],
    proof: Optional[Proof],
    entries: Tuple[Tuple[ProcId, int, tuple], ...],
) -> Assessment:
    """:func:`assess` under the batch or main-wait measure: no batch came (and, with the
    inside view, no worker reached for a new sample) for the whole stall. A proof makes it
    proven; a loader process that worked (:func:`working`) makes it a slow sample, unless a
    helper of the job ended badly meanwhile (:func:`ended_feeder`: a suspected hang); anything
    else (threads that sleep, poll, retry or block) is a suspected hang, however often they
    wake."""
    if proof is not None:
        return Assessment(True, verdict, f"proven: {proof.conclusion}", proof, entries)
    busy = working(sample, stall, details)
    dead = ended_feeder(sample, stall) if busy else None
    if dead is not None:
        return Assessment(
            True,
            verdict,
            f"no batch for {stall.stall_s:.0f} s while {busy[0]}, and {dead}: what the workers compute or spin for "
            "may never come (suspected, not proven)",
            None,
            entries,
        )
    if busy:
        return Assessment(
            False,
            verdict,
            f"no batch for {stall.stall_s:.0f} s, but {busy[0]}: working on a sample, slow, not stuck",
            None,
            entries,
        )
    if stall.measure == Measure.MAIN_WAIT:
        came = (
            f"main waited for a batch in the DataLoader iterator for {stall.stall_s:.0f} s without reading a "
            "byte (no batch came)"
        )
    else:
        came = f"no batch was delivered and no worker reached for a new sample for {stall.stall_s:.0f} s"
    return Assessment(
        True,
        verdict,
        f"{came}, while the loader's processes used little CPU and I/O: they wait, poll or retry without "
        "getting anywhere",
        None,
        entries,
    )


_BLOCKED = frozenset({WaitKind.FUTEX_PRIVATE, WaitKind.FUTEX_SHARED, WaitKind.FD, WaitKind.CHILD, WaitKind.DISK})


def polling(
    first: Mapping[int, ProcessStack],
    later: Mapping[int, ProcessStack],
    before: Mapping[int, Sequence[ThreadSample]],
    after: Mapping[int, Sequence[ThreadSample]],
    gap_s: float,
) -> Tuple[Polling, ...]:
    """Threads seen polling (:class:`~watchdog.types.Polling`): the same innermost frame of the
    job's own code (file and line) in both stacks, not idle in PyTorch's loop, and at least one
    voluntary context switch between ``before`` and ``after``. A thread asleep across the gap
    (one long wait), or found in the same untimed wait (a lock, a descriptor, a child) at both
    reads, is blocked, not polling, and is left out.

    Args:
        first, later: Python stacks by pid, ``gap_s`` seconds apart.
        before, after: each process's threads (``/proc``) at the gap's ends.
    """
    out = []
    b_of = {pid: {d.tid: d for d in threads} for pid, threads in before.items()}
    a_of = {pid: {d.tid: d for d in threads} for pid, threads in after.items()}
    for pid, a in sorted(first.items()):
        b = later.get(pid)
        if a is None or b is None or not a.ok or not b.ok:
            continue
        by_tid = {t.tid: t for t in b.threads}
        for t in a.threads:
            u = by_tid.get(t.tid)
            if u is None or states.is_loader_idle(t):
                continue
            fa, fb = frames.innermost_user(t), frames.innermost_user(u)
            if fa is None or fb is None or (fa.file, fa.line) != (fb.file, fb.line):
                continue
            d0, d1 = b_of.get(pid, {}).get(t.tid), a_of.get(pid, {}).get(t.tid)
            if d0 is None or d1 is None or d0.voluntary_ctxt_switches is None or d1.voluntary_ctxt_switches is None:
                continue
            w0, w1 = d0.wait, d1.wait
            if w0 is not None and w1 is not None and w0.raw == w1.raw and w1.kind in _BLOCKED:
                continue  # the same untimed wait at both reads: blocked
            if d1.voluntary_ctxt_switches <= d0.voluntary_ctxt_switches:
                continue
            out.append(Polling(pid, t.tid, fb, d1.voluntary_ctxt_switches - d0.voluntary_ctxt_switches, gap_s))
    return tuple(out)


def loader_members(sample: Sample) -> frozenset:
    """The :class:`~watchdog.types.ProcId` of main and the workers: when it changes, the job moved."""
    return frozenset(p.ident for p in sample.processes if p.role in (ROLE_MAIN, ROLE_WORKER))


@dataclass(frozen=True)
class Termination:
    """Whether a reported hang may end the job (NOTE [ Escalation ladder ] in daemon.py).

    ``grounded`` is True when the evidence holds for the whole job: a proof that main can never
    run again, a worker proof while main's stack shows it waiting for that data (or once the
    longest bounded shutdown has passed), or the loader-level proof. Without a proof only the
    opt-in ``terminate_unproven_after_s`` grounds it (:func:`still_moving` finds nothing that
    moves); ``unproven`` then says so. ``allowed`` adds the outside-the-loader setting. ``note``
    says why, for the report's action line.
    """

    grounded: bool
    allowed: bool
    note: str
    unproven: bool = False


def still_moving(
    sample: Sample,
    stall: Stall,
    details: Mapping[int, Sequence[ThreadSample]],
    locks: Sequence[FileLock] = (),
) -> List[str]:
    """Why an unproven stall must not be ended even under ``terminate_unproven_after_s``, one
    sentence each (empty: nothing was seen moving). Over the stall's last ``work_window_s``
    (``Stall.loader_work``, from ``/proc/PID/stat`` and ``/proc/PID/io``):

    * a process of the job that is not main or a worker (a lock holder, a downloader, a worker's
      or main's child, a forkserver) used ``BUSY_SHARE`` of a core or moved any byte
      (``rchar + wchar``): what the loader waits for may be under way;
    * main or a worker used ``BUSY_SHARE`` of a core, moved ``WORK_IO_BYTES_PER_S`` (a poller's
      retries move about a kilobyte a second), or a worker thread was runnable (state ``R``) at
      the examination's reads: it computes, or reads a sample;
    * a loader thread waits in ``flock``/``fcntl`` for a lock (``/proc/locks``) whose holder is
      outside the job, or unknown: its progress cannot be measured, and a lock's holder is alive
      (the kernel releases a process's locks when it exits).
    """
    out: List[str] = []
    span = max(stall.work_window_s, 1e-6)
    for pid, cpu_s, io_bytes, *_ in stall.loader_work:
        p = sample.process(pid)
        if p is None:
            continue
        waiter = p.role in (ROLE_MAIN, ROLE_WORKER)
        threads = details.get(pid) or p.threads
        running = p.role == ROLE_WORKER and any(d.state == "R" for d in threads)
        moved_io = io_bytes >= WORK_IO_BYTES_PER_S * span if waiter else io_bytes > 0
        if cpu_s >= BUSY_SHARE * span or moved_io or running:
            out.append(
                f"{p.role} pid {pid} is alive and moving ({cpu_s:.1f} s of CPU, {io_bytes / 1024:.0f} KiB of I/O in "
                f"the last {stall.work_window_s:.0f} s{', a thread running' if running else ''})"
            )
    members = {p.pid for p in sample.processes}
    for pid, threads in sorted(details.items()):
        p = sample.process(pid)
        if p is None or p.role not in LOADER_ROLES:
            continue
        if not any(d.wait is not None and d.wait.syscall in LOCK_CALLS for d in threads):
            continue
        for lock in locks:
            if lock.opener == pid and lock.holder not in members:
                who = f"pid {lock.holder}, outside the job" if lock.holder is not None else "an open file description"
                out.append(f"pid {pid} waits for a lock on {lock.path} held by {who}: its progress cannot be measured")
                break
    return out


def termination(
    assessment: Assessment,
    stall: Stall,
    sample: Sample,
    stall_timeout_s: float,
    terminate_unproven_after_s: Optional[float],
    terminate_outside_loader: bool,
    details: Optional[Mapping[int, Sequence[ThreadSample]]] = None,
    locks: Sequence[FileLock] = (),
) -> Termination:
    """Decide whether ``assessment``'s hang may end the job (see :class:`Termination`).

    ``on_hang: terminate`` ends a job only on a proof (NOTE [ Deadlock proof ]). An unproven
    stall, however long (``busy_stall_timeout_s`` included), ends it only with the opt-in
    ``terminate_unproven_after_s`` (seconds; ``None``: off), once no batch came for that long,
    main's stack shows it in its loader and nothing of the job moves (:func:`still_moving`:
    ``details`` the examination's ``/proc`` thread reads by pid, ``locks`` the file locks
    loader processes wait on)."""
    verdict, proof = assessment.verdict, assessment.proof
    main_proven = proof is not None and proof.kind is ProofKind.KERNEL and stall.main_pid in proof.pids
    waiting_for_data = verdict.confirmed_by_stack and verdict.in_loader and not in_bounded_shutdown(verdict)
    bound_s = shutdown_bound_s(sample, stall_timeout_s)
    unproven = False
    if main_proven or (
        proof is not None and proof.kind in (ProofKind.LOADER_IDLE, ProofKind.WAITS_ON_DEAD, ProofKind.MANAGER_CYCLE)
    ):
        grounded, note = True, "proven: the job cannot move"
    elif proof is not None and (waiting_for_data or stall.stall_s >= bound_s):
        grounded, note = True, "proven: workers can never run again and main waits for their data"
    elif proof is not None:
        grounded, note = (
            False,
            (
                "proven stuck workers, but main's stack is unknown and PyTorch's shutdown would end them within "
                f"{bound_s:.0f} s: terminate waits until then"
            ),
        )
    elif terminate_unproven_after_s is None:
        grounded, note = (
            False,
            "suspected, not proven: on_hang=terminate ends a job only on a proof (terminate_unproven_after_s is off)",
        )
    elif stall.no_delivery_s < terminate_unproven_after_s:
        grounded, note = (
            False,
            f"suspected, not proven: no batch for {stall.no_delivery_s:.0f} s, under terminate_unproven_after_s "
            f"({terminate_unproven_after_s:g} s)",
        )
    elif not waiting_for_data:
        grounded, note = False, "suspected, not proven, and main's stack does not show it waiting for a batch"
    elif moving := still_moving(sample, stall, details or {}, locks):
        grounded, note = False, f"suspected, not proven, and {moving[0]}: not ended while it moves"
    else:
        grounded, unproven = True, True
        note = (
            f"NOT proven: no batch for {stall.no_delivery_s:.0f} s (terminate_unproven_after_s "
            f"{terminate_unproven_after_s:g} s) and nothing in the job moved in the last {stall.work_window_s:.0f} s"
        )
    allowed = verdict.in_loader or main_proven or terminate_outside_loader
    if grounded and not allowed:
        note = "outside the DataLoader and terminate_outside_loader is false"
    return Termination(grounded, allowed, note, unproven)


# --- the hang episode ---------------------------------------------------------------------------

# A suspected stall that resolved by itself is not reported again at the same place until a
# stall there lasts this many times the longest one that resolved.
RECUR_FACTOR = 2.0


@dataclass(frozen=True)
class Reported:
    """The last hang report of an :class:`Episode`, kept while its hang lasts (no batch since).

    ``delivery`` is the tracker's delivery mark then (``ProgressTracker.last_delivery_mono``),
    ``batch`` its batch mark (``ProgressTracker.last_batch_mono``) when the stall was measured
    in batches, else ``None``, ``members`` the loader's members then (:func:`loader_members`),
    ``terminable`` whether the hang could be ended then (:func:`termination`), ``proven``
    whether the report held a proof, ``key`` the first diagnosis's ``(kind, location)``,
    ``since`` when its stall began and ``published`` False for a recurring suspected stall that
    was looked at and not reported again (monotonic seconds)."""

    delivery: Optional[float]
    terminable: bool
    proven: bool
    key: Tuple[str, str] = ("", "")
    since: float = 0.0
    published: bool = True
    batch: Optional[float] = None
    members: frozenset = frozenset()


class Conclusion(TextEnum):
    """What an examination concluded (:meth:`Episode.conclude`)."""

    REPORT = "report"  # a hang: take the closer look and report it (and end the job when allowed)
    DISMISS = "dismiss"  # not a hang: the stall clock restarts
    LOOK_AGAIN = "look_again"  # past the batch rhythm, not proven: wait for stall_timeout_s
    PEER = "peer"  # stalled outside its loader while another rank's loader is stuck
    REPORTED = "reported"  # the same hang, already reported, and this look changes nothing


@dataclass(frozen=True)
class Decision:
    """An examination's outcome: ``conclusion``, the ``assessment`` it rests on, and for a
    report whether the hang may end the job (``termination``, ``terminate``: ``on_hang`` is
    ``terminate`` and it may). ``peer`` names the stalled rank under ``Conclusion.PEER``."""

    conclusion: Conclusion
    assessment: Assessment
    termination: Optional[Termination] = None
    terminate: bool = False
    peer: str = ""

    @property
    def terminable(self) -> bool:
        """Whether the hang could be ended now (the evidence holds and the settings allow it)."""
        return self.termination is not None and self.termination.grounded and self.termination.allowed


class Episode:
    """The hang-episode policy of one watched main, pure (the clock is passed in): when an
    examination is due, what it concludes, what was already reported, when a stall counts as
    resolved, and whether a new look at the same hang is reported (NOTE [ Escalation ladder ]
    in daemon.py).

    Args:
        stall_timeout_s, busy_stall_timeout_s: the configured timeouts, in seconds.
        terminate: ``on_hang`` is ``terminate``.
        terminate_outside_loader: the setting of that name (:func:`termination`).
        terminate_unproven_after_s: the opt-in of that name, seconds (``None``: off;
            :func:`termination`).
    """

    def __init__(
        self,
        stall_timeout_s: float,
        busy_stall_timeout_s: float,
        terminate: bool,
        terminate_outside_loader: bool = False,
        terminate_unproven_after_s: Optional[float] = None,
    ) -> None:
        self.stall_timeout_s = stall_timeout_s
        self.busy_stall_timeout_s = busy_stall_timeout_s
        self.terminate = terminate
        self.terminate_outside_loader = terminate_outside_loader
        self.terminate_unproven_after_s = terminate_unproven_after_s
        self.reported: Optional[Reported] = None
        self.quiet_floor = float("-inf")  # when an examination last found no hang (or looked again)
        self.rhythm_floor = float("-inf")  # when a batch-rhythm examination last proved nothing
        self.resolved: Dict[Tuple[str, str], float] = {}  # (kind, location) -> longest stall that resolved

    def due(self, stall: Stall, now: float, rule: Optional[Rhythm] = None) -> Optional[Trigger]:
        """The trigger of an examination due now (:func:`due_trigger`), or ``None``; while the
        last report's hang lasts, only a proof, the busy-stall ceiling, or (``terminate`` with
        ``terminate_unproven_after_s`` set and no batch for that long) the stall timeout, that
        could escalate it: end it (``terminate``, once it may be ended) or prove it (``report``,
        when unproven)."""
        trigger = due_trigger(
            stall, self.stall_timeout_s, self.busy_stall_timeout_s, self.quiet_floor, now, rule, self.rhythm_floor
        )
        last = self.reported
        if trigger is None or last is None:
            return trigger
        opt_in = self.terminate_unproven_after_s
        unproven_due = (
            self.terminate and opt_in is not None and trigger == TRIGGER_STALL and stall.no_delivery_s >= opt_in
        )
        if trigger not in (TRIGGER_PROOF, TRIGGER_BUSY) and not unproven_due:
            return None
        escalates = not last.terminable if self.terminate else not last.proven
        return trigger if escalates else None

    def delivered(
        self, delivery: Optional[float], now: float, batch: Optional[float] = None, members: frozenset = frozenset()
    ) -> Optional[Reported]:
        """Fold in the tracker's marks (``delivery``: ``ProgressTracker.last_delivery_mono``,
        ``batch``: ``last_batch_mono``, ``members``: the loader's members now): when the job
        moved since the last report, that report's hang is over. Returns the report when it
        was a suspected one that had been published (the caller says ``resolved after N s``),
        else ``None``.

        A hang reported under the batch measure is over only when a batch or a sample moved
        (``batch`` rose): workers that went away, or main's work once it left ``__next__`` by
        an exception, are no delivery. Otherwise the delivery mark must move while the loader
        did not merely lose workers (the members now a strict subset of those reported: a
        killed worker, or a job that is ending, never delivers a batch)."""
        last = self.reported
        if last is None:
            return None
        if last.batch is not None:
            if batch is None or batch <= last.batch:
                return None
        elif delivery == last.delivery or (last.members and members < last.members):
            return None
        self.reported = None
        if last.proven:
            return None
        self.resolved[last.key] = max(self.resolved.get(last.key, 0.0), now - last.since)
        return last if last.published else None

    def conclude(
        self,
        evidence: Evidence,
        sample: Sample,
        stall: Stall,
        woke: Set[Tuple[int, int]],
        now: float,
        stalled_peers: Sequence[str] = (),
    ) -> Decision:
        """Decide on an examination of ``stall`` (due in ``sample``) from what it read.

        The kernel proof over ``evidence.stable`` (:func:`prove`, kept when it covers main or a
        worker), else a Manager lock whose holder ended (``dead_releaser.prove_manager_lock``)
        or a cycle through a Manager (``manager_proof.prove_manager_cycle``),
        else the loader-level one (:func:`prove_loader_idle`); main's verdict
        (:func:`confirm`); then :func:`assess`, unless the workers changed during the look (an
        epoch ended: the job moved). An early (batch-rhythm) look reports only a proof. A rank
        (``stalled_peers`` given, from :meth:`~watchdog.watch.node_loop.JobWatcher.loader_stalls`)
        stalled outside its loader, unproven, waits for the first of those peers. A hang
        already reported is reported again only when this look could end it or proves it
        first. ``woke`` is :meth:`ProgressTracker.woke_during_stall`; ``now`` monotonic
        seconds. Records the floors of :meth:`due` as it decides."""
        main = sample.main
        assert main is not None, "a stall is only declared with main in the sample"
        stacks = evidence.stacks
        threads = [(pid, t) for pid, st in stacks.items() if st.ok for t in st.threads]
        inert = [(pid, t.tid) for pid, t in threads if frames.is_resource_sharer(t)]
        names = {(pid, t.tid): t.name for pid, t in threads if t.name}
        proof = relevant(
            prove(
                evidence.stable,
                evidence.children,
                evidence.pipes,
                inert,
                names,
                evidence.wakeable,
                evidence.lock_holds,
                loader_waits(sample, stacks),
                role_words(sample),
            ),
            sample,
        )
        verdict = confirm(main.pid, stacks.get(main.pid), evidence.details.get(main.pid, ()), len(sample.workers))
        early = stall.trigger == TRIGGER_RHYTHM
        if proof is None:  # a Manager lock whose holder ended (NOTE [ Manager lock proof ] in manager_proof.py)
            proof = dead_releaser.prove_manager_lock(
                sample, stacks, evidence.stable, loader_waits(sample, stacks), evidence.wakeable, evidence.manager_peers
            )
        if proof is None:  # a cycle through a Manager among the living (the same NOTE)
            proof = manager_proof.prove_manager_cycle(
                sample,
                stacks,
                evidence.stable,
                loader_waits(sample, stacks),
                evidence.wakeable,
                evidence.manager_peers,
                role_words(sample),
            )
        if proof is None:
            timeout = min(self.stall_timeout_s, stall.stall_s) if early else self.stall_timeout_s
            proof = prove_loader_idle(verdict, sample, stacks, stall, timeout)
        assessment = assess(
            stall.trigger,
            sample,
            stall,
            verdict,
            stacks,
            evidence.stable,
            proof,
            woke,
            self.stall_timeout_s,
            evidence.file_locks,
            evidence.details,
        )
        if loader_members(evidence.after) != loader_members(sample):
            assessment = Assessment(False, verdict, "the job's workers changed during the examination: it moved")
        if early and assessment.hang and assessment.proof is None:
            # NOTE [ Batch rhythm ]: before stall_timeout_s only a proven hang is reported.
            self.rhythm_unproven(now)
            return Decision(Conclusion.LOOK_AGAIN, assessment)
        if not assessment.hang:
            self.dismissed(now)
            return Decision(Conclusion.DISMISS, assessment)
        if stalled_peers and not verdict.in_loader and assessment.proof is None:
            self.dismissed(now)
            return Decision(Conclusion.PEER, assessment, peer=stalled_peers[0])
        ending = termination(
            assessment,
            stall,
            sample,
            self.stall_timeout_s,
            self.terminate_unproven_after_s,
            self.terminate_outside_loader,
            evidence.details,
            evidence.file_locks,
        )
        decision = Decision(Conclusion.REPORT, assessment, ending)
        decision = dataclasses.replace(decision, terminate=self.terminate and decision.terminable)
        if self.already_reported(decision.terminate, assessment.proof is not None):
            # Already reported, and this look would neither end it nor prove it: no second
            # report (nor alert) of the same hang; look again later.
            self.dismissed(now)
            return dataclasses.replace(decision, conclusion=Conclusion.REPORTED)
        return decision

    def dismissed(self, now: float) -> None:
        """An examination found no hang (or looked and decided to look again later)."""
        self.quiet_floor = now

    def rhythm_unproven(self, now: float) -> None:
        """A batch-rhythm examination found nothing proven: it waits for ``stall_timeout_s``."""
        self.rhythm_floor = now

    def already_reported(self, terminate: bool, proven: bool) -> bool:
        """Whether a look at a hang already reported would neither end it (``terminate``) nor
        prove it for the first time: then nothing is reported (nor alerted) again."""
        last = self.reported
        return last is not None and not terminate and (not proven or last.proven)

    def report(self, reported: Reported, stall: Stall, now: float) -> bool:
        """Record a hang report about to be written; returns False when it is a suspected stall
        at a place where one resolved by itself before and this one has not yet lasted
        ``RECUR_FACTOR`` times the longest of those (one episode, one report), so it is not
        published. The busy-stall ceiling is always published."""
        self.quiet_floor = now
        longest = self.resolved.get(reported.key)
        recurs = (
            not reported.proven
            and longest is not None
            and stall.trigger != TRIGGER_BUSY
            and stall.stall_s < RECUR_FACTOR * longest
        )
        self.reported = dataclasses.replace(reported, published=not recurs)
        return not recurs

"""Hang detection: is the job still moving? Pure functions of samples and stacks.

NOTE [ Hang criterion ]
A job is stalled when neither its iterating thread (main's main thread, ``tid == pid``) nor
any DataLoader worker thread has made progress for ``stall_timeout_s``. Progress is judged
per thread, never per process, because busy background threads (loggers, uploaders,
checkpoint writers) keep a process's CPU up while its training loop is stuck. A thread made
progress since its last mark when any of these moved past its mark:

* its I/O byte count (``rchar + wchar``: a batch read from a pipe or socket, a file read);
* its CPU time, by at least ``cpu_progress_s``;
* its voluntary context switches, by more than the periodic wake-ups allow.

PyTorch's waiting loops (main's ``_try_get_data``, an idle worker's ``index_queue.get``, the
pin-memory thread) wake every ``MP_STATUS_CHECK_INTERVAL`` (5 s) to check liveness, with no
I/O and microseconds of CPU; under GIL contention each wake-up costs a few voluntary switches
(3 per 5 s measured here beside a busy thread). Those switches are allowed for: a waiting
thread is quiet, and a deadlocked one shows nothing at all. Workers appearing or exiting
(each epoch without ``persistent_workers``) count as progress too. After py-spy attaches
(which makes threads switch), marks are re-based without counting progress.

A second, slower criterion catches workers that burn CPU without ever sending a batch (an
endless loop in ``__getitem__``): when main's iterating thread is quiet and no worker thread
did any I/O for ``busy_stall_timeout_s``, the stall is examined too (``Stall.no_delivery_s``).
CPU-only progress cannot be told apart from a slow CPU-bound batch before that, hence the
longer default.

A stall is then confirmed from main's stack (:func:`confirm`): the iterating thread inside
the DataLoader iterator waiting for data is a DataLoader hang; anywhere else it is
``stall_outside_loader``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from . import frames
from .types import ROLE_WORKER, HangVerdict, ProcessSample, ProcessStack, Sample, Stall, ThreadDetail

# Voluntary switches one periodic wake-up may cost (measured: ~3 under GIL contention).
WAKE_SWITCH_ALLOWANCE = 4

_Key = Tuple[int, float]  # (pid, create_time): pids are reused


@dataclass
class _Mark:
    t_mono: float
    cpu_s: float
    vol: int
    io: Optional[int]


def _watched_threads(p: ProcessSample, main_pid: int):
    if p.pid == main_pid:
        return [t for t in p.threads if t.tid == p.pid]
    return list(p.threads)


class ProgressTracker:
    """Tracks per-thread progress marks across samples (see NOTE [ Hang criterion ]).

    Args:
        cpu_progress_s: CPU seconds since the mark that count as progress.
        wake_interval_s: the period of PyTorch's liveness wake-ups, in seconds.
    """

    def __init__(self, cpu_progress_s: float, wake_interval_s: float = frames.MP_STATUS_CHECK_INTERVAL_S) -> None:
        self.cpu_progress_s = cpu_progress_s
        self.wake_interval_s = wake_interval_s
        self._marks: Dict[Tuple[_Key, int], _Mark] = {}
        self._pid_progress: Dict[_Key, float] = {}
        self._last_progress: Optional[float] = None
        self._last_delivery: Optional[float] = None
        self._members: frozenset = frozenset()

    @staticmethod
    def _did_io(mark: _Mark, t) -> bool:
        return t.io_bytes is not None and mark.io is not None and t.io_bytes != mark.io

    def _moved(self, mark: _Mark, t, now: float) -> bool:
        if self._did_io(mark, t):
            return True
        if t.cpu_s - mark.cpu_s >= self.cpu_progress_s:
            return True
        allowance = WAKE_SWITCH_ALLOWANCE * (1 + (now - mark.t_mono) / self.wake_interval_s)
        return t.voluntary_ctxt_switches - mark.vol > allowance

    def update(self, sample: Sample) -> None:
        """Fold one sample in; call once per sample, in time order."""
        now = sample.t_mono
        main = sample.main
        if main is None:
            return
        watched = [p for p in sample.processes if p.pid == main.pid or p.role == ROLE_WORKER]
        members = frozenset((p.pid, p.create_time) for p in watched)
        if self._last_progress is None or members != self._members:
            self._last_progress = self._last_delivery = now  # workers came or went: the job moved
        self._members = members
        seen = set()
        for p in watched:
            pkey = (p.pid, p.create_time)
            self._pid_progress.setdefault(pkey, now)
            for t in _watched_threads(p, main.pid):
                key = (pkey, t.tid)
                seen.add(key)
                mark = self._marks.get(key)
                if mark is None or self._moved(mark, t, now):
                    if mark is None or p.pid == main.pid or self._did_io(mark, t):
                        self._last_delivery = now
                    self._marks[key] = _Mark(now, t.cpu_s, t.voluntary_ctxt_switches, t.io_bytes)
                    self._pid_progress[pkey] = now
                    self._last_progress = now
        for key in list(self._marks):
            if key not in seen:
                del self._marks[key]
        for pkey in list(self._pid_progress):
            if pkey not in members:
                del self._pid_progress[pkey]

    def rebaseline(self, sample: Sample) -> None:
        """Move every mark's counters to ``sample`` without counting it as progress (after
        py-spy attached, which perturbs context switches and CPU)."""
        main = sample.main
        if main is None:
            return
        for p in sample.processes:
            for t in _watched_threads(p, main.pid):
                key = ((p.pid, p.create_time), t.tid)
                mark = self._marks.get(key)
                if mark is not None:
                    self._marks[key] = _Mark(mark.t_mono, t.cpu_s, t.voluntary_ctxt_switches, t.io_bytes)

    def stall(self, sample: Sample) -> Optional[Stall]:
        """The current stall as of ``sample`` (``stall_s`` may be small), or ``None`` before
        main was seen."""
        main = sample.main
        if main is None or self._last_progress is None:
            return None
        now = sample.t_mono
        ages = tuple(sorted((pkey[0], now - t) for pkey, t in self._pid_progress.items()))
        return Stall(
            stall_s=now - self._last_progress,
            quiet_since_mono=self._last_progress,
            main_pid=main.pid,
            progress_age_s=ages,
            no_delivery_s=now - self._last_delivery,
        )

    @property
    def last_delivery_mono(self) -> Optional[float]:
        """When main's iterating thread last moved or a worker last did I/O (``time.monotonic()``)."""
        return self._last_delivery


class WorkerBirths:
    """Remembers, for each worker, how many threads main had in the sample before the worker
    first appeared (H-FORKTHREADS in ``shared/field-notes.md``: a multi-threaded parent at
    fork time is the risk factor of every inherited-lock deadlock)."""

    def __init__(self) -> None:
        self._prev_main_threads: Optional[int] = None
        self._known: Dict[int, int] = {}
        self._seen: set = set()

    def update(self, sample: Sample) -> None:
        """Fold one sample in."""
        main = sample.main
        if main is None:
            return
        live = set()
        for w in sample.workers:
            live.add(w.pid)
            if w.pid not in self._known and self._prev_main_threads is not None:
                self._known[w.pid] = self._prev_main_threads  # unknown for workers already there at the first sample
        for pid in list(self._known):
            if pid not in live:
                del self._known[pid]
        self._prev_main_threads = main.num_threads
        self._seen.update(live)

    def first_seen(self, pid: int) -> bool:
        """True once ``pid`` has been seen as a worker."""
        return pid in self._seen

    def as_tuple(self) -> Tuple[Tuple[int, int], ...]:
        """``(worker pid, main's thread count before it appeared)`` pairs."""
        return tuple(sorted(self._known.items()))


def confirm(main_pid: int, main_stack: Optional[ProcessStack], main_threads: Tuple[ThreadDetail, ...], worker_count: int) -> HangVerdict:
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
                return HangVerdict("dataloader", True, "the iterating thread waits for a batch in the DataLoader iterator", t)
        for t in ordered:
            if frames.has_frame(t, frames.LOADER_SHUTDOWN_FUNCS, frames.DATALOADER_FILE):
                return HangVerdict("dataloader", True, "the main process is shutting the DataLoader iterator down", t)
        main_thread = ordered[0] if ordered else None
        return HangVerdict("outside_loader", True, "the main thread is not inside a DataLoader iterator", main_thread)
    main_detail = next((t for t in main_threads if t.tid == main_pid), None)
    wchan = main_detail.wchan if main_detail else None
    family = frames.wchan_family(wchan)
    shown = wchan if family else "a wait channel the kernel hides (no permission)"
    if worker_count and family in ("poll", "futex", None):
        return HangVerdict("dataloader", False, f"no stack; DataLoader workers exist and main's main thread waits in {shown}")
    return HangVerdict(
        "outside_loader", False, "no stack; " + ("no DataLoader workers" if not worker_count else f"main's main thread waits in {shown}")
    )

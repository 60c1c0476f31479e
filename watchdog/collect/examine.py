"""The I/O of an examination: everything read from the job when a stall comes due, and the
closer look taken once it is judged a hang. Reads and dumps only; what they mean is decided by
:meth:`watchdog.detect.Episode.conclude` (NOTE [ Escalation ladder ] in watch/hang_episodes.py).

Two looks, both bounded by one deadline (``time.monotonic()`` seconds):

- :func:`look` (step 2 of the ladder): every thread's kernel wait read twice ``STABLE_GAP_S``
  apart, the holders of the pipes the unmoved threads wait on, Python-only py-spy dumps of
  main and the workers (and of the server of a ``multiprocessing.Manager`` a worker waits on),
  their timer wake-ups and the file locks lock waiters wait for, and the job's sample after it
  all: an :class:`~watchdog.types.Evidence`.
- :func:`look_closer` (step 3): under the batch and main-wait measures first a second
  Python-only dump of the workers ``POLL_GAP_S`` later (:class:`PollLook`), then the full dumps
  (native frames and locals when configured), the source lines of their frames, open files,
  file locks, wait chains, worker start times and the lock files that name a holder
  (``lockfiles.find``): a :class:`CloserLook`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .. import frames
from ..types import (
    ROLE_MAIN,
    ROLE_OTHER,
    ROLE_WORKER,
    Evidence,
    FdKind,
    FdTarget,
    FileLock,
    KernelWait,
    LockFile,
    PipeEnds,
    ProcessStack,
    Sample,
    ThreadSample,
    WaitKind,
    WaitLink,
)
from . import chain, lockfiles, procfs, pyspy, sockets
from .waits import LOCK_CALLS

# Seconds between the two reads of every thread's wait that a proof compares.
STABLE_GAP_S = 0.25
# Seconds between the two stacks of the workers that show a thread polling at one line.
POLL_GAP_S = 2.0
# Seconds a look and a closer look may spend besides their py-spy dumps: the two gaps, and a
# generous allowance for reading /proc, source lines and open files.
OUTSIDE_DUMPS_S = STABLE_GAP_S + POLL_GAP_S + 2.75
# Python frames per thread whose source lines go into the report.
SOURCE_FRAMES_PER_THREAD = 12

Details = Mapping[int, Sequence[ThreadSample]]


def stable_details(first: Details, second: Details) -> Dict[int, Tuple[ThreadSample, ...]]:
    """``second`` with the wait of every thread that changed since ``first`` (another system
    call or arguments, more voluntary context switches, or absent from one read) made
    ``UNKNOWN``: a proof rests only on threads that were asleep, unmoved, across both reads
    (NOTE [ Deadlock proof ] in detect/proof.py)."""
    out = {}
    for pid, threads in second.items():
        before = {d.tid: d for d in first.get(pid, ())}
        kept = []
        for d in threads:
            b = before.get(d.tid)
            same = (
                b is not None
                and b.wait is not None
                and d.wait is not None
                and b.wait.raw == d.wait.raw
                and b.voluntary_ctxt_switches == d.voluntary_ctxt_switches
            )
            kept.append(
                d
                if same
                else dataclasses.replace(d, wait=KernelWait(WaitKind.UNKNOWN, detail="changed between two reads"))
            )
        out[pid] = tuple(kept)
    return out


def pipe_ends(details: Details) -> PipeEnds:
    """Holders of the pipes that the threads in ``details`` read or write (one scan of every
    process's descriptors, :func:`~watchdog.collect.procfs.pipe_holders`)."""
    targets = {}
    for pid, threads in details.items():
        for d in threads:
            if d.wait is not None and d.wait.fd is not None:
                target = procfs.read_fd_target(pid, d.wait.fd)
                if target is not None:
                    targets[(pid, d.wait.fd)] = target
    pipes = {t.path for t in targets.values() if t.kind is FdKind.PIPE}
    if not pipes:
        return PipeEnds(targets, {}, {}, True)
    readers, writers, complete = procfs.pipe_holders(pipes)
    return PipeEnds(targets, readers, writers, complete)


def _stopped(sample: Sample) -> set:
    return {p.pid for p in sample.processes if p.state in ("T", "t")}


# Children of main dumped as the possible server of a multiprocessing.Manager that a worker waits on.
MANAGERS = 2


def manager_servers(sample: Sample, stacks: Mapping[int, ProcessStack], stopped: Iterable[int] = ()) -> List[int]:
    """The children of main that may serve the ``multiprocessing.Manager`` a worker waits on
    (a worker's stack in a proxy call, ``frames.manager_call``; ``BaseManager.start`` forks the
    server from main, CPython's Lib/multiprocessing/managers.py): up to ``MANAGERS`` of role
    ``other``, not stopped; empty when no worker waits on a proxy."""
    main = sample.main
    if main is None or not any(
        frames.manager_call(t) is not None for w in sample.workers if (st := stacks.get(w.pid)) for t in st.threads
    ):
        return []
    return [p.pid for p in sample.processes if p.ppid == main.pid and p.role == ROLE_OTHER and p.pid not in stopped][
        :MANAGERS
    ]


def look(sample: Sample, pyspy_path: Optional[str], timeout_s: float, resample) -> Evidence:
    """Read what an examination of ``sample``'s stall rests on (the module's first look).

    Args:
        sample: the tick's sample in which the stall came due (main in it).
        pyspy_path: the py-spy binary, or ``None`` (then no stacks; each process says why).
        timeout_s: ``py_spy.timeout_s``; the dumps are over within half of it.
        resample: takes the job's sample once the look is over (``Sampler.sample``).

    Blocks for ``STABLE_GAP_S`` plus the dumps; never raises for a process that ended meanwhile
    (its reads come back empty)."""
    pids = [p.pid for p in sample.processes]
    first = {pid: procfs.thread_details(pid) for pid in pids}
    time.sleep(STABLE_GAP_S)
    details = {pid: procfs.thread_details(pid) for pid in pids}
    stable = stable_details(first, details)
    children = {p.pid: tuple(c.pid for c in sample.processes if c.ppid == p.pid) for p in sample.processes}
    stopped = _stopped(sample)
    live = [p.pid for p in sample.processes if p.role in (ROLE_MAIN, ROLE_WORKER) and p.pid not in stopped]
    d_state = [p.pid for p in sample.processes if p.state == "D"]
    deadline = time.monotonic() + timeout_s / 2
    quick = pyspy.dump_all(live, pyspy_path, False, timeout_s, disk_sleep=d_state, deadline=deadline)
    servers = manager_servers(sample, quick, stopped)
    peers, listeners = {}, {}
    if servers:  # NOTE [ Manager lock proof ] in watchdog/manager_proof.py needs the manager's stack and clients
        quick = {**quick, **pyspy.dump_all(servers, pyspy_path, False, timeout_s, deadline=deadline)}
        peers = {srv: held for srv in servers if (held := sockets.peer_holders(srv, pids)) is not None}
        listeners = {srv: sockets.private_listeners(srv) for srv in servers}
    wakeable = {pid: why for pid in pids for why in [procfs.timer_wakeup(pid)] if why}
    lock_waiters = [
        pid
        for pid, threads in stable.items()
        if any(d.wait is not None and d.wait.syscall in LOCK_CALLS for d in threads)
    ]
    return Evidence(
        details=details,
        stable=stable,
        children=children,
        pipes=pipe_ends(stable),
        stacks=quick,
        wakeable=wakeable,
        file_locks=procfs.file_locks(lock_waiters) if lock_waiters else (),
        after=resample(),
        gap_s=STABLE_GAP_S,
        lock_holds=chain.lock_holds(stable, sample.main.start_ticks if sample.main else None) if lock_waiters else {},
        manager_peers=peers,
        manager_listeners=listeners,
        non_blocking_gets=non_blocking_gets(sample, quick),
    )


def non_blocking_gets(sample: Sample, stacks: Mapping[int, ProcessStack]) -> Tuple[int, ...]:
    """The workers of ``sample`` whose loop thread, in ``stacks``, is inside a queue's
    ``get_nowait`` or whose innermost frame of the job's code is at, or up to
    ``frames.ENCLOSING_LINES`` below, a line that gets from a queue without blocking
    (``frames.NON_BLOCKING_GET``; the source read by ``procfs.source_lines``, as the job's user
    could): a worker spinning for what another process was to put (issue #34, a decoder killed
    while the workers spin on ``get_nowait()``), not one computing a sample."""
    out = []
    for p in sample.processes:
        stack = stacks.get(p.pid)
        if p.role != ROLE_WORKER or stack is None or not stack.ok:
            continue
        loop = frames.worker_loop_thread(stack.threads)
        if loop is None:
            continue
        if frames.in_non_blocking_get(loop):
            out.append(p.pid)
            continue
        user = frames.innermost_user(loop)
        if user is None or user.native:
            continue
        wanted = [(user.file, line) for line in range(max(1, user.line - frames.ENCLOSING_LINES), user.line + 1)]
        if any(frames.NON_BLOCKING_GET.search(text) for text in procfs.source_lines(p.pid, wanted).values()):
            out.append(p.pid)
    return tuple(out)


@dataclass(frozen=True)
class PollLook:
    """The workers' second Python-only dump ``gap_s`` seconds after the first (``later``), and
    every thread's ``/proc`` details just before and after the gap, for
    :func:`watchdog.detect.polling`."""

    later: Mapping[int, ProcessStack]
    before: Mapping[int, Tuple[ThreadSample, ...]]
    after: Mapping[int, Tuple[ThreadSample, ...]]
    gap_s: float


@dataclass(frozen=True)
class CloserLook:
    """What a hang report adds to the :class:`~watchdog.types.Evidence` (the module's second
    look), in the shapes of :class:`~watchdog.types.Facts`: ``stacks`` keyed by pid, each
    ``(pid, …)`` tuple sorted by pid."""

    stacks: Mapping[int, ProcessStack]
    source_lines: Tuple[Tuple[Tuple[str, int], str], ...]
    open_files: Tuple[Tuple[int, Tuple[FdTarget, ...]], ...]
    file_locks: Tuple[FileLock, ...]
    chains: Tuple[Tuple[WaitLink, ...], ...]
    worker_start_ticks: Tuple[Tuple[int, int], ...]
    poll: Optional[PollLook] = None
    opening: Tuple[Tuple[int, int, str], ...] = ()
    lock_files: Tuple[LockFile, ...] = ()


def _poll_look(sample: Sample, first: Mapping[int, ProcessStack], pyspy_path: Optional[str], timeout_s: float):
    stopped = _stopped(sample)
    pids = [p.pid for p in sample.workers if p.pid not in stopped and first.get(p.pid) is not None]
    if not pids:
        return None
    before = {pid: procfs.thread_details(pid) for pid in pids}
    time.sleep(POLL_GAP_S)
    after = {pid: procfs.thread_details(pid) for pid in pids}
    later = pyspy.dump_all(pids, pyspy_path, False, timeout_s / 2, deadline=time.monotonic() + timeout_s / 2)
    return PollLook(later, before, after, POLL_GAP_S)


def chains(sample: Sample, details: Details) -> Tuple[Tuple[WaitLink, ...], ...]:
    """The wait chain of each worker whose main thread is blocked on a descriptor, a child or
    the disk (:func:`~watchdog.collect.chain.follow`)."""
    out = []
    job = {p.pid for p in sample.processes}
    for w in sample.workers:
        d = next((x for x in details.get(w.pid, ()) if x.tid == w.pid), None)
        if d is not None and d.wait is not None and d.wait.kind in (WaitKind.FD, WaitKind.CHILD, WaitKind.DISK):
            out.append(chain.follow(w.pid, d, job))
    return tuple(out)


def look_closer(
    sample: Sample,
    evidence: Evidence,
    pids: Sequence[int],
    pyspy_path: Optional[str],
    py_spy,
    deadline: float,
    poll: bool,
    more_sources: Iterable[Tuple[int, List[Tuple[str, int]]]] = (),
) -> CloserLook:
    """Take the closer look of a hang report (the module's second look).

    Args:
        sample: the sample the stall came due in; ``evidence`` the first look at it.
        pids: the processes to dump in full (main, the workers, a forkserver), in that order.
        pyspy_path: the py-spy binary, or ``None``.
        py_spy: the ``py_spy`` settings (``native``, ``locals``, ``timeout_s``).
        deadline: when the full dumps must be over (``time.monotonic()`` seconds); a
            :class:`PollLook`, taken first when ``poll``, moves it to at least half of
            ``py_spy.timeout_s`` after that look.
        more_sources: ``(pid, [(file, line), …])`` of further source lines to read (the
            lines around the frames of the threads main had at each fork).

    What a dump leaves out keeps its Python stack from ``evidence`` and says why."""
    polled = _poll_look(sample, evidence.stacks, pyspy_path, py_spy.timeout_s) if poll else None
    if poll:
        deadline = max(deadline, time.monotonic() + py_spy.timeout_s / 2)
    stopped = _stopped(sample)
    d_state = [p.pid for p in sample.processes if p.state == "D"]
    dumpable = [pid for pid in pids if sample.process(pid) is not None and pid not in stopped]
    stacks = pyspy.dump_all(
        dumpable,
        pyspy_path,
        py_spy.native,
        py_spy.timeout_s,
        py_spy.locals,
        d_state,
        deadline=deadline,
        python_stacks=dict(evidence.stacks),
    )
    sources: Dict[Tuple[str, int], str] = {}
    for pid, st in stacks.items():
        wanted = [
            (f.file, f.line)
            for t in st.threads
            for f in [x for x in t.frames if not x.native][:SOURCE_FRAMES_PER_THREAD]
        ]
        sources.update(procfs.source_lines(pid, wanted))
    for pid, wanted in more_sources:
        sources.update(procfs.source_lines(pid, wanted))
    open_files = tuple((pid, procfs.open_targets(pid)) for pid in pids)
    return CloserLook(
        stacks=stacks,
        source_lines=tuple(sources.items()),
        open_files=open_files,
        file_locks=procfs.file_locks(pids),
        chains=chains(sample, evidence.stable),
        worker_start_ticks=tuple(
            (w.pid, t) for w in sample.workers for t in [procfs.start_ticks(w.pid)] if t is not None
        ),
        poll=polled,
        opening=tuple(
            (w.pid, d.tid, path)
            for w in sample.workers
            for d in evidence.stable.get(w.pid, ())
            if (path := procfs.opening_path(w.pid, d.wait)) is not None
        ),
        lock_files=lockfiles.find(sample, tuple((pid, tuple(t.path for t in ts)) for pid, ts in open_files)),
    )

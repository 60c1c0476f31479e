"""Assessment: the examination of a stall (NOTE [ Hang criterion ] in
:mod:`watchdog.detect.progress`): main's stack classified (:func:`confirm`), a stall that can
still move by itself dismissed (:func:`assess`), and whether a reported hang may end the job
(:func:`termination`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from .. import frames, states
from ..types import (
    BUSY_SHARE,
    LOADER_ROLES,
    ROLE_MAIN,
    ROLE_STARTING,
    ROLE_WORKER,
    FileLock,
    Frame,
    HangVerdict,
    KernelWait,
    Measure,
    Polling,
    ProcessSample,
    ProcessStack,
    ProcId,
    Proof,
    ProofKind,
    Sample,
    Stall,
    ThreadSample,
    Trigger,
    VerdictKind,
    WaitKind,
    WaitOp,
)
from .progress import POLL_WAKES_PER_S, RUNNABLE_SHARE, TRIGGER_BUSY, WORK_IO_BYTES_PER_S


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
    spinning: Collection[int] = (),
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
        spinning: the workers seen spinning on a queue without blocking
            (``Evidence.non_blocking_gets``): only they make an ended helper
            (:func:`ended_feeder`) the reason busy workers deliver nothing.
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
    starting = starting_workers(sample, stall, details) if proof is None else []
    if starting:
        return Assessment(
            False,
            verdict,
            f"workers starting: {starting[0]}: the loader is moving (a spawn or forkserver worker imports "
            "torch and the Dataset's modules before its loop), not stuck",
            None,
            entries,
        )
    if measure == Measure.MAIN_WAIT and proof is None:
        slow = _slow_waker(stall, [(p.pid, d.tid, user) for p, d, _, user in timed])
        if slow is not None:
            return Assessment(False, verdict, slow, None, entries)
    if measure in (Measure.BATCHES, Measure.MAIN_WAIT):
        return _assess_batches(sample, stall, verdict, details, proof, entries, spinning)
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
    busy = working(sample, stall, details)
    if busy:
        # On a machine loaded far past its cores a loader process that computes (main importing
        # torch at start, a worker's long sample) gets under the marks' CPU threshold, but it is
        # runnable all along: the same rule as under the batch measure (NOTE [ Run-queue wait ]).
        return Assessment(
            False,
            verdict,
            f"no progress by the marks for {stall.stall_s:.0f} s, but {busy[0]}: computing, slow, not stuck",
            None,
            entries,
        )
    # The stall is counted from the loader's last progress (a worker's I/O or CPU, a wake): it
    # may be far shorter than main's wait for a batch, which the report shows beside it.
    waited = f" (no batch for {stall.no_delivery_s:.0f} s)" if stall.no_delivery_s >= stall.stall_s + 1.0 else ""
    return Assessment(
        True,
        verdict,
        f"the loader made no progress for {stall.stall_s:.0f} s{waited} and nothing else in the job moved",
        None,
        entries,
    )


def starting_workers(sample: Sample, stall: Stall, details: Mapping[int, Sequence[ThreadSample]]) -> List[str]:
    """The workers still starting (role ``worker_starting``: a spawn or forkserver child not yet
    named ``pt_data_worker``, unpickling the Dataset and re-importing torch and its modules,
    which takes seconds, more on a loaded machine) that worked in the stall's last
    ``work_window_s``, one sentence each: ``BUSY_SHARE`` of a core or more; runnable (on a CPU,
    or waiting on a run queue for one: ``LoaderWork.runq_wait_s`` from ``/proc/PID/schedstat``,
    as :func:`working` counts it) for ``RUNNABLE_SHARE`` of the window or more; or any CPU used
    with the process or a thread in state R at the examination's reads. On a machine loaded far
    past its cores such a start gets a few percent of a CPU, under the progress marks' CPU
    threshold, but it waits for a CPU, not for an event: the loader is moving. A start that
    waits (a lock inherited by the forkserver, a pipe nobody writes) uses no CPU and is not
    runnable, and is left to the other checks; a starting worker is one for at most
    ``WORKER_START_WINDOW_S`` (watchdog/collect/discovery.py)."""
    out = []
    span = max(stall.work_window_s, 1e-6)
    for w in stall.loader_work:
        p = sample.process(w.pid)
        if p is None or p.role != ROLE_STARTING:
            continue
        share = w.cpu_s / span
        waited = w.runq_wait_s or 0.0
        running = p.state == "R" or any(d.state == "R" for d in (details.get(w.pid) or p.threads))
        if share >= BUSY_SHARE or share + waited / span >= RUNNABLE_SHARE or (running and w.cpu_s > 0):
            line = (
                f"worker_starting pid {w.pid}" + (f" ({p.start_method})" if p.start_method else "") + f" used "
                f"{w.cpu_s:.2f} s of CPU in the last {stall.work_window_s:.0f} s"
            )
            if waited >= 0.05 * span:
                line += f" and waited {waited:.1f} s runnable for a CPU (/proc/PID/schedstat)"
            if running:
                line += ", state R"
            out.append(line)
    return out


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


def _lock_waiters(sample: Sample, details: Mapping[int, Sequence[ThreadSample]]) -> Iterator[int]:
    """The pids, in order, of the job's loader processes (``LOADER_ROLES``) with a thread in
    ``details`` waiting in ``flock``/``fcntl`` (:attr:`WaitOp.LOCK`)."""
    for pid, threads in sorted(details.items()):
        p = sample.process(pid)
        if p is None or p.role not in LOADER_ROLES:
            continue
        if any(d.wait is not None and d.wait.op is WaitOp.LOCK for d in threads):
            yield pid


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
    for pid in _lock_waiters(sample, details):
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
    spinning: Collection[int] = (),
) -> Assessment:
    """:func:`assess` under the batch or main-wait measure: no batch came (and, with the
    inside view, no worker reached for a new sample) for the whole stall. A proof makes it
    proven; a loader process that worked (:func:`working`) makes it a slow sample, unless a
    worker spins on a queue without blocking (``spinning``) and a helper of the job ended badly
    meanwhile (:func:`ended_feeder`: a suspected hang; workers that compute while an unrelated
    helper failed are working); anything
    else (threads that sleep, poll, retry or block) is a suspected hang, however often they
    wake."""
    if proof is not None:
        return Assessment(True, verdict, f"proven: {proof.conclusion}", proof, entries)
    busy = working(sample, stall, details)
    dead = ended_feeder(sample, stall) if busy and spinning else None
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


@dataclass(frozen=True)
class Termination:
    """Whether a reported hang may end the job (NOTE [ Escalation ladder ] in watch/hang_episodes.py).

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
    for pid in _lock_waiters(sample, details):
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

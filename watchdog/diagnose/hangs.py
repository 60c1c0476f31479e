"""Hang rules: what a stalled job's stacks, kernel waits and stderr say.

No rule matches on a single frame name where another cause produces the same frame: a worker
idle in ``index_queue.get`` is healthy, and main in ``_try_get_data`` is only the symptom; each
rule combines a stack shape with the worker's quiescence and its kernel wait state.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

from .. import frames
from ..types import MODE_HANG, SEVERITY_HANG, Diagnosis, Facts, Frame, ProcessSample, ProcessStack, ThreadStack
from .common import (
    BLOCKED_DOING,
    DOC_DATALOADER,
    DOC_MULTI_PROCESS_LOADING,
    DOC_MULTIPROCESSING,
    DOC_START_METHODS,
    brief,
    describe,
    gather,
    is_quiet,
    kernel_wait,
    location,
    quiet_text,
    waiting_main,
    worker_thread,
)
from .engine import rule


def lock_wait(facts: Facts, pid: int, t: ThreadStack) -> Optional[str]:
    """How ``t`` is seen to be acquiring a lock, or ``None``: a native lock-acquire frame on top
    of its Python frames, or (Python-only stacks) a source line that takes a lock. Waits for a
    notification (Condition, Event, queues) are not lock-holder waits."""
    if frames.waits_on_condition(t):
        return None
    nat = frames.native_lock_frame(t)
    if nat is not None:
        return f"native frame {nat.function} ({frames.short_path(nat.file)})"
    top = frames.innermost_python(t)
    if top is not None and frames.line_takes_lock(facts.source(top.file, top.line)):
        return "its innermost Python line takes a lock"
    return None


def other_live_threads(stack: ProcessStack, t: ThreadStack) -> List[ThreadStack]:
    """Threads of the worker besides ``t`` that could hold a lock (queue feeder threads idle in
    ``Queue._feed`` cannot hold the user's lock)."""
    return [x for x in stack.threads if x.tid != t.tid and not frames.is_feeder_thread(x)]


def fork_context(facts: Facts, w: ProcessSample) -> str:
    """``start method fork; main ran N threads at the last sample before the fork``."""
    n = dict(facts.main_threads_at_fork).get(w.pid)
    if n is None:
        extra = ""
    elif n > 1:
        extra = f"; main ran {n} threads at the last sample before the fork"
    else:
        extra = "; main ran a single thread at the last sample before the fork, so the holder was a short-lived thread"
    return f"start method {w.start_method or 'fork'}{extra}"


def fork_site(t: ThreadStack) -> Optional[Frame]:
    """The user's frame that created the iterator (and so forked the worker): in a forked
    worker the parent's frames stay below ``BaseProcess._bootstrap``, down to
    ``DataLoader.__iter__`` and the caller of ``iter(loader)``."""
    past_iter = False
    for f in t.frames:
        if frames.frame_in(f, frozenset({"__iter__", "_get_iterator"}), frames.DATALOADER_FILE):
            past_iter = True
        elif past_iter and frames.is_user(f):
            return f
    return None


# --- hangs ----------------------------------------------------------------------------------


def _fork_lock_hit(facts: Facts, w: ProcessSample) -> Optional[Tuple[float, List[str], Optional[Frame]]]:
    if w.start_method not in (None, "fork") or not is_quiet(facts, w.pid):
        return None
    stack = facts.stack(w.pid)
    t = worker_thread(stack, w.pid)
    if t is not None:
        how = lock_wait(facts, w.pid, t)
        if how is None or other_live_threads(stack, t):
            return None
        top = frames.innermost_python(t)
        user = frames.innermost_user(t) or top
        lines = [
            f"worker pid {w.pid} ({w.name}): thread {t.tid} blocked acquiring a lock at {describe(facts, w.pid, top)} — {how}",
            f"worker pid {w.pid}: {kernel_wait(facts, w.pid, t.tid)}; {quiet_text(facts, w.pid)}; "
            f"the worker has no other thread that could release it; {fork_context(facts, w)}",
        ]
        if user is not None and user is not top:
            lines.append(f"worker pid {w.pid}: called from {describe(facts, w.pid, user)}")
        site = fork_site(t)
        if site is not None:
            lines.append(
                f"worker pid {w.pid}: forked when the iterator was created at {describe(facts, w.pid, site)}: "
                "another thread of main held the lock at that moment"
            )
        return (0.9 if "native" in how else 0.75), lines, user
    details = facts.threads_of(w.pid)
    loop = next((d for d in details if d.tid == w.pid), None)
    if loop is None or frames.wchan_family(loop.wchan) != "futex":
        return None
    n = dict(facts.main_threads_at_fork).get(w.pid)
    lines = [
        f"worker pid {w.pid} ({w.name}): no stack (py-spy unavailable); main thread {kernel_wait(facts, w.pid, w.pid)} — a futex wait with no wake-up; {quiet_text(facts, w.pid)}",
        f"worker pid {w.pid}: {fork_context(facts, w)}",
    ]
    return (0.55 if (n or 0) > 1 else 0.4), lines, None


@rule(rank=10)
def fork_inherited_lock(facts: Facts) -> Optional[Diagnosis]:
    """Forked workers blocked acquiring a lock that no thread in them can release: it was held
    by another thread of the parent at ``fork()``, and only the forking thread survives in the
    child (POSIX ``fork``; CPython docs on start methods; PyTorch multiprocessing notes)."""
    found = gather(facts, _fork_lock_hit)
    if found is None:
        return None
    return found.hang(
        "fork_inherited_lock",
        (
            "deadlocked{where} on a lock that another thread of the main process held when the workers were forked; "
            "no thread in a worker can ever release it."
        ),
        (
            'Start workers without fork: DataLoader(..., multiprocessing_context="forkserver") (or "spawn"), so '
            "each worker gets fresh locks; or create the lock (or the object holding it: DB connection, logger "
            "handler, image library state) inside the worker, in worker_init_fn or lazily in __getitem__; or make "
            "sure no other thread holds it while iter(loader) forks the workers."
        ),
        (DOC_MULTIPROCESSING, DOC_START_METHODS),
    )


def _dataset_frames(t: ThreadStack) -> Optional[Tuple[Optional[Frame], Frame]]:
    """``(innermost frame, innermost user frame)`` of a worker-loop thread that is inside the
    Dataset (not idle waiting for an index), else ``None``."""
    if frames.is_idle_worker(t) or not frames.has_frame(t, frames.FETCH_FUNCS | frames.WORKER_LOOP_FUNCS):
        return None
    user = frames.innermost_user(t)
    if user is None:
        return None
    return (t.frames[0] if t.frames else None), user


def _busy_cpu_s(facts: Facts, pid: int) -> Optional[float]:
    """CPU seconds ``pid`` used while no batch was delivered (from the timeline)."""
    if facts.stall is None or not facts.timeline:
        return None
    since = facts.timeline[-1].t_mono - facts.stall.no_delivery_s
    cpu = [s.process(pid).cpu_s for s in facts.timeline if s.t_mono >= since and s.process(pid) is not None]
    return cpu[-1] - cpu[0] if len(cpu) >= 2 else None


def _thread_wchan_family(facts: Facts, pid: int, tid: int) -> Optional[str]:
    return frames.wchan_family(next((d.wchan for d in facts.threads_of(pid) if d.tid == tid), None))


def _blocked_io_hit(facts: Facts, w: ProcessSample) -> Optional[Tuple[float, List[str], Optional[Frame]]]:
    if not is_quiet(facts, w.pid) or _fork_lock_hit(facts, w) is not None:
        return None
    t = worker_thread(facts.stack(w.pid), w.pid)
    tid = t.tid if t is not None else w.pid
    family = _thread_wchan_family(facts, w.pid, tid)
    state = next((d.state for d in facts.threads_of(w.pid) if d.tid == tid), w.status)
    native_io = None
    if t is not None:
        native_io = next((f for f in t.frames[:3] if f.native and f.function.split("@")[0] in frames.IO_NATIVE), None)
        if _dataset_frames(t) is None:
            return None
    in_kernel_io = (
        state == "D" or family in frames.IO_WCHAN_FAMILIES or (native_io is not None and family not in ("sleep", "socket", "futex", "poll"))
    )
    if not in_kernel_io:
        return None
    user = frames.innermost_user(t) if t is not None else None
    files = dict(facts.open_files).get(w.pid, ())
    regular = [f for f in files if f.startswith("/") and not f.startswith(("/dev/", "/proc/"))]
    lines = [
        f"worker pid {w.pid} ({w.name}): thread {tid} blocked in the kernel: {kernel_wait(facts, w.pid, tid)}"
        + (" — uninterruptible sleep (D)" if state == "D" else f" — {BLOCKED_DOING.get(family or '', 'in I/O')}"),
    ]
    if t is not None:
        lines.append(
            f"worker pid {w.pid}: innermost frame {describe(facts, w.pid, t.frames[0] if t.frames else None)}, called from {describe(facts, w.pid, user)}"
        )
    else:
        lines.append(f"worker pid {w.pid}: no stack (py-spy unavailable)")
    lines.append(
        f"worker pid {w.pid}: {quiet_text(facts, w.pid)}; open files: {', '.join(regular[:8]) or 'none besides pipes and sockets'}"
    )
    return (0.85 if t is not None else 0.5), lines, user


@rule(rank=15)
def worker_blocked_io(facts: Facts) -> Optional[Diagnosis]:
    """A worker blocked in the kernel in file-system or pipe code (state D, or a wait channel
    such as ``wait_for_partner``, ``rpc_wait_bit_killable``, ``request_wait_answer``, ``pipe_read``):
    a stuck network file system, FUSE mount, disk or FIFO. Main waits forever (``timeout=0``)."""
    found = gather(facts, _blocked_io_hit)
    if found is None:
        return None
    return found.hang(
        "worker_blocked_io",
        "blocked in file-system or pipe I/O{where}; the main process waits for their batch forever.",
        (
            "Check the storage the Dataset reads (NFS/FUSE mount, disk, FIFO): `cat /proc/<pid>/stack` as root shows the "
            "kernel path; set DataLoader(..., timeout=<seconds>) so the job fails instead of hanging, and use storage "
            "clients with timeouts (or copy data to local disk)."
        ),
        (DOC_DATALOADER, DOC_MULTI_PROCESS_LOADING),
    )


def _stuck_hit(facts: Facts, w: ProcessSample) -> Optional[Tuple[float, List[str], Optional[Frame]]]:
    if _fork_lock_hit(facts, w) is not None or _blocked_io_hit(facts, w) is not None:
        return None
    quiet = is_quiet(facts, w.pid)
    busy_cpu = None if quiet else _busy_cpu_s(facts, w.pid)
    if not quiet and not (busy_cpu is not None and facts.stall is not None and busy_cpu >= 0.5 * facts.stall.no_delivery_s):
        return None
    stack = facts.stack(w.pid)
    t = worker_thread(stack, w.pid)
    if t is not None:
        found = _dataset_frames(t)
        if found is None:
            return None
        top, user = found
        if quiet:
            doing = BLOCKED_DOING.get(_thread_wchan_family(facts, w.pid, t.tid) or "", "blocked")
            how = quiet_text(facts, w.pid)
        else:
            doing = "burning CPU without returning a batch"
            how = f"{busy_cpu:.0f} s of CPU in the last {facts.stall.no_delivery_s:.0f} s, and no I/O: no batch was sent"
        lines = [
            f"worker pid {w.pid} ({w.name}): thread {t.tid} {doing} in the Dataset at {describe(facts, w.pid, user)}",
            f"worker pid {w.pid}: innermost frame {describe(facts, w.pid, top)}; {kernel_wait(facts, w.pid, t.tid)}; {how}",
        ]
        return 0.8, lines, user
    if not quiet:
        return None
    family = _thread_wchan_family(facts, w.pid, w.pid)
    if family not in ("sleep", "socket"):
        return None
    lines = [
        f"worker pid {w.pid} ({w.name}): no stack (py-spy unavailable); {kernel_wait(facts, w.pid, w.pid)} ({family}); {quiet_text(facts, w.pid)}"
    ]
    return 0.45, lines, None


@rule(rank=20)
def worker_stuck(facts: Facts) -> Optional[Diagnosis]:
    """A worker blocked or sleeping inside the Dataset (not on a lock) while main waits for its
    batch forever: ``DataLoader(timeout=0)``, the default, waits without limit
    (``_MultiProcessingDataLoaderIter._try_get_data`` in torch/utils/data/dataloader.py)."""
    found = gather(facts, _stuck_hit)
    if found is None:
        return None
    return found.hang(
        "worker_stuck",
        "stuck in the Dataset{where} (not on a lock, not in file I/O); the main process waits for their batch forever.",
        (
            "Give the blocking call a timeout (socket/HTTP/storage client) or fix the loop that never returns, and set "
            "DataLoader(..., timeout=<seconds>) so the main process raises 'DataLoader timed out' instead of waiting forever."
        ),
        (DOC_DATALOADER, DOC_MULTI_PROCESS_LOADING),
    )


_FEEDER_FRAME = re.compile(r'multiprocessing[/\\]queues\.py", line \d+, in _feed')
_TB_FILE = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')


def feeder_failures(stderr: str) -> List[Tuple[str, Optional[str]]]:
    """``(exception line, user file:line)`` for each traceback in ``stderr`` printed by a
    multiprocessing queue feeder thread (``Queue._feed`` in multiprocessing/queues.py, which
    prints the error of a failed pickle and drops the item: ``_on_queue_feeder_error``)."""
    out = []
    blocks = stderr.split("Traceback (most recent call last):")
    for block in blocks[1:]:
        lines = block.strip("\n").splitlines()
        if not any(_FEEDER_FRAME.search(line) for line in lines):
            continue
        exc = next((line.strip() for line in lines if line and not line.startswith((" ", "\t"))), None)
        user = None
        for line in lines:
            m = _TB_FILE.match(line)
            if m and frames.is_user(Frame(m.group(3), m.group(1), int(m.group(2)), False)):
                user = f"{m.group(1)}:{m.group(2)}"
        if exc:
            out.append((exc, user))
    return out


@rule(rank=18)
def batch_lost(facts: Facts) -> Optional[Diagnosis]:
    """A worker's batch never reached main: its queue feeder thread failed to pickle or send it,
    printed a traceback, and dropped it; the worker went back to waiting and main waits forever
    for that index (field notes B22; ``multiprocessing.queues.Queue._feed``)."""
    if not facts.loader_hang():
        return None
    failures = feeder_failures(facts.stderr_tail)
    if not failures:
        return None
    idle, evidence = [], [waiting_main(facts)]
    for exc, user in failures[-3:]:
        evidence.append(f"stderr: a worker's queue feeder thread failed to send a batch: {exc}" + (f" (raised at {user})" if user else ""))
    for w in facts.sample.workers:
        t = worker_thread(facts.stack(w.pid), w.pid)
        if t is not None and frames.is_idle_worker(t):
            idle.append(w.pid)
        elif t is None and _thread_wchan_family(facts, w.pid, w.pid) == "poll":
            idle.append(w.pid)
    if idle:
        evidence.append(
            f"workers {', '.join(map(str, idle))} are idle, waiting for new indices (index_queue.get under _worker_loop): the lost batch will never be re-sent"
        )
    return Diagnosis(
        kind="batch_lost",
        severity=SEVERITY_HANG,
        confidence=0.85 if idle else 0.6,
        summary=f"A batch was lost: a worker failed to send it to the main process ({failures[-1][0][:120]}), and main waits for it forever.",
        evidence=tuple(evidence),
        remedy=(
            "Make every sample picklable (return tensors, numbers, strings; no open files, locks, sockets or C handles "
            "in the sample or the collate_fn's output), and set DataLoader(..., timeout=<seconds>) so a lost batch "
            "fails the job instead of hanging it."
        ),
        pids=tuple(w.pid for w in facts.sample.workers),
        location=failures[-1][1],
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_DATALOADER),
    )


@rule(rank=12)
def pin_memory_stall(facts: Facts) -> Optional[Diagnosis]:
    """The pin-memory thread of main (``_pin_memory_loop`` in torch/utils/data/_utils/pin_memory.py)
    is blocked inside pinning (``pin_memory``, a CUDA host allocation) rather than idle in
    ``in_queue.get``, while main waits on its output queue."""
    if not facts.loader_hang():
        return None
    pid = facts.stall.main_pid
    stack = facts.stack(pid)
    if stack is None or not stack.ok:
        return None
    for t in stack.threads:
        if not frames.has_frame(t, frames.PIN_LOOP_FUNCS, frames.PIN_MEMORY_FILE):
            continue
        top = frames.innermost_python(t)
        if (
            top is not None
            and top.function.endswith("Queue.get")
            and not frames.has_frame(t, frames.PIN_WORK_FUNCS, frames.PIN_MEMORY_FILE)
        ):
            continue  # idle: waiting for the next batch from the workers
        if not (
            frames.has_frame(t, frames.PIN_WORK_FUNCS, frames.PIN_MEMORY_FILE)
            or any(f.native and "cuda" in (f.function + (f.module or "")).lower() for f in t.frames)
        ):
            continue
        cuda = [f for f in t.frames if f.native and "cuda" in (f.function + (f.module or "")).lower()]
        blocked_at = " ← ".join(describe(facts, pid, f) for f in cuda[:3]) or describe(facts, pid, t.frames[0] if t.frames else None)
        evidence = (
            waiting_main(facts),
            f"main pid {pid}: pin-memory thread {t.tid} ({t.name or 'pt_data_pin'}) blocked at {blocked_at}, inside {describe(facts, pid, top)}",
            f"main pid {pid}: pin-memory thread {t.tid} {kernel_wait(facts, pid, t.tid)}",
        )
        return Diagnosis(
            kind="pin_memory_stall",
            severity=SEVERITY_HANG,
            confidence=0.8,
            summary="The pin-memory thread of the main process is stuck pinning a batch (page-locked host allocation), so no batch reaches the training loop.",
            evidence=evidence,
            remedy=(
                "Try pin_memory=False to confirm; lower batch_size × prefetch_factor × num_workers (pinned memory is "
                "page-locked and scarce); check the GPU driver (nvidia-smi, dmesg for Xid errors); avoid other threads "
                "creating CUDA contexts while the loader pins."
            ),
            pids=(pid,),
            location=None,
            docs=(DOC_MULTI_PROCESS_LOADING, "https://pytorch.org/docs/stable/data.html#memory-pinning"),
        )
    return None


@rule(rank=25)
def shutdown_hang(facts: Facts) -> Optional[Diagnosis]:
    """Main is stuck shutting the iterator down (``_shutdown_workers`` in dataloader.py: joining
    workers or the pin-memory thread) at the end of an epoch or at interpreter exit."""
    v = facts.verdict
    if not facts.loader_hang() or v.thread is None or not frames.has_frame(v.thread, frames.LOADER_SHUTDOWN_FUNCS, frames.DATALOADER_FILE):
        return None
    pid = facts.stall.main_pid
    top = frames.innermost_python(v.thread)
    user = frames.innermost_user(v.thread)
    evidence = [f"main pid {pid}: thread {v.thread.tid} is in _shutdown_workers, waiting at {describe(facts, pid, top)}"]
    if user is not None:
        evidence.append(f"main pid {pid}: reached from {describe(facts, pid, user)}")
    for w in facts.sample.workers:
        evidence.append(f"worker pid {w.pid}: state {w.status}, wchan {w.wchan}, {quiet_text(facts, w.pid)}")
    joins_pin = any(f.function.endswith("join") for f in v.thread.frames[:6]) and any(
        frames.has_frame(t, frames.PIN_LOOP_FUNCS) for t in (facts.stack(pid).threads if facts.stack(pid) else ())
    )
    return Diagnosis(
        kind="shutdown_hang",
        severity=SEVERITY_HANG,
        confidence=0.75,
        summary="The main process is stuck shutting a DataLoader iterator down"
        + (" (joining the pin-memory thread)" if joins_pin else "")
        + ".",
        evidence=tuple(evidence),
        remedy=(
            "Exhaust or delete iterators explicitly before exit (del it) and avoid killing workers by hand; with "
            "persistent_workers=True and pin_memory=True upgrade PyTorch (exit-order fixes in pytorch/pytorch#72269); "
            "if a worker is stuck, the worker's stack below shows where."
        ),
        pids=(pid,) + tuple(w.pid for w in facts.sample.workers),
        location=location(user),
        docs=(DOC_MULTI_PROCESS_LOADING,),
    )


@rule(rank=30)
def stall_outside_loader(facts: Facts) -> Optional[Diagnosis]:
    """Main's iterating thread stopped outside any DataLoader iterator (a collective, a lock,
    a sleep, user I/O); the loader is not the cause."""
    v = facts.verdict
    if facts.mode != MODE_HANG or v is None or v.kind != "outside_loader":
        return None
    pid = facts.stall.main_pid
    t = v.thread
    evidence = [f"main pid {pid}: {v.reason}" + ("" if v.confirmed_by_stack else " (from /proc only: py-spy could not read main)")]
    user = None
    if t is not None:
        top = t.frames[0] if t.frames else None
        user = frames.innermost_user(t)
        evidence.append(f"main pid {pid}: thread {t.tid} ({t.name or 'MainThread'}) innermost frame {describe(facts, pid, top)}")
        if user is not None and user is not top:
            evidence.append(f"main pid {pid}: in the job's code at {describe(facts, pid, user)}")
        evidence.append(f"main pid {pid}: thread {t.tid} {kernel_wait(facts, pid, t.tid)}")
        collective = next((f for f in t.frames if not f.native and frames.is_collective(f)), None)
        if collective is not None:
            evidence.insert(
                1,
                f"main pid {pid}: waits in a torch.distributed collective, {describe(facts, pid, collective)}: another rank has not reached it (uneven batches per rank, a crashed or slower rank)",
            )
    else:
        evidence.append(f"main pid {pid}: main thread {kernel_wait(facts, pid, pid)}")
    evidence.append(f"main pid {pid}: {quiet_text(facts, pid)}; {len(facts.sample.workers)} DataLoader worker(s) alive")
    where = f" at {brief(user)}" if user else ""
    if any("collective" in e for e in evidence):
        where += ", in a torch.distributed collective"
    return Diagnosis(
        kind="stall_outside_loader",
        severity=SEVERITY_HANG,
        confidence=0.8 if v.confirmed_by_stack else 0.4,
        summary=f"The training loop stopped outside the DataLoader{where}; no batch was requested for {facts.stall.stall_s:.0f} s.",
        evidence=tuple(evidence),
        remedy=(
            "Look at main's stack below: the job waits there, not on its data. If that wait is legitimate (a long "
            "checkpoint, an evaluation, a barrier), raise stall_timeout_s; the watchdog does not end such a job "
            "unless terminate_outside_loader is true."
        ),
        pids=(pid,),
        location=location(user),
        docs=("https://pytorch.org/docs/stable/distributed.html",) if "collective" in where else (),
    )


def unknown(facts: Facts) -> Diagnosis:
    """The fallback when no rule matched: the stall and every stack are attached."""
    v = facts.verdict
    evidence = [waiting_main(facts) if v.kind == "dataloader" else f"main pid {facts.stall.main_pid}: {v.reason}"]
    for w in facts.sample.workers:
        t = worker_thread(facts.stack(w.pid), w.pid)
        top = frames.innermost_python(t) if t else None
        evidence.append(
            f"worker pid {w.pid}: state {w.status}, wchan {w.wchan}, {quiet_text(facts, w.pid)}"
            + (f", at {describe(facts, w.pid, top)}" if top else "")
        )
    if facts.pyspy_problem:
        evidence.append(facts.pyspy_problem)
    return Diagnosis(
        kind="unknown",
        severity=SEVERITY_HANG,
        confidence=0.2,
        summary=f"The job made no progress for {facts.stall.stall_s:.0f} s and no known cause matched; every stack is attached.",
        evidence=tuple(evidence),
        remedy="Read the stacks below (main's iterating thread first, then each worker's innermost frames).",
        pids=(facts.stall.main_pid,) + tuple(w.pid for w in facts.sample.workers),
        docs=(DOC_MULTI_PROCESS_LOADING,),
    )

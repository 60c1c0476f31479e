"""The diagnosis catalogue. Each rule reads facts only (process samples, stacks, ``/proc``
thread details, source lines) and never touches a process.

No rule matches on a single frame name where another cause produces the same frame: a worker
idle in ``index_queue.get`` is healthy, and main in ``_try_get_data`` is only the symptom; each
rule combines a stack shape with the worker's quiescence and its kernel wait state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from .. import frames
from ..types import SEVERITY_HANG, Diagnosis, Facts, Frame, ProcessSample, ProcessStack, ThreadStack
from .engine import rule

DOC_MULTIPROCESSING = "https://pytorch.org/docs/stable/notes/multiprocessing.html"
DOC_MULTI_PROCESS_LOADING = "https://pytorch.org/docs/stable/data.html#multi-process-data-loading"
DOC_DATALOADER = "https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader"
DOC_START_METHODS = "https://docs.python.org/3/library/multiprocessing.html#contexts-and-start-methods"

# What a worker is doing, by the family of its kernel wait channel (frames.WCHAN_FAMILIES).
_BLOCKED_DOING = {
    "sleep": "sleeping",
    "socket": "waiting on a socket",
    "pipe": "waiting on a pipe",
    "fifo_open": "opening a FIFO with no writer",
    "disk_or_network_fs": "in uninterruptible file-system I/O",
}

# Seconds of tolerance when asking whether a process was quiet for the whole stall.
_QUIET_SLACK_S = 2.0


# --- helpers shared by the rules ------------------------------------------------------------


def describe(facts: Facts, pid: int, frame: Optional[Frame]) -> str:
    """``file:line in function: `source``` for a Python frame; the library for a native one."""
    if frame is None:
        return "an unknown frame"
    if frame.native:
        return f"native {frame.function} ({frames.short_path(frame.file)})"
    text = f"{frames.short_path(frame.file)}:{frame.line} in {frame.function}"
    src = facts.source(frame.file, frame.line)
    return f"{text}: `{src}`" if src else text


def location(frame: Optional[Frame]) -> Optional[str]:
    """``file:line`` of a Python frame (full path, as the job sees it)."""
    return None if frame is None or frame.native else f"{frame.file}:{frame.line}"


def quiet_for(facts: Facts, pid: int) -> Optional[float]:
    """Seconds ``pid`` showed no progress, or ``None`` when unknown."""
    return facts.progress_age_s(pid)


def is_quiet(facts: Facts, pid: int) -> bool:
    """True when ``pid`` made no progress during (about) the whole stall."""
    age = quiet_for(facts, pid)
    return age is not None and age >= facts.stall.stall_s - _QUIET_SLACK_S


def kernel_wait(facts: Facts, pid: int, tid: int) -> str:
    """``state S, wchan futex_do_wait, syscall 202`` for one thread (from ``/proc``)."""
    for t in facts.threads_of(pid):
        if t.tid == tid:
            return f"state {t.state}, wchan {t.wchan or '?'}, syscall {t.syscall or '?'}"
    return "state unknown (thread not readable)"


def worker_thread(stack: Optional[ProcessStack], pid: int) -> Optional[ThreadStack]:
    """The thread that runs the worker loop (or the process's main thread)."""
    if stack is None or not stack.ok:
        return None
    return frames.worker_loop_thread(stack.threads) or next((t for t in stack.threads if t.tid == pid), None)


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
    """``start method fork; main had N threads when it was forked``."""
    n = dict(facts.main_threads_at_fork).get(w.pid)
    extra = f"; main had {n} threads when it was forked" if n is not None else ""
    return f"start method {w.start_method or 'fork'}{extra}"


def _waiting_main(facts: Facts) -> str:
    v = facts.verdict
    how = "" if v.confirmed_by_stack else " (presumed from /proc: py-spy could not read main)"
    t = v.thread
    where = ""
    if t is not None:
        frame = frames.innermost_user(t) or frames.innermost_python(t)
        where = f", iterating at {describe(facts, facts.stall.main_pid, frame)}" if frame else ""
    return f"main pid {facts.stall.main_pid}: {v.reason}{where}{how}"


def brief(frame: Optional[Frame]) -> str:
    """``file:line (function)`` with a short path, for one-sentence summaries."""
    if frame is None:
        return "an unknown place"
    return f"{frames.short_path(frame.file)}:{frame.line} ({frame.function})"


def _quiet_text(facts: Facts, pid: int) -> str:
    age = quiet_for(facts, pid)
    return "no progress seen" if age is None else f"no CPU, I/O or context-switch progress for {age:.0f} s"


@dataclass(frozen=True)
class _WorkerFindings:
    """Per-worker hits of one rule, gathered: evidence (main's wait first), pids, the first
    user frame, and the highest confidence."""

    evidence: Tuple[str, ...]
    pids: Tuple[int, ...]
    user: Optional[Frame]
    confidence: float

    @property
    def where(self) -> str:
        return f" at {brief(self.user)}" if self.user else ""


def _gather(facts: Facts, hit) -> Optional[_WorkerFindings]:
    """Apply ``hit(facts, worker) -> (confidence, evidence lines, user frame) | None`` to every
    worker of a DataLoader hang; ``None`` when the stall is not one or no worker matched."""
    if facts.verdict.kind != "dataloader":
        return None
    hits = [(w, h) for w in facts.sample.workers for h in [hit(facts, w)] if h is not None]
    if not hits:
        return None
    evidence = [_waiting_main(facts)] + [line for _, h in hits for line in h[1]]
    user = next((h[2] for _, h in hits if h[2] is not None), None)
    return _WorkerFindings(tuple(evidence), tuple(w.pid for w, _ in hits), user, max(h[0] for _, h in hits))


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
            f"worker pid {w.pid}: {kernel_wait(facts, w.pid, t.tid)}; {_quiet_text(facts, w.pid)}; "
            f"the worker has no other thread that could release it; {fork_context(facts, w)}",
        ]
        if user is not None and user is not top:
            lines.append(f"worker pid {w.pid}: called from {describe(facts, w.pid, user)}")
        return (0.9 if "native" in how else 0.75), lines, user
    details = facts.threads_of(w.pid)
    loop = next((d for d in details if d.tid == w.pid), None)
    if loop is None or frames.wchan_family(loop.wchan) != "futex":
        return None
    n = dict(facts.main_threads_at_fork).get(w.pid)
    lines = [
        f"worker pid {w.pid} ({w.name}): no stack (py-spy unavailable); main thread {kernel_wait(facts, w.pid, w.pid)} — a futex wait with no wake-up; {_quiet_text(facts, w.pid)}",
        f"worker pid {w.pid}: {fork_context(facts, w)}",
    ]
    return (0.55 if (n or 0) > 1 else 0.4), lines, None


@rule(rank=10)
def fork_inherited_lock(facts: Facts) -> Optional[Diagnosis]:
    """Forked workers blocked acquiring a lock that no thread in them can release: it was held
    by another thread of the parent at ``fork()``, and only the forking thread survives in the
    child (POSIX ``fork``; CPython docs on start methods; PyTorch multiprocessing notes)."""
    found = _gather(facts, _fork_lock_hit)
    if found is None:
        return None
    return Diagnosis(
        kind="fork_inherited_lock",
        severity=SEVERITY_HANG,
        confidence=found.confidence,
        summary=(
            f"{len(found.pids)} DataLoader worker(s) are deadlocked{found.where} on a lock that another thread of the main "
            "process held when the workers were forked; no thread in a worker can ever release it."
        ),
        evidence=found.evidence,
        remedy=(
            'Start workers without fork: DataLoader(..., multiprocessing_context="forkserver") (or "spawn"), so '
            "each worker gets fresh locks; or create the lock (or the object holding it: DB connection, logger "
            "handler, image library state) inside the worker, in worker_init_fn or lazily in __getitem__; or make "
            "sure no other thread holds it while iter(loader) forks the workers."
        ),
        pids=found.pids,
        location=location(found.user),
        docs=(DOC_MULTIPROCESSING, DOC_START_METHODS),
    )


def _stuck_hit(facts: Facts, w: ProcessSample) -> Optional[Tuple[float, List[str], Optional[Frame]]]:
    if not is_quiet(facts, w.pid) or _fork_lock_hit(facts, w) is not None:
        return None
    stack = facts.stack(w.pid)
    t = worker_thread(stack, w.pid)
    if t is not None:
        if frames.is_idle_worker(t) or not frames.has_frame(t, frames.FETCH_FUNCS | frames.WORKER_LOOP_FUNCS):
            return None
        top = t.frames[0] if t.frames else None
        user = frames.innermost_user(t)
        if user is None:
            return None
        family = frames.wchan_family(next((d.wchan for d in facts.threads_of(w.pid) if d.tid == t.tid), None))
        doing = _BLOCKED_DOING.get(family or "", "blocked")
        lines = [
            f"worker pid {w.pid} ({w.name}): thread {t.tid} {doing} in the Dataset at {describe(facts, w.pid, user)}",
            f"worker pid {w.pid}: innermost frame {describe(facts, w.pid, top)}; {kernel_wait(facts, w.pid, t.tid)}; {_quiet_text(facts, w.pid)}",
        ]
        return 0.8, lines, user
    loop = next((d for d in facts.threads_of(w.pid) if d.tid == w.pid), None)
    family = frames.wchan_family(loop.wchan if loop else None)
    if family not in ("sleep", "socket", "pipe", "fifo_open", "disk_or_network_fs"):
        return None
    lines = [f"worker pid {w.pid} ({w.name}): no stack (py-spy unavailable); {kernel_wait(facts, w.pid, w.pid)} ({family}); {_quiet_text(facts, w.pid)}"]
    return 0.45, lines, None


@rule(rank=20)
def worker_stuck(facts: Facts) -> Optional[Diagnosis]:
    """A worker blocked or sleeping inside the Dataset (not on a lock) while main waits for its
    batch forever: ``DataLoader(timeout=0)``, the default, waits without limit
    (``_MultiProcessingDataLoaderIter._try_get_data`` in torch/utils/data/dataloader.py)."""
    found = _gather(facts, _stuck_hit)
    if found is None:
        return None
    return Diagnosis(
        kind="worker_stuck",
        severity=SEVERITY_HANG,
        confidence=found.confidence,
        summary=f"{len(found.pids)} DataLoader worker(s) are stuck in the Dataset{found.where}; the main process waits for their batch forever.",
        evidence=found.evidence,
        remedy=(
            "Give the blocking call a timeout (socket/HTTP/storage client), and set DataLoader(..., timeout=<seconds>) "
            "so the main process raises 'DataLoader timed out' instead of waiting forever."
        ),
        pids=found.pids,
        location=location(found.user),
        docs=(DOC_DATALOADER, DOC_MULTI_PROCESS_LOADING),
    )


@rule(rank=30)
def stall_outside_loader(facts: Facts) -> Optional[Diagnosis]:
    """Main's iterating thread stopped outside any DataLoader iterator (a collective, a lock,
    a sleep, user I/O); the loader is not the cause."""
    v = facts.verdict
    if v.kind != "outside_loader":
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
    else:
        evidence.append(f"main pid {pid}: main thread {kernel_wait(facts, pid, pid)}")
    evidence.append(f"main pid {pid}: {_quiet_text(facts, pid)}; {len(facts.sample.workers)} DataLoader worker(s) alive")
    where = f" at {brief(user)}" if user else ""
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
        docs=(DOC_MULTIPROCESSING,),
    )


def unknown(facts: Facts) -> Diagnosis:
    """The fallback when no rule matched: the stall and every stack are attached."""
    v = facts.verdict
    evidence = [_waiting_main(facts) if v.kind == "dataloader" else f"main pid {facts.stall.main_pid}: {v.reason}"]
    for w in facts.sample.workers:
        t = worker_thread(facts.stack(w.pid), w.pid)
        top = frames.innermost_python(t) if t else None
        evidence.append(
            f"worker pid {w.pid}: state {w.status}, wchan {w.wchan}, {_quiet_text(facts, w.pid)}"
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

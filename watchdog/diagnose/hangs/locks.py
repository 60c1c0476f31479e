"""Hang rules of locks among the living: a lock cycle between workers, a worker or main waiting
for a lock it holds itself, file locks (``worker_deadlock``, ``main_thread_deadlock``).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

from ... import frames
from ...states import Activity
from ...types import (
    SEVERITY_HANG,
    Facts,
    Frame,
    ProofKind,
    ThreadStack,
    WaitKind,
    WaitOp,
)
from ..common import (
    DOC_MULTI_PROCESS_LOADING,
    DOC_MULTIPROCESSING,
    WorkerView,
    brief,
    describe,
    kernel_wait,
    location,
    worker_finding,
    worker_views,
)
from ..engine import Finding, rule
from .fork import (
    FORKED,
    HOLDER_TEXT,
    LOCK_TAKEN_TWICE_REMEDY,
    PYTHON_HOLDERS,
    LockOrigin,
    alone_at_fork,
    fork_context,
    held_lock,
    holds_at,
    inherited_from_forker,
    lock_name,
    lock_origin,
    owner_class,
    proof_line,
)
from .shared import HANG, worker_word


def _own_threads(v: WorkerView) -> List[ThreadStack]:
    """The worker's threads besides multiprocessing's queue feeder and resource sharer."""
    if v.stack is None or not v.stack.ok:
        return []
    return [t for t in v.stack.threads if not frames.is_feeder_thread(t) and not frames.is_resource_sharer(t)]


def _own_lock(facts: Facts, v: WorkerView) -> Optional[LockOrigin]:
    """The :class:`LockOrigin` of a worker whose only thread of its own waits for a
    ``threading.Lock`` that, by the evidence, it took itself since the fork (``verdict`` ``own``),
    else ``None``."""
    threads = _own_threads(v)
    if len(threads) != 1:
        return None
    origin = lock_origin(facts, v, threads[0])
    return origin if origin is not None and origin.verdict == "own" else None


def self_deadlock_hit(facts: Facts, v: WorkerView) -> Optional[Tuple[float, List[str], Optional[Frame]]]:
    if v.stack is None or not v.stack.ok:
        return None
    threads = _own_threads(v)
    if not threads:
        return None
    own_lock = _own_lock(facts, v)
    waits = v.quiet and not v.others and v.activity in (Activity.PRIVATE_WAIT, Activity.UNKNOWN)
    if not v.proven and not (own_lock is not None and waits):
        return None
    inherited_ruled_out = (
        held_lock(facts, threads[0]) in PYTHON_HOLDERS
        and alone_at_fork(facts, v.pid)
        and not inherited_from_forker(facts, v, threads[0])
    )
    if len(threads) < 2 and v.proc.start_method in FORKED and not inherited_ruled_out and own_lock is None:
        return None  # one thread, forked: fork_inherited_lock, unless the evidence rules that out
    lines = []
    for t in threads:
        top = frames.innermost_python(t)
        user = frames.innermost_user(t) or top
        what = HOLDER_TEXT.get(held_lock(facts, t) or "", "something only a thread of its process could release")
        lines.append(
            f"worker pid {v.pid}: thread {t.tid} ({t.name or '?'}) waits for {what} at {describe(facts, v.pid, user)}"
        )
        lines.append(f"worker pid {v.pid}: thread {t.tid}: {kernel_wait(facts, v.pid, t.tid)}")
    if own_lock is not None:
        lines += list(own_lock.own)
        lines.append(
            f"worker pid {v.pid}: its only thread of its own waits (multiprocessing's queue-feeder and resource-sharer "
            "threads hold none of the user's locks), so no thread of the worker can release the lock"
            + (f"; {fork_context(facts, v)}" if v.proc.start_method in FORKED else "")
        )
    elif len(threads) < 2:
        lines.append(
            f"worker pid {v.pid}: its only thread of its own waits (multiprocessing's queue-feeder and resource-sharer "
            "threads hold none of the user's locks); the job's record at the fork shows no other Python thread in "
            "the parent, so nothing was inherited locked: no thread exists that could ever signal it"
        )
    lines += proof_line(facts, v.pid)
    if own_lock is not None:
        confidence = (0.9 if own_lock.taken_twice else 0.8) if v.proven else 0.6
        return confidence, lines, v.user
    return 0.9, lines, v.user


def shared_lock_cycle(facts: Facts) -> Optional[Tuple[str, Dict[int, Tuple[float, List[str], Optional[Frame]]]]]:
    """A cycle of workers, each waiting (untimed, on a futex shared between processes: a
    ``multiprocessing`` lock, a POSIX semaphore in shared memory) at ``with X:`` or
    ``X.acquire()`` in the job's code while its stack shows it inside a ``with Y:`` (or after a
    ``Y.acquire()``, :func:`holds_at`) for the ``Y`` another worker of the cycle waits for. The
    kernel keeps no holder of a semaphore, so this is read from the stacks (the names in the
    source, of the same class's method), never proven. Returns the cycle's sentence ("worker 0
    (pid A) holds self.a (at x.py:45) and waits for self.b; worker 1 …") and each worker's
    evidence, or ``None``. Workers a proof covers are left to the proven rules."""
    proven = set(facts.proof.pids) if facts.proof is not None else set()
    waiting: Dict[int, Tuple[WorkerView, str]] = {}
    for v in worker_views(facts):
        w = v.loop_detail.wait if v.loop_detail is not None else None
        if v.pid in proven or v.user is None or w is None or w.kind is not WaitKind.FUTEX_SHARED:
            continue
        name = lock_name(facts.source_raw(v.user.file, v.user.line))
        if name is not None:
            waiting[v.pid] = (v, name)

    def holder_of(pid: int) -> Optional[Tuple[int, Tuple[int, str]]]:
        """A worker that holds what ``pid`` waits for, with the line that took it."""
        v, name = waiting[pid]
        for other, (u, theirs) in sorted(waiting.items()):
            if other == pid or theirs == name or u.user is None or v.user is None or u.user.file != v.user.file:
                continue
            if name.startswith("self.") and owner_class(u.user.function) != owner_class(v.user.function):
                continue
            held = holds_at(facts, u.user, name)
            if held is not None:
                return other, held
        return None

    for start in sorted(waiting):
        path: List[int] = [start]
        taken: Dict[int, Tuple[int, str]] = {}
        here = start
        while True:
            found = holder_of(here)
            if found is None:
                break
            nxt, held = found
            taken[nxt] = held
            if nxt == start:
                break
            if nxt in path:
                path = path[path.index(nxt) :]
                start = nxt
                break
            path.append(nxt)
            here = nxt
        if start not in taken or len(path) < 2:
            continue
        parts: List[str] = []
        hits: Dict[int, Tuple[float, List[str], Optional[Frame]]] = {}
        for pid in path:
            v, name = waiting[pid]
            line, text = taken[pid]
            assert v.user is not None and v.loop is not None
            held_name = lock_name(text) or text
            parts.append(f"{worker_word(facts, pid)} holds {held_name} (taken at line {line}) and waits for {name}")
            hits[pid] = (
                0.8,
                [
                    f"worker pid {pid} ({v.proc.name}): thread {v.loop.tid} waits for {name} at "
                    f"{describe(facts, pid, v.user)}, inside `{text}` (line {line})",
                    f"worker pid {pid}: {kernel_wait(facts, pid, v.loop.tid)}",
                    f"worker pid {pid}: a multiprocessing lock is a semaphore in shared memory: the kernel shows no "
                    "holder (unlike a file lock in /proc/locks), so the cycle is read from the workers' stacks, not "
                    "proven",
                ],
                v.user,
            )
        return "; ".join(parts), hits
    return None


_CYCLE_END = ": every thread of pid(s) "


def file_lock_cycle(facts: Facts) -> Optional[str]:
    """The cycle a kernel proof names through file locks ("worker pid A holds …/a.lock and
    waits for …/b.lock; …", from ``detect.lock_cycle``), when the proof covers a worker whose
    loop thread waits in ``flock``/``fcntl``; else ``None``."""
    proof = facts.proof
    if proof is None or proof.kind is not ProofKind.KERNEL or _CYCLE_END not in proof.conclusion:
        return None
    cycle = proof.conclusion.split(_CYCLE_END, 1)[0]
    if " waits for " not in cycle:
        return None
    if not any(_file_lock_wait(v) for v in worker_views(facts) if v.pid in proof.pids):
        return None
    return cycle


def _file_lock_wait(v: WorkerView) -> bool:
    w = v.loop_detail.wait if v.loop_detail is not None else None
    return w is not None and w.op is WaitOp.LOCK


def _file_lock_hit(facts: Facts, v: WorkerView) -> Optional[Tuple[float, List[str], Optional[Frame]]]:
    if not v.proven or not _file_lock_wait(v):
        return None
    tid = v.loop.tid if v.loop is not None else v.pid
    lines = [f"worker pid {v.pid} ({v.proc.name}): thread {tid}: {kernel_wait(facts, v.pid, tid)}"]
    if v.loop is not None:
        lines.append(
            f"worker pid {v.pid}: innermost frame {describe(facts, v.pid, v.top)}, called from "
            f"{describe(facts, v.pid, v.user)}"
        )
    lines += proof_line(facts, v.pid)
    main = facts.sample.main
    if main is not None and facts.proof is not None and main.pid in facts.proof.pids:
        lines += [f"main pid {main.pid}: {link.text()}" for link in facts.proof.links_of(main.pid)[:2]]
    return 0.95, lines, v.user


def _file_lock_remedy(facts: Facts) -> str:
    main = facts.sample.main
    if main is not None and facts.proof is not None and main.pid in facts.proof.pids:
        return (
            "Main holds the file lock the workers wait for while it waits for their batch: release it (fcntl.lockf("
            "f, LOCK_UN) or close the file) before iterating the DataLoader, or take it only around the work it "
            "guards; give the workers' wait a deadline (LOCK_NB in a loop with a timeout) so it fails loudly."
        )
    return (
        "Take the file locks in one global order in every process (sort the lock files' paths, then lock), or hold "
        "one at a time; flock(2) does not detect deadlocks, so give each wait a deadline (LOCK_NB in a loop, or "
        "filelock's timeout=) so it fails loudly instead of waiting forever."
    )


@rule("worker_deadlock", SEVERITY_HANG, 11, HANG)
def worker_deadlock(facts: Facts) -> Optional[Finding]:
    """A worker's own threads wait on each other: every thread of it is in an untimed wait on a
    private futex (two locks taken in opposite orders, a lock taken twice), so none can run; or
    its only thread waits for an event, condition or lock that no thread of it can ever signal,
    when the job's record at the fork rules out an inherited one."""
    cycle = file_lock_cycle(facts)
    if cycle is not None:
        found = worker_finding(
            facts,
            _file_lock_hit,
            "deadlocked on file locks across processes{where}: " + cycle + ".",
            _file_lock_remedy(facts),
            (DOC_MULTI_PROCESS_LOADING,),
        )
        if found is not None:
            return found
    shared = shared_lock_cycle(facts)
    if shared is not None:
        text, hits = shared
        found = worker_finding(
            facts,
            lambda _facts, v: hits.get(v.pid),
            "deadlocked on multiprocessing locks across processes, by their stacks{where}: " + text + ".",
            (
                "Take the locks in one global order in every worker and in main (always the first, then the second), "
                "or use one lock; acquire with a timeout (lock.acquire(timeout=…)) so a wait fails loudly instead of "
                "hanging."
            ),
            (DOC_MULTI_PROCESS_LOADING, DOC_MULTIPROCESSING),
        )
        if found is not None:
            return found
    views = {v.pid: v for v in worker_views(facts)}

    def adapt(pids: Tuple[int, ...]) -> Optional[Tuple[str, str]]:
        single = [views[pid] for pid in pids if pid in views and len(_own_threads(views[pid])) < 2]
        if not single:
            return None
        if all(held_lock(facts, _own_threads(v)[0]) == "python_lock" for v in single if _own_threads(v)):
            return (
                "deadlocked{where}: the worker's only thread of its own waits for a threading.Lock that it took "
                "itself and never released (taken twice, or left held by an earlier path); no thread of the worker "
                "can release it.",
                LOCK_TAKEN_TWICE_REMEDY,
            )
        return (
            "deadlocked{where}: the worker's only thread of its own (besides multiprocessing's helper threads) "
            "waits for an event, condition or lock that no thread of it "
            "can ever signal or release.",
            "Find what should have signalled it: an Event, Condition or Queue waited on in __getitem__ whose setter "
            "is another process or a thread the worker never started (create the object where its setter lives, e.g. "
            "in worker_init_fn); wait with a timeout to fail loudly.",
        )

    return worker_finding(
        facts,
        self_deadlock_hit,
        "deadlocked{where}: every thread of the worker waits for a lock or condition that only another of its own "
        "threads could release.",
        (
            "Take locks in one global order in __getitem__ and in any thread it starts (or use one lock); never take a "
            "non-reentrant lock twice in one thread (threading.RLock if needed); acquire with a timeout to fail loudly."
        ),
        (DOC_MULTI_PROCESS_LOADING,),
        adapt,
    )


# --- a deadlock inside main -------------------------------------------------------------------


def _main_threads_chain(facts: Facts, pid: int) -> Tuple[List[str], Optional[Frame], List[str]]:
    """Evidence lines (one per thread of main, the iterating thread first), main's user frame,
    and the holder kinds seen."""
    stack = facts.stack(pid)
    lines: List[str] = []
    kinds: List[str] = []
    where: Optional[Frame] = None
    if stack is None or not stack.ok:
        return [f"main pid {pid}: no stack ({facts.pyspy_problem or 'not dumped'})"], None, kinds
    for t in sorted(stack.threads, key=lambda x: x.tid != pid):
        top = frames.innermost_python(t)
        user = frames.innermost_user(t)
        holder = held_lock(facts, t)
        kinds.append(holder or "")
        detail = facts.detail(pid, t.tid)
        wait = detail.wait.detail if detail is not None and detail.wait is not None else "unknown wait"
        target = ""
        if detail is not None and detail.wait is not None and detail.wait.fd is not None:
            fd_target = dict(facts.fd_targets).get((pid, detail.wait.fd))
            if fd_target is not None and fd_target.path:
                readers = dict(facts.pipe_readers).get(fd_target.path, ())
                held = ", ".join(map(str, readers)) or "none"
                target = f"; fd {detail.wait.fd} is {fd_target.path}, read only by pid(s) {held}"
        doing = f"waits for {HOLDER_TEXT[holder]}, at" if holder in HOLDER_TEXT else "is at"
        at = describe(facts, pid, top) + (
            f", called from {describe(facts, pid, user)}" if user is not None and user is not top else ""
        )
        lines.append(f"main pid {pid}: thread {t.tid} ({t.name or '?'}) {doing} {at} — {wait}{target}")
        if where is None and user is not None and t.tid == pid:
            where = user
    return lines, where, kinds


@dataclasses.dataclass(frozen=True)
class Reentry:
    """A thread that waits for a lock one of its own outer frames holds: ``name`` is the lock's
    name in the source, ``waiter`` the innermost Python frame (waiting to take it), ``holder`` the
    outer frame inside ``holder_text`` (``with NAME:`` or ``NAME.acquire()``) at ``holder_line``;
    ``handler`` the frame that its caller's line does not call (``None`` when every call between
    them is written in the caller's line): a signal handler CPython ran between two bytecodes of
    ``interrupted``."""

    name: str
    waiter: Frame
    holder: Frame
    holder_line: int
    holder_text: str
    handler: Optional[Frame]
    interrupted: Optional[Frame]


def _short_name(function: str) -> str:
    return function.rsplit(".", 1)[-1].split("@")[0]


def reentry_of(facts: Facts, t: ThreadStack) -> Optional[Reentry]:
    """The :class:`Reentry` of thread ``t``, or ``None``: its innermost Python frame waits at a
    line that takes a lock (``with NAME:``, ``NAME.acquire()``) whose name an outer frame of the
    user's code holds (:func:`holds_at`). Between them, a frame whose caller's source line does
    not name it was not called by that line: Python signal handlers run in the main thread on top
    of the frame they interrupt (CPython docs, signal module, "Execution of Python signal
    handlers"). Unknown source lines are never taken for such a frame."""
    py = frames.python_frames(t)
    if not py or held_lock(facts, t) != "python_lock":
        return None
    name = lock_name(facts.source(py[0].file, py[0].line))
    if name is None:
        return None
    for i, f in enumerate(py[1:8], 1):
        if not frames.is_user(f):
            continue
        held = holds_at(facts, f, name)
        if held is None:
            continue
        handler = interrupted = None
        for callee, caller in zip(py[:i], py[1 : i + 1]):
            called = _short_name(callee.function)
            implicit = called.startswith("__") and called.endswith("__") or called == "<module>"
            if not frames.is_user(callee) or implicit:
                continue  # the library's frames, and methods that syntax calls (with, [], a class's name)
            text = facts.source(caller.file, caller.line)
            if text is not None and called not in text:
                handler, interrupted = callee, caller
                break
        return Reentry(name, py[0], f, held[0], held[1], handler, interrupted)
    return None


_HANDLER_REMEDY = (
    "A Python signal handler runs in the main thread on top of whatever it interrupted, so a handler that takes a "
    "lock the interrupted code holds (directly, or through logging, print or a library call that locks) waits for "
    "itself forever. Make the handler only set a flag (a plain variable, or write a byte to a pipe given to "
    "signal.set_wakeup_fd) and do the work (the status, the checkpoint, the logging) in the loop when it sees the "
    "flag; never take a lock in a signal handler."
)

_MAIN_TAKEN_TWICE_REMEDY = (
    "A threading.Lock is not reentrant: the thread takes it again while an outer frame of its own holds it. Do not "
    "call code that takes the lock from inside it (split the locked part out), use threading.RLock where one thread "
    "may take it again, release it on every path, and acquire(timeout=<seconds>) to fail loudly."
)


@rule("main_thread_deadlock", SEVERITY_HANG, 13, HANG)
def main_thread_deadlock(facts: Facts) -> Optional[Finding]:
    """The main process's threads wait on each other: the proof shows every thread of main in an
    untimed wait that only another of them could end (a join of a thread blocked on a full queue,
    multiprocessing's exit handler joining a queue feeder thread blocked on a pipe nobody reads:
    ``Queue._finalize_join`` in multiprocessing/queues.py, pytorch/pytorch#48666)."""
    main = facts.sample.main
    if (
        main is None
        or facts.proof is None
        or facts.proof.kind is not ProofKind.KERNEL
        or main.pid not in facts.proof.pids
        or file_lock_cycle(facts) is not None
    ):
        return None  # a cycle through file locks is worker_deadlock's (main holds what workers wait for)
    lines, where, kinds = _main_threads_chain(facts, main.pid)
    stack = facts.stack(main.pid)
    at_exit = stack is not None and any(
        frames.has_frame(t, frozenset({"_exit_function", "_run_finalizers"})) for t in stack.threads
    )
    feeder = stack is not None and any(frames.is_feeder_thread(t) for t in stack.threads)
    iterating = next((t for t in stack.threads if t.tid == main.pid), None) if stack is not None and stack.ok else None
    reentry = reentry_of(facts, iterating) if iterating is not None else None
    if at_exit and feeder:
        summary = (
            "The main process hangs at interpreter exit: multiprocessing's exit handler joins a queue's feeder thread, "
            "which is blocked writing to a pipe that no process will read again."
        )
        remedy = (
            "Before exiting, drain the queue and join its consumer process, or call queue.cancel_join_thread() on a "
            "queue whose reader may be gone (it may drop unsent items); do not leave a daemonic consumer behind a "
            "full queue."
        )
    elif reentry is not None:
        r = reentry
        held_at = f"{frames.short_path(r.holder.file)}:{r.holder_line}"
        if r.handler is not None and r.interrupted is not None:
            summary = (
                f"The main process deadlocked on itself: the signal handler at {brief(r.handler)} waits for "
                f"{r.name}, which the code it interrupted holds (`{r.holder_text}` "
                f"at {held_at}, in {r.holder.function}); both run in the main thread, so nothing can release it."
            )
            remedy = _HANDLER_REMEDY
            lines.insert(
                1,
                f"main pid {main.pid}: thread {main.pid}: {r.handler.function} ({describe(facts, main.pid, r.handler)})"
                f" runs on top of {describe(facts, main.pid, r.interrupted)}, a line that does not call it: CPython "
                f"ran it as a signal handler between two bytecodes; an outer frame, {r.holder.function}, holds "
                f"{r.name} (`{r.holder_text}` at {held_at})",
            )
            where = r.handler if frames.is_user(r.handler) else where
        else:
            summary = (
                f"The main process deadlocked on itself at {brief(r.waiter)}: its thread waits for {r.name}, which an "
                f"outer frame of the same thread holds (`{r.holder_text}` at {held_at}, in {r.holder.function})."
            )
            remedy = _MAIN_TAKEN_TWICE_REMEDY
            lines.insert(
                1,
                f"main pid {main.pid}: thread {main.pid} waits for {r.name} at {describe(facts, main.pid, r.waiter)}; "
                f"the same thread holds it in {r.holder.function} (`{r.holder_text}` at {held_at})",
            )
    else:
        summary = (
            f"Deadlock in the main process{f' at {brief(where)}' if where else ''}: its threads wait on each other "
            "and none can run."
        )
        remedy = (
            "Do not join (or wait for) a thread that is itself blocked: drain the queue it puts into (or put with a "
            "timeout and check a stop flag) before join(); join with a timeout to fail loudly; take locks in one "
            "order."
        )
    evidence = tuple(lines + [f"proof: {line}" for line in facts.proof.lines()])
    return Finding(0.95, summary, evidence, remedy, (main.pid,), location(where), (DOC_MULTIPROCESSING,))

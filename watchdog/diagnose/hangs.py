"""Hang rules: what a stalled job's stacks, kernel waits, proof and stderr say.

Rules read the states decided once in :mod:`watchdog.states` and :func:`common.worker_views`
(how each thread waits, what each worker's loop does) and the facts' proof; none matches on
another rule's evidence text. A worker idle in ``index_queue.get`` is healthy, and main in
``_try_get_data`` is only the symptom.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional, Tuple, Union

from .. import dead_releaser, frames
from ..collect.stderr_facts import parse_stderr, stderr_facts
from ..collect.waits import LOCK_CALLS
from ..states import Activity, WorkerState
from ..types import (
    MODE_HANG,
    ROLE_FORKSERVER,
    ROLE_OTHER,
    ROLE_STARTING,
    SEVERITY_HANG,
    ExitRecord,
    Facts,
    ForkRecord,
    Frame,
    LinkKind,
    LoaderView,
    ProcessSample,
    ProcId,
    ProofKind,
    ThreadAtFork,
    ThreadStack,
    VerdictKind,
    WaitKind,
)
from . import ended as ended_mod
from .common import (
    BLOCKED_DOING,
    DOC_DATALOADER,
    DOC_MULTI_PROCESS_LOADING,
    DOC_MULTIPROCESSING,
    DOC_START_METHODS,
    FORKSERVER,
    SPAWN,
    WorkerView,
    brief,
    chain_of,
    chain_remedy,
    chain_text,
    describe,
    kernel_wait,
    location,
    lock_holders,
    polling_of,
    quiet_text,
    torch_seen,
    waiting_main,
    worker_finding,
    worker_views,
)
from .dead import dead_end
from .engine import Finding, rule

HANG = (MODE_HANG,)

# What a worker (or a thread) waits to acquire, by frames.lock_holder(), for sentences.
HOLDER_TEXT = {
    "openmp": "the OpenMP runtime's thread pool (libgomp/libiomp), whose threads do not exist in a forked child",
    "future": "a concurrent.futures result that only a thread pool's thread could set",
    "condition": "a condition, event or queue.Queue that only another thread could signal",
    "join": "a thread to finish",
    "native_mutex": "a native mutex (pthread_mutex_lock)",
    "python_lock": "a threading.Lock",
}


def fork_record_of(facts: Facts, pid: int) -> Optional[ForkRecord]:
    """The job's own record of the threads when worker ``pid`` was forked (the inside view)."""
    if facts.inside is None:
        return None
    return next((r for r in facts.inside.forks if pid in r.workers), None)


_LOCK_NAME = re.compile(r"\bwith\s+([A-Za-z_][\w.]*)\s*[:,]|([A-Za-z_][\w.]*)\.acquire\(")


def lock_name(source: Optional[str]) -> Optional[str]:
    """``_SAMPLE_LOCK`` from ``with _SAMPLE_LOCK:`` or ``_SAMPLE_LOCK.acquire()``, else ``None``."""
    m = _LOCK_NAME.search(source or "")
    return (m.group(1) or m.group(2)) if m else None


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def _owner_class(function: str) -> Optional[str]:
    """``Live`` of ``Live._refresh`` (py-spy's qualified names), or ``None`` for a plain function."""
    head, dot, _ = function.rpartition(".")
    return head.rsplit(".", 1)[-1] if dot else None


_SCOPE = re.compile(r"^\s*(?:async\s+def|def|class)\s")


def holds_at(facts: Facts, f: Frame, name: str) -> Optional[Tuple[int, str]]:
    """Whether frame ``f`` runs while holding the lock named ``name``: the line and text of a
    ``with NAME:`` enclosing ``f.line`` (indented less), or of a ``NAME.acquire()`` above it in
    the same block or an enclosing one with no ``NAME.release()`` between; ``None`` when neither
    is found in the :data:`~watchdog.frames.ENCLOSING_LINES` raw source lines above (the hang's
    look reads them) or the scan reaches the start of ``f``'s function. ``f.line`` itself is not read: a thread waiting
    at ``with NAME:`` does not hold it yet."""
    here = facts.source_raw(f.file, f.line)
    if here is None:
        return None
    enclosing = re.compile(r"^\s*with\s+" + re.escape(name) + r"\b")
    taken = re.compile(r".*\b" + re.escape(name) + r"\.acquire\(")
    given = re.compile(r".*\b" + re.escape(name) + r"\.release\(")
    for line in range(f.line - 1, max(0, f.line - frames.ENCLOSING_LINES) - 1, -1):
        text = facts.source_raw(f.file, line)
        if text is None or not text.strip():
            continue
        indent = _indent(text)
        if indent < _indent(here) and enclosing.match(text):
            return line, text.strip()
        if indent <= _indent(here) and given.match(text):
            return None
        if indent <= _indent(here) and taken.match(text):
            return line, text.strip()
        if indent < _indent(here) and _SCOPE.match(text):
            return None
    return None


def lock_holder_at_fork(
    facts: Facts, record: ForkRecord, name: str, forking: bool = False, waiter: Optional[Frame] = None
) -> Optional[Tuple[ThreadAtFork, Frame, int, str]]:
    """The thread of ``record`` (the forking one when ``forking``, else another) that held the
    lock named ``name`` at the fork (:func:`holds_at` on its user frames): ``(thread, its frame,
    line of the with or acquire, its text)``. The lock is matched by its name, so an attribute
    of ``self`` (``self._lock``) matches only in a method of the waiting frame's (``waiter``)
    own class: two classes' ``self._lock`` are two locks (Textualize/rich#2046)."""
    cls = _owner_class(waiter.function) if waiter is not None and name.startswith("self.") else None
    for t in record.threads:
        if t.forking != forking:
            continue
        for f in [f for f in t.frames if frames.is_user(f)][:6]:
            if cls is not None and _owner_class(f.function) != cls:
                continue
            held = holds_at(facts, f, name)
            if held is not None:
                return (t, f) + held
    return None


def fork_threads_text(facts: Facts, pid: int) -> str:
    """How many threads main ran when worker ``pid`` was forked, and which: from the job's own
    record at the fork when there is one (:func:`fork_record_of`); else the larger of the
    count in the last sample before the fork and the threads of main still alive that started
    before the worker (``stat`` start times; within one clock tick, thread IDs, which the kernel
    hands out in order), named as py-spy names them."""
    server = forkserver_of(facts, pid)
    if server is not None:
        stack = facts.stack(server.pid)
        if stack is not None and stack.ok and stack.threads:
            named = [
                f"{t.name or '?'} (tid {t.tid})"
                + (f" at {describe(facts, server.pid, f)}" if (f := frames.innermost_user(t)) is not None else "")
                for t in stack.threads[:8]
            ]
        else:
            named = [f"{d.name} (tid {d.tid})" for d in facts.threads_of(server.pid)[:8]]
        count = len(named) or server.num_threads
        return (
            f"; the forkserver (pid {server.pid}), not main, forked this worker; it runs {count} thread(s): "
            f"{'; '.join(named) or '?'} (threads that a module in set_forkserver_preload, or the main module it "
            "imports, started: a lock one of them held at the fork stays locked in every worker it forks)"
        )
    record = fork_record_of(facts, pid)
    if record is not None:
        others = [t for t in record.threads if not t.forking]
        python_tids = {t.native_id for t in record.threads}
        native = [(tid, comm) for tid, comm in record.os_threads if tid not in python_tids]
        if native:
            names = ", ".join(f"{comm} ({tid})" for tid, comm in native[:8])
            more = f" and {len(native) - 8} more" if len(native) > 8 else ""
            native_text = (
                f"{len(native)} native thread(s) that threading does not list: {names}{more} (a Rust, C++ or OpenMP "
                "thread pool; a lock one of them held is inherited locked)"
            )
        else:
            native_text = ""
        if not others:
            if native_text:
                return (
                    f"; main ran one Python thread (the forking one) and {native_text} when it forked this worker "
                    "(recorded at the fork)"
                )
            return (
                "; main ran a single thread when it forked this worker (recorded at the fork, its OS threads "
                "counted): the lock was taken by that same thread before iter()"
                if record.os_threads
                else "; main ran a single Python thread when it forked this worker (recorded at the fork): the lock "
                "was taken by that same thread before iter(), or by a library's native thread"
            )
        shown = "; ".join(
            f"{t.name or '?'} (tid {t.native_id}) at {describe(facts, record.pid, _innermost_user(t))}"
            for t in others[:6]
        )
        more = f"; and {len(others) - 6} more" if len(others) > 6 else ""
        return (
            f"; main ran {len(others) + 1} Python threads when it forked this worker (recorded at the fork): the "
            f"forking one and {shown}{more}" + (f"; besides them, {native_text}" if native_text else "")
        )
    sampled = dict(facts.main_threads_at_fork).get(pid)
    start = dict(facts.worker_start_ticks).get(pid)
    main = facts.sample.main
    before = []
    if start is not None and main is not None:
        before = [
            d
            for d in facts.threads_of(main.pid)
            if d.start_ticks is not None and (d.start_ticks < start or (d.start_ticks == start and d.tid < pid))
        ]
    count = max(sampled or 0, len(before))
    if not count:
        return ""
    if count == 1:
        return (
            "; main ran a single thread at the fork as far as was sampled (a thread that started and ended between "
            "two samples cannot be ruled out, nor can it be shown)"
        )
    stack = facts.stack(main.pid) if main is not None else None
    py_names = {t.tid: t.name for t in stack.threads} if stack is not None and stack.ok else {}
    names = ", ".join(f"{py_names.get(d.tid) or d.name} ({d.tid})" for d in before[:8])
    text = f"; main ran at least {count} threads when it forked this worker"
    if names:
        text += f"; still alive of those: {names}"
    if len(before) < count:
        text += f"; {count - len(before)} of them ended since (the holder may be among them)"
    return text


def forkserver_of(facts: Facts, pid: int) -> Optional[ProcessSample]:
    """The forkserver process that forked worker ``pid`` (its parent, role ``forkserver``), or
    ``None`` for a worker that main forked or spawned. The forkserver is the worker's parent
    but not its owner: the iterator that asked for it lives in main (multiprocessing's
    forkserver.py: the server forks each child from its own state, after importing the
    preloaded modules)."""
    worker = facts.sample.process(pid)
    parent = facts.sample.process(worker.ppid) if worker is not None else None
    return parent if parent is not None and parent.role == ROLE_FORKSERVER else None


def _innermost_user(t: ThreadAtFork) -> Frame:
    return (
        next((f for f in t.frames if frames.is_user(f)), None)
        or next((f for f in t.frames if not frames.is_stdlib(f)), None)
        or t.frames[0]
    )


def fork_context(facts: Facts, v: WorkerView) -> str:
    """``start method fork; main ran at least N threads when it forked this worker: …``."""
    return f"start method {v.proc.start_method or 'fork'}{fork_threads_text(facts, v.pid)}"


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


def _holder(facts: Facts, t: ThreadStack) -> Optional[str]:
    top = frames.innermost_python(t)
    return frames.lock_holder(t, facts.source(top.file, top.line) if top else None)


def _proof_line(facts: Facts, pid: int) -> List[str]:
    """The proof's steps about ``pid`` (its conclusion is added once per finding), without the
    raw syscall lines (addresses), which stay in the report's proof section."""
    if facts.proof is None:
        return []
    return [f"proof: {link.text()}" for link in facts.proof.links_of(pid)]


# --- fork-inherited locks and deadlocks inside a worker -------------------------------------------


# What a Python thread of the parent could have held at the fork; OpenMP pools and native mutexes
# belong to threads that ``threading`` does not list, so the fork record cannot rule those out.
_PYTHON_HOLDERS = ("python_lock", "condition", "future", "join")


def alone_at_fork(facts: Facts, pid: int) -> bool:
    """True when the job's own record at the fork (the inside view) shows that the forking
    thread was the only Python thread of the parent: no other Python thread can have held a
    Python lock or condition that the worker inherited."""
    record = fork_record_of(facts, pid)
    return record is not None and not [t for t in record.threads if not t.forking]


def _seen_alone_at_fork(facts: Facts, pid: int) -> bool:
    """From the sampler alone: main ran one thread in the last sample before worker ``pid``
    appeared, and none of its live threads started before the worker."""
    sampled = dict(facts.main_threads_at_fork).get(pid)
    start = dict(facts.worker_start_ticks).get(pid)
    main = facts.sample.main
    if sampled is None or sampled > 1 or main is None or start is None:
        return False
    before = [
        d
        for d in facts.threads_of(main.pid)
        if d.start_ticks is not None and d.start_ticks <= start and d.tid != main.pid
    ]
    return not before


def _forking_thread_held(facts: Facts, v: WorkerView, t: ThreadStack) -> bool:
    """Whether the forking thread itself was inside ``with NAME:`` (or after ``NAME.acquire()``)
    for the lock the worker waits on (the worker's copy of that thread then waits for a lock its
    own copy holds)."""
    top = frames.innermost_python(t)
    name = lock_name(facts.source(top.file, top.line)) if top is not None else None
    record = fork_record_of(facts, v.pid)
    return bool(name and record is not None and lock_holder_at_fork(facts, record, name, forking=True, waiter=top))


def in_first_fetch(facts: Facts, pid: int) -> bool:
    """Whether worker ``pid`` is still inside the first batch it fetches: its count of samples
    reached for (the inside view's ``<pid>.fetch``) is at most ``batch_size + 1``, one read
    of the dataset per index and one for ``hasattr(dataset, "__getitems__")``
    (``_MapDatasetFetcher.fetch`` in torch/utils/data/_utils/fetch.py). ``False`` when unknown
    (no inside view, no ``batch_size``: a ``batch_sampler``)."""
    fetched = {f.pid: f.samples for f in (facts.inside.fetches if facts.inside else ()) + facts.sample.fetches}
    loaders = [lv for lv in (facts.inside.loaders if facts.inside else ()) + facts.sample.loaders if pid in lv.workers]
    batch = dict(loaders[0].settings).get("batch_size") if loaders else None
    samples = fetched.get(pid)
    return isinstance(batch, int) and batch >= 1 and samples is not None and samples <= batch + 1


def _locked_before_it_began(facts: Facts, v: WorkerView, t: ThreadStack) -> bool:
    """Whether the ``threading.Lock`` that the worker's thread ``t`` waits for was already held
    when the worker began: the worker is inside its first batch (:func:`in_first_fetch`) and no
    frame of ``t`` took the lock itself (:func:`holds_at`), so no earlier sample and no caller
    can have left it held. With the forking thread alone at the fork, that thread held it: a
    lock taken in a function that returned before ``iter(loader)``, beyond what the record's
    frames show."""
    top = frames.innermost_python(t)
    name = lock_name(facts.source(top.file, top.line)) if top is not None else None
    if name is None or _holder(facts, t) != "python_lock" or not in_first_fetch(facts, v.pid):
        return False
    return not any(holds_at(facts, f, name) for f in [f for f in t.frames if frames.is_user(f)][:6])


def _inherited_from_forker(facts: Facts, v: WorkerView, t: ThreadStack) -> bool:
    """The forking thread held what ``t`` waits for: seen in its frames at the fork
    (:func:`_forking_thread_held`), or shown by the worker's own first batch
    (:func:`_locked_before_it_began`)."""
    return _forking_thread_held(facts, v, t) or _locked_before_it_began(facts, v, t)


# Start methods whose workers are copies of a running process (main's, or the forkserver's).
_FORKED = (None, "fork", "forkserver")


def _samples_read(facts: Facts, pid: int) -> Optional[int]:
    """How many samples worker ``pid`` reached for since it started (the inside view's
    ``<pid>.fetch``), or ``None`` when unknown."""
    fetched = {f.pid: f.samples for f in (facts.inside.fetches if facts.inside else ()) + facts.sample.fetches}
    return fetched.get(pid)


def _past_first_batch(facts: Facts, pid: int) -> bool:
    """Whether worker ``pid`` reached for more samples than its first batch holds (more than
    ``batch_size + 1``: :func:`in_first_fetch`); ``False`` when either count is unknown."""
    loaders = [lv for lv in (facts.inside.loaders if facts.inside else ()) + facts.sample.loaders if pid in lv.workers]
    batch = dict(loaders[0].settings).get("batch_size") if loaders else None
    samples = _samples_read(facts, pid)
    return isinstance(batch, int) and batch >= 1 and samples is not None and samples > batch + 1


def _written_bytes(facts: Facts, pid: int) -> Optional[int]:
    """Bytes worker ``pid`` has written since it started (``wchar`` of ``/proc/PID/io``, which a
    forked child starts at zero: proc(5)); a worker sends each batch to main by writing its pickle
    to a pipe (``Connection._send`` in multiprocessing/connection.py). ``None`` when unreadable."""
    p = facts.sample.process(pid) or facts.last_seen(pid)
    return p.write_chars if p is not None else None


@dataclasses.dataclass(frozen=True)
class LockOrigin:
    """What is known of who left held the ``threading.Lock`` a worker's thread waits for.

    ``inherited`` holds the evidence lines that it was held when the worker was forked (a thread
    of the forking process inside ``with NAME:`` at the fork, by the job's record at the fork;
    the forking thread itself holding it; the worker waiting inside its first batch with no
    frame of its own having taken it; a forkserver running other threads); ``own`` those that
    the worker took it itself since the fork (a frame of the waiting thread holds it; the worker
    read samples, or sent batches, through its code since the fork). ``taken_twice`` is True
    when a frame of the waiting thread itself holds the lock it waits for."""

    name: Optional[str]
    inherited: Tuple[str, ...]
    own: Tuple[str, ...]
    taken_twice: bool

    @property
    def verdict(self) -> str:
        """``inherited`` (evidence of a holder at the fork), ``own`` (evidence only that the
        worker took it since: a lock never released, or taken twice), or ``unknown``."""
        if self.taken_twice:
            return "own"
        if self.inherited:
            return "inherited"
        return "own" if self.own else "unknown"


def lock_origin(facts: Facts, v: WorkerView, t: ThreadStack) -> Optional[LockOrigin]:
    """For a worker whose thread ``t`` waits for a ``threading.Lock`` (:func:`frames.lock_holder`
    ``python_lock``), the evidence of where its holder is (:class:`LockOrigin`); ``None`` for
    any other wait. A fork copies a lock in the state it had (POSIX fork(2): only the calling
    thread is copied), so a fork-inherited lock needs a thread that held it at the fork; a
    worker that got through the code that takes it since the fork shows the opposite."""
    if _holder(facts, t) != "python_lock":
        return None
    top = frames.innermost_python(t)
    name = lock_name(facts.source(top.file, top.line)) if top is not None else None
    record = fork_record_of(facts, v.pid)
    inherited: List[str] = []
    own: List[str] = []
    mine = [
        (f, held) for f in [f for f in t.frames if frames.is_user(f)][:6] if name for held in [holds_at(facts, f, name)]
    ]
    taken = [(f, held) for f, held in mine if held is not None]
    for f, (line, text) in taken[:1]:
        own.append(
            f"worker pid {v.pid}: thread {t.tid} took the lock named {name} itself, at `{text}` "
            f"({frames.short_path(f.file)}:{line}, in {f.function}), and waits for it again: a threading.Lock "
            "is not reentrant"
        )
    if record is not None and name:
        held = lock_holder_at_fork(facts, record, name, waiter=top)
        if held is not None:
            ht, hf, hline, htext = held
            inherited.append(
                f"worker pid {v.pid}: at the fork, thread {ht.name or '?'} (tid {ht.native_id}) of pid {record.pid} "
                f"held a lock named {name}: it was at {describe(facts, record.pid, hf)}, inside `{htext}` "
                f"({frames.short_path(hf.file)}:{hline})"
            )
        forker = lock_holder_at_fork(facts, record, name, forking=True, waiter=top)
        if held is None and forker is not None:
            ht, hf, hline, htext = forker
            inherited.append(
                f"worker pid {v.pid}: at the fork, the forking thread {ht.name or '?'} (tid {ht.native_id}) of pid "
                f"{record.pid} held the lock named {name} itself: it was at {describe(facts, record.pid, hf)}, after "
                f"`{htext}` ({frames.short_path(hf.file)}:{hline}); the worker's copy of it is held and nothing in the "
                "worker releases it"
            )
    if not inherited and not taken and _locked_before_it_began(facts, v, t):
        who = (
            f"the forking thread, the only thread of pid {record.pid} at the fork, held it (taken before the "
            "iterator was created, and not released)"
            if record is not None and alone_at_fork(facts, v.pid)
            else "a thread of the process that forked it held it then"
        )
        inherited.append(
            f"worker pid {v.pid}: the lock named {name} was already held when the worker began: it waits inside "
            f"its first batch ({_samples_read(facts, v.pid)} reads of the dataset) and none of its own frames took "
            f"it; {who}"
        )
    server = forkserver_of(facts, v.pid)
    if server is not None and not inherited:
        stack = facts.stack(server.pid)
        count = len(stack.threads) if stack is not None and stack.ok and stack.threads else server.num_threads
        if count > 1:
            inherited.append(
                f"worker pid {v.pid}: the forkserver (pid {server.pid}) that forked it runs {count} threads: one of "
                "them may have held the lock at the fork"
            )
    samples = _samples_read(facts, v.pid)
    if samples is not None and _past_first_batch(facts, v.pid):
        own.append(
            f"worker pid {v.pid}: it read {samples} samples since it started (the job's own count) and got past its "
            f"first batch: a lock held since the fork would have stopped it at the first sample that takes it, so "
            "the worker most likely took this lock itself since the fork and never released it"
        )
    elif samples is None:
        wrote = _written_bytes(facts, v.pid)
        if wrote:
            own.append(
                f"worker pid {v.pid}: it has written {wrote} bytes since it started (a worker writes each batch it "
                "sends to main to a pipe): it got through its code before, so a lock held since the fork is the less "
                "likely cause; more likely the worker took it itself and never released it"
            )
    return LockOrigin(name, tuple(inherited), tuple(own), bool(taken))


def _fork_lock_hit(facts: Facts, v: WorkerView) -> Optional[Tuple[float, List[str], Optional[Frame]]]:
    if v.proc.start_method not in _FORKED or not v.quiet or v.others:
        return None
    if v.activity not in (Activity.PRIVATE_WAIT, Activity.UNKNOWN):
        return None
    t = v.loop
    if t is not None:
        holder = _holder(facts, t)
        if holder is None and not v.proven:
            return None
        origin = lock_origin(facts, v, t)
        if origin is not None and origin.verdict == "own":
            return None  # the worker took it itself since the fork: worker_deadlock
        forker = alone_at_fork(facts, v.pid) and _inherited_from_forker(facts, v, t)
        if holder in _PYTHON_HOLDERS and alone_at_fork(facts, v.pid) and not forker:
            return None  # nothing was inherited locked: worker_deadlock (its own threads, or none)
        top = frames.innermost_python(t)
        what = HOLDER_TEXT.get(holder or "", "something only another thread of its process could release")
        lines = [
            f"worker pid {v.pid} ({v.proc.name}): thread {t.tid} waits for {what}, at {describe(facts, v.pid, top)}",
            f"worker pid {v.pid}: {kernel_wait(facts, v.pid, t.tid)}; {quiet_text(facts, v.pid)}; "
            f"the worker has no other thread that could release it; {fork_context(facts, v)}",
        ]
        name = lock_name(facts.source(top.file, top.line)) if top is not None else None
        record = fork_record_of(facts, v.pid)
        held = lock_holder_at_fork(facts, record, name, waiter=top) if record is not None and name else None
        if origin is not None:  # a threading.Lock: what is known of its holder, said once
            lines += list(origin.inherited) + list(origin.own)
            if origin.verdict == "unknown":
                lines.append(
                    f"worker pid {v.pid}: what is known: the worker's thread waits for a threading.Lock that no "
                    "thread of the worker will release; either a thread of the process that forked it held it at the "
                    "fork, or this thread took it earlier (a path that returns or raises between acquire() and "
                    "release()) and takes it again; nothing seen tells which"
                )
        elif held is not None and record is not None:  # a holder is only looked for in a record
            ht, hf, hline, htext = held
            lines.append(
                f"worker pid {v.pid}: at the fork, thread {ht.name or '?'} (tid {ht.native_id}) of pid {record.pid} "
                f"held a lock named {name}: it was at {describe(facts, record.pid, hf)}, inside `{htext}` "
                f"({frames.short_path(hf.file)}:{hline})"
            )
        mine = lock_holder_at_fork(facts, record, name, forking=True, waiter=top) if record and name else None
        if origin is None and held is None and record is not None and mine is not None:
            ht, hf, hline, htext = mine
            lines.append(
                f"worker pid {v.pid}: at the fork, the forking thread {ht.name or '?'} (tid {ht.native_id}) of pid "
                f"{record.pid} held the lock named {name} itself: it was at {describe(facts, record.pid, hf)}, after "
                f"`{htext}` ({frames.short_path(hf.file)}:{hline}); the worker's copy of it is held and nothing in the "
                "worker releases it"
            )
        elif origin is None and held is None and record is not None and forker:
            fetched = next((f.samples for f in facts.inside.fetches if f.pid == v.pid), None) if facts.inside else None
            lines.append(
                f"worker pid {v.pid}: the lock named {name} was already held when the worker began: it waits inside "
                f"its first batch ({fetched} reads of the dataset) and none of its own frames took it; the forking "
                f"thread, the only thread of pid {record.pid} at the fork, held it (taken before the iterator was "
                "created, and not released)"
            )
        native = [f for f in t.frames if f.native][:3]
        if holder in ("openmp", "native_mutex") and native:
            lines.append(
                f"worker pid {v.pid}: native frames on top: {' ← '.join(describe(facts, v.pid, f) for f in native)}"
            )
        if v.user is not None and v.user is not top:
            lines.append(f"worker pid {v.pid}: called from {describe(facts, v.pid, v.user)}")
        site = fork_site(t)
        if site is not None:
            lines.append(
                f"worker pid {v.pid}: forked when the iterator was created at {describe(facts, v.pid, site)}: "
                "only the forking thread is copied into the child"
            )
        lines += _proof_line(facts, v.pid)
        confidence = 0.95 if v.proven else (0.85 if holder in ("openmp", "native_mutex", "python_lock") else 0.7)
        if origin is not None and origin.verdict == "unknown":
            confidence = 0.5  # the hang may be proven; which thread left the lock held is not
        elif origin is not None and origin.own:
            confidence = min(confidence, 0.75)  # a holder at the fork, yet the worker got through its code since
        elif holder in _PYTHON_HOLDERS and fork_record_of(facts, v.pid) is None and _seen_alone_at_fork(facts, v.pid):
            # Without the job's own record, nothing shows a thread that could have held it.
            lines.append(
                f"worker pid {v.pid}: no other thread of main was seen at the fork (sampled; no inside view): it may "
                "never have been held by anyone, only never set; the proof stands, the cause is the less sure part"
            )
            confidence = 0.6
        return confidence, lines, v.user or top
    if v.loop_detail is None or frames.wchan_family(v.loop_detail.wchan) != "futex":
        return None
    n = dict(facts.main_threads_at_fork).get(v.pid)
    lines = [
        f"worker pid {v.pid} ({v.proc.name}): no stack (py-spy unavailable); main thread "
        f"{kernel_wait(facts, v.pid, v.pid)}; {quiet_text(facts, v.pid)}",
        f"worker pid {v.pid}: {fork_context(facts, v)}",
    ] + _proof_line(facts, v.pid)
    return (0.6 if v.proven else 0.55 if (n or 0) > 1 else 0.4), lines, None


_FORK_REMEDY = {
    "openmp": (
        "Do not run multi-threaded (OpenMP) work in fork-started workers: PyTorch sets one intra-op thread per "
        "worker for this reason, so remove torch.set_num_threads(>1) from worker_init_fn (and OMP_NUM_THREADS>1 "
        'inside workers); or start workers with DataLoader(..., multiprocessing_context="forkserver") (or "spawn").'
    ),
    "future": (
        "Create thread pools (concurrent.futures executors, client libraries with background threads) inside the "
        "worker, in worker_init_fn or lazily in __getitem__, not before iter(loader); or use "
        'multiprocessing_context="forkserver".'
    ),
    "condition": (
        "The thread that would signal this condition, event or queue lives only in the main process, and a "
        "threading object never crosses a process boundary: another start method (spawn, forkserver) hangs the "
        "same way. If main is to signal the workers, use a multiprocessing.Event (or a multiprocessing queue) "
        "created before the DataLoader and passed to the Dataset; if the worker is to signal itself, create the "
        "object and its thread inside the worker (worker_init_fn)."
    ),
}
_FORK_REMEDY_DEFAULT = (
    'Start workers without fork: DataLoader(..., multiprocessing_context="forkserver") (or "spawn"), so each worker '
    "gets fresh locks; or create the lock (or the object holding it: DB connection, logger handler, image library "
    "state) inside the worker, in worker_init_fn or lazily in __getitem__; or make sure no other thread holds it "
    "while iter(loader) forks."
)


_FORKER_REMEDY = (
    "Release the lock before the iterator is created (iter(loader), `for batch in loader`, which forks the "
    "workers) and take it again after, or do not hold it across the loop: fork copies it held into every worker, "
    "where nothing releases it. Or create the lock inside the worker (worker_init_fn), or start workers with "
    'DataLoader(..., multiprocessing_context="forkserver") (or "spawn"), which gives each worker fresh locks.'
)


_FORKSERVER_REMEDY = (
    "The forkserver forks every worker from its own state, and a thread in it held this lock: modules named in "
    "set_forkserver_preload([...]) (and the main module, which the forkserver imports) run there, so a thread they "
    "start at import runs in the forkserver. Start such threads lazily, in the process that needs them (not at "
    "import), or leave that module out of the preload; or create the lock inside the worker (worker_init_fn). "
    'multiprocessing_context="spawn" starts each worker from scratch.'
)


_UNKNOWN_LOCK_STATE = (
    "deadlocked{where} on a threading.Lock that no thread of the worker will release: either a thread of the "
    "process that forked the worker held it at the fork, or the worker's own thread took it before and never "
    "released it; nothing seen tells which."
)

_LOCK_TAKEN_TWICE_REMEDY = (
    "A threading.Lock is not reentrant: a thread that takes it again before releasing it waits forever. Release it "
    "on every path (`with lock:` rather than acquire()/release(), or release in a finally: block, so that an early "
    "return or an exception cannot leave it held); use threading.RLock where one thread may take it again (a nested "
    "call); and acquire(timeout=<seconds>) to fail loudly instead of hanging."
)

_OWN_OR_INHERITED_REMEDY = (
    "Two causes fit, and each has its own fix. If the worker's thread took the lock before and never released it "
    "(an early return or an exception between acquire() and release(), or a nested call that takes it again): "
    + _LOCK_TAKEN_TWICE_REMEDY
    + " If a thread of main held it when iter(loader) forked the workers: create the lock inside the worker "
    '(worker_init_fn), or start workers with DataLoader(..., multiprocessing_context="forkserver") (or "spawn"), '
    "which gives each worker fresh locks; `dlwatch verify` on this report tries that one."
)


@rule("fork_inherited_lock", SEVERITY_HANG, 10, HANG)
def fork_inherited_lock(facts: Facts) -> Optional[Finding]:
    """Forked workers wait for a lock, condition or thread pool that no thread in them can
    release: only the forking thread survives ``fork()``, so a lock another thread of the parent
    held, or a pool whose threads lived in the parent, stays stuck in the child (POSIX ``fork``;
    CPython docs on start methods; PyTorch multiprocessing notes; pytorch/pytorch#41197)."""

    def state(what: str) -> str:
        return f"deadlocked{{where}} on {what}; no thread in a worker can ever release it."

    def inherited(parent: str) -> str:
        return f"state inherited through fork (a lock, condition or thread pool of the {parent})"

    def adapt(pids: Tuple[int, ...]) -> Tuple[str, str]:
        waiting = [(v, v.loop) for v in worker_views(facts) if v.pid in pids and v.loop is not None]
        origins = [lock_origin(facts, v, t) for v, t in waiting]
        if origins and all(o is not None and o.verdict == "unknown" for o in origins):
            return _UNKNOWN_LOCK_STATE, _OWN_OR_INHERITED_REMEDY
        if any(forkserver_of(facts, pid) is not None for pid in pids):
            return state(inherited("forkserver process that forked the workers")), _FORKSERVER_REMEDY
        if waiting and all(alone_at_fork(facts, v.pid) and _inherited_from_forker(facts, v, t) for v, t in waiting):
            return state("a lock that main's own thread held when it created the iterator"), _FORKER_REMEDY
        holders = {_holder(facts, v.loop) for v in worker_views(facts) if v.pid in pids and v.loop is not None}
        holder = next(iter(holders)) if len(holders) == 1 else None
        if holder is not None and holder in _FORK_REMEDY:
            return state(HOLDER_TEXT[holder]), _FORK_REMEDY[holder]
        return state(inherited("main process")), _FORK_REMEDY_DEFAULT

    found = worker_finding(
        facts,
        _fork_lock_hit,
        state(inherited("main process")),
        _FORK_REMEDY_DEFAULT,
        (DOC_MULTIPROCESSING, DOC_START_METHODS),
        adapt,
    )
    if found is None:
        return None
    # Workers started without fork get fresh locks; from a forkserver that holds one, only spawn.
    through_forkserver = any(forkserver_of(facts, pid) is not None for pid in found.pids)
    return dataclasses.replace(found, fix=SPAWN if through_forkserver else FORKSERVER)


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


def _self_deadlock_hit(facts: Facts, v: WorkerView) -> Optional[Tuple[float, List[str], Optional[Frame]]]:
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
        _holder(facts, threads[0]) in _PYTHON_HOLDERS
        and alone_at_fork(facts, v.pid)
        and not _inherited_from_forker(facts, v, threads[0])
    )
    if len(threads) < 2 and v.proc.start_method in _FORKED and not inherited_ruled_out and own_lock is None:
        return None  # one thread, forked: fork_inherited_lock, unless the evidence rules that out
    lines = []
    for t in threads:
        top = frames.innermost_python(t)
        user = frames.innermost_user(t) or top
        what = HOLDER_TEXT.get(_holder(facts, t) or "", "something only a thread of its process could release")
        lines.append(
            f"worker pid {v.pid}: thread {t.tid} ({t.name or '?'}) waits for {what} at {describe(facts, v.pid, user)}"
        )
        lines.append(f"worker pid {v.pid}: thread {t.tid}: {kernel_wait(facts, v.pid, t.tid)}")
    if own_lock is not None:
        lines += list(own_lock.own)
        lines.append(
            f"worker pid {v.pid}: its only thread of its own waits (multiprocessing's queue-feeder and resource-sharer "
            "threads hold none of the user's locks), so no thread of the worker can release the lock"
            + (f"; {fork_context(facts, v)}" if v.proc.start_method in _FORKED else "")
        )
    elif len(threads) < 2:
        lines.append(
            f"worker pid {v.pid}: its only thread of its own waits (multiprocessing's queue-feeder and resource-sharer "
            "threads hold none of the user's locks); the job's record at the fork shows no other Python thread in "
            "the parent, so nothing was inherited locked: no thread exists that could ever signal it"
        )
    lines += _proof_line(facts, v.pid)
    if own_lock is not None:
        confidence = (0.9 if own_lock.taken_twice else 0.8) if v.proven else 0.6
        return confidence, lines, v.user
    return 0.9, lines, v.user


def worker_ids(facts: Facts) -> Dict[int, int]:
    """pid to worker id (the inside view's order of an iterator's workers)."""
    return {pid: i for v in facts.sample.loaders for i, pid in enumerate(v.workers)}


def _worker_word(facts: Facts, pid: int) -> str:
    wid = worker_ids(facts).get(pid)
    return f"worker {wid} (pid {pid})" if wid is not None else f"worker pid {pid}"


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
            if name.startswith("self.") and _owner_class(u.user.function) != _owner_class(v.user.function):
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
            parts.append(f"{_worker_word(facts, pid)} holds {held_name} (taken at line {line}) and waits for {name}")
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
    return w is not None and w.syscall in LOCK_CALLS


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
    lines += _proof_line(facts, v.pid)
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
        if all(_holder(facts, _own_threads(v)[0]) == "python_lock" for v in single if _own_threads(v)):
            return (
                "deadlocked{where}: the worker's only thread of its own waits for a threading.Lock that it took "
                "itself and never released (taken twice, or left held by an earlier path); no thread of the worker "
                "can release it.",
                _LOCK_TAKEN_TWICE_REMEDY,
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
        _self_deadlock_hit,
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
        holder = _holder(facts, t)
        kinds.append(holder or "")
        detail = facts.detail(pid, t.tid)
        wait = detail.wait.detail if detail is not None and detail.wait is not None else "unknown wait"
        target = ""
        if detail is not None and detail.wait is not None and detail.wait.fd is not None:
            pipe = dict(facts.fd_targets).get((pid, detail.wait.fd))
            if pipe:
                readers = dict(facts.pipe_readers).get(pipe, ())
                target = (
                    f"; fd {detail.wait.fd} is {pipe}, read only by pid(s) {', '.join(map(str, readers)) or 'none'}"
                )
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
    if not py or _holder(facts, t) != "python_lock":
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


# --- workers blocked in I/O or elsewhere --------------------------------------------------------


def _thread_wchan_family(facts: Facts, pid: int, tid: int) -> Optional[str]:
    d = facts.detail(pid, tid)
    return frames.wchan_family(d.wchan if d else None)


def _fd_target(facts: Facts, v: WorkerView) -> Optional[str]:
    w = v.loop_detail.wait if v.loop_detail is not None else None
    if w is None or w.fd is None:
        return None
    return dict(facts.fd_targets).get((v.pid, w.fd))


def _blocked_io_hit(facts: Facts, v: WorkerView) -> Optional[Tuple[float, List[str], Optional[Frame]]]:
    if not v.quiet or v.state is WorkerState.IDLE or _fork_lock_hit(facts, v) is not None:
        return None
    tid = v.loop.tid if v.loop is not None else v.pid
    family = _thread_wchan_family(facts, v.pid, tid)
    target = _fd_target(facts, v) or ""
    if target.startswith("socket:") or (v.loop is not None and frames.waits_on_mp_queue(v.loop)):
        return None  # a socket's peer, or a multiprocessing queue's feeder, is another process: worker_stuck
    # The loop thread's wait: set whenever the activity is FD_WAIT or the wait's fd has a target.
    wait = v.loop_detail.wait if v.loop_detail is not None else None
    in_kernel_io = (
        v.activity is Activity.KERNEL_IO
        or family in frames.IO_WCHAN_FAMILIES
        or (
            v.activity is Activity.FD_WAIT
            and (target.startswith(("pipe:", "/")) or (wait is not None and wait.syscall in ("open", "openat")))
        )
    )
    if not in_kernel_io:
        return None
    lines = [
        f"worker pid {v.pid} ({v.proc.name}): thread {tid} blocked in the kernel: {kernel_wait(facts, v.pid, tid)}"
    ]
    opening = [path for pid, t, path in facts.opening if pid == v.pid and t == tid]
    if opening:
        fifo = " (a FIFO: open blocks until another process opens it for writing)" if family == "fifo_open" else ""
        lines.append(f"worker pid {v.pid}: it is opening {opening[0]}{fifo}")
    if target and wait is not None:
        lines.append(f"worker pid {v.pid}: it waits on fd {wait.fd}, which is {target}")
        if target.startswith("pipe:"):
            readers = dict(facts.pipe_readers).get(target, ())
            writers = dict(facts.pipe_writers).get(target, ())
            writing = wait.syscall in ("write", "writev", "sendto", "sendmsg", "pwrite64")
            others = [p for p in (readers if writing else writers) if p != v.pid]
            roles = {p.pid: p.role for p in facts.sample.processes}
            held = ", ".join(f"{p} ({roles.get(p, 'outside the job')})" for p in others)
            lines.append(
                f"worker pid {v.pid}: the pipe's {'read' if writing else 'write'} end is held by pid(s) "
                f"{held or 'no other process'}"
            )
    if v.loop is not None:
        lines.append(
            f"worker pid {v.pid}: innermost frame {describe(facts, v.pid, v.top)}, called from "
            f"{describe(facts, v.pid, v.user)}"
        )
    else:
        lines.append(f"worker pid {v.pid}: no stack (py-spy unavailable)")
    lines += _chain_lines(facts, v.pid)
    files = dict(facts.open_files).get(v.pid, ())
    regular = [f for f in files if f.startswith("/") and not f.startswith(("/dev/", "/proc/"))]
    lines.append(
        f"worker pid {v.pid}: {quiet_text(facts, v.pid)}; open files: "
        f"{', '.join(regular[:8]) or 'none besides pipes and sockets'}"
    )
    return (0.85 if v.loop is not None else 0.5), lines, v.user


def _chain_lines(facts: Facts, pid: int) -> List[str]:
    """The worker's wait chain as an evidence line, when it leads somewhere (another process,
    a socket's peer, a mount, a terminal)."""
    links = chain_of(facts, pid)
    if len(links) > 1 or (links and links[-1].kind not in (LinkKind.OTHER, LinkKind.FILE, LinkKind.PIPE)):
        return [f"worker pid {pid}: {chain_text(links)}"]
    return []


def _end_remedy(facts: Facts, pids: Tuple[int, ...]) -> Optional[str]:
    """The remedy for what the first of ``pids``' wait chains that has one ends at."""
    return next((r for pid in pids for r in [chain_remedy(chain_of(facts, pid))] if r), None)


def _io_remedy(facts: Facts, pids: Tuple[int, ...]) -> str:
    end = _end_remedy(facts, pids)
    if end is not None:
        return end
    views = [v for v in worker_views(facts) if v.pid in pids]
    targets = [_fd_target(facts, v) or "" for v in views]
    if any(t.startswith("pipe:") for t in targets):
        writing = any(
            v.loop_detail is not None
            and v.loop_detail.wait is not None
            and v.loop_detail.wait.syscall in ("write", "writev")
            for v in views
        )
        if writing:
            return (
                "The process that reads this pipe (often the job's stdout or stderr: a `| tee`, a log shipper, a "
                "pager) stopped reading or died while another process keeps the pipe open: restart or fix the reader, "
                "or write logs to a file; print from workers sparingly."
            )
        return "Nothing writes to the pipe this worker reads: check the process meant to feed it; read with a timeout."
    if any(
        v.loop_detail is not None
        and v.loop_detail.wait is not None
        and v.loop_detail.wait.syscall in ("open", "openat")
        for v in views
    ):
        paths = sorted({path for pid, _, path in facts.opening if pid in pids})
        what = f"the FIFO (named pipe) {', '.join(paths[:3])}" if paths else "a FIFO (named pipe)"
        return (
            f"The worker opens {what} for reading and no process opens it for writing: start the writer first (or "
            "check that it still runs), or open the FIFO with O_NONBLOCK and wait for data with a timeout."
        )
    return (
        "Check the storage the Dataset reads (NFS/FUSE mount, disk): `cat /proc/<pid>/stack` as root shows the kernel "
        "path; set DataLoader(..., timeout=<seconds>) so the job fails instead of hanging, and use storage clients "
        "with timeouts (or copy data to local disk)."
    )


@rule("worker_blocked_io", SEVERITY_HANG, 15, HANG)
def worker_blocked_io(facts: Facts) -> Optional[Finding]:
    """A worker blocked in the kernel in file-system or pipe code (state D, or a wait such as
    ``wait_for_partner``, ``rpc_wait_bit_killable``, ``request_wait_answer``, a pipe read or
    write). The remedy follows the descriptor's target: a pipe's other end, a FIFO, storage."""
    found = worker_finding(
        facts,
        _blocked_io_hit,
        "blocked in file-system or pipe I/O{where}; the main process waits for {their} batch.",
        "",
        (DOC_DATALOADER, DOC_MULTI_PROCESS_LOADING),
    )
    return None if found is None else Finding(**{**found.__dict__, "remedy": _io_remedy(facts, found.pids)})


def _busy_cpu_s(facts: Facts, pid: int) -> Optional[float]:
    """CPU seconds ``pid`` used while no batch was delivered (from the timeline)."""
    if facts.stall is None or not facts.timeline:
        return None
    since = facts.timeline[-1].t_mono - facts.stall.no_delivery_s
    cpu = [p.cpu_s for s in facts.timeline if s.t_mono >= since for p in [s.process(pid)] if p is not None]
    return cpu[-1] - cpu[0] if len(cpu) >= 2 else None


_STUCK_DOING = {
    Activity.TIMED_WAIT: "in a timed wait (a sleep, or a call with a timeout)",
    Activity.SHARED_WAIT: "waiting on a lock, semaphore or event shared with another process",
    Activity.FD_WAIT: "waiting on a file descriptor with no timeout",
    Activity.CHILD_WAIT: "waiting for a child process to exit",
    Activity.PRIVATE_WAIT: "waiting for another thread of the worker",
    Activity.RUNNING: "burning CPU without returning a batch",
}


@dataclasses.dataclass(frozen=True)
class ManagerWait:
    """A worker's call through a ``multiprocessing.Manager`` proxy (:func:`frames.manager_call`):
    ``method`` the proxy method, ``server`` the manager process when one was found (a child of
    main that is neither a worker nor a forkserver, dumped: its stack runs managers.py's
    ``Server``), ``waiting`` the lines saying what its threads that serve a call wait for, and
    ``holder`` what the first of those waits on (:func:`frames.lock_holder`)."""

    method: str
    server: Optional[ProcessSample]
    waiting: Tuple[str, ...]
    holder: Optional[str]


_MANAGERS_FILE = "multiprocessing/managers.py"


def manager_wait(facts: Facts, v: WorkerView) -> Optional[ManagerWait]:
    """The :class:`ManagerWait` of worker ``v``'s loop thread, or ``None`` when it waits on no
    Manager proxy. The proxy's connection is a Unix socket to the manager's server, which main
    started as its child (``BaseManager.start`` in multiprocessing/managers.py); the server runs
    each call in the thread that serves that connection (``Server.serve_client``), so a call
    that does not return is a serving thread that waits, not one that reads its next request."""
    method = frames.manager_call(v.loop) if v.loop is not None else None
    if method is None:
        return None
    method = {"__enter__": "acquire", "__exit__": "release"}.get(method, method)  # AcquirerProxy's `with`
    main = facts.sample.main
    candidates = [p for p in facts.sample.processes if main is not None and p.ppid == main.pid and p.role == ROLE_OTHER]
    for p in candidates:
        stack = facts.stack(p.pid)
        if stack is None or not stack.ok:
            continue
        serving = [t for t in stack.threads if frames.has_frame(t, frozenset({"serve_client"}), _MANAGERS_FILE)]
        if not serving:
            continue
        busy = [t for t in serving if not frames.waits_on_mp_queue(t)]
        lines = []
        for t in busy[:4]:
            top = frames.innermost_python(t)
            holder = _holder(facts, t)
            what = HOLDER_TEXT.get(holder or "", "something")
            lines.append(
                f"thread {t.tid} of the manager (pid {p.pid}) runs a call and waits for {what}, at "
                f"{describe(facts, p.pid, top)}; {kernel_wait(facts, p.pid, t.tid)}"
            )
        return ManagerWait(method, p, tuple(lines), _holder(facts, busy[0]) if busy else None)
    return ManagerWait(method, candidates[0] if len(candidates) == 1 else None, (), None)


def _manager_lines(facts: Facts, v: WorkerView, m: ManagerWait) -> List[str]:
    """Evidence lines for a worker waiting on a Manager proxy's call."""
    if m.server is None:
        return [
            f"worker pid {v.pid}: its {m.method}() went through a multiprocessing.Manager proxy to the manager "
            "process (main's child that serves the Manager's objects), which has not answered; which process "
            "that is could not be told"
        ]
    head = (
        f"worker pid {v.pid}: its {m.method}() went through a multiprocessing.Manager proxy (a Unix socket) to the "
        f"manager process, pid {m.server.pid} (a child of main; managers.py's Server runs each call there), which "
        "has not answered"
    )
    if not m.waiting:
        return [head + ("; its stack could not be read" if facts.stack(m.server.pid) is None else "")]
    return [head + ": " + m.waiting[0]] + [f"worker pid {v.pid}: besides, {line}" for line in m.waiting[1:]]


def _stuck_hit(facts: Facts, v: WorkerView) -> Optional[Tuple[float, List[str], Optional[Frame]]]:
    if (
        _fork_lock_hit(facts, v) is not None
        or _blocked_io_hit(facts, v) is not None
        or _self_deadlock_hit(facts, v) is not None
    ):
        return None
    busy_cpu = None if v.quiet else _busy_cpu_s(facts, v.pid)
    no_delivery_s = facts.stall.no_delivery_s if facts.stall is not None else None
    busy = busy_cpu is not None and no_delivery_s is not None and busy_cpu >= 0.5 * no_delivery_s
    runnable = None if v.quiet or busy else runnable_spin(facts, v.pid)
    busy = busy or runnable is not None
    if not v.quiet and not busy:
        return None
    if v.loop is not None:
        if v.state is not WorkerState.IN_DATASET or v.user is None:
            return None
        if busy:
            doing = _STUCK_DOING[Activity.RUNNING]
            how = runnable or (
                f"{busy_cpu:.0f} s of CPU in the last {no_delivery_s:.0f} s, and no I/O: no batch was sent"
            )
        else:
            doing = _STUCK_DOING.get(v.activity, "blocked")
            family = _thread_wchan_family(facts, v.pid, v.loop.tid)
            if v.activity in (Activity.FD_WAIT, Activity.UNKNOWN) and family in BLOCKED_DOING:
                doing = BLOCKED_DOING[family]
            target = _fd_target(facts, v)
            manager = manager_wait(facts, v)
            if manager is not None:
                server = f", pid {manager.server.pid}" if manager.server is not None else ""
                doing = (
                    f"waiting for a multiprocessing.Manager proxy's {manager.method}() to return (the manager process"
                    f"{server} answers it)"
                )
            elif frames.waits_on_mp_queue(v.loop):
                writers = [p for p in dict(facts.pipe_writers).get(target or "", ()) if p != v.pid]
                doing = "waiting on a multiprocessing queue that no process feeds" + (
                    f" (its pipe's write end is held by pid(s) {', '.join(map(str, writers))})" if writers else ""
                )
            elif target:
                doing += f" ({target})"
            poll = polling_of(facts, v.pid)
            if poll is not None:
                doing = f"polls (the same line in two stacks {poll.gap_s:g} s apart, {poll.wakes} wake-ups between)"
            how = quiet_text(facts, v.pid)
        lines = [
            f"worker pid {v.pid} ({v.proc.name}): thread {v.loop.tid} {doing} in the Dataset at "
            f"{describe(facts, v.pid, v.user)}",
            f"worker pid {v.pid}: innermost frame {describe(facts, v.pid, v.top)}; "
            f"{kernel_wait(facts, v.pid, v.loop.tid)}; {how}",
        ]
        lines += [f"worker pid {v.pid}: {held}" for held in lock_holders(facts, v.pid)]
        manager = manager_wait(facts, v)
        lines += _manager_lines(facts, v, manager) if manager is not None else _chain_lines(facts, v.pid)
        return 0.8, lines, v.user
    if not v.quiet:
        return None
    family = _thread_wchan_family(facts, v.pid, v.pid)
    if family not in ("sleep", "socket"):
        return None
    lines = [
        f"worker pid {v.pid} ({v.proc.name}): no stack (py-spy unavailable); {kernel_wait(facts, v.pid, v.pid)} "
        f"({family}); {quiet_text(facts, v.pid)}"
    ]
    return 0.45, lines, None


def runnable_spin(facts: Facts, pid: int) -> Optional[str]:
    """How worker ``pid`` spun in the stall's last ``work_window_s`` when it was runnable (on a
    CPU, or waiting on a run queue for one: ``LoaderWork.runq_wait_s``) for ``RUNNABLE_SHARE`` of
    it or more with no I/O: a spin on a loaded machine gets a small CPU share but never sleeps
    (``detect.working`` counts the same as work). ``None`` otherwise."""
    from ..detect import RUNNABLE_SHARE

    st = facts.stall
    w = next((x for x in (st.loader_work if st is not None else ()) if x.pid == pid), None)
    if st is None or w is None or w.runq_wait_s is None or w.io_bytes > 0:
        return None
    span = max(st.work_window_s, 1e-6)
    if (w.cpu_s + w.runq_wait_s) / span < RUNNABLE_SHARE:
        return None
    return (
        f"{w.cpu_s:.1f} s of CPU and {w.runq_wait_s:.1f} s runnable, waiting for a CPU, in the last "
        f"{st.work_window_s:.0f} s, and no I/O: no batch was sent"
    )


def _polling_remedy(facts: Facts, pids: Tuple[int, ...]) -> str:
    """For a worker that polls, or waits for a file lock another process holds: what it waits
    for, and how to bound the wait."""
    polls = any(polling_of(facts, pid) is not None for pid in pids)
    held = next((h for pid in pids for h in lock_holders(facts, pid)), None)
    cause = (
        f" {held[0].upper() + held[1:]}: release it before the DataLoader iterates (commit or close that "
        "transaction, drop that lock), or let the workers use a file of their own."
        if held
        else " Check that what the loop waits for can still happen (a peer that arrives, a file that appears, a "
        "counter that reaches its target, a lock that its holder releases)."
    )
    head = (
        "The worker keeps trying at the line above and what it waits for never happens: its retries are no progress."
        if polls
        else "The worker waits for a file lock that another process holds and does not release."
    )
    return (
        f"{head}{cause} Bound the wait (a deadline or a number of tries that raises, a client timeout of "
        "seconds rather than hours), and set DataLoader(..., timeout=<seconds>) so that main fails instead of "
        "waiting forever."
    )


def _stuck_remedy(facts: Facts, pids: Tuple[int, ...]) -> str:
    if any(polling_of(facts, pid) is not None for pid in pids) or any(lock_holders(facts, pid) for pid in pids):
        return _polling_remedy(facts, pids)
    end = _end_remedy(facts, pids)
    if end is not None:
        return end
    views = [v for v in worker_views(facts) if v.pid in pids]
    acts = {v.activity for v in views}
    busy = facts.stall is not None and facts.stall.trigger == "busy_stall" and Activity.RUNNING in acts
    if busy:
        return (
            "Fix the loop in __getitem__ that never returns (py-spy dump --pid <worker> shows where it spins); set "
            "DataLoader(..., timeout=<seconds>) to fail instead of hanging."
        )
    if acts == {Activity.TIMED_WAIT}:
        return (
            "The wait has a timeout and may end by itself: if samples legitimately take this long (remote storage, a "
            "slow service), raise stall_timeout_s above the slowest sample; if not, find why the call at the location "
            "above keeps waiting. DataLoader(..., timeout=<seconds>) bounds how long main waits for a batch."
        )
    if Activity.SHARED_WAIT in acts or any(
        v.loop is not None and (frames.waits_on_mp_queue(v.loop) or manager_wait(facts, v) is not None) for v in views
    ):
        return _shared_wait_remedy(facts, views)
    return (
        "Give the blocking call a timeout (socket.settimeout, an HTTP or storage client's timeout, "
        "Queue.get(timeout=…)) and set DataLoader(..., timeout=<seconds>) so the main process raises 'DataLoader "
        "timed out' instead of waiting forever."
    )


_BOUND_THE_WAIT = "DataLoader(..., timeout=<seconds>) makes main fail instead of hanging."


def _shared_wait_remedy(facts: Facts, views: List[WorkerView]) -> str:
    """For workers that wait on something another process must do: put to the multiprocessing
    queue they read (whose write end's holders are named), set the multiprocessing.Event they
    wait on, release the lock; each with the line it waits at and how to bound the wait."""
    for v in views:
        if v.loop is None:
            continue
        at = f" at {frames.short_path(v.user.file)}:{v.user.line}" if v.user is not None else ""
        manager = manager_wait(facts, v)
        if manager is not None:
            return _manager_remedy(facts, manager, at)
        if frames.waits_on_mp_queue(v.loop):
            target = _fd_target(facts, v) or ""
            writers = [p for p in dict(facts.pipe_writers).get(target, ()) if p not in {w.pid for w in views}]
            roles = {p.pid: p.role for p in facts.sample.processes}
            held = ", ".join(f"{p} ({roles.get(p, 'outside the job')})" for p in writers)
            who = f": its write end is held by pid(s) {held}, and none of them puts" if held else ""
            return (
                f"Nothing puts to the multiprocessing queue the workers get from{at}{who}. Start (or fix) the "
                "producer meant to put: a process that was never started or has died, or code that runs only after "
                "the loop; get with a timeout (queue.get(timeout=<seconds>) raises queue.Empty) to fail loudly. "
                + _BOUND_THE_WAIT
            )
        kind = frames.mp_sync_wait(v.loop)
        if kind == "event":
            return (
                f"Nothing sets the multiprocessing.Event the workers wait on{at}: call .set() in the process meant to "
                "(check that it runs and reaches it, before or while the loader iterates); wait with a timeout "
                "(event.wait(<seconds>) returns False) to fail loudly. " + _BOUND_THE_WAIT
            )
        if kind in ("lock", "semaphore", "condition", "barrier"):
            return (
                f"Another process holds the multiprocessing {kind} the workers wait on{at}, and has not released it "
                f"{_for_so_far(facts)}(which process holds it cannot be read from outside): if it is still working "
                "(a download, a preparation), this is slow, not stuck; if it is stuck or died holding it, find it, "
                "release in a finally: block, and acquire with a timeout (acquire(timeout=<seconds>) returns False). "
                + _BOUND_THE_WAIT
            )
    return (
        (
            "Another process is meant to set this event, release this lock or feed this queue and has not done so "
            + _for_so_far(facts)
        ).rstrip()
        + ": check that it still runs and gets there, and wait with a timeout. "
        + _BOUND_THE_WAIT
    )


def _manager_remedy(facts: Facts, m: ManagerWait, at: str) -> str:
    """For workers waiting on a Manager proxy's call: what the manager waits for, by the proxy's
    method and by what its serving thread waits on, and how to bound the wait."""
    who = f"the manager process (pid {m.server.pid})" if m.server is not None else "the manager process"
    proof = facts.proof
    if proof is not None and proof.kind is ProofKind.WAITS_ON_DEAD:
        ended = dead_releaser.possible_holders(facts.sample, m.server.pid) if m.server is not None else []
        gone = ", ".join(f"pid {r.pid} {r.how()}" for r in ended[:3])
        return (
            f"The workers wait for a multiprocessing.Manager lock{at} that no live process of the job can release "
            f"(proven above), and a process of the job has ended ({gone or 'see the evidence'}): a process that dies "
            f"holding a Manager lock leaves it held for good ({who} keeps no owner, and releases nothing for a client "
            "that is gone). Find why it ended (its exit code or signal above: SIGKILL is often the OOM killer, see "
            "dmesg), release the lock on every path (`with lock:`; a finally: block cannot run under SIGKILL), and "
            "acquire with a timeout (lock.acquire(timeout=<seconds>) through the proxy returns False) so that the "
            "others fail loudly instead of waiting forever. " + _BOUND_THE_WAIT
        )
    if proof is not None and proof.kind is ProofKind.MANAGER_CYCLE:
        return _manager_cycle_remedy(facts, who, at)
    if m.method in ("acquire", "__enter__") or m.holder == "python_lock":
        return (
            f"The workers wait for a multiprocessing.Manager lock{at}: {who} runs their acquire() and waits, because "
            f"another of its clients (main, a worker, another process of the job) holds that lock and has not "
            f"released it {_for_so_far(facts)}(which client cannot be read from outside). Release it on every path "
            "(`with lock:`, or release in a finally: block: an early return leaves it held), and acquire with a "
            "timeout (lock.acquire(timeout=<seconds>) through the proxy returns False) to fail loudly. "
            + _BOUND_THE_WAIT
        )
    if m.method in ("get", "get_nowait"):
        return (
            f"Nothing puts to the multiprocessing.Manager queue the workers get from{at}: {who} waits in its get() for "
            "a put that no client makes. Start (or fix) the producer meant to put, and get with a timeout "
            "(queue.get(timeout=<seconds>) raises queue.Empty) to fail loudly. " + _BOUND_THE_WAIT
        )
    if m.method == "wait":
        return (
            f"Nothing sets the multiprocessing.Manager Event (or Condition) the workers wait on{at}: {who} waits in "
            "its wait() for a set() no client makes. Call set() in the process meant to, and wait with a timeout "
            "(event.wait(<seconds>) returns False) to fail loudly. " + _BOUND_THE_WAIT
        )
    return (
        f"The workers' {m.method}() through a multiprocessing.Manager proxy{at} has not returned: {who} serves it; its "
        "stack below shows what it waits for. Give the call a timeout where the method takes one. " + _BOUND_THE_WAIT
    )


def manager_lock_cycle(facts: Facts) -> Optional[str]:
    """The lock-order cycle of workers waiting at ``with X:`` (or ``X.acquire()``) through a
    Manager proxy while their source shows them inside a ``with Y:`` (:func:`holds_at`) of a
    lock another of them waits for: "worker 0 (pid A) holds self.a (taken at line 45) and waits
    for self.b; worker 1 …", or ``None`` unless every such worker holds what another waits for.
    Read from the stacks and the source (a Manager lock keeps no owner), never proven."""
    waiting: Dict[int, Tuple[Frame, str]] = {}
    for v in worker_views(facts):
        if v.user is None or manager_wait(facts, v) is None:
            continue
        name = lock_name(facts.source_raw(v.user.file, v.user.line))
        if name is not None:
            waiting[v.pid] = (v.user, name)
    parts = []
    for pid, (at, name) in sorted(waiting.items()):
        held = next(
            (
                (theirs, taken[0])
                for other, (_, theirs) in sorted(waiting.items())
                if other != pid and theirs != name and (taken := holds_at(facts, at, theirs)) is not None
            ),
            None,
        )
        if held is None:
            return None
        parts.append(f"{_worker_word(facts, pid)} holds {held[0]} (taken at line {held[1]}) and waits for {name}")
    return "; ".join(parts) if len(parts) >= 2 else None


def _manager_cycle_remedy(facts: Facts, who: str, at: str) -> str:
    """For workers in a proven cycle through a Manager (NOTE [ Manager lock proof ] in
    manager_proof.py): the lock-order cycle when the source shows one, else main as the likely
    holder when it is the only client not waiting in a proxy call."""
    proven = (
        f"No process of the job can move (proven above: main, the workers and {who} wait for one another, and no "
        "other process of the job lives). A Manager lock keeps no owner, so who holds it is read from the code, "
        "not proven: "
    )
    timeout = (
        "acquire with a timeout (lock.acquire(timeout=<seconds>) through the proxy returns False) so that a wait "
        "fails loudly instead of hanging. " + _BOUND_THE_WAIT
    )
    cycle = manager_lock_cycle(facts)
    if cycle is not None:
        return (
            proven + f"by the workers' stacks and source, a lock-order cycle through the manager: {cycle}. Take the "
            "Manager locks in one global order in every worker and in main (always the first, then the second), or "
            "use one lock; " + timeout
        )
    main = facts.sample.main
    stack = facts.stack(main.pid) if main is not None else None
    others_wait = all(manager_wait(facts, v) is not None for v in worker_views(facts))
    if others_wait and stack is not None and stack.ok and not any(frames.manager_call(t) for t in stack.threads):
        return (
            proven + f"the workers wait for a multiprocessing.Manager lock{at}, and main, the only client not itself "
            "waiting in a call to the manager, now waits in __next__ for their batch: main likely took the lock and "
            "did not release it before iterating (an early return or an exception path left it held). Release it "
            "on every path (`with lock:`, or release in a finally: block), and " + timeout
        )
    return (
        proven + f"the workers wait for a multiprocessing.Manager lock{at} that a client of this set holds. Release "
        "it on every path (`with lock:`, or release in a finally: block), and " + timeout
    )


def _for_so_far(facts: Facts) -> str:
    """``"in the N s of this stall so far "`` when the stall's length is known, else ``""``:
    what is known of a wait on another process, never that it will not end."""
    return f"in the {facts.stall.stall_s:.0f} s of this stall so far " if facts.stall is not None else ""


@rule("worker_stuck", SEVERITY_HANG, 20, HANG)
def worker_stuck(facts: Facts) -> Optional[Finding]:
    """A worker blocked, sleeping or spinning inside the Dataset (not on an inherited lock, not
    in file I/O) while main waits for its batch: ``DataLoader(timeout=0)``, the default, waits
    without limit (``_MultiProcessingDataLoaderIter._try_get_data`` in dataloader.py). The
    remedy follows how the worker waits (a timed wait, another process, a socket)."""
    found = worker_finding(
        facts,
        _stuck_hit,
        "stuck in the Dataset{where}; the main process waits for {their} batch.",
        "",
        (DOC_DATALOADER, DOC_MULTI_PROCESS_LOADING),
    )
    if found is None:
        return None
    dead = dead_end(facts, found.pids)  # a lock file or a queue only an ended process served (#34 section 2)
    if dead is not None:
        return dataclasses.replace(
            found,
            confidence=max(found.confidence, dead.confidence),
            evidence=found.evidence + dead.evidence,
            remedy=dead.remedy,
            location=dead.location or found.location,
        )
    remedy = _stuck_remedy(facts, found.pids)
    ended: List[Tuple[Union[ProcessSample, ExitRecord], float]] = list(ended_helpers(facts))
    # ended before the timeline's first sample: their exit records remain (at most 64, the newest)
    seen = {ProcId(p.pid, p.start_ticks) for p, _ in ended}
    ended += [(r, facts.sample.t_mono - r.last_seen_mono) for r in ended_mod.older_records(facts, seen)]
    if ended:
        records = ended_mod.records_of(facts, [p for p, _ in ended if isinstance(p, ProcessSample)])
        named = ", ".join(
            f"pid {p.pid} ({_cmd(p)})" + (f", which {r.how()}" if (r := ended_mod.record_for(facts, p)) else "")
            for p, _ in ended[:3]
        )
        if facts.proof is None or facts.proof.kind is not ProofKind.WAITS_ON_DEAD:  # that remedy names it already
            remedy = (
                f"A process of the job other than main and its workers has ended ({named}): if the worker waits for "
                "what it was to do (write a marker file, feed a queue, release a lock it held), that wait can never "
                "end; restart the job with that process fixed, and give the wait a timeout. " + remedy
            )
        evidence = found.evidence + tuple(ended_mod.ended_line(facts, p, ago, records) for p, ago in ended[:3])
        return Finding(**{**found.__dict__, "remedy": remedy, "evidence": evidence})
    return Finding(**{**found.__dict__, "remedy": remedy})


def _cmd(p: Union[ProcessSample, ExitRecord]) -> str:
    """A process's command line for a line of ours: redacted, on one line, cut to 80 characters."""
    from .. import redact
    from ..text import one_line

    return one_line(" ".join(redact.cmdline(p.cmdline)) or p.name)[:80]


def ended_helpers(facts: Facts) -> List[Tuple[ProcessSample, float]]:
    """Processes of the job other than main and its workers (a producer, a decoder, a lock
    holder: role ``other``, or a fork of main that ended before it could be told apart,
    ``worker_starting``, and that no loader lists as its worker) that the timeline saw and the
    latest sample no longer holds, with how long before that sample each was last seen, most
    recent first. A wait that only such a
    process could end cannot end; which wait it was is not known from outside, so this is said,
    not proven. A zombie (state ``Z``: ended, not yet reaped by its parent) counts as ended."""
    if not facts.timeline:
        return []
    now = facts.sample
    alive = {p.pid for p in now.processes if p.state != "Z"}  # a zombie has ended: nobody reaped it yet
    last: Dict[int, Tuple[ProcessSample, float]] = {}
    workers = {p.pid for sample in facts.timeline for p in sample.workers}
    workers |= {pid for v in (facts.inside.loaders if facts.inside else ()) for pid in v.workers}
    for sample in facts.timeline:
        for p in sample.processes:
            if p.role in (ROLE_OTHER, ROLE_STARTING) and p.state != "Z" and p.pid not in workers:
                last[p.pid] = (p, sample.t_mono)
    gone = [(p, now.t_mono - t) for pid, (p, t) in last.items() if pid not in alive]
    return sorted(gone, key=lambda item: item[1])


# --- lost batches, the pin thread, shutdown, and main outside the loader ----------------------


def feeder_failures(stderr: str) -> List[Tuple[str, Optional[str]]]:
    """``(exception line, user file:line)`` for each traceback in ``stderr`` printed by a
    multiprocessing queue feeder thread (``StderrFacts.feeder_failures``)."""
    return list(parse_stderr(stderr).feeder_failures)


def exec_workers(facts: Facts) -> List[Tuple[ProcessSample, ProcessSample]]:
    """``(as a worker, now)`` for each process of the job that was a DataLoader worker in the
    timeline and now, the same process (its :class:`~watchdog.types.ProcId`), runs another
    program: another name and command line, whatever role it has now (a role is decided once,
    and may be decided again after the name changed)."""
    now = {p.ident: p for p in facts.sample.processes}
    out: Dict[ProcId, Tuple[ProcessSample, ProcessSample]] = {}
    for s in facts.timeline:
        for w in s.workers:
            p = now.get(w.ident)
            if p is not None and p.name != w.name and p.cmdline != w.cmdline and p.name not in frames.WORKER_COMMS:
                out.setdefault(w.ident, (w, p))
    return list(out.values())


@rule("worker_exec", SEVERITY_HANG, 14, HANG)
def worker_exec(facts: Facts) -> Optional[Finding]:
    """A DataLoader worker replaced itself with another program (``os.exec*`` in the Dataset,
    ``worker_init_fn`` or ``collate_fn``): the pid lives on, so PyTorch's worker checks
    (``_MultiProcessingDataLoaderIter._try_get_data``: a worker that *exited*) never fire, and
    the batch it owned never comes. Seen from outside (a worker pid whose command line changed)
    and, with the inside view, from the worker's own record of the call."""
    if not facts.loader_hang():
        return None
    changed = exec_workers(facts)
    records = {e.pid: e for e in (facts.inside.execs if facts.inside else ())}
    pids = sorted({now.pid for _was, now in changed} | set(records))
    if not pids:
        return None
    evidence = [waiting_main(facts)]
    location = None
    for was, now in changed:
        shown = " ".join(now.cmdline)[:200] or now.name
        evidence.append(
            f"pid {now.pid}: a DataLoader worker ({was.name}) until it became `{shown}` (the same process, "
            "its start time unchanged): it replaced itself with another program, so it no longer serves the DataLoader"
        )
    for pid in pids:
        record = records.get(pid)
        if record is None:
            continue
        user = [f for f in record.frames if frames.is_user(f)]
        at = user[-1] if user else (record.frames[-1] if record.frames else None)
        if at is not None:
            location = location or f"{at.file}:{at.line}"
            evidence.append(
                f"pid {pid} recorded, just before: exec of {record.path} from {at.file}:{at.line} ({at.function})"
            )
    program = changed[0][1].name if changed else records[pids[0]].path
    return Finding(
        confidence=0.95,
        summary=(
            f"DataLoader worker pid {pids[0]} replaced itself with another program ({program}): the batch it owned "
            "never comes, and main waits for it forever."
        ),
        evidence=tuple(evidence),
        remedy=(
            "A DataLoader worker must stay the Python process PyTorch started: run another program with "
            "subprocess.run([...], check=True), which returns when it ends, instead of os.exec* (which replaces the "
            "worker) in the Dataset, worker_init_fn or collate_fn; and set DataLoader(..., timeout=<seconds>) so a "
            "worker that stops answering fails the job instead of hanging it."
        ),
        pids=tuple(pids),
        location=location,
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_DATALOADER),
    )


@rule("batch_lost", SEVERITY_HANG, 18, HANG)
def batch_lost(facts: Facts) -> Optional[Finding]:
    """A batch main waits for will never come: a worker's queue feeder thread failed to pickle or
    send it and dropped it (``multiprocessing.queues.Queue._feed`` prints the error and drops the item), or, proven
    from the outside, every worker sits idle in PyTorch's loop holding no task while main waits."""
    if not facts.loader_hang():
        return None
    failures = stderr_facts(facts).feeder_failures
    idle_proof = facts.proof if facts.proof is not None and facts.proof.kind is ProofKind.LOADER_IDLE else None
    if not failures and idle_proof is None:
        return None
    evidence = [waiting_main(facts)]
    for exc, user in failures[-3:]:
        evidence.append(
            f"stderr: a worker's queue feeder thread failed to send a batch: {exc}"
            + (f" (raised at {user})" if user else "")
        )
    idle = [v.pid for v in worker_views(facts) if v.state is WorkerState.IDLE]
    if idle:
        evidence.append(
            f"workers {', '.join(map(str, idle))} are idle, waiting for new indices (index_queue.get under "
            "_worker_loop): the lost batch will never be re-sent"
        )
    if idle_proof is not None:
        evidence += [f"proof: {line}" for line in idle_proof.lines()]
    why = (
        f"a worker failed to send it to the main process ({failures[-1][0][:240]})"
        if failures
        else "no worker holds it and none is sending it"
    )
    return Finding(
        confidence=0.9 if idle_proof is not None else 0.6,
        summary=f"A batch was lost: {why}, and main waits for it forever.",
        evidence=tuple(evidence),
        remedy=(
            "Make every sample picklable (return tensors, numbers, strings; no open files, locks, sockets or C "
            "handles in the sample or the collate_fn's output); read the feeder thread's traceback on stderr; and set "
            "DataLoader(..., timeout=<seconds>) so a lost batch fails the job instead of hanging it."
        ),
        pids=tuple(w.pid for w in facts.sample.workers),
        location=failures[-1][1] if failures else None,
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_DATALOADER),
    )


@rule("pin_memory_stall", SEVERITY_HANG, 12, HANG)
def pin_memory_stall(facts: Facts) -> Optional[Finding]:
    """The pin-memory thread of main (``_pin_memory_loop`` in torch/utils/data/_utils/pin_memory.py)
    is blocked inside pinning (``pin_memory``, a CUDA host allocation) rather than idle in
    ``in_queue.get``, while main waits on its output queue."""
    if not facts.loader_hang() or facts.stall is None:
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
        cuda = [f for f in t.frames if f.native and "cuda" in (f.function + (f.module or "")).lower()]
        if not (frames.has_frame(t, frames.PIN_WORK_FUNCS, frames.PIN_MEMORY_FILE) or cuda):
            continue
        blocked_at = " ← ".join(describe(facts, pid, f) for f in cuda[:3]) or describe(
            facts, pid, t.frames[0] if t.frames else None
        )
        evidence = (
            waiting_main(facts),
            f"main pid {pid}: pin-memory thread {t.tid} ({t.name or 'pt_data_pin'}) blocked at {blocked_at}, inside "
            f"{describe(facts, pid, top)}",
            f"main pid {pid}: pin-memory thread {t.tid} {kernel_wait(facts, pid, t.tid)}",
        )
        return Finding(
            confidence=0.8,
            summary="The pin-memory thread of the main process is stuck pinning a batch (page-locked host "
            "allocation), so no batch reaches the training loop.",
            evidence=evidence,
            remedy=(
                "Try pin_memory=False to confirm; lower batch_size × prefetch_factor × num_workers (pinned memory is "
                "page-locked and scarce); check the GPU driver (nvidia-smi, dmesg for Xid errors); avoid other threads "
                "creating CUDA contexts while the loader pins."
            ),
            pids=(pid,),
            docs=(DOC_MULTI_PROCESS_LOADING, "https://pytorch.org/docs/stable/data.html#memory-pinning"),
        )
    return None


@rule("shutdown_hang", SEVERITY_HANG, 25, HANG)
def shutdown_hang(facts: Facts) -> Optional[Finding]:
    """Main is stuck shutting the iterator down (``_shutdown_workers`` in dataloader.py: joining
    workers or the pin-memory thread) at the end of an epoch or at interpreter exit, beyond the
    bounded join-with-timeout that PyTorch does per worker."""
    v = facts.verdict
    if (
        v is None
        or facts.stall is None
        or not facts.loader_hang()
        or v.thread is None
        or not frames.has_frame(v.thread, frames.LOADER_SHUTDOWN_FUNCS, frames.DATALOADER_FILE)
    ):
        return None
    pid = facts.stall.main_pid
    top = frames.innermost_python(v.thread)
    user = frames.innermost_user(v.thread)
    evidence = [
        f"main pid {pid}: thread {v.thread.tid} is in _shutdown_workers, waiting at {describe(facts, pid, top)}"
    ]
    if user is not None:
        evidence.append(f"main pid {pid}: reached from {describe(facts, pid, user)}")
    for w in facts.sample.workers:
        evidence.append(f"worker pid {w.pid}: state {w.state}, wchan {w.wchan}, {quiet_text(facts, w.pid)}")
    stack = facts.stack(pid)
    joins_pin = any(f.function.endswith("join") for f in v.thread.frames[:6]) and any(
        frames.has_frame(t, frames.PIN_LOOP_FUNCS) for t in (stack.threads if stack else ())
    )
    return Finding(
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


DOC_UNEVEN_INPUTS = "https://pytorch.org/tutorials/advanced/generic_join.html"
# What ends a collective wait if nothing else does (torch/distributed/constants.py:
# default_pg_timeout, default_pg_nccl_timeout; init_process_group(timeout=…) overrides both).
COLLECTIVE_TIMEOUT_TEXT = (
    "left alone, the process group's timeout ends this wait (PyTorch's default: 30 minutes; 10 for NCCL; "
    "init_process_group(timeout=…) sets it): each waiting rank then raises a timeout error from this collective "
    "and the job fails, with no word about the DataLoader"
)


def _epoch_over(v: LoaderView) -> bool:
    """The iterator's epoch has ended: main was in ``__next__`` with no worker owning the next
    batch (StopIteration; the recorder leaves that mark until the next epoch)."""
    return v.batches > 0 and v.waiting_since is not None and v.waiting_worker < 0


@rule("uneven_batches", SEVERITY_HANG, 29, HANG)
def uneven_batches(facts: Facts) -> Optional[Finding]:
    """Ranks of a distributed job whose DataLoaders yield different numbers of batches: the
    rank that runs out leaves the loop for its end-of-epoch collective, the others wait in the
    next step's collective (DDP's gradient all-reduce) for a rank that never joins it, until the
    collective timeout (allenai/allennlp#5088, microsoft/PyMarlin#80). Read from the inside view
    of every rank: the same iterator over, on one rank, while another delivered a different
    count and is still mid-epoch."""
    if facts.rank is None or not facts.peer_loaders or facts.verdict is None or facts.verdict.in_loader:
        return None
    main = facts.sample.main
    own = [v for v in facts.sample.loaders if main is not None and v.pid == main.pid]
    if main is None or not own:
        return None
    latest = {facts.rank: max(own, key=lambda v: v.iterator)}
    for rank, loaders in facts.peer_loaders:
        if loaders:
            latest[rank] = max(loaders, key=lambda v: v.iterator)
    same = {r: v for r, v in latest.items() if v.iterator == latest[facts.rank].iterator}
    over = {r: v for r, v in same.items() if _epoch_over(v)}
    going = {r: v for r, v in same.items() if not _epoch_over(v)}
    if not over or not going or len({v.batches for v in same.values()}) < 2:
        return None
    short = min(over.items(), key=lambda rv: rv[1].batches)
    long = max(going.items(), key=lambda rv: rv[1].batches)
    evidence = [
        f"rank {r}: its DataLoader ({v.label}) ended the epoch after {v.batches} batches; the rank left the loop"
        for r, v in sorted(over.items())
    ] + [
        f"rank {r}: {v.batches} batches delivered in the same epoch, and more to come" for r, v in sorted(going.items())
    ]
    evidence.append(f"rank {facts.rank} (this report): main waits outside the DataLoader: {facts.verdict.reason}")
    evidence.append(COLLECTIVE_TIMEOUT_TEXT)
    where = frames.innermost_user(facts.verdict.thread) if facts.verdict.thread is not None else None
    if where is not None:
        evidence.append(f"rank {facts.rank}: {describe(facts, main.pid, where)}")
    return Finding(
        confidence=0.85,
        summary=(
            f"The ranks' shards are uneven: rank {short[0]}'s DataLoader ran out after {short[1].batches} batches "
            f"while rank {long[0]} delivered {long[1].batches} and has more, so the ranks wait in different "
            "collectives for each other until the collective timeout."
        ),
        evidence=tuple(evidence),
        remedy=(
            "Give every rank the same number of batches: torch.utils.data.distributed.DistributedSampler (it pads the "
            "shards to equal length; drop_last=True trims instead), or split files evenly; for inputs that are uneven "
            "by nature wrap the loop in torch.distributed.algorithms.join.Join([model]) (DDP joins uneven inputs "
            "through it)."
        ),
        pids=(main.pid,),
        location=f"{where.file}:{where.line}" if where is not None else None,
        docs=(DOC_UNEVEN_INPUTS,),
    )


@rule("stall_outside_loader", SEVERITY_HANG, 30, HANG)
def stall_outside_loader(facts: Facts) -> Optional[Finding]:
    """Main's iterating thread stopped outside any DataLoader iterator (a collective, a lock,
    a sleep, user I/O), and no proof shows main deadlocked (``main_thread_deadlock`` covers that)."""
    v, stall = facts.verdict, facts.stall
    if v is None or v.kind is not VerdictKind.OUTSIDE_LOADER or stall is None:
        return None
    pid = stall.main_pid
    if facts.proof is not None and pid in facts.proof.pids:
        return None
    t = v.thread
    evidence = [
        f"main pid {pid}: {v.reason}"
        + ("" if v.confirmed_by_stack else " (from /proc only: py-spy could not read main)")
    ]
    user = None
    collective = None
    timed = False
    if t is not None:
        top = t.frames[0] if t.frames else None
        user = frames.innermost_user(t)
        evidence.append(
            f"main pid {pid}: thread {t.tid} ({t.name or 'MainThread'}) innermost frame {describe(facts, pid, top)}"
        )
        if user is not None and user is not top:
            evidence.append(f"main pid {pid}: in the job's code at {describe(facts, pid, user)}")
        evidence.append(f"main pid {pid}: thread {t.tid} {kernel_wait(facts, pid, t.tid)}")
        detail = facts.detail(pid, t.tid)
        timed = detail is not None and detail.wait is not None and detail.wait.kind.value == "timed"
        collective = next((f for f in t.frames if not f.native and frames.is_collective(f)), None)
        if collective is not None:
            evidence.insert(
                1,
                f"main pid {pid}: waits in a torch.distributed collective, {describe(facts, pid, collective)}: "
                "another rank has not reached it (uneven batches per rank, a crashed or slower rank)",
            )
            evidence.insert(2, COLLECTIVE_TIMEOUT_TEXT)
    else:
        evidence.append(f"main pid {pid}: main thread {kernel_wait(facts, pid, pid)}")
    evidence.append(f"main pid {pid}: {quiet_text(facts, pid)}; {len(facts.sample.workers)} DataLoader worker(s) alive")
    where = f" at {brief(user)}" if user else ""
    if not torch_seen(facts):
        evidence.insert(
            0,
            f"main pid {pid}: no DataLoader worker, no DataLoader iterator and no torch frame was seen in this "
            "process tree",
        )
        return Finding(
            confidence=0.3,
            summary=(
                f"No DataLoader or training loop was seen in pid {pid}; it has waited{where} for {stall.stall_s:.0f} s."
            ),
            evidence=tuple(evidence),
            remedy=(
                f"Check that pid {pid} is the training job's main process, the one that iterates the DataLoader "
                "(`attach --pid` takes that pid; `run` takes the first Python process of the command). dlwatch judges "
                "PyTorch training loops: for any other program this only says how long it has been idle."
            ),
            pids=(pid,),
            location=location(user),
        )
    if collective is not None:
        where += ", in a torch.distributed collective"
    if timed:
        where += " (a timed wait: it ends by itself)"
    return Finding(
        confidence=0.8 if v.confirmed_by_stack else 0.4,
        summary=(
            f"The training loop stopped outside the DataLoader{where}; "
            f"no batch was requested for {stall.stall_s:.0f} s."
        ),
        evidence=tuple(evidence),
        remedy=(
            "Look at main's stack below: the job waits there, not on its data. If that wait is expected (a long "
            "checkpoint, an evaluation, a barrier), raise stall_timeout_s; the watchdog does not end such a job "
            "unless terminate_outside_loader is true and the hang is proven."
        ),
        pids=(pid,),
        location=location(user),
        docs=("https://pytorch.org/docs/stable/distributed.html",) if collective is not None else (),
    )

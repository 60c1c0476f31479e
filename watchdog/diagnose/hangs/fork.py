"""Hang rules of locks inherited through ``fork()``: a worker forked while another thread of its
parent held a lock (``fork_inherited_lock``), and where such a lock came from.
"""

from __future__ import annotations

import dataclasses
import re
from typing import List, Optional, Tuple

from ... import frames
from ...states import Activity
from ...types import (
    ROLE_FORKSERVER,
    SEVERITY_HANG,
    Facts,
    ForkRecord,
    Frame,
    ProcessSample,
    ThreadAtFork,
    ThreadStack,
)
from ..common import (
    DOC_MULTIPROCESSING,
    DOC_START_METHODS,
    FORKSERVER,
    SPAWN,
    WorkerView,
    describe,
    kernel_wait,
    quiet_text,
    worker_finding,
    worker_views,
)
from ..engine import Finding, rule
from .shared import HANG

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


def owner_class(function: str) -> Optional[str]:
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
    cls = owner_class(waiter.function) if waiter is not None and name.startswith("self.") else None
    for t in record.threads:
        if t.forking != forking:
            continue
        for f in [f for f in t.frames if frames.is_user(f)][:6]:
            if cls is not None and owner_class(f.function) != cls:
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


def held_lock(facts: Facts, t: ThreadStack) -> Optional[str]:
    top = frames.innermost_python(t)
    return frames.lock_holder(t, facts.source(top.file, top.line) if top else None)


def proof_line(facts: Facts, pid: int) -> List[str]:
    """The proof's steps about ``pid`` (its conclusion is added once per finding), without the
    raw syscall lines (addresses), which stay in the report's proof section."""
    if facts.proof is None:
        return []
    return [f"proof: {link.text()}" for link in facts.proof.links_of(pid)]


# --- fork-inherited locks and deadlocks inside a worker -------------------------------------------


# What a Python thread of the parent could have held at the fork; OpenMP pools and native mutexes
# belong to threads that ``threading`` does not list, so the fork record cannot rule those out.
PYTHON_HOLDERS = ("python_lock", "condition", "future", "join")


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
    if name is None or held_lock(facts, t) != "python_lock" or not in_first_fetch(facts, v.pid):
        return False
    return not any(holds_at(facts, f, name) for f in [f for f in t.frames if frames.is_user(f)][:6])


def inherited_from_forker(facts: Facts, v: WorkerView, t: ThreadStack) -> bool:
    """The forking thread held what ``t`` waits for: seen in its frames at the fork
    (:func:`_forking_thread_held`), or shown by the worker's own first batch
    (:func:`_locked_before_it_began`)."""
    return _forking_thread_held(facts, v, t) or _locked_before_it_began(facts, v, t)


# Start methods whose workers are copies of a running process (main's, or the forkserver's).
FORKED = (None, "fork", "forkserver")


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
    if held_lock(facts, t) != "python_lock":
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


def fork_lock_hit(facts: Facts, v: WorkerView) -> Optional[Tuple[float, List[str], Optional[Frame]]]:
    if v.proc.start_method not in FORKED or not v.quiet or v.others:
        return None
    if v.activity not in (Activity.PRIVATE_WAIT, Activity.UNKNOWN):
        return None
    t = v.loop
    if t is not None:
        holder = held_lock(facts, t)
        if holder is None and not v.proven:
            return None
        origin = lock_origin(facts, v, t)
        if origin is not None and origin.verdict == "own":
            return None  # the worker took it itself since the fork: worker_deadlock
        forker = alone_at_fork(facts, v.pid) and inherited_from_forker(facts, v, t)
        if holder in PYTHON_HOLDERS and alone_at_fork(facts, v.pid) and not forker:
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
        lines += proof_line(facts, v.pid)
        confidence = 0.95 if v.proven else (0.85 if holder in ("openmp", "native_mutex", "python_lock") else 0.7)
        if origin is not None and origin.verdict == "unknown":
            confidence = 0.5  # the hang may be proven; which thread left the lock held is not
        elif origin is not None and origin.own:
            confidence = min(confidence, 0.75)  # a holder at the fork, yet the worker got through its code since
        elif holder in PYTHON_HOLDERS and fork_record_of(facts, v.pid) is None and _seen_alone_at_fork(facts, v.pid):
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
    ] + proof_line(facts, v.pid)
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

LOCK_TAKEN_TWICE_REMEDY = (
    "A threading.Lock is not reentrant: a thread that takes it again before releasing it waits forever. Release it "
    "on every path (`with lock:` rather than acquire()/release(), or release in a finally: block, so that an early "
    "return or an exception cannot leave it held); use threading.RLock where one thread may take it again (a nested "
    "call); and acquire(timeout=<seconds>) to fail loudly instead of hanging."
)

_OWN_OR_INHERITED_REMEDY = (
    "Two causes fit, and each has its own fix. If the worker's thread took the lock before and never released it "
    "(an early return or an exception between acquire() and release(), or a nested call that takes it again): "
    + LOCK_TAKEN_TWICE_REMEDY
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
        if waiting and all(alone_at_fork(facts, v.pid) and inherited_from_forker(facts, v, t) for v, t in waiting):
            return state("a lock that main's own thread held when it created the iterator"), _FORKER_REMEDY
        holders = {held_lock(facts, v.loop) for v in worker_views(facts) if v.pid in pids and v.loop is not None}
        holder = next(iter(holders)) if len(holders) == 1 else None
        if holder is not None and holder in _FORK_REMEDY:
            return state(HOLDER_TEXT[holder]), _FORK_REMEDY[holder]
        return state(inherited("main process")), _FORK_REMEDY_DEFAULT

    found = worker_finding(
        facts,
        fork_lock_hit,
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

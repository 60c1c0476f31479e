"""Proofs: can the job ever move again? A set of threads no one outside can wake, read from
kernel waits and stacks, and the loader-level argument of an idle loader.

NOTE [ Deadlock proof ];
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

from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from .. import frames, states
from ..types import (
    ROLE_MAIN,
    ROLE_STARTING,
    ROLE_WORKER,
    FdKind,
    HangVerdict,
    LockHold,
    PipeEnds,
    ProcessStack,
    Proof,
    ProofKind,
    ProofLink,
    Sample,
    Stall,
    ThreadSample,
    WaitKind,
    WaitOp,
)

# --- proofs ---------------------------------------------------------------------------------


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
        target = pipes.targets.get((pid, w.fd))
        return target.path if target is not None and target.kind is FdKind.PIPE else None

    def pipe_ends(pid: int, d: ThreadSample) -> Tuple[Optional[str], str, Tuple[int, ...]]:
        """The pipe a thread reads or writes, the end that could wake it (``write`` for a
        reader), and the pids that hold that end."""
        pipe = pipe_of(pid, d)
        end = "write" if d.wait is not None and d.wait.op is WaitOp.READ else "read"
        if pipes is None or pipe is None:
            return pipe, end, ()
        return pipe, end, (pipes.writers if end == "write" else pipes.readers).get(pipe, ())

    def lock_of(pid: int, d: ThreadSample) -> Optional[LockHold]:
        """Who can release the file lock the thread waits for, when all of them are known."""
        w = d.wait
        if lock_holds is None or w is None or w.op is not WaitOp.LOCK or w.fd is None:
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
        elif w.kind is WaitKind.FD and w.op in (WaitOp.READ, WaitOp.WRITE) and pipe_of(pid, d):
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
            hold = lock_holds.get((pid, w.fd)) if w is not None and w.fd is not None and w.op is WaitOp.LOCK else None
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

"""Waits on the dead, proven (issue #34, section 2): a ``multiprocessing.Manager()`` lock whose
holder has ended, so that no live process of the job can ever release it.

NOTE [ Manager lock proof ]
A Manager's objects live in the manager process (``BaseManager.start`` forks it from main):
its ``Server`` (CPython's Lib/multiprocessing/managers.py) accepts connections in one thread
(``Server.accepter``), serves each connection in a thread of its own (``Server.serve_client``:
read a request, run the method, send the answer) and waits, in its main thread, for its stop
event (``Server.serve_forever``: ``stop_event.wait(1)`` in a loop, which releases nothing). A
client's proxy call (``BaseProxy._callmethod``) sends the request and reads the answer from its
connection, with no timeout. A Manager lock is a plain ``threading.Lock`` in the manager
process, with no owner kept: a client that dies holding it leaves it held (its serving thread
reads EOF and exits, releasing nothing).

So the job can never move by itself when, read twice ``STABLE_GAP_S`` apart (the proof rests
on threads that did not move between the reads, ``examine.stable_details``):

* each worker thread waits in a proxy call (``_callmethod`` reading its connection, no timeout)
  or in one of the waits below, and at least one does;
* the manager process's serving threads that run a call wait, with no timeout, on a private
  futex (a lock's ``acquire``): only a thread of the manager can wake it (futex(2),
  ``FUTEX_PRIVATE_FLAG``), and a manager thread releases a lock only for a client's
  ``release()`` request; there are at least as many as the client threads that wait;
* every other manager thread waits for its client's next request (a read with no timeout), for
  a new connection (``accept`` with no timeout: a connection is served only after the
  authkey's handshake, and only the job's processes inherit the authkey,
  ``current_process().authkey``) or loops in ``serve_forever``;
* main's threads wait in PyTorch's own loop for those workers' batch (no ``timeout`` set:
  ``loader_waits`` in detect.py), or on a private futex (its queue feeder threads: only a thread
  of main can wake them), or are multiprocessing's resource-sharer thread (it hands out
  descriptors, nothing else);
* no process of the argument catches a timer signal (``procfs.timer_wakeup``), and the job has
  no other live process (one that holds a proxy could send the ``release()``);
* a process of the job other than main, its workers and the manager, seen alive after the
  manager started, has ended (its :class:`~watchdog.types.ExitRecord`): whoever holds the lock
  (a live process, all of which wait, or that one) can never release it; the ended process is
  named, with how and when it ended (it is the likely holder, not a proven one: a Manager lock
  keeps no owner to read).

Then no live thread can send the ``release()`` the manager waits for: every thread of main,
the workers and the manager waits for a thread of this same set. Anything else (a live thread
that runs, a timed wait in the job's code, a second manager, another live process) leaves the
hang suspected.
"""

from __future__ import annotations

import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from . import frames
from .collect.waits import READ_CALLS
from .types import (
    ROLE_MAIN,
    ROLE_WORKER,
    ExitRecord,
    ProcessStack,
    Proof,
    ProofKind,
    ProofLink,
    Sample,
    ThreadSample,
    ThreadStack,
    WaitKind,
)

MANAGERS_FILE = "multiprocessing/managers.py"
_ACCEPT_CALLS = frozenset({"accept", "accept4"})
_SERVER_FUNCS = frozenset({"serve_forever", "serve_client", "accepter"})


def _untimed_read(d: ThreadSample) -> bool:
    w = d.wait
    return w is not None and w.kind is WaitKind.FD and w.syscall in READ_CALLS


def _private_futex(d: ThreadSample) -> bool:
    w = d.wait
    return w is not None and w.kind is WaitKind.FUTEX_PRIVATE


# Kernel waits in which a thread may sit in one of PyTorch's own loader loops (detect.py's
# _LOADER_WAIT_KINDS), or a wait that changed between the two reads (``UNKNOWN``): such a loop
# wakes at its timeout (main's 5 s poll in ``_try_get_data``) and waits again, and what else could
# wake it (a batch, an index) comes only from threads of the argument, which did not move. A
# thread seen running is none of these.
_LOOP_WAITS = frozenset({WaitKind.TIMED, WaitKind.FD, WaitKind.FUTEX_PRIVATE, WaitKind.FUTEX_SHARED, WaitKind.UNKNOWN})


def _in_loop(d: ThreadSample) -> bool:
    return d.wait is not None and d.wait.kind in _LOOP_WAITS


def _link(pid: int, d: ThreadSample, t: Optional[ThreadStack], wait: str, why: str) -> ProofLink:
    raw = d.wait.raw if d.wait is not None and d.wait.raw else ""
    detail = d.wait.detail if d.wait is not None else "unknown wait"
    return ProofLink(pid, d.tid, (t.name if t is not None and t.name else d.name), f"{wait} ({detail})", why, raw)


def _manager_of(sample: Sample, stacks: Mapping[int, ProcessStack]) -> Optional[int]:
    """The one process of the job whose stack runs a Manager's ``Server`` (managers.py), or
    ``None`` when there is none, or more than one (which a proxy talks to is then not known)."""
    found = [
        p.pid
        for p in sample.processes
        if p.role not in (ROLE_MAIN, ROLE_WORKER)
        and (st := stacks.get(p.pid)) is not None
        and st.ok
        and any(frames.has_frame(t, _SERVER_FUNCS, MANAGERS_FILE) for t in st.threads)
    ]
    return found[0] if len(found) == 1 else None


def ended_others(sample: Sample, exits: Sequence[ExitRecord]) -> List[ExitRecord]:
    """The exit records of processes of the job other than main, its workers and the live
    processes (a pid seen ended and not alive again under the same start), newest first."""
    alive = {p.ident for p in sample.processes}
    workers = {pid for v in sample.loaders for pid in v.workers}
    out = [r for r in exits if r.ident not in alive and r.pid not in workers]
    return sorted(out, key=lambda r: -r.ended_mono)


def possible_holders(sample: Sample, manager: int) -> List[ExitRecord]:
    """The ended processes of the job (:func:`ended_others`) that could have held a lock of
    the manager ``manager``: started after it, or seen alive after it started; those that ended
    otherwise than cleanly first, then the newest. Empty when the manager is not in ``sample``."""
    server = sample.process(manager)
    if server is None:
        return []
    found = [
        r
        for r in ended_others(sample, sample.exits)
        if r.pid != manager
        # started after it (start times in clock ticks: exact), or seen alive after it started
        # (wall clocks: within a second, create_time rests on the boot time)
        and (r.start_ticks >= server.start_ticks or r.last_seen_wall >= server.create_time - 1.0)
    ]
    return sorted(found, key=lambda r: r.exit_code == 0)


def ended_text(r: ExitRecord, now_mono: float) -> str:
    """How and when ``r``'s process ended, for a proof's line: ``was killed by signal 9
    (SIGKILL); last seen alive at 12:00:01 UTC, found ended at 12:00:02 UTC (40 s before this
    look)`` (``now_mono``: the look's sample, ``time.monotonic()`` seconds)."""
    ago = max(0.0, now_mono - r.ended_mono)
    stamp = time.strftime("%H:%M:%S", time.gmtime(r.last_seen_wall))
    found = time.strftime("%H:%M:%S", time.gmtime(r.ended_wall))
    return f"{r.how()}; last seen alive at {stamp} UTC, found ended at {found} UTC ({ago:.0f} s before this look)"


def prove_manager_lock(
    sample: Sample,
    stacks: Mapping[int, ProcessStack],
    details: Mapping[int, Sequence[ThreadSample]],
    loader: Mapping[Tuple[int, int], Tuple[int, ...]],
    wakeable: Mapping[int, str],
) -> Optional[Proof]:
    """The argument of NOTE [ Manager lock proof ], or ``None`` when any step fails.

    Args:
        sample: the job's sample (its processes, roles, loaders and ``exits``).
        stacks: Python stacks by pid (main, the workers and the manager must be readable).
        details: ``/proc`` thread details by pid, each wait kept only when unchanged between
            two reads (``Evidence.stable``).
        loader: ``detect.loader_waits``: the threads in PyTorch's own waits for the loader's
            other side, with the pids that alone can end them.
        wakeable: pid to why it might wake itself from a timer signal.

    Returns a :class:`~watchdog.types.Proof` of kind ``waits_on_dead`` whose ``pids`` are main,
    the workers and the manager; its links name every thread's wait and the ended process(es).
    """
    main = sample.main
    workers = sample.workers
    if main is None or not workers or main.role != ROLE_MAIN:
        return None
    manager = _manager_of(sample, stacks)
    if manager is None:
        return None
    members = [main.pid] + [w.pid for w in workers] + [manager]
    if {p.pid for p in sample.processes} != set(members):
        return None  # another live process (a holder, a helper) might still release it
    if any(pid in wakeable for pid in members):
        return None
    ended = possible_holders(sample, manager)
    if not ended:
        return None  # no process of the job ended: waits among the living are not this proof's
    st_of: Dict[int, Dict[int, ThreadStack]] = {}
    for pid in members:
        st = stacks.get(pid)
        if st is None or not st.ok or not details.get(pid):
            return None
        if {t.tid for t in st.threads} - {d.tid for d in details[pid]}:
            return None  # a thread that started after the reads: something moves
        st_of[pid] = {t.tid: t for t in st.threads}
    links: List[ProofLink] = []
    worker_pids = tuple(w.pid for w in workers)
    calls = 0
    for pid in worker_pids:
        for d in details[pid]:
            t = st_of[pid].get(d.tid)
            method = frames.manager_call(t) if t is not None else None
            if t is not None and frames.is_resource_sharer(t) and _in_loop(d):
                links.append(
                    _link(pid, d, t, "multiprocessing's resource-sharer thread", "it only hands out descriptors")
                )
                continue
            if method is not None and _untimed_read(d):
                method = {"__enter__": "acquire", "__exit__": "release"}.get(method, method)
                calls += 1
                links.append(
                    _link(
                        pid,
                        d,
                        t,
                        f"waits for the manager's answer to its proxy's {method}() (BaseProxy._callmethod)",
                        f"only the manager process (pid {manager}) answers it",
                    )
                )
            elif (
                (pid, d.tid) in loader
                and loader[(pid, d.tid)]
                and set(loader[(pid, d.tid)]) <= set(members)
                and _in_loop(d)
            ):
                links.append(_link(pid, d, t, "idle in PyTorch's worker loop", "only main sends it an index"))
            elif _private_futex(d):
                links.append(
                    _link(pid, d, t, "waits on a private futex", "only a thread of the same process can wake it")
                )
            else:
                return None
    if not calls:
        return None
    busy = 0
    for d in details[manager]:
        t = st_of[manager].get(d.tid)
        if t is None:
            return None
        top = frames.innermost_python(t)
        serving = frames.has_frame(t, frozenset({"serve_client"}), MANAGERS_FILE)
        if serving and _private_futex(d) and top is not None and frames.frame_in(top, {"serve_client"}, MANAGERS_FILE):
            busy += 1
            links.append(
                _link(
                    manager,
                    d,
                    t,
                    "serves a client's call and waits in it, on a lock (the method runs in serve_client)",
                    "a private futex is woken only by a thread of the manager, and a manager thread releases a lock "
                    "only for a client's release() request",
                )
            )
        elif serving and _untimed_read(d):
            links.append(
                _link(
                    manager,
                    d,
                    t,
                    "waits for its client's next request",
                    "only its client, a process of this set, sends one",
                )
            )
        elif (
            frames.has_frame(t, frozenset({"accepter"}), MANAGERS_FILE)
            and d.wait is not None
            and d.wait.kind is WaitKind.FD
            and d.wait.syscall in _ACCEPT_CALLS
        ):
            links.append(
                _link(
                    manager,
                    d,
                    t,
                    "waits for a new connection",
                    "a connection is served only after the authkey handshake, and only the job's processes inherit "
                    "the authkey: all of them are in this set",
                )
            )
        elif (
            frames.has_frame(t, frozenset({"serve_forever"}), MANAGERS_FILE)
            and top is not None
            and top.function.endswith("wait")
            and _in_loop(d)  # it wakes every second (changed between the reads) and waits again
        ):
            links.append(
                _link(
                    manager,
                    d,
                    t,
                    "Server.serve_forever waits for its stop event (stop_event.wait(1), a loop)",
                    "it only looks at that event and releases nothing",
                )
            )
        else:
            return None
    if busy < calls:
        return None
    for d in details[main.pid]:
        t = st_of[main.pid].get(d.tid)
        key = (main.pid, d.tid)
        if t is not None and frames.is_resource_sharer(t) and _in_loop(d):
            links.append(
                _link(main.pid, d, t, "multiprocessing's resource-sharer thread", "it only hands out descriptors")
            )
        elif key in loader and loader[key] and set(loader[key]) <= set(worker_pids) and _in_loop(d):
            links.append(
                _link(
                    main.pid,
                    d,
                    t,
                    "waits in PyTorch's own loop for the workers' batch (no timeout set)",
                    f"only pid(s) {', '.join(map(str, loader[key]))} can send it",
                )
            )
        elif _private_futex(d):
            links.append(
                _link(main.pid, d, t, "waits on a private futex", "only a thread of the same process can wake it")
            )
        elif t is not None and frames.manager_call(t) is not None and _untimed_read(d):
            links.append(
                _link(
                    main.pid,
                    d,
                    t,
                    "waits for the manager's answer to a proxy call",
                    f"only the manager process (pid {manager}) answers it",
                )
            )
        else:
            return None
    for r in ended[:3]:
        links.append(ProofLink(r.pid, None, f"ended process ({r.name})", ended_text(r, sample.t_mono)))
    gone = "; ".join(f"pid {r.pid} {r.how()}" for r in ended[:3])
    conclusion = (
        f"the multiprocessing.Manager lock the workers wait for is held, and no live process of the job can ever "
        f"release it: every thread of main, the workers and the manager (pid {manager}) waits with no timeout (or in "
        f"a loop that releases nothing) for a thread of this same set, so whoever holds the lock, one of them or "
        f"a process that has ended, can never release it; a process of the job that lived beside the manager has "
        f"ended ({gone}): a Manager lock keeps no owner, so one its holder did not release stays held"
    )
    return Proof(ProofKind.WAITS_ON_DEAD, tuple(members), tuple(links), conclusion)

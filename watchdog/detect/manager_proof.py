"""Waits through a ``multiprocessing.Manager`` that nobody can end (issue #34, section 2): the
checker that main, the workers and the manager process all wait for one another
(:func:`closed_wait`), which both the proof of a lock whose holder ended
(:mod:`watchdog.dead_releaser`) and the proof of a cycle among the living
(:func:`prove_manager_cycle`) rest on.

NOTE [ Manager lock proof ]
A Manager's objects live in the manager process (``BaseManager.start`` forks it from main):
its ``Server`` (CPython's Lib/multiprocessing/managers.py) accepts connections in one thread
(``Server.accepter``), serves each connection in a thread of its own (``Server.serve_client``:
read a request, run the method, send the answer) and waits, in its main thread, for its stop
event (``Server.serve_forever``: ``stop_event.wait(1)`` in a loop, which releases nothing). A
client's proxy call (``BaseProxy._callmethod``) sends the request and reads the answer from its
connection, with no timeout. A Manager lock is a plain ``threading.Lock`` in the manager
process, with no owner kept: a client that dies holding it leaves it held (its serving thread
reads EOF and exits, releasing nothing), and which client holds it cannot be read.

So the job can never move by itself when, read twice ``STABLE_GAP_S`` apart (the proof rests
on threads that did not move between the reads, ``examine.stable_details``):

* each worker thread waits in a proxy call (``_callmethod`` reading its connection, no timeout)
  or in one of the waits below, and at least one does;
* the manager process's serving threads that run a call wait, with no timeout, on a private
  futex (a lock's ``acquire``): only a thread of the manager can wake it (futex(2),
  ``FUTEX_PRIVATE_FLAG``), and a manager thread releases a lock only for a client's
  ``release()`` request; there are at least as many as the client threads that wait;
* every other manager thread waits for its client's next request (a read with no timeout), for
  a new connection (``accept`` with no timeout) on a listener at multiprocessing's own private
  address (``<tempdir>/pymp-XXXXXXXX/listener-XXXXXXXX``, ``connection.arbitrary_address`` in a
  ``util.get_temp_dir`` folder of mode 0700 owned by the job's user: only the job was told it,
  and the key of its handshake is main's inherited ``current_process().authkey``;
  ``collect.sockets.private_listeners``; a chosen address and authkey, CPython docs "Using a
  remote manager", lets any process that knows them connect later and release) or loops in
  ``serve_forever``;
* the other end of each of the manager's connections is held by a process of this set (the
  peer of each connected Unix socket, sock_diag(7), and who holds it in ``/proc/PID/fd``:
  ``collect.sockets.peer_holders``): a client outside the job that knows the address and the
  authkey (CPython docs, "Using a remote manager") could send the ``release()``; a connection
  that is not a Unix socket (a TCP manager) or a peer table that cannot be read fails the step.
  A new connection is served only after the authkey's handshake, and every live process of the
  job is in the set;
* main's threads wait in PyTorch's own loop for those workers' batch (no ``timeout`` set:
  ``loader_waits`` in detect/proof.py), in a proxy call, or on a private futex (its queue feeder
  threads: only a thread of main can wake them), or are multiprocessing's resource-sharer
  thread (it hands out descriptors, nothing else);
* no process of the argument catches a timer signal (``procfs.timer_wakeup``), and the job has
  no other live process (one that holds a proxy could send the ``release()``); every thread
  py-spy shows was seen by both reads (one that started since moves).

Then no live thread can send the ``release()`` (the ``put``, the ``set()``) the manager waits
for: every thread of main, the workers and the manager waits for a thread of this same set
(:func:`closed_wait`). What follows names who likely holds the lock, never proves it:

* a process of the job other than these, seen alive after the manager started, has ended (its
  :class:`~watchdog.types.ExitRecord`): it is named as the likely holder, with how and when it
  ended (``waits_on_dead``, :func:`watchdog.dead_releaser.prove_manager_lock`);
* none has: the holder is one of the set, all of which wait: a cycle (``manager_cycle``,
  :func:`prove_manager_cycle`), named from the stacks (main in ``__next__`` waiting for the
  workers, each worker at the line of its proxy call); main is the likely holder when it is the
  only client not itself waiting in a proxy call, and workers waiting at different lines may
  each hold what another waits for (a lock-order cycle: the diagnosis reads the source around
  each line).

Anything else (a live thread that runs, a timed wait in the job's code, a second manager, another
live process, a stack or thread read missing) leaves the hang suspected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from .. import frames
from ..types import (
    ROLE_MAIN,
    ROLE_WORKER,
    ExitRecord,
    Frame,
    ProcessStack,
    Proof,
    ProofKind,
    ProofLink,
    Sample,
    ThreadSample,
    ThreadStack,
    WaitKind,
    WaitOp,
)

MANAGERS_FILE = "multiprocessing/managers.py"
_SERVER_FUNCS = frozenset({"serve_forever", "serve_client", "accepter"})


def _untimed_read(d: ThreadSample) -> bool:
    w = d.wait
    return w is not None and w.kind is WaitKind.FD and w.op is WaitOp.READ


def _private_futex(d: ThreadSample) -> bool:
    w = d.wait
    return w is not None and w.kind is WaitKind.FUTEX_PRIVATE


# Kernel waits in which a thread may sit in one of PyTorch's own loader loops (detect/proof.py's
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


def manager_of(sample: Sample, stacks: Mapping[int, ProcessStack]) -> Optional[int]:
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


@dataclass(frozen=True)
class ProxyCall:
    """A client thread (``pid``, ``tid``) waiting for the manager's answer to its proxy's
    ``method`` (``acquire`` for a ``with`` of a Manager lock), called from the job's frame
    ``at`` (``None`` when its stack shows none)."""

    pid: int
    tid: int
    method: str
    at: Optional[Frame]


@dataclass(frozen=True)
class ClosedWait:
    """What :func:`closed_wait` found: the manager's pid, the ``members`` (main, the workers,
    the manager), one step per thread of them (``links``) and the client threads that wait in
    a proxy call (``calls``, at least one)."""

    manager: int
    members: Tuple[int, ...]
    links: Tuple[ProofLink, ...]
    calls: Tuple[ProxyCall, ...]


class ManagerReads(NamedTuple):
    """What the Manager proofs (NOTE [ Manager lock proof ]) read of the job: the arguments of
    :func:`closed_wait`, :func:`prove_manager_cycle` and
    :func:`watchdog.detect.dead_releaser.prove_manager_lock`.

    Attributes:
        sample: the job's sample (its processes, roles, loaders and ``exits``).
        stacks: Python stacks by pid (main, the workers and the manager must be readable).
        details: ``/proc`` thread details by pid, each wait kept only when unchanged between
            two reads (``Evidence.stable``).
        loader: ``detect.loader_waits``: the threads in PyTorch's own waits for the loader's
            other side, with the pids that alone can end them.
        wakeable: pid to why it might wake itself from a timer signal.
        peers: ``Evidence.manager_peers``: for a Manager server, the pid holding the other end
            of each of its connected sockets (``collect.sockets.peer_holders``); the manager's
            must be there, each a process of the set (a client outside the job could release).
        listeners: ``Evidence.manager_listeners``: for a Manager server, the descriptors of its
            listening sockets at multiprocessing's own private address
            (``collect.sockets.private_listeners``); the accepter must wait on one of them.
    """

    sample: Sample
    stacks: Mapping[int, ProcessStack]
    details: Mapping[int, Sequence[ThreadSample]]
    loader: Mapping[Tuple[int, int], Tuple[int, ...]]
    wakeable: Mapping[int, str]
    peers: Mapping[int, Tuple[Optional[int], ...]]
    listeners: Mapping[int, Tuple[int, ...]]


def _caller(t: ThreadStack) -> Optional[Frame]:
    """The job's frame that made ``t``'s proxy call: the first frame of the user's code outside
    the proxy (``MakeProxyType``'s methods have the file ``<string>``)."""
    return next((f for f in frames.python_frames(t) if frames.is_user(f) and f.file != "<string>"), None)


def _call(pid: int, d: ThreadSample, t: Optional[ThreadStack]) -> Optional[ProxyCall]:
    method = frames.manager_call(t) if t is not None else None
    if t is None or method is None or not _untimed_read(d):
        return None
    method = {"__enter__": "acquire", "__exit__": "release"}.get(method, method)
    return ProxyCall(pid, d.tid, method, _caller(t))


def closed_wait(reads: ManagerReads) -> Optional[ClosedWait]:
    """The argument of NOTE [ Manager lock proof ] up to "no live thread can send the
    ``release()``" over ``reads`` (:class:`ManagerReads`), or ``None`` when any step fails."""
    sample, stacks, details, loader, wakeable, peers, listeners = reads
    main = sample.main
    workers = sample.workers
    if main is None or not workers or main.role != ROLE_MAIN:
        return None
    manager = manager_of(sample, stacks)
    if manager is None:
        return None
    members = [main.pid] + [w.pid for w in workers] + [manager]
    if {p.pid for p in sample.processes} != set(members):
        return None  # another live process (a holder, a helper) might still release it
    if any(pid in wakeable for pid in members):
        return None
    clients = peers.get(manager)
    if clients is None or any(pid not in members for pid in clients):
        return None  # a connection whose other end no process of the set holds: a client outside the job
    st_of: Dict[int, Dict[int, ThreadStack]] = {}
    for pid in members:
        st = stacks.get(pid)
        if st is None or not st.ok or not details.get(pid):
            return None
        if {t.tid for t in st.threads} - {d.tid for d in details[pid]}:
            return None  # a thread that started after the reads: something moves
        st_of[pid] = {t.tid: t for t in st.threads}
    links: List[ProofLink] = []
    calls: List[ProxyCall] = []
    worker_pids = tuple(w.pid for w in workers)
    answers = f"only the manager process (pid {manager}) answers it"
    for pid in worker_pids:
        for d in details[pid]:
            t = st_of[pid].get(d.tid)
            call = _call(pid, d, t)
            if t is not None and frames.is_resource_sharer(t) and _in_loop(d):
                links.append(
                    _link(pid, d, t, "multiprocessing's resource-sharer thread", "it only hands out descriptors")
                )
            elif call is not None:
                calls.append(call)
                wait = f"waits for the manager's answer to its proxy's {call.method}() (BaseProxy._callmethod)"
                links.append(_link(pid, d, t, wait, answers))
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
    for d in details[main.pid]:
        t = st_of[main.pid].get(d.tid)
        key = (main.pid, d.tid)
        call = _call(main.pid, d, t)
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
        elif call is not None:
            calls.append(call)
            links.append(
                _link(main.pid, d, t, f"waits for the manager's answer to its proxy's {call.method}()", answers)
            )
        else:
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
            and d.wait.op is WaitOp.ACCEPT
            and d.wait.fd in listeners.get(manager, ())
        ):
            links.append(
                _link(
                    manager,
                    d,
                    t,
                    "waits for a new connection",
                    "it listens at multiprocessing's own private address (a pymp- folder of mode 0700 that only the "
                    "job was told), a new client is served only after the authkey handshake (the key main's "
                    "processes inherit), and every client the manager has now is a process of this set",
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
    if busy < len(calls):
        return None
    return ClosedWait(manager, tuple(members), tuple(links), tuple(calls))


def _at(c: ProxyCall) -> str:
    if c.at is None:
        return ""
    return f" at {frames.short_path(c.at.file)}:{c.at.line} ({c.at.function})"


def cycle_text(closed: ClosedWait, sample: Sample, words: Mapping[int, str]) -> str:
    """The cycle as the stacks show it: main waiting in ``__next__`` for the workers' batch,
    each client thread's proxy call with the line that made it, the manager waiting in those
    calls; then who likely holds the lock (never proven: a Manager lock keeps no owner)."""

    def who(pid: int) -> str:
        return f"{words.get(pid, 'process')} (pid {pid})"

    main = sample.main
    assert main is not None
    workers = [pid for pid in closed.members if pid not in (main.pid, closed.manager)]
    calling = {c.pid for c in closed.calls}
    parts = []
    if main.pid not in calling:
        names = [who(p) for p in workers]
        them = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        parts.append(f"{who(main.pid)} waits in __next__ (PyTorch's loop, no timeout) for the batch of {them}")
    for c in closed.calls:
        parts.append(f"{who(c.pid)} waits{_at(c)} for the manager's answer to its proxy's {c.method}()")
    methods = sorted({c.method for c in closed.calls})
    parts.append(
        f"the manager (pid {closed.manager}) runs those {'/'.join(methods)}() calls and waits in them, on a lock "
        "that only a client's request can free"
    )
    cycle = "; ".join(parts)
    idle = [pid for pid in [main.pid] + workers if pid not in calling]
    lines = {(c.at.file, c.at.line) for c in closed.calls if c.at is not None}
    acquiring = all(c.method == "acquire" for c in closed.calls)
    main_only = idle == [main.pid] and acquiring
    holder = "which client holds it is not known"
    if main_only:
        holder = (
            "main is the likely holder: it is the only client of this set that is not itself waiting to acquire (a "
            "lock it took and did not release before iterating: an early return, an exception path); or a process "
            "of the job that took it and ended before a sample saw it (dlwatch sees a process that lives through "
            "one sample, every interval_s)"
        )
    elif idle and acquiring:
        holder = f"the likely holder is one of the clients not waiting to acquire: {', '.join(who(p) for p in idle)}"
    if len(lines) > 1:
        holder = (
            "the waits are at different lines: each client may hold, from an enclosing `with` or acquire(), a lock "
            "another of them waits for (a lock-order cycle)" + ("; or " + holder if main_only else "")
        )
    return f"{cycle}. A Manager lock keeps no owner, so who holds it is not proven: {holder}"


def prove_manager_cycle(reads: ManagerReads, words: Mapping[int, str]) -> Optional[Proof]:
    """A cycle through a Manager among the living (NOTE [ Manager lock proof ]): the
    :func:`closed_wait` of main, the workers and the manager, when no process of the job that
    lived beside the manager has ended (that is :func:`watchdog.dead_releaser.prove_manager_lock`'s
    proof); ``None`` otherwise. ``words`` names each pid in the sentence (``detect.role_words``:
    ``main``, ``worker 0``); ``reads`` is :func:`closed_wait`'s.

    Returns a :class:`~watchdog.types.Proof` of kind ``manager_cycle`` whose ``pids`` are main,
    the workers and the manager; its links name every thread's wait, its conclusion the cycle
    (:func:`cycle_text`)."""
    sample = reads.sample
    closed = closed_wait(reads)
    if closed is None or possible_holders(sample, closed.manager):
        return None
    conclusion = (
        f"no process of the job can move: every thread of main, the workers and the manager (pid {closed.manager}) "
        "waits with no timeout (or in a loop that releases nothing) for a thread of this same set, and no other "
        "process of the job lives, so no client can ever send the release() the manager waits for (and none that "
        f"lived beside the manager is known to have ended): {cycle_text(closed, sample, words)}"
    )
    return Proof(ProofKind.MANAGER_CYCLE, closed.members, closed.links, conclusion)

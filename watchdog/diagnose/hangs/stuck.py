"""Hang rules of workers that wait or spin: blocked in a kernel read or write
(``worker_blocked_io``), stuck in the user's code, a poll, or a ``multiprocessing.Manager``
call (``worker_stuck``).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple, Union

from ... import frames
from ...detect import dead_releaser
from ...states import Activity, WorkerState
from ...types import (
    ROLE_OTHER,
    SEVERITY_HANG,
    ExitRecord,
    Facts,
    FdKind,
    FdTarget,
    Frame,
    LinkKind,
    ProcessSample,
    ProcId,
    ProofKind,
    WaitKind,
    WaitOp,
)
from .. import ended as ended_mod
from ..common import (
    BLOCKED_DOING,
    DOC_DATALOADER,
    DOC_MULTI_PROCESS_LOADING,
    WorkerView,
    chain_of,
    chain_remedy,
    chain_text,
    describe,
    kernel_wait,
    lock_holders,
    polling_of,
    quiet_text,
    worker_finding,
    worker_views,
)
from ..dead import dead_end
from ..engine import Finding, rule
from .fork import HOLDER_TEXT, fork_lock_hit, held_lock, holds_at, lock_name
from .helpers import cmd, ended_helpers
from .locks import self_deadlock_hit
from .shared import HANG, worker_word

# --- workers blocked in I/O or elsewhere --------------------------------------------------------


def _thread_wchan_family(facts: Facts, pid: int, tid: int) -> Optional[str]:
    d = facts.detail(pid, tid)
    return frames.wchan_family(d.wchan if d else None)


def _fd_target(facts: Facts, v: WorkerView) -> Optional[FdTarget]:
    w = v.loop_detail.wait if v.loop_detail is not None else None
    if w is None or w.fd is None:
        return None
    return dict(facts.fd_targets).get((v.pid, w.fd))


def _blocked_io_hit(facts: Facts, v: WorkerView) -> Optional[Tuple[float, List[str], Optional[Frame]]]:
    if not v.quiet or v.state is WorkerState.IDLE or fork_lock_hit(facts, v) is not None:
        return None
    tid = v.loop.tid if v.loop is not None else v.pid
    family = _thread_wchan_family(facts, v.pid, tid)
    target = _fd_target(facts, v)
    kind = target.kind if target is not None else None
    if kind is FdKind.SOCKET or (v.loop is not None and frames.waits_on_mp_queue(v.loop)):
        return None  # a socket's peer, or a multiprocessing queue's feeder, is another process: worker_stuck
    # The loop thread's wait: set whenever the activity is FD_WAIT or the wait's fd has a target.
    wait = v.loop_detail.wait if v.loop_detail is not None else None
    in_kernel_io = (
        v.activity is Activity.KERNEL_IO
        or family in frames.IO_WCHAN_FAMILIES
        or (
            v.activity is Activity.FD_WAIT
            and (
                kind is FdKind.PIPE
                or (target is not None and target.is_path)
                or (wait is not None and wait.op is WaitOp.OPEN)
            )
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
    if target is not None and target.path and wait is not None:
        lines.append(f"worker pid {v.pid}: it waits on fd {wait.fd}, which is {target.path}")
        if target.kind is FdKind.PIPE:
            readers = dict(facts.pipe_readers).get(target.path, ())
            writers = dict(facts.pipe_writers).get(target.path, ())
            writing = wait.op is WaitOp.WRITE
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
    regular = [f.path for f in files if f.kind is FdKind.FILE]
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
    targets = [_fd_target(facts, v) for v in views]
    if any(t is not None and t.kind is FdKind.PIPE for t in targets):
        writing = any(
            v.loop_detail is not None and v.loop_detail.wait is not None and v.loop_detail.wait.op is WaitOp.WRITE
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
        v.loop_detail is not None and v.loop_detail.wait is not None and v.loop_detail.wait.op is WaitOp.OPEN
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
            holder = held_lock(facts, t)
            what = HOLDER_TEXT.get(holder or "", "something")
            lines.append(
                f"thread {t.tid} of the manager (pid {p.pid}) runs a call and waits for {what}, at "
                f"{describe(facts, p.pid, top)}; {kernel_wait(facts, p.pid, t.tid)}"
            )
        return ManagerWait(method, p, tuple(lines), held_lock(facts, busy[0]) if busy else None)
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
        fork_lock_hit(facts, v) is not None
        or _blocked_io_hit(facts, v) is not None
        or self_deadlock_hit(facts, v) is not None
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
                writers = [p for p in dict(facts.pipe_writers).get(target.path if target else "", ()) if p != v.pid]
                doing = "waiting on a multiprocessing queue that no process feeds" + (
                    f" (its pipe's write end is held by pid(s) {', '.join(map(str, writers))})" if writers else ""
                )
            elif target is not None and target.path:
                doing += f" ({target.path})"
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
    from ...detect import RUNNABLE_SHARE

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
            target = _fd_target(facts, v)
            writers = [
                p
                for p in dict(facts.pipe_writers).get(target.path if target else "", ())
                if p not in {w.pid for w in views}
            ]
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
    for v in views:
        # a lock taken in the job's own code (`with self.lock:`, `lock.acquire()`): a
        # multiprocessing.Lock or Semaphore is acquired in C (SemLock), so no Python frame names
        # its kind; the line and the shared futex do (futex(2): no FUTEX_PRIVATE_FLAG)
        w = v.loop_detail.wait if v.loop_detail is not None else None
        name = lock_name(facts.source_raw(v.user.file, v.user.line)) if v.user is not None else None
        if name is not None and w is not None and w.kind is WaitKind.FUTEX_SHARED:
            at = f" at {frames.short_path(v.user.file)}:{v.user.line}" if v.user is not None else ""
            return (
                f"The workers wait{at} for {name}, a lock shared between processes (a multiprocessing.Lock or "
                "Semaphore: the kernel keeps no holder of it), that a process of the job took and has not released "
                f"{_for_so_far(facts)}(which one cannot be read from outside): a worker or main that returned or "
                "raised while holding it (release it on every path: `with lock:`, or release in a finally: block), "
                "or one that takes it twice (a multiprocessing.Lock is not re-entrant: use multiprocessing.RLock); "
                "acquire with a timeout (acquire(timeout=<seconds>) returns False) to fail loudly. " + _BOUND_THE_WAIT
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
        parts.append(f"{worker_word(facts, pid)} holds {held[0]} (taken at line {held[1]}) and waits for {name}")
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
            "did not release it before iterating (an early return or an exception path left it held), unless a "
            "process of the job took it and ended before a sample saw it (dlwatch sees a process that lives "
            "through one sample: look for a helper process that exits while holding it). Release it on every "
            "path (`with lock:`, or release in a finally: block), and " + timeout
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
            f"pid {p.pid} ({cmd(p)})" + (f", which {r.how()}" if (r := ended_mod.record_for(facts, p)) else "")
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

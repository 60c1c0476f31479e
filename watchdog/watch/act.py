"""The only module that sends signals: ending a hung job, or a bounded run's job.

Only the job's own processes are signalled: the tree found under the job's root (never the
process group of an attached job, which may hold the shell or launcher that started it). Each
process is identified by its :class:`~watchdog.types.ProcId` (pid and start time in clock
ticks, compared exactly), then held by a pidfd (``pidfd_open(2)``) opened before its identity
is read, and signalled through it (``pidfd_send_signal(2)``): a pid reused at any point is
never signalled. Without pidfds, psutil's ``Process.send_signal`` checks the start time again
before each signal (``_raise_if_pid_reused``). The job's own process group (``dlwatch run``)
is reached member by member, never by number with ``killpg``: once a group is empty its
number may become another program's group. SIGTERM first; after the grace period whatever
remains is stopped (SIGSTOP: it forks no more and keeps its children for the last look), then
killed (SIGKILL).

NOTE [ Late processes ]: a job forks while it is being ended (a DataLoader makes new workers at
each epoch's start; a fork that completes before the signal reaches its parent makes a child
no sample saw), and a child whose parent died leaves the tree (its parent becomes init or a
subreaper; a DataLoader worker still in its ``worker_init_fn`` then never sees its parent die:
torch's ``ManagerWatchdog`` notes the parent's pid after that function returns). So the
job's processes are looked for again after each signal and every ``_SWEEP_S`` seconds of the
grace period, and once more before the job counts as ended: the children of every process
held (``/proc/PID/task/TID/children``, or every process's parent without those files), the
members of the job's own group that started while it was provably the job's (see
:meth:`_Reach.witness`), and with ``own_session`` every process of dlwatch's own session.
What stays out of reach: without ``own_session``, a process that left both the tree and the
group (its own group or session, its parent dead) before any look found it, and a group member
forked by a process that died before a look saw either of them again.
"""

from __future__ import annotations

import os
import resource
import signal
import time
from typing import Callable, Dict, Iterable, List, Optional

import psutil

from ..collect import procfs
from ..types import ProcId


def same_process(proc: ProcId) -> bool:
    """True when ``proc.pid`` still names the process that started at ``proc.start_ticks``
    (one ``/proc/PID/stat`` read)."""
    st = procfs.proc_stat(proc.pid)
    return st is not None and st.start_ticks == proc.start_ticks


def still_running(proc: ProcId) -> bool:
    """:func:`same_process`, and not a zombie (a dead child its parent has not reaped yet)."""
    st = procfs.proc_stat(proc.pid)
    return st is not None and st.start_ticks == proc.start_ticks and st.state not in ("Z", "X", "x")


class _Target:
    """One process that may be signalled, held by a pidfd where the kernel has them
    (``pidfd_open(2)``, Linux >= 5.3, Python >= 3.9): a signal through it reaches that process or
    none, never another that reused its pid. Without pidfds, psutil's ``send_signal`` checks the
    pid's start time again right before the signal (a narrower window, not none). ``pgrp`` is its
    process group when it was held."""

    # pidfds held now, by every target not yet closed (:func:`_pidfd_budget`)
    held = 0

    def __init__(self, proc: ProcId, pidfd: Optional[int], handle: Optional[psutil.Process], pgrp: int = 0) -> None:
        self.proc = proc
        self.pidfd = pidfd
        if pidfd is not None:
            _Target.held += 1
        self.handle = handle
        self.pgrp = pgrp

    def send(self, sig: int) -> bool:
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, sig)
            elif self.handle is not None:
                self.handle.send_signal(sig)
            else:
                return False
            return True
        except (OSError, psutil.Error):
            return False

    def alive(self) -> bool:
        return still_running(self.proc)

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
            _Target.held -= 1


def _hold(pid: int, start_ticks: Optional[int] = None) -> Optional[_Target]:
    """A :class:`_Target` for ``pid`` when it is (still) the process that started at
    ``start_ticks`` (any start when ``None``: the caller checks the process it got), or
    ``None``. The pidfd is opened first, then the start read: a pid reused before the open
    shows another start and is let go."""
    if pid == os.getpid():
        return None
    pidfd = None
    handle = None
    try:
        if _Target.held >= _pidfd_budget():  # a job of thousands of processes: keep dlwatch's descriptors
            raise AttributeError
        pidfd = os.pidfd_open(pid)
    except AttributeError:
        try:
            handle = psutil.Process(pid)
        except psutil.Error:
            return None
    except OSError:
        return None
    st = procfs.proc_stat(pid)
    if st is None or (start_ticks is not None and st.start_ticks != start_ticks) or st.state in ("Z", "X", "x"):
        if pidfd is not None:
            os.close(pidfd)
        return None
    return _Target(ProcId(pid, st.start_ticks), pidfd, handle, st.pgrp)


# File descriptors left to the rest of dlwatch (its /proc reads, the report, the stderr pump's
# pipe) however many processes the job has: past that, targets are held by psutil handles.
_FD_RESERVE = 128


def _pidfd_budget() -> int:
    """How many pidfds may be held at once: the soft ``RLIMIT_NOFILE`` less :data:`_FD_RESERVE`
    and the descriptors open now (counted in ``/proc/self/fd``; getrlimit(2)). A job forking
    thousands of processes would otherwise exhaust dlwatch's descriptors (``EMFILE``): every
    later ``pidfd_open`` and ``/proc`` read fails, and its processes are never signalled."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0
    return _Target.held + max(0, soft - _FD_RESERVE - used)


def _verified(members: Iterable[ProcId]) -> List[_Target]:
    out = []
    for member in dict.fromkeys(members):
        target = _hold(member.pid, member.start_ticks)
        if target is not None:
            out.append(target)
    return out


def _boot_ticks() -> int:
    """Now, in clock ticks since boot: the clock of ``stat`` field 22 (``CLOCK_BOOTTIME``,
    Linux >= 5.3; proc(5))."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * procfs.CLK_TCK)


# Seconds between two looks for the job's late processes during the grace period (NOTE [ Late processes ]).
_SWEEP_S = 0.25
# The most rounds of "signal, look again" at one signal: a job forking faster is caught at the next sweep.
_ROUNDS = 8


class _Reach:
    """Where the job's processes outside its tree are found (NOTE [ Late processes ]).

    Attributes:
        pgrp, session: the job's own process group and its session; ``pgrp`` ``None``: none.
        cutoff: the latest moment (clock ticks since boot) at which ``pgrp`` is known to be the
            job's group: a group's number stays reserved while it has members (a pid is freed
            only when no process uses it as pid, group or session: kernel/pid.c), so a member
            started by then belongs to the job's group, not to a later one that reused the number.
        own_session: dlwatch's own session, when dlwatch leads it and started nothing else in
            it but the job (``dlwatch run`` started by ``dlwatch verify``, a service manager or
            ``setsid``): every other process of it descends from the job, whatever its group,
            and its number is dlwatch's own pid, reserved while dlwatch runs; ``None``: none.
    """

    def __init__(self, pgrp: Optional[int], session: int, cutoff: int, own_session: Optional[int]) -> None:
        self.pgrp = pgrp
        self.session = session
        self.cutoff = cutoff
        self.own_session = own_session

    @classmethod
    def of(cls, targets: List[_Target], own_group: Optional[int], own_session: Optional[int]) -> "_Reach":
        """The reach of a job whose processes ``targets`` were just verified: ``own_group`` while
        one of them is in it (never dlwatch's own group), ``own_session`` when it is the session
        dlwatch leads."""
        if own_session is not None and not own_session == os.getsid(0) == os.getpid():
            own_session = None
        reach = cls(None, 0, 0, own_session)
        if own_group is not None and own_group != os.getpgrp():
            reach.pgrp = own_group
            reach.witness(targets)
            if not reach.cutoff:
                reach.pgrp = None
        return reach

    def witness(self, targets: List[_Target], accepted: Iterable[_Target] = ()) -> None:
        """Move :attr:`cutoff` to now when the group is provably still the job's: one of
        ``accepted`` (just signalled through its pidfd, which reaches only a process not yet
        reaped: pidfd_send_signal(2)) was in it, or one of ``targets`` is in it still, its
        ``stat`` read after now (a zombie included: it keeps its group until reaped)."""
        if self.pgrp is None:
            return
        now = _boot_ticks()
        if any(t.pgrp == self.pgrp for t in accepted) or any(self._member(t) for t in targets):
            self.cutoff = max(self.cutoff, now)

    def _member(self, t: _Target) -> bool:
        st = procfs.proc_stat(t.proc.pid)
        if st is None or st.start_ticks != t.proc.start_ticks or st.pgrp != self.pgrp:
            return False
        if not self.session:
            self.session = st.session
        return st.session == self.session

    def holds(self, st: procfs.ProcStat) -> bool:
        """Whether the process of ``st`` is the job's by its group or session."""
        if self.own_session is not None and st.session == self.own_session:
            return True
        return (
            self.pgrp is not None
            and st.pgrp == self.pgrp
            and st.session == self.session
            and st.start_ticks <= self.cutoff
        )


def _descendants(targets: List[_Target], reach: _Reach) -> List[_Target]:
    """Processes to add to ``targets`` (NOTE [ Late processes ]): their children now (each held,
    then its parent checked to be one of ours), and the processes :meth:`_Reach.holds`. Each is
    held by pidfd before its identity is checked; none is signalled as a number."""
    known = {t.proc.pid: t for t in targets}
    found: List[_Target] = []
    files = procfs.children_files_supported()
    stats = _all_stats() if reach.pgrp is not None or reach.own_session is not None or not files else {}
    kids: Dict[int, List[int]] = {}
    for pid, st in stats.items():
        kids.setdefault(st.ppid, []).append(pid)
    queue = [t.proc.pid for t in targets]
    while queue:
        pid = queue.pop()
        for child in (procfs.children_of(pid) if files else kids.get(pid)) or ():
            if child in known:
                continue
            target = _hold(child)
            if target is None:
                continue
            now = procfs.proc_stat(child)
            # The child's pid, or its parent's (a process of ours that died, its pid then taken by
            # another program whose children these are), reused meanwhile: not the job's. The
            # parent read after the child's ppid was the same process then, and is still.
            parent = known.get(now.ppid) if now is not None else None
            if parent is None or not same_process(parent.proc):
                target.close()
                continue
            known[child] = target
            found.append(target)
            queue.append(child)
    for pid, st in stats.items():
        if pid in known or pid == os.getpid() or not reach.holds(st):
            continue
        target = _hold(pid, st.start_ticks)
        if target is not None:
            known[pid] = target
            found.append(target)
    return found


def own_session() -> Optional[int]:
    """dlwatch's own session id when it leads it and is its only process (call it before
    starting the job), else ``None``. Then every later process of that session descends from
    dlwatch (a session is joined only by forking from one of its processes: setsid(2)), and
    ending a job may sweep it (NOTE [ Late processes ]); a session that already holds another
    process (``sh -c 'logger & exec dlwatch run …'``, a container's entrypoint) is not swept:
    that process and its children are not the job's. Cost: one ``stat`` read per process."""
    me = os.getpid()
    if os.getsid(0) != me:
        return None
    others = [pid for pid, st in _all_stats().items() if st.session == me and pid != me]
    return None if others else me


def _all_stats() -> Dict[int, procfs.ProcStat]:
    """``/proc/PID/stat`` of every process on the host. Cost: one read per process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = procfs.proc_stat(int(entry))
            if st is not None:
                out[int(entry)] = st
    return out


def _signal(batch: List[_Target], sig: int, targets: List[_Target], reach: _Reach) -> int:
    """Send ``sig`` to ``batch`` (all of them also in ``targets``), then look again for the
    job's processes (the children forked before the signal arrived: a fork either fails on a
    pending fatal signal or its child is visible before the signal is handled, kernel/fork.c),
    add them to ``targets`` and signal them, for at most ``_ROUNDS`` rounds. How many processes
    were signalled."""
    count = 0
    for _ in range(_ROUNDS):
        accepted = [t for t in batch if t.send(sig)]
        count += len(accepted)
        reach.witness(targets, accepted)
        batch = _descendants(targets, reach)
        targets.extend(batch)
        if not batch:
            break
    return count


def terminate_tree(
    members: Iterable[ProcId],
    grace_s: float,
    own_group: Optional[int] = None,
    ended: Optional[Callable[[], bool]] = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    own_session: Optional[int] = None,
) -> str:
    """End the job's processes: SIGTERM to each of ``members`` that is still the same process,
    and to their descendants, and to the job's own process group's and session's (NOTE [ Late
    processes ]), then SIGSTOP and SIGKILL to whatever of them remains after ``grace_s`` seconds.

    Args:
        members: every process of the job's tree (root and main first); a pid that now
            names another process is never signalled.
        grace_s: seconds between SIGTERM and SIGKILL.
        own_group: the job's process group when ``dlwatch run`` created it for the job alone
            (its members are signalled too, each by pidfd, to reach processes that left the
            tree, while the group is provably the job's: :class:`_Reach`); ``None`` for
            ``attach``.
        ended: returns True once the job's root is gone (``dlwatch run`` reaps its own child,
            so its exit is not waited for here).
        own_session: dlwatch's own session when it leads it and started nothing else in it
            but the job (:class:`_Reach`); ``None`` otherwise (``attach``, and ``dlwatch run``
            from a shell, whose session holds the shell's other jobs).

    Returns a one-line account of what was done. Never raises.
    """
    targets = _verified(members)
    reach = _Reach.of(targets, own_group, own_session)
    targets += _descendants(targets, reach)
    if not targets:
        return "the job's processes are gone; nothing signalled"
    try:
        sent = _signal(list(targets), signal.SIGTERM, targets, reach)
        deadline = clock() + grace_s
        next_look = clock() + _SWEEP_S
        while clock() < deadline:
            quiet = not any(t.alive() for t in targets) and (ended is None or ended())
            if quiet or clock() >= next_look:
                reach.witness(targets)
                late = _descendants(targets, reach)
                if late:
                    targets.extend(late)
                    sent += _signal(late, signal.SIGTERM, targets, reach)
                    continue
                if quiet:
                    return f"SIGTERM sent to {sent} process(es) of the job; the job ended"
                next_look = clock() + _SWEEP_S
            sleep(0.05)
        reach.witness(targets)
        targets.extend(_descendants(targets, reach))
        # Frozen first: a stopped process forks no more and stays alive, so its children stay
        # its children and a look finds every one; a killed parent's late children would go to
        # init, out of the tree, before the look (a process forking in a loop left some).
        _signal([t for t in targets if t.alive()], signal.SIGSTOP, targets, reach)
        killed = _signal([t for t in targets if t.alive()], signal.SIGKILL, targets, reach)
    finally:
        for t in targets:
            t.close()
    return f"SIGTERM sent to {sent} process(es) of the job, then SIGKILL to {killed} still alive after {grace_s:g} s"

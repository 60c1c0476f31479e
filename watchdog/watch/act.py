"""The only module that sends signals: ending a hung job.

Only the job's own processes are signalled: the tree found under the job's root (never the
process group of an attached job, which may hold the shell or launcher that started it). Each
process is identified by its :class:`~watchdog.types.ProcId` (pid and start time in clock
ticks, compared exactly), then held by a pidfd (``pidfd_open(2)``) opened before its identity
is read, and signalled through it (``pidfd_send_signal(2)``): a pid reused at any point is
never signalled. Without pidfds, psutil's ``Process.send_signal`` checks the start time again
before each signal (``_raise_if_pid_reused``). The job's own process group (``dlwatch run``)
is reached member by member, never by number with ``killpg``: once a group is empty its
number may become another program's group. SIGTERM first, SIGKILL for whatever remains after
the grace period.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable, Iterable, List, Optional, Tuple

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
    pid's start time again right before the signal (a narrower window, not none)."""

    def __init__(self, proc: ProcId, pidfd: Optional[int], handle: Optional[psutil.Process]) -> None:
        self.proc = proc
        self.pidfd = pidfd
        self.handle = handle

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
    return _Target(ProcId(pid, st.start_ticks), pidfd, handle)


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


def _own_group(targets: List[_Target], own_group: Optional[int]) -> Optional[Tuple[int, int, int]]:
    """``(pgrp, session, cutoff)`` of the job's own process group while it is provably the
    job's now (one of ``targets``, just verified, is in it), or ``None``. A group's number
    stays reserved while it has members (a pid is freed only when no process uses it as pid,
    group or session: kernel/pid.c), so any process in it that started before ``cutoff`` (now,
    in clock ticks since boot) belongs to the job's group, not to a later one that reused the
    number."""
    if own_group is None or own_group == os.getpgrp():
        return None
    for t in targets:
        st = procfs.proc_stat(t.proc.pid)
        if st is not None and st.pgrp == own_group and st.start_ticks == t.proc.start_ticks:
            return own_group, st.session, _boot_ticks()
    return None


def _descendants(targets: List[_Target], group: Optional[Tuple[int, int, int]]) -> List[_Target]:
    """Processes to add to ``targets``: their children now (forked during the grace period;
    each held, then its parent checked to be one of ours), and with ``group`` (:func:`_own_group`)
    the processes of the job's own process group that left the tree, started before its
    cutoff. The group is never signalled as a number (``killpg``): once its last member is gone
    its number may name an unrelated program's new group."""
    known = {t.proc.pid: t for t in targets}
    found: List[_Target] = []
    queue = [t.proc.pid for t in targets]
    while queue:
        pid = queue.pop()
        for child in procfs.children_of(pid) or ():
            if child in known:
                continue
            target = _hold(child)
            if target is None:
                continue
            st = procfs.proc_stat(child)
            if st is None or st.ppid not in known:  # the pid was reused meanwhile, outside the job
                target.close()
                continue
            known[child] = target
            found.append(target)
            queue.append(child)
    if group is not None:
        pgrp, session, cutoff = group
        for pid, st in procfs.group_members(pgrp, session):
            if pid in known or pid == os.getpid() or st.start_ticks > cutoff:
                continue
            target = _hold(pid, st.start_ticks)
            if target is not None:
                known[pid] = target
                found.append(target)
    return found


def _send(targets: Iterable[_Target], sig: int) -> int:
    """Send ``sig`` to each target; how many were signalled."""
    return sum(t.send(sig) for t in targets)


def terminate_tree(
    members: Iterable[ProcId],
    grace_s: float,
    own_group: Optional[int] = None,
    ended: Optional[Callable[[], bool]] = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """End the job's processes: SIGTERM to each of ``members`` that is still the same process,
    then SIGKILL to whatever of them (and of their descendants, and of the job's own process
    group) remains after ``grace_s`` seconds.

    Args:
        members: every process of the job's tree (root and main first); a pid that now
            names another process is never signalled.
        grace_s: seconds between SIGTERM and SIGKILL.
        own_group: the job's process group when ``dlwatch run`` created it for the job alone
            (its members are signalled too, each by pidfd, to reach processes that left the
            tree, while the group is provably the job's: :func:`_own_group`); ``None`` for
            ``attach``.
        ended: returns True once the job's root is gone (``dlwatch run`` reaps its own child,
            so its exit is not waited for here).

    Returns a one-line account of what was done. Never raises.
    """
    targets = _verified(members)
    if not targets:
        return "the job's processes are gone; nothing signalled"
    group = _own_group(targets, own_group)
    extra = _descendants(targets, group) if group is not None else []
    try:
        sent = _send(targets + extra, signal.SIGTERM)
        deadline = clock() + grace_s
        while clock() < deadline:
            if not any(t.alive() for t in targets + extra) and (ended is None or ended()):
                return f"SIGTERM sent to {sent} process(es) of the job; the job ended"
            sleep(0.05)
        extra += _descendants(targets + extra, group)
        left = [t for t in targets + extra if t.alive()]
        killed = _send(left, signal.SIGKILL)
    finally:
        for t in targets + extra:
            t.close()
    return f"SIGTERM sent to {sent} process(es) of the job, then SIGKILL to {killed} still alive after {grace_s:g} s"

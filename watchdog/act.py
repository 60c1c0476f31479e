"""The only module that sends signals: ending a hung job.

Only the job's own processes are signalled: the tree found under the job's root (never the
process group of an attached job, which may hold the shell or launcher that started it). Each
process is identified by its :class:`~watchdog.types.ProcId` (pid and start time in clock
ticks, compared exactly) and checked before every signal, as psutil's ``Process.send_signal``
does after ``_raise_if_pid_reused``; processes that vanish meanwhile are skipped. SIGTERM
first, SIGKILL for whatever remains after the grace period.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable, Iterable, List, Optional

import psutil

from .collect import procfs
from .types import ProcId


def same_process(proc: ProcId) -> bool:
    """True when ``proc.pid`` still names the process that started at ``proc.start_ticks``
    (one ``/proc/PID/stat`` read)."""
    st = procfs.proc_stat(proc.pid)
    return st is not None and st.start_ticks == proc.start_ticks


def still_running(proc: ProcId) -> bool:
    """:func:`same_process`, and not a zombie (a dead child its parent has not reaped yet)."""
    st = procfs.proc_stat(proc.pid)
    return st is not None and st.start_ticks == proc.start_ticks and st.state not in ("Z", "X", "x")


def _verified(members: Iterable[ProcId]) -> List[psutil.Process]:
    out = []
    for member in dict.fromkeys(members):
        if member.pid == os.getpid():
            continue
        try:
            proc = psutil.Process(member.pid)  # psutil keeps this process's start from here on
        except psutil.Error:
            continue
        if same_process(member):  # and it is still ours: a pid reused before psutil looked is not
            out.append(proc)
    return out


def _with_descendants(procs: List[psutil.Process]) -> List[psutil.Process]:
    """``procs`` plus their descendants now (children forked during the grace period)."""
    seen = {p.pid: p for p in procs}
    for p in list(procs):
        try:
            for c in p.children(recursive=True):
                seen.setdefault(c.pid, c)
        except psutil.Error:
            continue
    seen.pop(os.getpid(), None)
    return list(seen.values())


def _send(procs: Iterable[psutil.Process], sig: int, own_group: Optional[int]) -> int:
    """Send ``sig`` to each process (psutil refuses a pid that now names another process) and
    to ``own_group`` when given and not ours; how many processes were signalled."""
    sent = 0
    for p in procs:
        try:
            p.send_signal(sig)
            sent += 1
        except psutil.Error:
            continue
    if own_group is not None and own_group != os.getpgrp():
        try:
            os.killpg(own_group, sig)
        except OSError:
            pass
    return sent


def _alive(procs: Iterable[psutil.Process]) -> List[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def terminate_tree(
    members: Iterable[ProcId],
    grace_s: float,
    own_group: Optional[int] = None,
    ended: Optional[Callable[[], bool]] = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """End the job's processes: SIGTERM to each of ``members`` that is still the same process,
    then SIGKILL to whatever of them (and of their descendants) remains after ``grace_s``
    seconds.

    Args:
        members: every process of the job's tree (root and main first); a pid that now
            names another process is never signalled.
        grace_s: seconds between SIGTERM and SIGKILL.
        own_group: the job's process group when ``dlwatch run`` created it for the job alone
            (signalled too, to reach processes that left the tree); ``None`` for ``attach``.
        ended: returns True once the job's root is gone (``dlwatch run`` reaps its own child,
            so its exit is not waited for here).

    Returns a one-line account of what was done. Never raises.
    """
    procs = _verified(members)
    if not procs:
        return "the job's processes are gone; nothing signalled"
    sent = _send(procs, signal.SIGTERM, own_group)
    deadline = clock() + grace_s
    while clock() < deadline:
        if not _alive(procs) and (ended is None or ended()):
            return f"SIGTERM sent to {sent} process(es) of the job; the job ended"
        sleep(0.05)
    left = _alive(_with_descendants(procs))
    killed = _send(left, signal.SIGKILL, own_group)
    return f"SIGTERM sent to {sent} process(es) of the job, then SIGKILL to {killed} still alive after {grace_s:g} s"

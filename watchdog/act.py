"""The only module that sends signals: ending a hung job.

Only the job's own processes are signalled: the tree found under the job's root (never the
process group of an attached job, which may hold the shell or launcher that started it). Each
process is identified by ``(pid, create_time)`` and checked before every signal, as psutil's
``Process.send_signal`` does after ``_raise_if_pid_reused``; processes that vanish meanwhile
are skipped. SIGTERM first, SIGKILL for whatever remains after the grace period.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable, Iterable, List, Optional, Tuple

import psutil

Identity = Tuple[int, float]  # (pid, create_time)


def same_process(pid: int, create_time: float) -> bool:
    """True when ``pid`` still names the process created at ``create_time``."""
    try:
        return abs(psutil.Process(pid).create_time() - create_time) < 0.01
    except psutil.Error:
        return False


def still_running(pid: int, create_time: float) -> bool:
    """True when ``pid`` still names the process created at ``create_time`` and it is not a
    zombie (a dead child its parent has not reaped yet)."""
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _verified(members: Iterable[Identity]) -> List[psutil.Process]:
    out = []
    for pid, create_time in dict.fromkeys(members):
        if pid == os.getpid():
            continue
        try:
            proc = psutil.Process(pid)
            if abs(proc.create_time() - create_time) < 0.01:
                out.append(proc)
        except psutil.Error:
            continue
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
    members: Iterable[Identity],
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
        members: ``(pid, create_time)`` of every process of the job's tree (root and main
            first); a pid that now names another process is never signalled.
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

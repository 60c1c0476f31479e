"""The only module that sends signals: ending a hung job.

A process is identified by ``(pid, create_time)`` and checked before each signal, as psutil's
``_raise_if_pid_reused`` does, so a reused PID is never signalled.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable, Iterable, Optional

import psutil


def same_process(pid: int, create_time: float) -> bool:
    """True when ``pid`` still names the process created at ``create_time``."""
    try:
        return abs(psutil.Process(pid).create_time() - create_time) < 0.01
    except psutil.Error:
        return False


def terminate_group(
    pgid: int,
    leader_pid: int,
    leader_create_time: float,
    grace_s: float,
    tree_pids: Iterable[int] = (),
    ended: Optional[Callable[[], bool]] = None,
) -> str:
    """SIGTERM the process group ``pgid``, then SIGKILL it after ``grace_s`` seconds if any
    member remains. When ``pgid`` is this process's own group (an attached job started from
    the same shell), the job's processes (``tree_pids``) are signalled one by one instead.

    Returns a short account of what was done. ``ended`` (optional) tells when the job is
    gone, for a job that is this process's child and must be reaped by the caller.
    """
    if not same_process(leader_pid, leader_create_time):
        return f"pid {leader_pid} is no longer the job; nothing signalled"
    own_group = pgid == os.getpgrp()
    tree = [p for p in tree_pids if p != os.getpid()]

    def send(sig: int) -> None:
        if own_group:
            for pid in tree:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        else:
            try:
                os.killpg(pgid, sig)
            except OSError:
                pass

    def alive() -> bool:
        if ended is not None and not ended():
            return True
        if own_group:
            return any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in tree)
        try:
            os.killpg(pgid, 0)
            return True
        except OSError:
            return False

    send(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not alive():
            return f"SIGTERM sent to process group {pgid}; the job ended"
        time.sleep(0.05)
    send(signal.SIGKILL)
    return f"SIGTERM sent to process group {pgid}, then SIGKILL after {grace_s:g} s"

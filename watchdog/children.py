"""Ending a child dlwatch started (a verify run, a probe's job) with everything it started:
one way, for every caller. A leaf: it imports nothing of the watchdog."""

from __future__ import annotations

import os
import signal
import subprocess


def end_tree(proc: subprocess.Popen, grace_s: float = 0.0, reap_s: float = 5.0) -> None:
    """End ``proc`` (started with ``start_new_session``) and every process that descended from
    it. With ``grace_s`` > 0, SIGTERM to ``proc`` first (``dlwatch run`` forwards it to its job
    and waits for it), then ``grace_s`` + 5 seconds for it to end. Then SIGKILL to each
    descendant found before the SIGTERM that is still that process (psutil compares its start
    time before signalling: a reused pid is never hit), to their process groups (never ours),
    and to ``proc``'s own group; ``proc`` is reaped within ``reap_s`` seconds. Never raises."""
    import psutil

    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    if grace_s > 0:
        try:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(grace_s + 5.0)
        except (OSError, subprocess.TimeoutExpired):
            pass
    groups = set()
    for p in tree:
        try:
            if p.is_running():
                groups.add(os.getpgid(p.pid))
                p.kill()
        except (psutil.Error, OSError):
            pass
    for group in groups - {os.getpgrp()}:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    if proc.poll() is None:
        try:
            if proc.pid != os.getpgrp():
                os.killpg(proc.pid, signal.SIGKILL)  # its own group, when it leads one
        except OSError:
            pass
        try:
            proc.kill()  # and itself, when it does not
        except OSError:
            pass
    try:
        proc.communicate(timeout=reap_s)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        pass

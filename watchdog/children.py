"""Ending a child dlwatch started (a verify run, a probe's job, a py-spy dump, an alert command)
with everything it started: one way, for every caller. A leaf: it imports nothing of the watchdog.

A child started with ``start_new_session`` (or ``process_group=0``) leads a process group whose
id is its pid. That id is the child's for as long as the child is not reaped: the kernel keeps a
zombie's pid, so no other process can have it or lead a group of that id (``setsid(2)``,
``setpgid(2)``). :func:`signal_group` therefore signals the group by number only while the
``Popen`` has no ``returncode``, and never dlwatch's own group; a group dlwatch did not create
is never signalled here.
"""

from __future__ import annotations

import os
import signal
import subprocess


def signal_group(proc: subprocess.Popen, sig: int) -> bool:
    """Send ``sig`` to the process group ``proc`` leads (it was started in a session or group of
    its own), only while ``proc`` is not reaped (``returncode`` is ``None``: its pid, the group's
    id, is still its own; see the module's note) and the group is not dlwatch's own. Does not
    reap ``proc`` (a zombie still holds the id). ``True`` when the signal was sent; never raises."""
    if proc.returncode is not None or proc.pid == os.getpgrp():
        return False
    try:
        os.killpg(proc.pid, sig)
        return True
    except OSError:  # ESRCH: the group is empty; EPERM: no member of it may be signalled by us
        return False


def kill_group(proc: subprocess.Popen, reap_s: float = 5.0) -> None:
    """SIGKILL the process group ``proc`` leads (:func:`signal_group`), then reap ``proc``
    within ``reap_s`` seconds, reading what is left in its pipes (``communicate``); when that
    does not end in time, its pipes are closed and it is waited for ``reap_s`` seconds more.
    Never raises."""
    signal_group(proc, signal.SIGKILL)
    try:
        proc.communicate(timeout=reap_s)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        for stream in (proc.stdout, proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=reap_s)
        except subprocess.TimeoutExpired:
            pass


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
        signal_group(proc, signal.SIGKILL)  # its own group, when it leads one
        try:
            proc.kill()  # and itself, when it does not
        except OSError:
            pass
    try:
        proc.communicate(timeout=reap_s)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        pass

"""What a job's start had besides its command line, for ``dlwatch verify`` to compare with its
own: where its standard input came from, its mount namespace and its cgroup.

Read from ``/proc/PID/fd/0``, ``/proc/PID/ns/mnt`` and ``/proc/PID/cgroup`` (proc(5),
namespaces(7), cgroups(7)); each is ``""`` when it cannot be read (no permission, the process
ended), never an error.
"""

from __future__ import annotations

import os
import stat
from typing import Tuple, Union

# What a standard input was: a terminal, a file, a pipe or FIFO, a socket, /dev/null, closed.
STDIN_KINDS = ("terminal", "file", "pipe", "socket", "null", "closed")


def stdin_kind(pid: Union[int, str] = "self") -> str:
    """What fd 0 of process ``pid`` is (one of ``STDIN_KINDS``), ``""`` when unknown."""
    path = f"/proc/{pid}/fd/0"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "closed" if os.path.isdir(f"/proc/{pid}/fd") else ""
    except OSError:
        return ""
    if stat.S_ISCHR(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            return ""
        return "null" if target == "/dev/null" else "terminal"
    if stat.S_ISFIFO(st.st_mode):
        return "pipe"
    if stat.S_ISSOCK(st.st_mode):
        return "socket"
    return "file" if stat.S_ISREG(st.st_mode) else ""


def mount_ns(pid: Union[int, str] = "self") -> str:
    """The mount namespace of process ``pid`` (``mnt:[4026531841]``), ``""`` when unknown."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return ""


def cgroup(pid: Union[int, str] = "self") -> str:
    """The cgroup of process ``pid``: the v2 path (``0::/PATH``), else the memory controller's
    v1 path; ``""`` when unknown."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            lines = f.read(65536).splitlines()
    except OSError:
        return ""
    fields = [line.split(":", 2) for line in lines if line.count(":") >= 2]
    unified = next((path for hid, _, path in fields if hid == "0"), None)
    if unified is not None:
        return unified
    return next((path for _, ctrl, path in fields if "memory" in ctrl.split(",")), "")


def context(pid: Union[int, str] = "self") -> Tuple[str, str, str]:
    """``(stdin_kind, mount_ns, cgroup)`` of process ``pid``."""
    return stdin_kind(pid), mount_ns(pid), cgroup(pid)

"""cgroup v2 facts about the job: its OOM-kill count and its CPU quota.

Files: ``/proc/PID/cgroup`` (``0::/path``), ``memory.events`` (``oom_kill N``) and ``cpu.max``
(``QUOTA PERIOD`` or ``max PERIOD``), per the kernel's ``Documentation/admin-guide/cgroup-v2.rst``.
Every function returns ``None`` when cgroup v2 is absent or unreadable; none raises.
"""

from __future__ import annotations

import os
from typing import Optional

CGROUP_ROOT = "/sys/fs/cgroup"


def cgroup_dir(pid: int) -> Optional[str]:
    """The cgroup v2 folder of ``pid`` under ``/sys/fs/cgroup``, or ``None``."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            for line in f:
                if line.startswith("0::"):
                    path = os.path.join(CGROUP_ROOT, line[3:].strip().lstrip("/"))
                    return path if os.path.isdir(path) else None
    except OSError:
        return None
    return None


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def oom_kills(pid: int) -> Optional[int]:
    """``oom_kill`` of the job's cgroup ``memory.events`` (a count since the cgroup was made)."""
    d = cgroup_dir(pid)
    text = _read(os.path.join(d, "memory.events")) if d else None
    if text is None:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return None


def cpu_quota(pid: int) -> Optional[float]:
    """CPUs allowed by the tightest ``cpu.max`` from the job's cgroup up to the root
    (quota / period), or ``None`` when unlimited or unreadable."""
    d = cgroup_dir(pid)
    best = None
    while d and d.startswith(CGROUP_ROOT) and len(d) > len(CGROUP_ROOT):
        text = _read(os.path.join(d, "cpu.max"))
        if text:
            quota, _, period = text.strip().partition(" ")
            if quota != "max" and period:
                cpus = int(quota) / int(period)
                best = cpus if best is None else min(best, cpus)
        d = os.path.dirname(d)
    return best

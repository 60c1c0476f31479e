"""cgroup facts about the job: its memory limit, usage and OOM-kill count, and its CPU quota.

Files, per the kernel's ``Documentation/admin-guide/cgroup-v2.rst`` and
``Documentation/admin-guide/cgroup-v1/memory.rst``: ``/proc/PID/cgroup`` (``0::/path`` for v2,
``N:memory:/path`` for the v1 memory controller); v2 ``memory.max``, ``memory.current``,
``memory.events`` (``oom_kill N``) and ``cpu.max`` (``QUOTA PERIOD`` or ``max PERIOD``); v1
``memory.limit_in_bytes``, ``memory.usage_in_bytes``, ``memory.stat`` and ``memory.oom_control`` (``oom_kill N``,
Linux 4.13 and later). Every function returns ``None`` when the file is absent or unreadable;
none raises.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

CGROUP_ROOT = "/sys/fs/cgroup"


# v1 reports "no limit" as the largest page-aligned signed 64-bit value (PAGE_COUNTER_MAX pages).
_V1_UNLIMITED = 1 << 62


@dataclass(frozen=True)
class MemoryCgroup:
    """The job's memory cgroup now: ``version`` 1 or 2, its folder, ``limit_bytes`` (``None``:
    no limit), ``usage_bytes`` (the working set: usage less inactive file pages, which the
    kernel reclaims before it kills), ``oom_kills`` (the kernel's count since the cgroup was
    made; ``None`` when not kept) and ``anon_bytes``, its anonymous memory (``memory.stat``'s
    ``anon`` in v2, ``total_rss`` in v1: anonymous and swap cache), where every page a forked
    worker stops sharing with main lands."""

    version: int
    path: str
    limit_bytes: Optional[int]
    usage_bytes: Optional[int]
    oom_kills: Optional[int]
    anon_bytes: Optional[int] = None


def _lines(pid: int) -> List[str]:
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            return f.read().splitlines()
    except OSError:
        return []


def _int(text: Optional[str]) -> Optional[int]:
    text = (text or "").strip()
    return int(text) if text.isdigit() else None


def _count(text: Optional[str], key: str) -> Optional[int]:
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def memory_cgroup(pid: int) -> Optional[MemoryCgroup]:
    """``pid``'s memory cgroup (:class:`MemoryCgroup`): the v1 memory controller's when one is
    mounted (a hybrid host counts memory there), else v2's; ``None`` when neither is readable."""
    folder = memory_cgroup_folder(pid)
    return read_memory(*folder) if folder is not None else None


def memory_cgroup_folder(pid: int) -> Optional[Tuple[int, str]]:
    """``(version, folder)`` of ``pid``'s memory cgroup (see :func:`memory_cgroup`), or
    ``None`` when neither version's is readable."""
    for line in _lines(pid):
        parts = line.split(":", 2)
        if len(parts) == 3 and "memory" in parts[1].split(","):
            d = os.path.join(CGROUP_ROOT, "memory", parts[2].lstrip("/"))
            if os.path.isdir(d):
                return 1, d
    v2 = cgroup_dir(pid)
    if v2 is None or not os.path.exists(os.path.join(v2, "memory.current")):
        return None
    return 2, v2


def read_memory(version: int, path: str) -> Optional[MemoryCgroup]:
    """The memory cgroup at ``path`` (cgroup ``version`` 1 or 2) now, or ``None`` when it is
    gone: read by folder, so that the count of a job that ended can still be read."""
    if not os.path.isdir(path):
        return None
    stat = _read(os.path.join(path, "memory.stat"))
    if version == 1:
        limit = _int(_read(os.path.join(path, "memory.limit_in_bytes")))
        return MemoryCgroup(
            1,
            path,
            None if limit is None or limit >= _V1_UNLIMITED else limit,
            _working_set(_int(_read(os.path.join(path, "memory.usage_in_bytes"))), stat, "total_inactive_file"),
            _count(_read(os.path.join(path, "memory.oom_control")), "oom_kill"),
            _count(stat, "total_rss"),
        )
    return MemoryCgroup(
        2,
        path,
        _int(_read(os.path.join(path, "memory.max"))),  # "max": no limit
        _working_set(_int(_read(os.path.join(path, "memory.current"))), stat, "inactive_file"),
        _count(_read(os.path.join(path, "memory.events")), "oom_kill"),
        _count(stat, "anon"),
    )


def _working_set(usage: Optional[int], stat: Optional[str], inactive: str) -> Optional[int]:
    """Usage less the inactive file pages the kernel reclaims first (the working set, as
    Kubernetes' kubelet measures it): a job that reads many files fills its cgroup's usage with
    page cache it can give back."""
    if usage is None:
        return None
    return max(0, usage - (_count(stat, inactive) or 0))


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

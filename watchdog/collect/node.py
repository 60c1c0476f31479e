"""Readings of the node that the samplers of one job's ranks share: ``/dev/shm`` as the job
sees it, the host's memory (``/proc/meminfo``), the job's memory cgroup and the host's last
allocated pid.

NOTE [ Node reads ]
A node of 8 ranks has 8 samplers, ticking one after the other once a second (NOTE [ One loop
for the node ] in watchdog/watch/node_loop.py). What they read of the node is the same for all of them:
the ranks of one job see one ``/dev/shm`` (a launcher's children share its mount namespace) and
sit in one memory cgroup (a container's, a Slurm step's, a user's slice). Each reading is kept
for ``max_age_s`` (half an interval for the ranks), so 8 ranks read the node once a tick
instead of 8 times. A reading is at most ``max_age_s`` older than its tick: what decides on it
(memory short, the cgroup's usage) moves over seconds. A sampler alone (a job without ranks)
has its own, with ``max_age_s`` 0: it reads at each call. Safe from several threads (a rank's
examination samples in a thread of its own).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Dict, Optional, Tuple

import psutil

from . import cgroup, procfs

# Seconds a process's memory cgroup folder is kept before /proc/PID/cgroup is read again (a
# wrapper may move the job into another cgroup after it started; rarely later).
CGROUP_PATH_EVERY_S = 60.0


def shm_usage(pid: Optional[int]) -> Optional[Tuple[int, int]]:
    """``(size, used)`` of ``/dev/shm`` as ``pid`` sees it (``/proc/PID/root/dev/shm``, so a
    container's own shm mount is measured), else dlwatch's own, in bytes (``statvfs``); ``None``
    when neither can be read."""
    return (_statvfs_used(f"/proc/{pid}/root/dev/shm") if pid else None) or _statvfs_used("/dev/shm")


def _statvfs_used(path: str) -> Optional[Tuple[int, int]]:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize, (st.f_blocks - st.f_bfree) * st.f_frsize


def meminfo_fields(wanted: Tuple[bytes, ...] = (b"MemTotal", b"MemAvailable")) -> Dict[bytes, int]:
    """The fields ``wanted`` of ``/proc/meminfo`` (given in kB) in bytes, by name; the lines are
    parsed until every one is found (``MemTotal`` and ``MemAvailable`` are the first and the
    third, proc(5)). Those absent or unreadable are left out."""
    fields: Dict[bytes, int] = {}
    data = procfs.read_bytes("/proc/meminfo") or b""
    start = 0
    while len(fields) < len(wanted) and start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        key, _, value = data[start:end].partition(b":")
        start = end + 1
        if key in wanted:
            parts = value.split()
            if parts and parts[0].isdigit():
                fields[key] = int(parts[0]) * 1024
    return fields


def meminfo(fields: Optional[Dict[bytes, int]] = None) -> Tuple[int, int]:
    """``(MemTotal, MemAvailable)`` in bytes, of :func:`meminfo_fields` (or of ``fields``, read
    before), as psutil's ``virtual_memory()`` gives them (``total``, ``available``); psutil's
    own estimate on a kernel older than 3.14, which has no ``MemAvailable``."""
    fields = meminfo_fields() if fields is None else fields
    if b"MemTotal" in fields and b"MemAvailable" in fields:
        return fields[b"MemTotal"], fields[b"MemAvailable"]
    vm = psutil.virtual_memory()
    return vm.total, vm.available


def own_anon_bytes() -> int:
    """This process's anonymous memory (``RssAnon`` of ``/proc/self/status``, proc(5)) in
    bytes; 0 when unreadable."""
    value = procfs.status_field(procfs.read_bytes("/proc/self/status") or b"", "RssAnon")
    parts = value.split() if value else []
    return int(parts[0]) * 1024 if parts and parts[0].isdigit() else 0


class NodeReads:
    """The node's readings, each kept for ``max_age_s`` seconds (NOTE [ Node reads ]).

    Args:
        max_age_s: how old a reading may be when it is given again (0: read at every call).
        clock: ``time.monotonic``, or a test's clock.

    Raises:
        ValueError: ``max_age_s`` below 0.
    """

    def __init__(self, max_age_s: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        if max_age_s < 0:
            raise ValueError(f"max_age_s must be 0 or more (got {max_age_s})")
        self.max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._kept: Dict[object, Tuple[float, object]] = {}  # key -> (read at, value)
        self._cgroup_of: Dict[int, Tuple[float, Optional[Tuple[int, str]]]] = {}  # pid -> (read at, folder)

    def _get(self, key: object, read: Callable[[], object], max_age_s: Optional[float] = None) -> object:
        """The value kept under ``key`` when it is at most ``max_age_s`` (default: this
        reader's) old, else ``read()``'s, kept."""
        age = self.max_age_s if max_age_s is None else max_age_s
        now = self._clock()
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None and now - kept[0] <= age:
                return kept[1]
        value = read()  # outside the lock: a slow read never holds up another rank's kept value
        with self._lock:
            self._kept[key] = (now, value)
        return value

    def shm(self, pid: Optional[int]) -> Optional[Tuple[int, int]]:
        """:func:`shm_usage` of ``pid``'s ``/dev/shm``: one reading of the job's for every pid
        asking (the ranks of a job share their launcher's mount namespace; a rank in one of its
        own would be measured as the first rank asking); dlwatch's own, when the job's cannot
        be read, is not kept."""
        got = self._get("shm", lambda: _statvfs_used(f"/proc/{pid}/root/dev/shm")) if pid else None
        return got or shm_usage(None)  # type: ignore[return-value]

    def meminfo(self) -> Tuple[int, int]:
        """:func:`meminfo`: ``(MemTotal, MemAvailable)`` in bytes."""
        return meminfo(self._get("meminfo", meminfo_fields))  # type: ignore[arg-type]

    def anon_pages(self) -> Optional[int]:
        """The host's anonymous memory (``/proc/meminfo``'s ``AnonPages``) in bytes, or ``None``
        when not given."""
        return self._get("anon", lambda: meminfo_fields((b"AnonPages",))).get(b"AnonPages")  # type: ignore[attr-defined]

    def last_pid(self) -> Optional[int]:
        """:func:`procfs.last_pid`, read at most ``max_age_s`` ago: a walk that compares it
        with the value of its last walk may see a fork made within ``max_age_s`` before it only
        at its next walk (the first that reads a newer value); none is missed for longer."""
        return self._get("last_pid", procfs.last_pid)  # type: ignore[return-value]

    def memory_cgroup_folder(self, pid: int) -> Optional[Tuple[int, str]]:
        """:func:`cgroup.memory_cgroup_folder` of ``pid``, looked up (``/proc/PID/cgroup``) at
        most every ``CGROUP_PATH_EVERY_S``."""
        now = self._clock()
        with self._lock:
            known = self._cgroup_of.get(pid)
        if known is None or now - known[0] > CGROUP_PATH_EVERY_S:
            found = cgroup.memory_cgroup_folder(pid)
            with self._lock:
                if len(self._cgroup_of) > 4096:
                    self._cgroup_of.clear()  # pids of processes long gone
                self._cgroup_of[pid] = known = (now, found)
        return known[1]

    def memory_cgroup(self, pid: int) -> Optional[cgroup.MemoryCgroup]:
        """``pid``'s memory cgroup now (:func:`cgroup.memory_cgroup`): its folder is looked up
        at most every ``CGROUP_PATH_EVERY_S`` (:meth:`memory_cgroup_folder`), and its figures
        are one reading for every pid in that folder."""
        folder = self.memory_cgroup_folder(pid)
        if folder is None:
            return None
        return self._get(("memcg",) + folder, lambda: cgroup.read_memory(*folder))  # type: ignore[return-value]

    def own_anon(self) -> int:
        """dlwatch's own anonymous memory (``RssAnon`` of ``/proc/self/status``) in bytes; 0
        when unreadable."""
        return self._get("own_anon", own_anon_bytes)  # type: ignore[return-value]

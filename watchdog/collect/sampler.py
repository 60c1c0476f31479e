"""Take one :class:`~watchdog.types.Sample` of the job: every process's cheap metrics on each
call, per-thread progress counters for main and workers, USS/PSS at a slower cadence.

Costs measured on the development machine (psutil 7.2, torch 2.13, Linux 6.18): psutil's cheap reads
10–40 µs each under ``oneshot()``; ``memory_full_info()`` (USS/PSS, ``smaps_rollup``)
4–5 ms on a torch process, hence ``full_info_interval_s``; ``children(recursive=True)`` ~1 ms.
"""

from __future__ import annotations

import os
import resource
import time
from typing import Dict, List, Optional, Tuple

import psutil

from ..types import (
    ROLE_MAIN,
    ROLE_STARTING,
    ROLE_WORKER,
    HostSample,
    ProcessSample,
    Sample,
)
from . import cgroup, discovery, procfs

_STATUS_LETTER = {
    psutil.STATUS_RUNNING: "R",
    psutil.STATUS_SLEEPING: "S",
    psutil.STATUS_DISK_SLEEP: "D",
    psutil.STATUS_STOPPED: "T",
    psutil.STATUS_TRACING_STOP: "t",
    psutil.STATUS_ZOMBIE: "Z",
    psutil.STATUS_DEAD: "X",
    psutil.STATUS_IDLE: "I",
}


def host_sample(main_pid: Optional[int]) -> HostSample:
    """``/dev/shm`` as the job sees it (``/proc/PID/root/dev/shm``, so a container's own shm
    mount is measured) and available memory (``MemAvailable``), in bytes."""
    shm_total = shm_used = None
    for path in ([f"/proc/{main_pid}/root/dev/shm"] if main_pid else []) + ["/dev/shm"]:
        try:
            st = os.statvfs(path)
        except OSError:
            continue
        shm_total = st.f_blocks * st.f_frsize
        shm_used = (st.f_blocks - st.f_bfree) * st.f_frsize
        break
    vm = psutil.virtual_memory()
    return HostSample(
        shm_total_bytes=shm_total,
        shm_used_bytes=shm_used,
        mem_available_bytes=vm.available,
        max_map_count=procfs.max_map_count(),
        mem_total_bytes=vm.total,
    )


class Sampler:
    """Samples the process tree under ``root_pid``.

    Args:
        root_pid: the job's root process (``dlwatch run``'s child, or ``attach``'s PID).
        full_info_interval_s: seconds between USS/PSS reads of one process.
    """

    def __init__(self, root_pid: int, full_info_interval_s: float) -> None:
        self.root_pid = root_pid
        self.full_info_interval_s = full_info_interval_s
        self._root: Optional[psutil.Process] = None
        self._main: Optional[psutil.Process] = None
        self._procs: Dict[Tuple[int, float], psutil.Process] = {}
        self._full: Dict[Tuple[int, float], Tuple[float, Optional[int], Optional[int], Optional[int]]] = {}
        self._classifier = discovery.Classifier()
        self._quota_value: Optional[float] = None
        # pid -> role, set from outside (watchdog.ranks: the launcher and its ranks).
        self.role_overrides: Dict[int, str] = {}
        self._quota_read_at = float("-inf")

    def _find_main(self) -> Optional[psutil.Process]:
        if self._main is not None and self._main.is_running():
            return self._main
        try:
            if self._root is None:
                self._root = psutil.Process(self.root_pid)
            self._main = discovery.find_main(self._root)
        except psutil.Error:
            self._main = None
        return self._main

    def root_identity(self) -> List[Tuple[int, float]]:
        """``[(pid, create_time)]`` of the job's root process (a shell or launcher above main),
        or empty when it is gone or was never read."""
        try:
            root = self._root or psutil.Process(self.root_pid)
            return [(root.pid, root.create_time())]
        except psutil.Error:
            return []

    def _cached(self, proc: psutil.Process) -> psutil.Process:
        # Reuse Process objects so psutil's own caches (create_time) stay valid.
        try:
            key = (proc.pid, proc.create_time())
        except psutil.Error:
            return proc
        return self._procs.setdefault(key, proc)

    def sample(self) -> Sample:
        """One sample of the job now; processes that vanish meanwhile are left out."""
        t_mono, wall = time.monotonic(), time.time()
        main = self._find_main()
        processes = []
        if main is not None:
            for c in self._classifier.classify(main):
                role = self.role_overrides.get(c.proc.pid, c.role)
                ps = self._process_sample(self._cached(c.proc), role, c.start_method, t_mono, c.owner_pid)
                if ps is not None:
                    processes.append(ps)
        live = {(p.pid, p.create_time) for p in processes}
        for key in list(self._full):
            if key not in live:
                del self._full[key]
                self._procs.pop(key, None)
        return Sample(t_mono=t_mono, wall=wall, processes=tuple(processes), host=host_sample(main.pid if main else None))

    def _full_info(self, proc: psutil.Process, key, now: float) -> Tuple[Optional[int], Optional[int], Optional[int], Optional[int]]:
        """USS, PSS, the map count and CUDA pinned bytes (``None`` unless the process maps
        ``/dev/nvidiactl``), read at most every ``full_info_interval_s``."""
        last = self._full.get(key)
        if last is not None and now - last[0] < self.full_info_interval_s:
            return last[1], last[2], last[3], last[4]
        try:
            full = proc.memory_full_info()
            uss, pss = full.uss, getattr(full, "pss", None)
        except psutil.AccessDenied:
            uss = pss = None
        maps, nvidia = procfs.maps_summary(proc.pid)
        pinned = procfs.pinned_bytes(proc.pid) if nvidia else None
        self._full[key] = (now, uss, pss, maps, pinned)
        return uss, pss, maps, pinned

    def _process_sample(
        self, proc: psutil.Process, role: str, method: Optional[str], now: float, owner_pid: Optional[int] = None
    ) -> Optional[ProcessSample]:
        try:
            with proc.oneshot():
                create_time = proc.create_time()
                status = _STATUS_LETTER.get(proc.status(), "?")
                cpu = proc.cpu_times()
                mem = proc.memory_info()
                num_threads = proc.num_threads()
                name, ppid = proc.name(), proc.ppid()
                try:
                    num_fds = proc.num_fds()
                    rlimit = proc.rlimit(resource.RLIMIT_NOFILE)[0]
                    io = proc.io_counters()
                    read_b, write_b = io.read_chars, io.write_chars
                except (psutil.AccessDenied, AttributeError):
                    num_fds = rlimit = read_b = write_b = None
                try:
                    cmdline = tuple(proc.cmdline())
                except psutil.AccessDenied:
                    cmdline = ()
            watched = role in (ROLE_MAIN, ROLE_WORKER)
            threaded = watched or role == ROLE_STARTING
            affinity = quota = None
            if watched:
                try:
                    affinity = len(proc.cpu_affinity())
                except (psutil.AccessDenied, AttributeError, OSError):
                    affinity = None
                quota = self._quota(proc.pid, role)
            uss, pss, maps, pinned = self._full_info(proc, (proc.pid, create_time), now) if watched and status != "Z" else (None, None, None, None)
        except psutil.NoSuchProcess:
            return None
        except psutil.AccessDenied:
            return None
        return ProcessSample(
            pid=proc.pid,
            ppid=ppid,
            create_time=create_time,
            role=role,
            name=name,
            cmdline=cmdline,
            state=status,
            wchan=procfs.wchan(proc.pid),
            cpu_s=cpu.user + cpu.system,
            rss_bytes=mem.rss,
            uss_bytes=uss,
            pss_bytes=pss,
            num_fds=num_fds,
            rlimit_nofile_soft=None if rlimit is None or rlimit < 0 else rlimit,
            num_threads=num_threads,
            read_chars=read_b,
            write_chars=write_b,
            start_method=method,
            threads=procfs.thread_samples(proc.pid) if threaded else (),
            cpu_affinity=affinity,
            cpu_quota=quota,
            owner_pid=owner_pid,
            map_count=maps,
            pinned_bytes=pinned,
        )

    def _quota(self, pid: int, role: str) -> Optional[float]:
        # cgroup limits change rarely: read main's once a minute, and give workers main's value.
        now = time.monotonic()
        if role == ROLE_MAIN and now - self._quota_read_at > 60:
            self._quota_value = cgroup.cpu_quota(pid)
            self._quota_read_at = now
        return self._quota_value

"""The look at a job that ended: what a :class:`~watchdog.daemon.Watcher` keeps of the job
while it runs (every pid seen, its ``torch_shm_manager`` daemons, its memory cgroup and the
OOM kills counted there when first seen), and, once it ended, the facts of its exit (a crash,
``/dev/shm`` leftovers, the inside view's data checks) and the processes that outlived it.

Reads ``/proc``, ``/dev/shm`` and the cgroup's files; writes nothing and signals nothing."""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Container, Iterable, List, Optional, Sequence, Set, Tuple

from . import act
from .collect import cgroup, procfs
from .collect.sampler import host_sample
from .diagnose import diagnose
from .types import (
    MODE_CRASH,
    MODE_EXIT,
    ROLE_OTHER,
    SEVERITY_CRASH,
    SEVERITY_WARNING,
    Diagnosis,
    Facts,
    InsideView,
    ProcId,
    Sample,
)

# Seconds to wait, after the job ends, for its torch_shm_manager daemons to remove its files.
SHM_MANAGER_WAIT_S = 10.0
# At most this many pids are remembered for the /dev/shm leftovers check.
MAX_SEEN_PIDS = 100_000
# Samples at the end of the timeline whose mapped files are measured after a crash.
MAPPED_FILE_SAMPLES = 30


class JobTraces:
    """What is kept of a running job for the look after it ends (:meth:`note` each sample).

    ``root_pid`` is the job's root process; its memory cgroup is read at once."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.seen_pids: Set[int] = set()
        self.shm_managers: Set[ProcId] = set()
        self._memcg: Optional[cgroup.MemoryCgroup] = None
        self._oom_at_start: dict = {}  # memory cgroup folder -> its OOM kills when first seen
        self.note_memory_cgroup(cgroup.memory_cgroup(root_pid))

    def note(self, sample: Sample, memcg: Optional[cgroup.MemoryCgroup]) -> None:
        """Remember the pids and ``torch_shm_manager`` daemons of ``sample`` (up to
        ``MAX_SEEN_PIDS`` pids), and the memory cgroup ``memcg`` the sampler read for main: a
        wrapper may move the job after it started, while a dying main (its memory gone, the
        kernel about to move it out) is no news about its cgroup."""
        if len(self.seen_pids) < MAX_SEEN_PIDS:
            self.seen_pids.update(p.pid for p in sample.processes)
            self.shm_managers.update(
                p.ident for p in sample.processes if any("torch_shm_manager" in a for a in p.cmdline[:1])
            )
        main = sample.main
        if main is not None and main.rss_bytes > 0 and main.state not in ("Z", "X"):
            self.note_memory_cgroup(memcg)

    def note_memory_cgroup(self, found: Optional[cgroup.MemoryCgroup]) -> None:
        """Remember the job's memory cgroup ``found`` and the OOM kills it had counted when
        first seen (a job's wrapper may move it into another cgroup after it started)."""
        if found is not None and found.oom_kills is not None:
            self._memcg = found
            self._oom_at_start.setdefault(found.path, found.oom_kills)

    def oom_kills(self) -> Optional[int]:
        """The OOM kills the job's memory cgroup counted since dlwatch first saw it, read from
        the cgroup's folder (the job may have ended), or ``None``."""
        if self._memcg is None:
            return None
        now = cgroup.read_memory(self._memcg.version, self._memcg.path)
        start = self._oom_at_start.get(self._memcg.path)
        if now is None or now.oom_kills is None or start is None:
            return None
        return now.oom_kills - start

    def shm_leftovers(self, log: Callable[[str], None]) -> Tuple[Tuple[str, int], ...]:
        """The ``/dev/shm`` files the job's processes left, ``(path, bytes)`` each
        (:func:`procfs.shm_leftovers`), once
        its ``torch_shm_manager`` daemons (which remove their clients' files once those are gone)
        ended, waiting up to ``SHM_MANAGER_WAIT_S``; none while one still runs (said with
        ``log``: it may still remove them)."""
        deadline = time.monotonic() + SHM_MANAGER_WAIT_S
        while time.monotonic() < deadline and any(act.same_process(m) for m in self.shm_managers):
            time.sleep(0.1)
        alive = [m.pid for m in self.shm_managers if act.same_process(m)]
        if not alive:
            return procfs.shm_leftovers(self.seen_pids | {self.root_pid})
        if procfs.shm_leftovers(self.seen_pids):
            log(
                f"torch_shm_manager pid(s) {', '.join(map(str, alive))} still running: "
                "they may still remove the job's /dev/shm files"
            )
        return ()


def exit_facts(
    traces: JobTraces,
    timeline: Sequence[Sample],
    crashed: bool,
    exit_code: Optional[int],
    leftovers: Tuple[Tuple[str, int], ...],
    stderr_tail: Callable[[], str],
    inside: InsideView,
    host_cpus: int,
) -> Facts:
    """The facts of a job that ended with ``exit_code``: a crash (``crashed``: its stderr tail
    and the sizes of the files its processes mapped, read now) or an exit; the last sample of
    ``timeline`` (an empty one when the job ended before its first), the ``/dev/shm``
    ``leftovers``, and the inside view as the job left it."""
    last = timeline[-1] if timeline else Sample(time.monotonic(), time.time(), (), host_sample(None))
    return Facts(
        mode=MODE_CRASH if crashed else MODE_EXIT,
        sample=last,
        timeline=tuple(timeline),
        stderr_tail=stderr_tail() if crashed else "",
        exit_code=exit_code,
        oom_kills=traces.oom_kills(),
        host_cpus=host_cpus,
        shm_leftovers=leftovers,
        inside=inside,
        mapped_file_sizes=procfs.file_sizes(
            path for s in list(timeline)[-MAPPED_FILE_SAMPLES:] for p in s.processes for path, _, _ in p.mapped_files
        )
        if crashed
        else (),
    )


def exit_findings(facts: Facts, warned: Container[str]) -> Optional[Tuple[Facts, List[Diagnosis], str]]:
    """What to report of a job that ended, from its ``facts`` (:func:`exit_facts`): the facts
    (an exit, not a crash, when no crash rule fired), the diagnoses (a warning of a kind in
    ``warned``, already written while the job ran, is left out) and the report's kind,
    ``crash`` or ``exit``; ``None`` when nothing was found."""
    found = [d for d in diagnose(facts) if not (d.severity == SEVERITY_WARNING and d.kind in warned)]
    if not found:
        return None
    if any(d.severity == SEVERITY_CRASH for d in found):
        return facts, found, "crash"
    return dataclasses.replace(facts, mode=MODE_EXIT), found, "exit"  # killed or ended, not a crash we can name


def survivors(last: Iterable) -> Optional[str]:
    """Which processes of the job (``last``: its latest sample's processes) still run after it
    ended, and how to end them, or ``None``: workers orphaned by a main that was killed keep
    their hang forever. Never signals them; a process in uninterruptible I/O (state D) is said
    to be beyond any signal until that I/O returns."""
    alive = [(p.pid, p.role) for p in last if p.role is not ROLE_OTHER and act.still_running(p.ident)]
    if not alive:
        return None
    shown = ", ".join(f"{pid} ({role})" for pid, role in alive[:8])
    stuck = [pid for pid, _ in alive[:8] if (st := procfs.proc_stat(pid)) is not None and st.state == "D"]
    killable = [pid for pid, _ in alive[:8] if pid not in stuck]
    advice = [f"to end them: kill {' '.join(map(str, killable))}"] if killable else []
    if stuck:
        advice.append(
            f"pid(s) {', '.join(map(str, stuck))} are in uninterruptible I/O (state D): no signal ends them "
            "until that I/O returns (a FUSE mount: echo 1 > /sys/fs/fuse/connections/<N>/abort, or "
            "umount -l; NFS: umount -f -l)"
        )
    return f"{len(alive)} process(es) of the job still run after it ended: {shown}; {'; '.join(advice)}"

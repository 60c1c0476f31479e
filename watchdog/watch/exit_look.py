"""The look at a job that ended: what a :class:`~watchdog.watch.watcher.Watcher` keeps of the job
while it runs (every pid seen, its ``torch_shm_manager`` daemons, its memory cgroup and the
OOM kills counted there when first seen), and, once it ended, the facts of its exit (a crash,
``/dev/shm`` leftovers, the inside view's data checks) and the processes that outlived it.

Reads ``/proc``, ``/dev/shm`` and the cgroup's files; writes nothing and signals nothing."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from typing import Callable, Container, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ..collect import cgroup, procfs
from ..collect.sampler import host_sample
from ..collect.warning_stacks import WarningStacks
from ..diagnose import diagnose
from ..types import (
    MODE_CRASH,
    MODE_EXIT,
    ROLE_OTHER,
    SEVERITY_CRASH,
    SEVERITY_WARNING,
    Diagnosis,
    Facts,
    FdTarget,
    InsideView,
    ProcId,
    Sample,
)
from . import act

# Seconds to wait, after the job ends, for its torch_shm_manager daemons to remove its files.
SHM_MANAGER_WAIT_S = 10.0
# At most this many pids are remembered for the /dev/shm leftovers check.
MAX_SEEN_PIDS = 100_000
# Samples at the end of the timeline whose mapped files are measured after a crash.
MAPPED_FILE_SAMPLES = 30


# statvfs of a failed write's folder (disk_full): at most this many paths, each walk up to its
# nearest existing folder given this many seconds in all (a hung FUSE or NFS mount blocks it).
MAX_FS_PATHS = 4
STATVFS_TIMEOUT_S = 2.0
# Open files of a process still running after the job ended read for disk_full, at most.
MAX_OPEN_FILES = 64


# Where cgroup v1's pids controller and cgroup v2's unified hierarchy are mounted.
_PIDS_V1, _CGROUP_V2 = "/sys/fs/cgroup/pids", "/sys/fs/cgroup"
_LIMITS = {"Max processes": "RLIMIT_NPROC", "Max cpu time": "RLIMIT_CPU"}


def _small_read(path: str, limit: int = 8192) -> Optional[str]:
    """The first ``limit`` bytes of a kernel file (``/proc``, cgroupfs) as text, or ``None``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    return procfs.read_text_and_close(fd, limit)


def pids_limit(pid: int) -> Optional[Tuple[str, Optional[int]]]:
    """``("pids.max of cgroup FOLDER", value)`` for the tightest ``pids.max`` on the way from
    ``pid``'s pids cgroup up to the root (cgroup v1's pids controller, else v2's unified
    hierarchy; cgroups(7), Documentation/admin-guide/cgroup-v2.rst "PID"), ``None`` as value
    when every level says ``max``; ``None`` when unreadable."""
    text = _small_read(f"/proc/{pid}/cgroup")
    if text is None:
        return None
    where = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "pids" in parts[1].split(","):
            where = (_PIDS_V1, parts[2])
            break
        if len(parts) == 3 and parts[0] == "0" and parts[1] == "" and where is None:
            where = (_CGROUP_V2, parts[2])
    if where is None or ".." in where[1].split("/"):
        return None
    root, rel = where
    folder, best = rel.rstrip("/") or "/", None
    found = False
    while True:
        value = _small_read(os.path.join(root, folder.lstrip("/"), "pids.max"), 64)
        if value is not None:
            found = True
            value = value.strip()
            if value.isdigit() and (best is None or int(value) < best[1]):
                best = (folder, int(value))
        if folder in ("/", ""):
            break
        folder = os.path.dirname(folder) or "/"
    if not found:
        return None
    return (f"pids.max of cgroup {best[0]}", best[1]) if best else (f"pids.max of cgroup {rel}", None)


def process_limits(pid: int) -> List[Tuple[str, Optional[int]]]:
    """``RLIMIT_NPROC`` and ``RLIMIT_CPU`` (seconds) soft limits of ``pid`` from
    ``/proc/PID/limits`` (proc(5)), ``None`` for unlimited; empty when unreadable."""
    text = _small_read(f"/proc/{pid}/limits")
    out: List[Tuple[str, Optional[int]]] = []
    for line in (text or "").splitlines():
        for label, name in _LIMITS.items():
            if line.startswith(label):
                soft = line[len(label) :].split()[0] if line[len(label) :].split() else ""
                out.append((name, int(soft) if soft.isdigit() else None))
    return out


def _nearest_statvfs(path: str, root: str) -> Optional[Tuple[str, int, int]]:
    """``(folder, bytes free to unprivileged users, size in bytes)`` of the nearest existing
    folder of ``path`` (itself, else its parents), looked up under ``root`` (``""``: this
    process's own, ``/proc/PID/root``: that process's root and mount namespace), statvfs(3):
    ``f_bavail × f_frsize`` and ``f_blocks × f_frsize``; ``None`` when none could be read."""
    folder = os.path.normpath(path)
    for _ in range(64):
        try:
            st = os.statvfs(root + folder)
        except (FileNotFoundError, NotADirectoryError):
            if folder == "/":
                return None
            folder = os.path.dirname(folder)
            continue
        except (OSError, ValueError):
            return None
        return folder, st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    return None


def file_system_figures(
    paths: Sequence[str], alive: Sequence[int] = (), same_mount_ns: bool = True
) -> Tuple[Tuple[str, str, int, int], ...]:
    """``(path, folder measured, bytes free, size)`` of each of ``paths`` (absolute; the first
    ``MAX_FS_PATHS``), as ``Facts.file_systems``: statvfs of its nearest existing folder
    (:func:`_nearest_statvfs`), through ``/proc/PID/root`` of the first of ``alive`` (job
    processes still running: the path as they see it, in their mount namespace), else in
    dlwatch's own view when the job shared its mount namespace (``same_mount_ns``), else not
    at all (the job's file system cannot be reached once its processes are gone). Read-only:
    statvfs opens nothing and writes nothing; a path the job named only steers which figures
    are quoted. All of it runs in a daemon thread given ``STATVFS_TIMEOUT_S`` seconds: what
    a hung mount blocks is left out."""
    import threading

    wanted = [p for p in paths if p.startswith("/")][:MAX_FS_PATHS]
    if not wanted or (not alive and not same_mount_ns):
        return ()
    root = f"/proc/{alive[0]}/root" if alive else ""
    out: List[Tuple[str, str, int, int]] = []

    def measure() -> None:
        for path in wanted:
            found = _nearest_statvfs(path, root)
            if found is not None:
                out.append((path, *found))

    t = threading.Thread(target=measure, name="dlwatch-statvfs", daemon=True)
    t.start()
    t.join(STATVFS_TIMEOUT_S)
    return tuple(out[: len(wanted)])


def mount_ns(pid: int) -> str:
    """The mount namespace of ``pid`` (``mnt:[4026531841]``, the ``/proc/PID/ns/mnt`` link),
    or ``""`` when unreadable."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return ""


class JobTraces:
    """What is kept of a running job for the look after it ends (:meth:`note` each sample).

    ``root_pid`` is the job's root process; its memory cgroup is read at once."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.seen_pids: Dict[int, float] = {}  # pid -> the earliest start (Unix seconds) seen with it
        self.shm_managers: Set[ProcId] = set()
        self._memcg: Optional[cgroup.MemoryCgroup] = None
        self._oom_at_start: dict = {}  # memory cgroup folder -> its OOM kills when first seen
        self._limits: Dict[str, Optional[int]] = {}
        self._limits_of: Optional[int] = None  # the main pid whose rlimits were read
        self.mount_ns = ""  # main's mount namespace, read with its rlimits
        self.note_memory_cgroup(cgroup.memory_cgroup(root_pid))
        self.note_task_limits(root_pid)

    def note(self, sample: Sample, memcg: Optional[cgroup.MemoryCgroup]) -> None:
        """Remember the pids (with the earliest start seen with each: a ``/dev/shm`` file of a
        pid older than that is an earlier process's, :func:`procfs.shm_leftovers`) and
        ``torch_shm_manager`` daemons of ``sample`` (up to ``MAX_SEEN_PIDS`` pids), and the
        memory cgroup ``memcg`` the sampler read for main: a wrapper may move the job after it
        started, while a dying main (its memory gone, the kernel about to move it out) is no news
        about its cgroup. A lean sample (NOTE [ Lean ticks ] in watchdog/collect/read_plan.py)
        holds its full sample's processes and no cgroup read: nothing new, and the limits are
        read again at the next full one."""
        if sample.lean:
            return
        if len(self.seen_pids) < MAX_SEEN_PIDS:
            seen = self.seen_pids
            for p in sample.processes:
                if p.create_time < seen.get(p.pid, float("inf")):
                    seen[p.pid] = p.create_time
            self.shm_managers.update(
                p.ident for p in sample.processes if any("torch_shm_manager" in a for a in p.cmdline[:1])
            )
        main = sample.main
        if main is not None and main.rss_bytes > 0 and main.state not in ("Z", "X"):
            self.note_memory_cgroup(memcg)
            self.note_task_limits(main.pid)

    def note_task_limits(self, pid: int) -> None:
        """Read the limits on ``pid``'s tasks (:func:`pids_limit` each time: a job may move
        into a cgroup or lower its limit while it runs; its rlimits once per main pid)."""
        found = pids_limit(pid)
        if found is not None:
            self._limits = {k: v for k, v in self._limits.items() if not k.startswith("pids.max")}
            self._limits[found[0]] = found[1]
        if self._limits_of != pid:
            self._limits_of = pid
            self._limits.update(process_limits(pid))
            self.mount_ns = mount_ns(pid) or self.mount_ns

    def task_limits(self) -> Tuple[Tuple[str, Optional[int]], ...]:
        """The limits last read (:meth:`note_task_limits`), as ``Facts.task_limits``."""
        return tuple(self._limits.items())

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
            return procfs.shm_leftovers(set(self.seen_pids) | {self.root_pid}, since=self.seen_pids)
        if procfs.shm_leftovers(self.seen_pids, since=self.seen_pids):
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
    tail = stderr_tail() if crashed else ""
    opened, figures = _disk_full_look(traces, last, tail)
    return Facts(
        mode=MODE_CRASH if crashed else MODE_EXIT,
        sample=last,
        timeline=tuple(timeline),
        stderr_tail=tail,
        exit_code=exit_code,
        oom_kills=traces.oom_kills(),
        host_cpus=host_cpus,
        shm_leftovers=leftovers,
        inside=inside,
        task_limits=traces.task_limits(),
        mapped_file_sizes=procfs.file_sizes(
            path for s in list(timeline)[-MAPPED_FILE_SAMPLES:] for p in s.processes for path, _, _ in p.mapped_files
        )
        if crashed
        else (),
        open_files=tuple((pid, tuple(map(FdTarget.decode, ts))) for pid, ts in opened),
        file_systems=figures,
    )


def _disk_full_look(
    traces: JobTraces, last: Sample, tail: str
) -> Tuple[Tuple[Tuple[int, Tuple[str, ...]], ...], Tuple[Tuple[str, str, int, int], ...]]:
    """For a crash whose stderr holds a failed write to a full file system other than
    ``/dev/shm`` (:func:`~watchdog.collect.stderr_facts.enospc_errors`), read now: the open files of
    the job's processes still running (``/proc/PID/fd``, at most ``MAX_OPEN_FILES`` each) and
    the figures of the file systems of the paths the errors name, else of the regular files
    those processes have open (:func:`file_system_figures`): ``Facts.open_files`` and
    ``Facts.file_systems``; empty for any other crash."""
    from ..collect.stderr_facts import enospc_errors, enospc_paths

    if not tail or not any(not shm for _, shm, _ in enospc_errors(tail)):
        return (), ()
    alive = [p.pid for p in last.processes if p.role is not ROLE_OTHER and act.still_running(p.ident)]
    files = tuple((pid, procfs.open_files(pid, MAX_OPEN_FILES)) for pid in alive[:4])
    paths = enospc_paths(tail)
    if not paths:
        paths = list(
            dict.fromkeys(
                os.path.dirname(t)
                for _, targets in files
                for t in targets
                if t.startswith("/") and not t.startswith(("/dev/", "/proc/", "/sys/")) and "(deleted)" not in t
            )
        )
    same = bool(traces.mount_ns) and traces.mount_ns == mount_ns(os.getpid())
    return files, file_system_figures(paths, alive, same)


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


# Seconds a crash report waits for a warning's stacks still being taken (WarningStacks).
WARNING_STACKS_WAIT_S = 3.0


class ExitLook:
    """The report of a job that ended (:meth:`look`), from what was kept while it ran.

    Args:
        traces: what was kept of the job while it ran (:class:`JobTraces`).
        stderr_tail: returns the last bytes of the job's stderr.
        host_cpus: the host's CPUs.
        warning_stacks: the stacks taken at warnings (``py_spy.at_warning``), quoted in a crash.
        warned: the kinds warned of while the job ran (not reported again).
        publish: ``publish(facts, diagnoses, action, kind)`` writes one report.
        log: one ``dlwatch:`` line.
    """

    def __init__(
        self,
        traces: JobTraces,
        stderr_tail: Callable[[], str],
        host_cpus: int,
        warning_stacks: WarningStacks,
        warned: Container[str],
        publish: Callable[..., Optional[str]],
        log: Callable[[str], None],
    ) -> None:
        self.traces = traces
        self._stderr_tail = stderr_tail
        self._host_cpus = host_cpus
        self._stacks = warning_stacks
        self._warned = warned
        self._publish = publish
        self._log = log

    def look(
        self,
        timeline: Sequence[Sample],
        inside: Callable[[], InsideView],
        exit_code: Optional[int],
        terminated: bool,
        signalled: Optional[int],
    ) -> None:
        """Look at the job that ended with ``exit_code`` (``timeline``: its samples, oldest
        first; ``inside()`` reads the inside view as it left it): a non-zero ``exit_code`` is
        diagnosed from the stderr tail and the timeline (a crash report when a crash rule
        fires); after any exit the files the job left in ``/dev/shm`` are reported
        (``shm_leaked``), and what the inside view saw of its data (``iterable_replicated``,
        ``rng_duplicated``). Nothing is written when nothing is found. No crash is diagnosed
        when the watchdog ended the job (``terminated``) or forwarded it the signal
        ``signalled`` (SIGINT, SIGTERM, SIGHUP sent to ``dlwatch run``): its workers dying then
        is what the signal did, not a fault to explain."""
        leftovers = self.traces.shm_leftovers(self._log)
        crashed = bool(exit_code) and not terminated and signalled is None
        if bool(exit_code) and signalled is not None and not terminated:
            name = signal.Signals(signalled).name
            how = f"after the {name} dlwatch forwarded to it"
            self._log(f"the job exited with code {exit_code} {how}: not diagnosed as a crash")
        if terminated and not leftovers:
            return
        view = inside()
        self._stacks.wait(WARNING_STACKS_WAIT_S)
        facts = exit_facts(
            self.traces, timeline, crashed, exit_code, leftovers, self._stderr_tail, view, self._host_cpus
        )
        found = exit_findings(dataclasses.replace(facts, earlier_stacks=self._stacks.taken()), self._warned)
        if found is not None:
            facts, diagnoses, kind = found
            self._publish(facts, diagnoses, "none (the job had already exited)", kind)


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

"""Plain, frozen records exchanged between the pipeline's stages.

Every stage imports these types and never another stage. Units are in the field names:
``_s`` seconds, ``_bytes`` bytes; ``t_mono`` is ``time.monotonic()`` (seconds) and ``wall``
is ``time.time()`` (seconds since the epoch), used only for stamps shown to people.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

ROLE_MAIN = "main"
ROLE_WORKER = "dataloader_worker"
ROLE_FORKSERVER = "forkserver"
ROLE_OTHER = "other"

SEVERITY_HANG = "hang"
SEVERITY_CRASH = "crash"
SEVERITY_WARNING = "warning"


@dataclass(frozen=True)
class ThreadSample:
    """One thread of one process at one instant, read from ``/proc/PID/task/TID/``.

    ``cpu_s`` is user + system CPU time in seconds (``stat`` fields 14 and 15 over
    ``SC_CLK_TCK``); ``io_bytes`` is ``rchar + wchar`` from ``io`` (bytes passed to read/write
    system calls, pipes and sockets included), ``None`` when unreadable.
    """

    tid: int
    name: str
    state: str
    cpu_s: float
    voluntary_ctxt_switches: int
    nonvoluntary_ctxt_switches: int
    io_bytes: Optional[int]


@dataclass(frozen=True)
class ProcessSample:
    """One process at one instant (psutil ``oneshot()`` plus ``/proc`` reads).

    Memory in bytes; ``uss_bytes``/``pss_bytes`` are sampled at a slower cadence and hold the
    latest value read (``None`` until first read or without permission). ``status`` is the
    one-letter Linux state (R, S, D, Z, T, …). ``start_method`` is ``fork``, ``spawn``,
    ``forkserver`` or ``None`` for non-workers. ``cpu_affinity`` is the number of CPUs the
    process may run on (``sched_getaffinity``); ``cpu_quota`` the CPUs its cgroup v2
    ``cpu.max`` allows (quota / period), ``None`` when unlimited or unreadable; both are read
    for main and workers only.
    """

    pid: int
    ppid: int
    create_time: float
    role: str
    name: str
    cmdline: Tuple[str, ...]
    status: str
    wchan: Optional[str]
    cpu_s: float
    rss_bytes: int
    uss_bytes: Optional[int]
    pss_bytes: Optional[int]
    num_fds: Optional[int]
    rlimit_nofile_soft: Optional[int]
    num_threads: int
    read_bytes: Optional[int]
    write_bytes: Optional[int]
    start_method: Optional[str]
    threads: Tuple[ThreadSample, ...] = ()
    cpu_affinity: Optional[int] = None
    cpu_quota: Optional[float] = None


@dataclass(frozen=True)
class HostSample:
    """Host-wide facts: ``/dev/shm`` size and use (``statvfs``, bytes) and available memory."""

    shm_total_bytes: Optional[int]
    shm_used_bytes: Optional[int]
    mem_available_bytes: int


@dataclass(frozen=True)
class Sample:
    """Everything read at one instant: the job's processes (main first) and the host."""

    t_mono: float
    wall: float
    processes: Tuple[ProcessSample, ...]
    host: HostSample

    def process(self, pid: int) -> Optional[ProcessSample]:
        """The process with ``pid`` in this sample, or ``None``."""
        for p in self.processes:
            if p.pid == pid:
                return p
        return None

    @property
    def main(self) -> Optional[ProcessSample]:
        """The job's main process, or ``None`` when it was not found in this sample."""
        for p in self.processes:
            if p.role == ROLE_MAIN:
                return p
        return None

    @property
    def workers(self) -> Tuple[ProcessSample, ...]:
        """The DataLoader workers in this sample."""
        return tuple(p for p in self.processes if p.role == ROLE_WORKER)


@dataclass(frozen=True)
class Frame:
    """One stack frame as py-spy reports it; ``line`` is 0 for native frames."""

    function: str
    file: str
    line: int
    native: bool
    module: Optional[str] = None
    locals: Optional[Tuple[Tuple[str, str], ...]] = None


@dataclass(frozen=True)
class ThreadStack:
    """One thread's stack, innermost frame first. ``active`` is py-spy's idle flag inverted:
    py-spy calls a thread deadlocked on a lock "idle", so it is never evidence of health."""

    tid: int
    name: str
    active: bool
    owns_gil: bool
    frames: Tuple[Frame, ...]


@dataclass(frozen=True)
class ProcessStack:
    """The result of dumping one process with py-spy.

    ``threads`` is empty and ``error`` says why when the dump failed; ``native`` tells whether
    native frames were collected; ``raw`` is py-spy's own output (JSON text) or its error text;
    ``elapsed_s`` the seconds the dump took.
    """

    pid: int
    threads: Tuple[ThreadStack, ...]
    native: bool
    error: Optional[str]
    raw: str
    elapsed_s: float

    @property
    def ok(self) -> bool:
        """True when py-spy returned stacks."""
        return self.error is None


@dataclass(frozen=True)
class ThreadDetail:
    """What ``/proc`` alone tells about a thread at report time (no ptrace needed).

    ``syscall`` is the first field of ``/proc/PID/task/TID/syscall``: the system call number,
    ``running`` or ``None`` when unreadable.
    """

    tid: int
    name: str
    state: str
    wchan: Optional[str]
    syscall: Optional[str]


@dataclass(frozen=True)
class Stall:
    """A stall found by the detector: nothing that matters moved for ``stall_s`` seconds.

    ``quiet_since_mono`` is when the last progress was seen (``time.monotonic()``).
    ``progress_age_s`` maps pid to the seconds since that process's watched threads last moved.
    ``no_delivery_s`` is how long main's iterating thread has been quiet while no worker did
    any I/O (workers may burn CPU, but no batch was sent): see NOTE [ Hang criterion ].
    """

    stall_s: float
    quiet_since_mono: float
    main_pid: int
    progress_age_s: Tuple[Tuple[int, float], ...]
    no_delivery_s: float = 0.0


@dataclass(frozen=True)
class HangVerdict:
    """The confirmation of a stall from main's stack.

    ``kind`` is ``dataloader`` (the iterating thread waits inside the DataLoader iterator) or
    ``outside_loader``. ``confirmed_by_stack`` is False when py-spy could not read main and the
    verdict rests on ``/proc`` alone. ``thread`` is the main-process thread that the verdict
    names (the iterating thread), when known.
    """

    kind: str
    confirmed_by_stack: bool
    reason: str
    thread: Optional[ThreadStack] = None


@dataclass(frozen=True)
class Diagnosis:
    """One finding: what happened, the evidence, and what to change.

    ``confidence`` is in [0, 1]; ``evidence`` lines each name a process, frame or metric;
    ``location`` is the ``file:line`` in the user's code where it applies, when known.
    """

    kind: str
    severity: str
    confidence: float
    summary: str
    evidence: Tuple[str, ...]
    remedy: str
    pids: Tuple[int, ...]
    location: Optional[str] = None
    docs: Tuple[str, ...] = ()


MODE_HANG = "hang"
MODE_CRASH = "crash"
MODE_LIVE = "live"


@dataclass(frozen=True)
class Facts:
    """Everything the diagnosis rules may read; rules never touch processes themselves.

    ``mode`` says why the facts were gathered: ``hang`` (a confirmed stall: ``stall`` and
    ``verdict`` are set, stacks were taken), ``crash`` (the job exited non-zero: ``exit_code``
    and the stderr tail are set) or ``live`` (a periodic look at the timeline for warnings).
    ``stacks`` and ``thread_details`` are keyed by pid. ``main_threads_at_fork`` maps a worker
    pid to the number of threads main had in the last sample before that worker appeared.
    ``source_lines`` maps ``(file, line)`` to the stripped source text, when it could be read.
    ``pyspy_problem`` says why stacks are missing (permission, binary missing, timeout).
    ``stderr_tail`` is the last 64 KiB of the job's stderr (``dlwatch run`` only).
    ``oom_kills`` is how many OOM kills the job's cgroup counted while it was watched.
    ``host_cpus`` is the number of online CPUs of the host. ``open_files`` maps a pid to the
    targets of its file descriptors (``/proc/PID/fd``), read at report time.
    """

    mode: str
    sample: Sample
    timeline: Tuple[Sample, ...]
    stall: Optional[Stall] = None
    verdict: Optional[HangVerdict] = None
    stacks: Tuple[Tuple[int, ProcessStack], ...] = ()
    thread_details: Tuple[Tuple[int, Tuple[ThreadDetail, ...]], ...] = ()
    main_threads_at_fork: Tuple[Tuple[int, int], ...] = ()
    source_lines: Tuple[Tuple[Tuple[str, int], str], ...] = ()
    pyspy_problem: Optional[str] = None
    stderr_tail: str = ""
    exit_code: Optional[int] = None
    oom_kills: Optional[int] = None
    host_cpus: int = 1
    open_files: Tuple[Tuple[int, Tuple[str, ...]], ...] = ()

    def stack(self, pid: int) -> Optional[ProcessStack]:
        """The py-spy result for ``pid``, or ``None`` when it was not dumped."""
        return dict(self.stacks).get(pid)

    def threads_of(self, pid: int) -> Tuple[ThreadDetail, ...]:
        """The ``/proc`` thread details of ``pid`` (empty when unreadable)."""
        return dict(self.thread_details).get(pid, ())

    def source(self, file: str, line: int) -> Optional[str]:
        """The source text of ``file:line`` as read at report time, or ``None``."""
        return dict(self.source_lines).get((file, line))

    def progress_age_s(self, pid: int) -> Optional[float]:
        """Seconds since ``pid``'s watched threads last made progress, or ``None``."""
        return None if self.stall is None else dict(self.stall.progress_age_s).get(pid)

    def loader_hang(self) -> bool:
        """True for a confirmed (or presumed) DataLoader hang."""
        return self.mode == MODE_HANG and self.verdict is not None and self.verdict.kind == "dataloader"

    def last_seen(self, pid: int) -> Optional[ProcessSample]:
        """The latest sample of ``pid`` in the timeline (it may be gone now), or ``None``."""
        for s in reversed(self.timeline):
            p = s.process(pid)
            if p is not None:
                return p
        return None


@dataclass(frozen=True)
class Report:
    """A finished report, ready to be written: the JSON document, its text summary, and raw
    py-spy outputs as ``(file name, text)`` pairs."""

    folder_name: str
    document: dict = field(hash=False)
    text: str
    raw_files: Tuple[Tuple[str, str], ...]

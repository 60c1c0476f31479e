"""Plain, frozen records exchanged between the pipeline's stages.

Every stage imports these types and never another stage. Units are in the field names:
``_s`` seconds, ``_bytes`` bytes; ``t_mono`` is ``time.monotonic()`` (seconds) and ``wall``
is ``time.time()`` (seconds since the epoch), used only for stamps shown to people.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple, TypeVar

# The samples kept in a timeline (timeline_samples x processes x threads of them) carry no
# per-instance __dict__ where Python allows it (dataclass ``slots``, Python >= 3.10): about 40 %
# less memory for a full timeline.
_SLOTS: Dict[str, Any] = {"slots": True} if sys.version_info >= (3, 10) else {}

_T = TypeVar("_T")  # what Facts.derived returns


class TextEnum(str, enum.Enum):
    """A ``str`` enum whose members read as their values everywhere: in comparisons with
    strings, as dict keys, in JSON, and in ``str()`` and f-strings on every Python this runs
    on (Python 3.11 made ``format()`` of mixed-in enums print ``Class.MEMBER``)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class ProcessRole(TextEnum):
    """What a process of the job's tree is, decided once by :mod:`watchdog.collect.discovery`;
    the value is what reports show."""

    MAIN = "main"
    WORKER = "dataloader_worker"
    WORKER_CHILD = "worker_child"  # a process a worker started
    STARTING = "worker_starting"  # a child of main young enough that it may become a worker
    FORKSERVER = "forkserver"
    OTHER = "other"
    # Multi-rank jobs (watchdog.watch.node_loop): the launcher above the ranks (torchrun's elastic agent,
    # the process that called torch.multiprocessing.spawn), and each rank as the launcher's
    # sample sees it.
    LAUNCHER = "launcher"
    RANK = "rank"


ROLE_MAIN = ProcessRole.MAIN
ROLE_WORKER = ProcessRole.WORKER
ROLE_WORKER_CHILD = ProcessRole.WORKER_CHILD
ROLE_STARTING = ProcessRole.STARTING
ROLE_FORKSERVER = ProcessRole.FORKSERVER
ROLE_OTHER = ProcessRole.OTHER
ROLE_LAUNCHER = ProcessRole.LAUNCHER
ROLE_RANK = ProcessRole.RANK
# Roles whose progress is the loader's (NOTE [ Hang criterion ] in detect/progress.py).
LOADER_ROLES = frozenset({ROLE_MAIN, ROLE_WORKER, ROLE_WORKER_CHILD, ROLE_STARTING})

# A whole process (a starting worker, a worker's child, anything in the job's tree) works when
# it used at least this share of one core since its mark: a decoder or an import of torch does,
# a background poller waking every 10 ms (gloo's loop: about 1.5 % here) and PyTorch's idle 5 s
# polls in index_queue.get (about 0.1 %) do not. The progress tracker's measure
# (watchdog/detect/progress.py) and the read plan's sign of a moving worker
# (watchdog/collect/read_plan.py) alike.
BUSY_SHARE = 0.05


class Severity(TextEnum):
    """How bad a :class:`Diagnosis` is: the job hung, crashed, or a warning about a job that runs."""

    HANG = "hang"
    CRASH = "crash"
    WARNING = "warning"


SEVERITY_HANG = Severity.HANG
SEVERITY_CRASH = Severity.CRASH
SEVERITY_WARNING = Severity.WARNING


class Mode(TextEnum):
    """Why :class:`Facts` were gathered, and what kind of report they make."""

    HANG = "hang"  # a confirmed stall
    CRASH = "crash"  # the job exited non-zero
    LIVE = "live"  # a periodic look at the timeline for warnings
    EXIT = "exit"  # the job ended with exit code 0 (only leftovers are looked for)


MODE_HANG = Mode.HANG
MODE_CRASH = Mode.CRASH
MODE_LIVE = Mode.LIVE
MODE_EXIT = Mode.EXIT


class WaitKind(TextEnum):
    """What a thread waits for, decided once from ``/proc/PID/task/TID/{stat,syscall}`` (see
    :mod:`watchdog.collect.waits`). The value is what reports show."""

    RUNNING = "running"
    """On a CPU or runnable (state R, or ``syscall`` reads ``running``)."""
    FUTEX_PRIVATE = "futex_private"
    """An untimed wait on a process-private futex: only a thread of the same process can end it
    (``FUTEX_PRIVATE_FLAG``, futex(2)). Python locks, conditions, queues, pthread mutexes and
    OpenMP barriers wait this way."""
    FUTEX_SHARED = "futex_shared"
    """An untimed wait on a shared futex (``multiprocessing`` locks, semaphores, events): any
    process that maps it can end it."""
    TIMED = "timed"
    """A wait with a timeout (a futex with a timeout, poll/select/epoll with one, nanosleep): it
    ends by itself."""
    FD = "fd"
    """An untimed wait on file descriptors: read/write/recv/send/accept/connect/open, or
    poll/select/epoll without a timeout. It ends when the other party acts."""
    DISK = "disk"
    """Uninterruptible sleep (state D): file-system or device I/O."""
    CHILD = "child"
    """Waiting for a child process to exit (wait4/waitid)."""
    STOPPED = "stopped"
    """Stopped by a signal or a debugger (state T or t): paused, not hung."""
    ZOMBIE = "zombie"
    """Exited, not yet reaped (state Z or X)."""
    OTHER = "other"
    """Blocked in another system call."""
    UNKNOWN = "unknown"
    """Not readable (no permission, or the thread ended)."""


class WaitOp(TextEnum):
    """What a thread's system call does, decoded once from its name by :data:`WAIT_OPS` (the
    one table of system calls by operation; :mod:`watchdog.collect.waits` builds its sets
    from it): detect/ and diagnose/ test ``wait.op is WaitOp.READ``, never names."""

    READ = "read"
    """Reads a descriptor's data: read, readv, pread64, recvfrom, recvmsg."""
    WRITE = "write"
    """Writes a descriptor's data: write, writev, pwrite64, sendto, sendmsg."""
    LOCK = "lock"
    """Waits for a file lock: flock, fcntl (F_SETLKW), flock(2), fcntl(2)."""
    ACCEPT = "accept"
    """Waits for a connection on a listening socket: accept, accept4."""
    CONNECT = "connect"
    """Connects a socket."""
    OPEN = "open"
    """Opens a path (a FIFO with no writer blocks here): open, openat, creat, openat2."""
    POLL = "poll"
    """Waits for any of several descriptors: poll, ppoll, select, pselect6, epoll_wait…"""
    FUTEX = "futex"
    """Waits on a futex: futex, futex_waitv."""
    SLEEP = "sleep"
    """Sleeps: nanosleep, clock_nanosleep."""
    CHILD = "child"
    """Waits for a child to exit: wait4, waitid."""
    SIGNAL = "signal"
    """Waits for a signal: pause, rt_sigsuspend, rt_sigtimedwait."""
    RESTART = "restart"
    """restart_syscall(2): a timed wait the kernel restarted after a stop."""
    OTHER = "other"
    """Any other call, or none known."""


# System call name -> operation (syscalls(2)); names not listed are WaitOp.OTHER.
WAIT_OPS: Mapping[str, WaitOp] = {
    **dict.fromkeys(("read", "readv", "pread64", "recvfrom", "recvmsg"), WaitOp.READ),
    **dict.fromkeys(("write", "writev", "pwrite64", "sendto", "sendmsg"), WaitOp.WRITE),
    **dict.fromkeys(("flock", "fcntl"), WaitOp.LOCK),
    **dict.fromkeys(("accept", "accept4"), WaitOp.ACCEPT),
    "connect": WaitOp.CONNECT,
    **dict.fromkeys(("open", "openat", "creat", "openat2"), WaitOp.OPEN),
    **dict.fromkeys(("poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2"), WaitOp.POLL),
    **dict.fromkeys(("futex", "futex_waitv"), WaitOp.FUTEX),
    **dict.fromkeys(("nanosleep", "clock_nanosleep"), WaitOp.SLEEP),
    **dict.fromkeys(("wait4", "waitid"), WaitOp.CHILD),
    **dict.fromkeys(("pause", "rt_sigsuspend", "rt_sigtimedwait"), WaitOp.SIGNAL),
    "restart_syscall": WaitOp.RESTART,
}


def wait_op(syscall: Optional[str]) -> WaitOp:
    """The operation of system call ``syscall`` (its name; ``None`` or an unknown name, such
    as a bare number, gives :attr:`WaitOp.OTHER`)."""
    return WAIT_OPS.get(syscall or "", WaitOp.OTHER)


@dataclass(frozen=True, **_SLOTS)
class KernelWait:
    """One thread's wait, decoded from its state letter and its ``syscall`` file.

    ``syscall`` is the system call's name (``futex``, ``poll``; the number when the name is not
    known); ``timeout_ms`` the timeout in milliseconds where the call gives it in a register
    (poll, epoll_wait), ``None`` otherwise; ``fd`` the file descriptor a read/write-like call
    waits on; ``futex_op`` the futex operation word; ``detail`` a short human description
    (``futex(FUTEX_WAIT_BITSET|FUTEX_PRIVATE_FLAG), no timeout``); ``raw`` the ``syscall`` line.
    """

    kind: WaitKind
    syscall: Optional[str] = None
    timeout_ms: Optional[int] = None
    fd: Optional[int] = None
    futex_op: Optional[int] = None
    detail: str = ""
    raw: Optional[str] = None

    @property
    def signature(self) -> Tuple[object, ...]:
        """What stays the same while a thread repeats the same wait (to recognise a loop of
        timed waits between two looks)."""
        return (self.kind, self.syscall, self.timeout_ms, self.futex_op, self.fd)

    @property
    def op(self) -> WaitOp:
        """What the system call does (:data:`WAIT_OPS`; :attr:`WaitOp.OTHER` when none)."""
        return wait_op(self.syscall)


@dataclass(frozen=True, **_SLOTS)
class ThreadSample:
    """One thread of one process at one instant, read from ``/proc/PID/task/TID/`` (no ptrace
    needed): at every tick (:class:`~watchdog.collect.procfs.ThreadReader`) and, with its wait
    channel and start, at an examination (:func:`~watchdog.collect.procfs.thread_details`).

    ``cpu_s`` is user + system CPU time in seconds (``stat`` fields 14 and 15 over
    ``SC_CLK_TCK``); the context switches come from ``status``; ``io_bytes`` is ``rchar +
    wchar`` from ``io`` (bytes passed to read/write system calls, pipes and sockets included),
    ``None`` when unreadable or not read; ``wait`` the decoded ``syscall`` line. ``wchan`` (the
    kernel function it sleeps in) and ``start_ticks`` (when it started, in clock ticks since
    boot, ``stat`` field 22) are read at an examination only, ``None`` otherwise.
    """

    tid: int
    name: str
    state: str
    cpu_s: float = 0.0
    voluntary_ctxt_switches: int = 0
    nonvoluntary_ctxt_switches: int = 0
    io_bytes: Optional[int] = None
    wait: Optional[KernelWait] = None
    wchan: Optional[str] = None
    start_ticks: Optional[int] = None


class FdKind(TextEnum):
    """What a file descriptor refers to (its ``/proc/PID/fd/N`` link); the value is what
    reports show."""

    FILE = "file"  # a regular file or directory the job opened
    SHM = "shared memory"  # /dev/shm/… (PyTorch's shared tensors: deleted torch_* files, memfd)
    SOCKET = "socket"
    PIPE = "pipe"
    ANON = "anon_inode"  # eventfd, epoll, timerfd, …
    DEVICE = "device"  # /dev/… (a GPU, a terminal)
    OTHER = "other"
    KERNEL = "kernel"  # /proc/… or /sys/… (FdTarget.decode only; the census counts these as FILE)


@dataclass(frozen=True, **_SLOTS)
class FdTarget:
    """A file descriptor's target, decoded once where its link is read (``/proc/PID/fd/N``,
    proc(5)): ``kind`` what it is, ``inode`` the number in ``pipe:[N]``/``socket:[N]`` (``None``
    for the others), ``path`` the link's text as read, shown in reports unchanged."""

    kind: FdKind
    path: str
    inode: Optional[int] = None

    @classmethod
    def decode(cls, text: str) -> "FdTarget":
        """The record of link text ``text`` (``pipe:[123]``, ``socket:[45]``, ``/data/x.bin``,
        ``/dev/pts/3``, ``/dev/shm/torch_1_2``, ``anon_inode:[eventfd]``; proc(5)). Never raises:
        a malformed number gives ``inode`` ``None``, a text of no known shape
        :attr:`FdKind.OTHER`. ``/dev/shm/…`` and ``/memfd:…`` are SHM, other ``/dev/…`` DEVICE,
        ``/proc/…`` and ``/sys/…`` KERNEL, any other absolute path FILE."""
        for prefix, kind in (("pipe:", FdKind.PIPE), ("socket:", FdKind.SOCKET)):
            if text.startswith(prefix):
                number = text[len(prefix) + 1 : -1] if text[len(prefix) : len(prefix) + 1] == "[" else ""
                return cls(kind, text, int(number) if number.isdigit() and text.endswith("]") else None)
        if text.startswith("anon_inode:"):
            return cls(FdKind.ANON, text)
        if text.startswith(("/dev/shm/", "/memfd:")):
            return cls(FdKind.SHM, text)
        if text.startswith("/dev/"):
            return cls(FdKind.DEVICE, text)
        if text.startswith(("/proc/", "/sys/")):
            return cls(FdKind.KERNEL, text)
        if text.startswith("/"):
            return cls(FdKind.FILE, text)
        return cls(FdKind.OTHER, text)

    @property
    def is_path(self) -> bool:
        """Whether the target is an absolute path (FILE, SHM, DEVICE, KERNEL), as opposed to a
        pipe, socket or anonymous inode."""
        return self.kind in (FdKind.FILE, FdKind.SHM, FdKind.DEVICE, FdKind.KERNEL)

    def __str__(self) -> str:
        return self.path


def _fd_target(value: "FdTarget | str") -> FdTarget:
    return value if isinstance(value, FdTarget) else FdTarget.decode(value)


@dataclass(frozen=True, **_SLOTS)
class FdCensus:
    """What a process's open file descriptors are, counted when it nears RLIMIT_NOFILE
    (``watchdog.collect.procfs.fd_census``): ``read`` descriptors were read (at most the
    census limit), ``kinds`` counts them by :class:`FdKind`, most first, and ``files`` names
    the regular files' folders that hold the most of them, ``(folder, count)``, most first.
    ``t_mono`` is when it was taken (``time.monotonic()``)."""

    t_mono: float
    read: int
    kinds: Tuple[Tuple[FdKind, int], ...]
    files: Tuple[Tuple[str, int], ...] = ()

    def count(self, kind: FdKind) -> int:
        """How many of the descriptors read are of ``kind``."""
        return dict(self.kinds).get(kind, 0)


class ProcId(NamedTuple):
    """One process for as long as it lives: its pid and when it started, in clock ticks since
    boot (``/proc/PID/stat`` field 22, proc(5)). Pids are reused; the pair is not while the
    system runs, and it compares exactly (no float rounding, unlike psutil's ``create_time``)."""

    pid: int
    start_ticks: int


@dataclass(frozen=True, **_SLOTS)
class ProcessSample:
    """One process at one instant (psutil ``oneshot()`` plus ``/proc`` reads).

    Memory in bytes; ``uss_bytes``/``pss_bytes`` are sampled at a slower cadence and hold the
    latest value read (``None`` until first read or without permission). ``state`` is the
    one-letter Linux state (R, S, D, Z, T, …). ``start_method`` is ``fork``, ``spawn``,
    ``forkserver`` or ``None`` for non-workers. ``role`` is decided once, in
    :mod:`watchdog.collect.discovery`; ``owner_pid`` is the worker a ``worker_child`` descends
    from. ``threads`` are read for main, workers and starting workers. ``map_count`` is the
    number of memory mappings (lines of ``/proc/PID/maps``), read with USS. ``pinned_bytes`` is
    CUDA pinned host memory (``/dev/nvidiactl`` mappings in ``/proc/PID/smaps``), read with USS
    and only for a process that maps that device (``None`` otherwise). ``fd_census`` counts its
    descriptors by kind once it nears RLIMIT_NOFILE (:class:`FdCensus`); ``mapped_files`` are
    the data files it maps, ``(path, bytes mapped up to, inode)``, read with USS
    (``procfs.mapped_data_files``). ``dirty_bytes`` is its private dirty memory (``smaps_rollup``
    Private_Dirty, read with USS): what it wrote that only it holds; clean file pages it read
    (a memmap) are in USS and not in it; ``anon_bytes`` its anonymous memory (``smaps_rollup``
    Anonymous, read with USS: heap and objects, shared with its forked children or not);
    ``memory_read_mono`` when those slow-cadence values were read (``time.monotonic()``
    seconds; ``None``: never), so that a figure quoted at a crash can say how old it is.
    ``runq_wait_s`` is the seconds its main thread waited runnable for a CPU since it started
    (``/proc/PID/schedstat``, :func:`~watchdog.collect.procfs.run_queue_wait_s`), read for the
    loader's processes at samples that read threads, ``None`` otherwise.
    ``cpu_affinity`` is the number of CPUs the
    process may run on (``sched_getaffinity``); ``cpu_quota`` the CPUs its cgroup v2
    ``cpu.max`` allows (quota / period), ``None`` when unlimited or unreadable; both are read
    for main and workers only. ``create_time`` is when it started (seconds since the epoch, as
    psutil's) and ``start_ticks`` the same in clock ticks since boot, its :attr:`ident`.
    """

    pid: int
    ppid: int
    create_time: float
    role: ProcessRole
    name: str
    cmdline: Tuple[str, ...]
    state: str
    wchan: Optional[str]
    cpu_s: float
    rss_bytes: int
    uss_bytes: Optional[int]
    pss_bytes: Optional[int]
    num_fds: Optional[int]
    rlimit_nofile_soft: Optional[int]
    num_threads: int
    read_chars: Optional[int]
    write_chars: Optional[int]
    start_method: Optional[str]
    threads: Tuple[ThreadSample, ...] = ()
    cpu_affinity: Optional[int] = None
    cpu_quota: Optional[float] = None
    owner_pid: Optional[int] = None
    map_count: Optional[int] = None
    pinned_bytes: Optional[int] = None
    fd_census: Optional[FdCensus] = None
    mapped_files: Tuple[Tuple[str, int, int], ...] = ()
    dirty_bytes: Optional[int] = None
    start_ticks: int = 0
    anon_bytes: Optional[int] = None
    memory_read_mono: Optional[float] = None
    runq_wait_s: Optional[float] = None
    # :attr:`ident`, made at its first read (the sampler, the progress tracker and the looks ask
    # it of every process of every sample).
    _ident: Optional[ProcId] = field(default=None, init=False, repr=False, compare=False)

    @property
    def ident(self) -> ProcId:
        """This process's :class:`ProcId` (``start_ticks``: ``stat`` field 22)."""
        found = self._ident
        if found is None:
            found = ProcId(self.pid, self.start_ticks)
            object.__setattr__(self, "_ident", found)
        return found


@dataclass(frozen=True, **_SLOTS)
class HostSample:
    """Host-wide facts: ``/dev/shm`` size and use (``statvfs``, bytes), available memory, and
    ``vm.max_map_count`` (the most memory mappings one process may have). ``mem_limit_bytes``
    and ``mem_cgroup_usage_bytes`` are the job's memory cgroup's limit and usage (v1 or v2;
    ``None``: no limit, or unreadable); :attr:`mem_left_bytes` is what the job can still use."""

    shm_total_bytes: Optional[int]
    shm_used_bytes: Optional[int]
    mem_available_bytes: int
    max_map_count: Optional[int] = None
    mem_total_bytes: Optional[int] = None
    mem_limit_bytes: Optional[int] = None
    mem_cgroup_usage_bytes: Optional[int] = None

    @property
    def mem_left_bytes(self) -> int:
        """The host's available memory, or what is left under the cgroup's limit when that is
        less (a job under a 1 GiB limit on a 64 GiB host has about 1 GiB), in bytes."""
        if self.mem_limit_bytes is None or self.mem_cgroup_usage_bytes is None:
            return self.mem_available_bytes
        return max(0, min(self.mem_available_bytes, self.mem_limit_bytes - self.mem_cgroup_usage_bytes))


@dataclass(frozen=True)
class LoaderView:
    """One DataLoader iterator as the job's own process records it (the inside view, see
    ``watchdog/bootstrap/_dlwatch_inside.py``). Times are ``time.monotonic()`` seconds.

    ``settings`` holds the DataLoader's arguments as ``(name, value)`` pairs (``num_workers``,
    ``pin_memory``, ``persistent_workers``, ``prefetch_factor``, ``batch_size``, ``timeout``,
    ``multiprocessing_context`` as the start method, ...). ``batches`` and ``wait_s`` count over
    the iterator's life: the time main spent inside ``__next__`` for the batches delivered.
    ``waiting_since`` is when main last entered ``__next__`` without a batch since (``None``:
    not inside); after an epoch's last batch it stays set with ``waiting_worker`` -1 until the
    next epoch. ``waiting_idx`` is the batch index main waits for and ``waiting_worker`` the
    worker id that owns it (-1 unknown). ``interval_p50_s``/``interval_p99_s`` are percentiles
    of the time between consecutive batches within an epoch (each bucket's upper bound, so never
    low by more than a quarter octave), over ``intervals`` intervals. ``pin_memory_effective``
    is PyTorch's own decision (``pin_memory`` and an accelerator present). ``host_memory`` is
    ``torch.cuda.host_memory_stats()`` (PyTorch's caching host allocator: bytes and counts, keys
    as that torch names them) once CUDA is initialised, refreshed about every 5 s while batches
    flow; ``pin_thread_alive`` whether the pin-memory thread ran at that refresh.
    ``first_batches`` holds ``(worker id, digest)`` of each worker's first 32 records (or its
    whole stream when shorter) as ``<digest>/<records>``, for an ``IterableDataset`` with several
    workers (equal digests: every worker replays the stream).
    ``dataset_code`` is where the Dataset's ``__getitem__`` (``__iter__`` for an iterable one)
    is defined, when it is a Python function (its first line: the ``def``, or its decorator).
    """

    pid: int
    iterator: int
    kind: str
    site: Optional["Frame"]
    settings: Tuple[Tuple[str, object], ...]
    dataset_type: Optional[str]
    iterable: bool
    workers: Tuple[int, ...]
    worker_exitcodes: Tuple[Optional[int], ...]
    created: float
    batches: int
    wait_s: float
    epoch: int
    first_batch_s: Optional[float]
    waiting_since: Optional[float]
    waiting_idx: int
    waiting_worker: int
    last_batch: Optional[float]
    intervals: int
    interval_p50_s: Optional[float]
    interval_p99_s: Optional[float]
    pin_memory_effective: Optional[bool] = None
    host_memory: Tuple[Tuple[str, float], ...] = ()
    pin_thread_alive: Optional[bool] = None
    first_batches: Tuple[Tuple[int, str], ...] = ()
    dataset_code: Optional["Frame"] = None

    def setting(self, name: str, default: object = None) -> object:
        """One DataLoader argument as recorded, or ``default``."""
        return dict(self.settings).get(name, default)

    @property
    def data_wait_fraction(self) -> Optional[float]:
        """Share of the time from the iterator's creation to its last batch that main spent
        waiting inside ``__next__`` (0..1), or ``None`` before the first batch."""
        if self.last_batch is None or self.last_batch <= self.created:
            return None
        return min(1.0, self.wait_s / (self.last_batch - self.created))

    @property
    def label(self) -> str:
        """``train.py:42 (pid 7, iterator 3)``: where the iterator was created."""
        where = f"{self.site.file.rsplit('/', 1)[-1]}:{self.site.line}" if self.site else "DataLoader"
        return f"{where} (pid {self.pid}, iterator {self.iterator})"


@dataclass(frozen=True)
class ThreadAtFork:
    """A thread of the forking process when a DataLoader iterator forked its workers, from the
    inside view: ``frames`` innermost first, as py-spy's; ``forking`` marks the thread that
    called ``fork``."""

    name: Optional[str]
    native_id: Optional[int]
    daemon: Optional[bool]
    forking: bool
    frames: Tuple["Frame", ...]


@dataclass(frozen=True)
class ForkRecord:
    """The threads of ``pid`` when iterator ``iterator`` forked its workers ``workers``:
    ``threads`` its Python threads with their stacks, ``os_threads`` every OS thread as
    ``(tid, comm)`` (native ones included; empty from an older recorder)."""

    pid: int
    iterator: int
    site: Optional["Frame"]
    workers: Tuple[int, ...]
    threads: Tuple[ThreadAtFork, ...]
    os_threads: Tuple[Tuple[int, str], ...] = ()


@dataclass(frozen=True)
class RngCheck:
    """One DataLoader worker's random generators as it recorded them: digests of each
    generator's state (``(name, digest)``) when it created its fetcher (after PyTorch seeded it
    and after ``worker_init_fn``) and again some samples later (``later`` empty until then)."""

    pid: int
    ppid: int
    worker_id: int
    num_workers: int
    start: Tuple[Tuple[str, str], ...]
    later: Tuple[Tuple[str, str], ...] = ()


@dataclass(frozen=True)
class WorkerFetch:
    """A process's count of samples its fetcher reached for (``<pid>.fetch``, written by the
    inside view's recorder in ``torch.utils.data._utils.fetch``): ``samples`` since it started,
    the last at ``last_mono`` (``time.monotonic()`` seconds, ``None`` before the first). A
    worker that raises it moves; one that polls or waits inside a sample does not."""

    pid: int
    samples: int
    last_mono: Optional[float]


@dataclass(frozen=True)
class WorkerExec:
    """A DataLoader worker that replaced itself with another program (``os.exec*``), as it
    recorded just before: the program's ``path`` and the Python frames that called it
    (outermost first, innermost last)."""

    pid: int
    path: str
    frames: Tuple["Frame", ...]


@dataclass(frozen=True)
class WorkerFailure:
    """A batch whose fetch raised in a DataLoader worker, as the worker recorded it when it
    wrapped the exception for main (``ExceptionWrapper`` in torch/_utils.py): its ``worker`` id,
    the ``batch`` index (main's ``_rcvd_idx`` numbering), its sample ``indices`` (the first 64;
    ``None`` when they are not ints), the ``sample`` index being read when it raised (``None``:
    not known, e.g. the Dataset's ``__getitems__`` or collate raised) and the ``exception``'s
    class name; ``at_mono`` when (``time.monotonic()`` seconds); ``through`` the method the
    fetcher called when the ``__getitem__`` that raised was reached through it
    (``Subset.__getitems__``: ``sample`` is then an index of the dataset inside), else ``None``."""

    pid: int
    worker: Optional[int]
    batch: int
    indices: Optional[Tuple[int, ...]]
    sample: Optional[int]
    exception: Optional[str]
    at_mono: float = 0.0
    through: Optional[str] = None


@dataclass(frozen=True)
class ProcessEnd:
    """How a process that ``multiprocessing`` started (not a DataLoader worker) ended, as it
    recorded itself (the inside view, ``_on_mp_end`` in the recorder): ``name`` its
    ``Process.name``, ``code`` the exit code ``BaseProcess._bootstrap`` returns (0, a
    ``SystemExit`` code, 1 after an uncaught exception), ``exception`` that exception's
    ``Type: message`` (``None`` without one), ``at_mono`` when (``time.monotonic()`` seconds).
    Written by the job: text the report shows is made printable there."""

    pid: int
    name: Optional[str]
    code: Optional[int]
    exception: Optional[str]
    at_mono: Optional[float]


@dataclass(frozen=True)
class InsideView:
    """What the job's processes recorded about their DataLoaders at one instant: ``loaders``
    per live iterator, ``forks`` per iterator that forked workers, ``rng`` per worker that
    recorded its random generators, ``fetches`` per process that fetched samples, ``execs`` per
    worker that exec'd another program, ``failures`` per batch a worker failed to fetch,
    ``recording`` the pids whose recorder runs (it wrote its record when installed, and has not
    stopped), ``ends`` how each process that ``multiprocessing`` started (not a worker) and that
    ended said it ended (:class:`ProcessEnd`), and ``note`` saying why the view is empty or
    partial (``None`` when it is fine)."""

    loaders: Tuple[LoaderView, ...] = ()
    forks: Tuple[ForkRecord, ...] = ()
    note: Optional[str] = None
    rng: Tuple[RngCheck, ...] = ()
    fetches: Tuple[WorkerFetch, ...] = ()
    execs: Tuple[WorkerExec, ...] = ()
    recording: Tuple[int, ...] = ()
    failures: Tuple[WorkerFailure, ...] = ()
    ends: Tuple[ProcessEnd, ...] = ()


# Signal names for exit records (signal(7)); any other number is shown as a number.
_SIGNAL_NAMES = {
    1: "SIGHUP",
    2: "SIGINT",
    3: "SIGQUIT",
    4: "SIGILL",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    11: "SIGSEGV",
    13: "SIGPIPE",
    14: "SIGALRM",
    15: "SIGTERM",
}

# What is said of a process whose exit status no one recorded (NOTE [ Exit records ] in
# watchdog/collect/sampler.py): never more than is known.
NO_EXIT_RECORD = (
    "ended without a record (killed by a signal it could not catch, e.g. SIGKILL, or crashed; or its parent "
    "reaped it before a sample saw its exit status)"
)


@dataclass(frozen=True)
class ExitRecord:
    """How a process of the job other than main and its workers (role ``other`` or
    ``worker_starting``) ended, as the sampler saw it (NOTE [ Exit records ] in
    watchdog/collect/sampler.py).

    ``last_seen_mono``/``last_seen_wall`` is the last sample that held it alive,
    ``ended_mono``/``ended_wall`` the first that found it ended (a zombie, or gone).
    ``status`` is its wait status in waitpid(2)'s form (``exit code << 8``, or the signal
    number, ``| 0x80`` for a core dump), read from ``/proc/PID/stat`` field 52 (``exit_code``,
    proc(5), Linux 3.5 and later) while it was a zombie; ``None`` when its parent reaped it
    before a sample saw it (then nothing says how it ended)."""

    pid: int
    start_ticks: int
    ppid: int
    role: ProcessRole
    name: str
    cmdline: Tuple[str, ...]
    last_seen_mono: float
    last_seen_wall: float
    ended_mono: float
    ended_wall: float
    status: Optional[int] = None

    @property
    def ident(self) -> ProcId:
        """``(pid, start_ticks)``: the process, not a later one with its pid."""
        return ProcId(self.pid, self.start_ticks)

    @property
    def exit_code(self) -> Optional[int]:
        """The code it passed to ``exit`` (``WEXITSTATUS``), or ``None`` (killed, or unknown)."""
        if self.status is None or self.status & 0x7F:
            return None
        return (self.status >> 8) & 0xFF

    @property
    def signal(self) -> Optional[int]:
        """The signal that ended it (``WTERMSIG``), or ``None`` (it exited, or unknown)."""
        if self.status is None or not self.status & 0x7F:
            return None
        return self.status & 0x7F

    def how(self) -> str:
        """How it ended, as a clause: ``exited with code 1``, ``was killed by signal 9
        (SIGKILL)``, or :data:`NO_EXIT_RECORD`."""
        if self.signal is not None:
            core = " (core dumped)" if self.status is not None and self.status & 0x80 else ""
            return f"was killed by signal {self.signal} ({_SIGNAL_NAMES.get(self.signal, 'signal')}){core}"
        if self.exit_code is not None:
            return f"exited with code {self.exit_code}"
        return NO_EXIT_RECORD


# The states of a stopped process (proc(5)): stopped by a signal, stopped by a tracer.
STOPPED_STATES = ("T", "t")


@dataclass(frozen=True, **_SLOTS)
class Sample:
    """Everything read at one instant: the job's processes (main first), the host, and the
    inside view's loaders and workers' sample counts (empty without the hook)."""

    t_mono: float
    wall: float
    processes: Tuple[ProcessSample, ...]
    host: HostSample
    loaders: Tuple[LoaderView, ...] = ()
    fetches: Tuple[WorkerFetch, ...] = ()
    # Whether the processes' threads were read for this sample: ``False`` while main's loader
    # delivers batches and the tree leaves most of its CPUs idle, where each process's
    # ``threads`` is empty (NOTE [ Thread reads ] in watchdog/collect/sampler.py); a lean
    # sample has its full sample's.
    threads_read: bool = True
    # How the job's processes other than main and its workers ended, so far (NOTE [ Exit
    # records ] in watchdog/collect/sampler.py), oldest first; the same tuple in every sample
    # until another ends.
    exits: Tuple[ExitRecord, ...] = ()
    # Whether this is a lean sample: the last full sample's processes again, the same objects,
    # after a check that main's children did not change (NOTE [ Lean ticks ] in
    # watchdog/collect/read_plan.py).
    lean: bool = False
    # Whether the sampler may take a lean sample after this one: no process of the tree ended
    # at its walk, none is young (its role may still change) and memory is not short; a lean
    # sample's is ``True``. No tick is skipped after a sample without (NOTE [ Lean ticks ]).
    may_lean: bool = False
    # The inside view read with this sample (its loaders and fetches are the fields above), or
    # ``None`` when none was read (an examination's samples; no recorder). Equal views of
    # consecutive samples are one object.
    inside: Optional[InsideView] = field(default=None, repr=False, compare=False)
    # {pid: process}, built at the first :meth:`process` call (rules that follow one process
    # through the whole timeline look up every sample).
    _by_pid: Optional[Dict[int, ProcessSample]] = field(default=None, init=False, repr=False, compare=False)
    # The workers, found at the first :attr:`workers` read (the looks for warnings read them at
    # every sample of their window).
    _workers: Optional[Tuple[ProcessSample, ...]] = field(default=None, init=False, repr=False, compare=False)
    # (the processes and time of the sample before, the maker, what it made of the pair):
    # :meth:`pair_rows`. Never the sample before itself: each sample would then hold the one
    # before it, and the whole history would outlive the timeline.
    _pair: Optional[Tuple[Tuple["ProcessSample", ...], float, Any, Any]] = field(
        default=None, init=False, repr=False, compare=False
    )
    # Whether main or a worker is stopped, found at the first :attr:`stopped` read (the looks
    # for warnings ask it of every sample of their window at every look).
    _stopped: Optional[bool] = field(default=None, init=False, repr=False, compare=False)

    def process(self, pid: int) -> Optional[ProcessSample]:
        """The process with ``pid`` in this sample, or ``None``."""
        index = self._by_pid
        if index is None:
            index = {p.pid: p for p in self.processes}
            object.__setattr__(self, "_by_pid", index)
        return index.get(pid)

    def pair_rows(self, before: "Sample", make: Callable[["Sample", "Sample"], _T]) -> _T:
        """``make(before, self)``, kept with this sample for the last ``before`` (known by its
        processes and time: the sample itself is not held) and ``make`` it was asked with: the
        looks for warnings sum each pair of the window again at every look
        (``watchdog.diagnose.worker_time``). ``make`` must depend on ``before``'s processes and
        time and on this sample alone, and what it makes must hold no sample."""
        kept = self._pair
        if kept is None or kept[0] is not before.processes or kept[1] != before.t_mono or kept[2] is not make:
            kept = (before.processes, before.t_mono, make, make(before, self))
            object.__setattr__(self, "_pair", kept)
        return kept[3]

    @property
    def main(self) -> Optional[ProcessSample]:
        """The job's main process (the launcher of a multi-rank job), or ``None`` when it was
        not found in this sample."""
        for p in self.processes:
            if p.role in (ROLE_MAIN, ROLE_LAUNCHER):
                return p
        return None

    @property
    def workers(self) -> Tuple[ProcessSample, ...]:
        """The DataLoader workers in this sample."""
        found = self._workers
        if found is None:
            found = tuple(p for p in self.processes if p.role == ROLE_WORKER)
            object.__setattr__(self, "_workers", found)
        return found

    @property
    def stopped(self) -> bool:
        """Whether main or a DataLoader worker was seen stopped (state ``T`` or ``t``: SIGSTOP,
        a job-control stop, a tracer), NOTE [ Stopped jobs ] in watchdog/diagnose/worker_time.py."""
        found = self._stopped
        if found is None:
            main = self.main
            found = (main is not None and main.state in STOPPED_STATES) or any(
                p.state in STOPPED_STATES for p in self.workers
            )
            object.__setattr__(self, "_stopped", found)
        return found


def samples_since(timeline: Sequence[Sample], t_mono: float) -> Sequence[Sample]:
    """The samples of ``timeline`` (oldest first) taken at ``t_mono`` (``time.monotonic()``
    seconds) or later: found from its end, so a look at the last minute of a ten-minute
    timeline walks the minute, not the ten."""
    i = len(timeline)
    while i > 0 and timeline[i - 1].t_mono >= t_mono:
        i -= 1
    return timeline[i:]


@dataclass(frozen=True)
class Frame:
    """One stack frame as py-spy reports it; ``line`` is 0 for native frames. ``short_filename``
    is py-spy's shortened file name (``multiprocessing/queues.py``), when it gives one."""

    function: str
    file: str
    line: int
    native: bool
    module: Optional[str] = None
    locals: Optional[Tuple[Tuple[str, str], ...]] = None
    short_filename: Optional[str] = None


@dataclass(frozen=True)
class ThreadStack:
    """One thread's stack, innermost frame first. ``active`` is py-spy's idle flag inverted:
    py-spy calls a thread deadlocked on a lock "idle", so it is never evidence of health."""

    tid: int
    name: str
    active: bool
    owns_gil: bool
    frames: Tuple[Frame, ...]


class StackFailureKind(TextEnum):
    """Why py-spy gave no stack, or only part of one (``watchdog.collect.pyspy``); the value is
    the words a report's ``pyspy_problem`` groups pids under."""

    TIMED_OUT = "timed out at the dump deadline"
    NOT_RUN = "not started before the dump deadline"
    PTRACE_REFUSED = "ptrace refused"
    GONE = "process gone"
    UNWIND_FAILED = "native unwinding failed"
    DISK_SLEEP = "in D state (read --nonblocking, which py-spy cannot combine with --native)"
    NO_PYSPY = "py-spy missing"
    FAILED = "py-spy failed"


@dataclass(frozen=True)
class StackFailure:
    """A failed dump (``ProcessStack.error``) or a part of a stack that was asked for and is
    missing (``ProcessStack.lost``; ``what`` is ``native frames`` or ``locals``): its ``kind``
    and ``detail``, one sentence that names the pid (with the ptrace remedy when permission is
    the cause)."""

    kind: StackFailureKind
    detail: str
    what: str = ""

    def __str__(self) -> str:
        return f"{self.what} lost: {self.detail}" if self.what else self.detail


@dataclass(frozen=True)
class ProcessStack:
    """The result of dumping one process with py-spy.

    ``threads`` is empty and ``error`` says why when the dump failed; ``native`` tells whether
    native frames were collected; ``raw`` is py-spy's own output (JSON text) or its error text;
    ``elapsed_s`` the seconds the dump took. ``lost`` says what was asked for but is missing
    from a stack that did come back, and why (the threads are then Python-only); ``None`` when
    nothing was lost.
    """

    pid: int
    threads: Tuple[ThreadStack, ...]
    native: bool
    error: Optional[StackFailure]
    raw: str
    elapsed_s: float
    lost: Optional[StackFailure] = None

    @property
    def ok(self) -> bool:
        """True when py-spy returned stacks."""
        return self.error is None


@dataclass(frozen=True)
class EarlierStack:
    """A stack taken while the job still ran, before the moment a report explains: py-spy's
    ``--nonblocking`` dump of a process a warning named (``py_spy.at_warning``). ``why`` is
    the warning's kind, ``wall`` when it was taken (``time.time()`` seconds). A death with no
    traceback of its own (SIGKILL from the OOM killer) says from it which line the process was
    in then, as of then."""

    pid: int
    wall: float
    why: str
    stack: ProcessStack


class LoaderWork(NamedTuple):
    """What one process of the job's tree did in a stall's last ``Stall.work_window_s``
    seconds: ``cpu_s`` CPU seconds, ``io_bytes`` bytes read and written (``rchar + wchar``) and
    ``wakes`` voluntary context switches of all its threads; ``runq_wait_s`` seconds its main
    thread waited runnable for a CPU (``/proc/PID/schedstat``), ``None`` when not read at both
    ends of the window."""

    pid: int
    cpu_s: float
    io_bytes: int
    wakes: int = 0
    runq_wait_s: Optional[float] = None


class Measure(TextEnum):
    """What counts as the loader's progress in a stall (NOTE [ Hang criterion ] in detect/progress.py);
    the value is what report.json shows.

    ``BATCHES``: the inside view shows main in ``__next__``: a batch main received, or a
    sample a worker reached for. ``MAIN_WAIT``: no inside view, and main's iterating thread has
    sat in a wait like PyTorch's 5 s batch poll without reading or writing a byte (``rchar +
    wchar`` of the whole process, which the pin-memory thread's reads of the workers' result
    queue also move) or using CPU: only a byte moved or main's own work ends it. ``ACTIVITY``: any thread's CPU,
    I/O and wake-ups."""

    BATCHES = "batches"
    MAIN_WAIT = "main_wait"
    ACTIVITY = "activity"


class Trigger(TextEnum):
    """What led to an examination of a stall (NOTE [ Hang criterion ] in detect/progress.py)."""

    STALL = "stall_timeout"  # no progress for stall_timeout_s
    PROOF = "proof"  # a process's every thread in an untimed private-futex wait for stall_timeout_s
    BUSY = "busy_stall"  # no batch for busy_stall_timeout_s, whatever else moved
    RHYTHM = "batch_rhythm"  # far past the loader's own rhythm between batches (NOTE [ Batch rhythm ])


@dataclass(frozen=True)
class Stall:
    """The detector's view of the loader's progress (see NOTE [ Hang criterion ] in detect/progress.py).

    ``stall_s`` is how long the loader path has made no progress, since ``quiet_since_mono``
    (``time.monotonic()``). ``progress_age_s`` maps pid to the seconds since that process's
    loader threads (or descendants) last moved. ``no_delivery_s`` is how long no batch was
    delivered (main's iterating thread did no CPU or I/O and no worker did I/O).
    ``tree_quiet_s`` is how long no process of the job's tree did CPU work or I/O. ``stuck_s``
    maps the pid of a main or worker whose every thread has waited on a private futex with no
    timeout, unchanged, to how long. ``trigger`` is what led to the examination
    (:class:`Trigger`), set once one is due;
    ``criterion`` says which stall criterion was in force and why (NOTE [ Batch rhythm ]), for
    the report (its ``stall.rule``).
    ``measure`` is what counted as the loader's progress (:class:`Measure`). ``loader_work``
    holds what each process of the job's tree did in the stall's last ``work_window_s``
    seconds (:class:`LoaderWork`; at most half the stall, at most ``detect.WORK_WINDOW_S``).
    """

    stall_s: float
    quiet_since_mono: float
    main_pid: int
    progress_age_s: Tuple[Tuple[int, float], ...]
    no_delivery_s: float = 0.0
    tree_quiet_s: float = 0.0
    stuck_s: Tuple[Tuple[int, float], ...] = ()
    trigger: Optional[Trigger] = None
    criterion: str = ""
    measure: Measure = Measure.ACTIVITY
    loader_work: Tuple[LoaderWork, ...] = ()
    work_window_s: float = 0.0


class LinkKind(TextEnum):
    """What one link of a wait chain waits on (:class:`WaitLink`); the value is what reports show."""

    PIPE = "pipe"
    TCP = "tcp"
    UNIX = "unix"
    SOCKET = "socket"
    FUSE = "fuse"
    NFS = "nfs"
    FIFO = "fifo"
    TERMINAL = "terminal"
    FILE = "file"
    CHILD = "child"
    LOCK = "lock"
    OTHER = "other"


@dataclass(frozen=True)
class WaitLink:
    """One link of a wait chain (``watchdog.collect.chain``): thread ``tid`` of ``pid``
    (``name``, its comm) waits on ``kind`` through ``target`` (the descriptor's target: a path,
    ``pipe:[N]``, ``socket:[N]``; empty for a child), ``wait`` its kernel wait's sentence, and
    ``peer`` what is at the other end when it can be told: a TCP peer ``host:port``, a mount
    point with its file-system type (``/mnt/data fuse.sshfs``), the pids of a pipe's other end.
    ``fuse_connection`` is the FUSE connection's number (``/sys/fs/fuse/connections/N``);
    ``fd`` the descriptor waited on and ``reading`` whether the wait reads it."""

    pid: int
    tid: int
    name: str
    kind: LinkKind
    target: str
    wait: str
    peer: str = ""
    fuse_connection: Optional[int] = None
    fd: Optional[int] = None
    reading: bool = False


@dataclass(frozen=True)
class FileLock:
    """A lock another process holds on a file a loader process has open (``/proc/locks``,
    Documentation/filesystems/proc.rst; fcntl(2), flock(2)): ``path`` as the waiting process's
    descriptor names it, held by ``holder`` (``None`` for an open file description lock, which
    has no owning pid), ``kind`` ``POSIX``, ``FLOCK`` or ``OFDLCK``, ``mode`` ``READ`` or
    ``WRITE``; ``opener`` is the loader process that has the file open."""

    opener: int
    path: str
    holder: Optional[int]
    kind: str
    mode: str


@dataclass(frozen=True)
class LockFile:
    """A lock file in a folder the job uses whose first line names a pid, the way a soft lock
    marks its holder (tox-dev/filelock's ``SoftFileLock`` writes ``pid``, ``hostname`` and a
    start token, one a line; a pid file writes the pid): ``path`` as read (the folder as the
    job names it, joined with the file's name), ``pid`` and ``host`` (the second line when it
    is a host name, else ``None``) from its content, ``written_wall`` its modification time
    (seconds since the epoch). ``holder`` says what ``pid`` is on this machine now
    (``watchdog.collect.lockfiles``): ``alive`` (a process that started before the file was
    written), ``reused`` (a process that started after it: another holder of the number),
    ``zombie`` (ended, not yet reaped) or ``gone`` (no such process); ``holder_start_ticks`` is
    that live or zombie process's start (``stat`` field 22). ``other_host`` is True when
    ``host`` names another machine than dlwatch's: the pid is then not this machine's to check,
    unless the job's own timeline saw it."""

    path: str
    pid: int
    host: Optional[str]
    written_wall: float
    holder: str
    holder_start_ticks: Optional[int] = None
    other_host: bool = False


@dataclass(frozen=True)
class PipeEnds:
    """Who holds each end of the pipes that waiting threads read or write: ``targets`` maps
    ``(pid, fd)`` to the fd's target (:class:`FdTarget`, decoded from ``pipe:[123]``; link text
    given here is decoded on construction); ``readers``/``writers`` map a pipe (its link text,
    ``FdTarget.path``) to the pids holding its read/write end. ``complete`` is False when some
    process's descriptors could not be read (another user's): then no pipe wait can be part of
    a proof."""

    targets: Mapping[Tuple[int, int], FdTarget]
    readers: Mapping[str, Tuple[int, ...]]
    writers: Mapping[str, Tuple[int, ...]]
    complete: bool

    def __post_init__(self) -> None:
        # Targets given as link text (older captures, hand-built records) are decoded here.
        if any(not isinstance(t, FdTarget) for t in self.targets.values()):
            object.__setattr__(self, "targets", {k: _fd_target(t) for k, t in self.targets.items()})


@dataclass(frozen=True)
class LockHold:
    """Who can release the file lock a thread waits for in ``flock``/``fcntl`` (NOTE [ Deadlock
    proof ] in detect/proof.py): ``path`` is the waiter's descriptor's target, ``locks`` the locks held
    on that file as ``/proc/locks`` shows them (``POSIX WRITE``, ``FLOCK READ``), ``holders``
    every process that can release one (a POSIX lock's owning process; for an ``flock`` or OFD
    lock, every process with a descriptor of the lock's open file description: its
    ``/proc/PID/fdinfo`` lists the lock), and ``complete`` False when some holder could not be
    known (a process's descriptors unreadable, an OFD lock's pid -1 not found)."""

    path: str
    locks: Tuple[str, ...]
    holders: Tuple[int, ...]
    complete: bool


@dataclass(frozen=True)
class Evidence:
    """What one examination of a due stall read from the job (:func:`watchdog.collect.examine.look`),
    for :meth:`watchdog.detect.Episode.conclude` to decide on, all keyed by pid.

    ``details`` is every thread's ``/proc`` detail at the second of two reads
    ``gap_s`` seconds apart, and ``stable`` the same with the wait of every thread that changed
    between them made ``UNKNOWN`` (NOTE [ Deadlock proof ] in detect/proof.py). ``children`` maps a
    process to its children in the sample; ``pipes`` the holders of the pipes stable threads
    wait on; ``stacks`` the Python-only py-spy dumps of main and the workers; ``wakeable`` why a
    process might wake itself (a timer signal it catches, POSIX timers); ``file_locks`` the
    locks others hold on files a lock-waiting thread has open; ``after`` the job's sample once
    the look was over (workers that came or went mean the job moved); ``lock_holds`` who can
    release the lock each stable ``flock``/``fcntl`` wait (pid, fd) waits for (:class:`LockHold`);
    ``manager_peers`` for each Manager server read, the pid of the job holding the other end of
    each of its connected sockets (``None``: no process of the job, or not a Unix socket;
    ``collect.sockets.peer_holders``), absent when not read; ``manager_listeners`` for each
    Manager server read, the descriptors of its listening sockets at multiprocessing's own
    private address (``collect.sockets.private_listeners``); ``non_blocking_gets`` the workers whose
    loop thread is inside a queue's ``get_nowait`` or whose innermost frame of the job's code is
    at (or up to ``frames.ENCLOSING_LINES`` below) a line that gets from a queue without blocking
    (``frames.NON_BLOCKING_GET``, read from the job's source as its user could): a spin, not a
    computation."""

    details: Mapping[int, Tuple[ThreadSample, ...]]
    stable: Mapping[int, Tuple[ThreadSample, ...]]
    children: Mapping[int, Tuple[int, ...]]
    pipes: Optional[PipeEnds]
    stacks: Mapping[int, ProcessStack]
    wakeable: Mapping[int, str]
    file_locks: Tuple[FileLock, ...]
    after: Sample
    gap_s: float = 0.25
    lock_holds: Mapping[Tuple[int, int], LockHold] = field(default_factory=dict)
    manager_peers: Mapping[int, Tuple[Optional[int], ...]] = field(default_factory=dict)
    manager_listeners: Mapping[int, Tuple[int, ...]] = field(default_factory=dict)
    non_blocking_gets: Tuple[int, ...] = ()


@dataclass(frozen=True)
class Polling:
    """A thread that polls: in two Python stacks ``gap_s`` seconds apart (the batch measure's
    examination) its innermost frame in the job's own code is the same ``frame``, and it woke
    ``wakes`` times in between (voluntary context switches): a loop that waits, wakes, looks and
    waits again at the same line, for something that does not happen."""

    pid: int
    tid: int
    frame: "Frame"
    wakes: int
    gap_s: float


class ProofKind(TextEnum):
    """Which argument a :class:`Proof` makes (NOTE [ Deadlock proof ] in detect/proof.py); the value
    is what report.json shows."""

    KERNEL = "kernel"
    LOADER_IDLE = "loader_idle"
    # A wait whose only possible releaser has ended (NOTE [ Manager lock proof ] in
    # watchdog/manager_proof.py): main, the workers and the manager can never move.
    WAITS_ON_DEAD = "waits_on_dead"
    # A cycle through a multiprocessing.Manager among the living (NOTE [ Manager lock proof ] in
    # watchdog/manager_proof.py): main, the workers and the manager wait for one another.
    MANAGER_CYCLE = "manager_cycle"


@dataclass(frozen=True)
class ProofLink:
    """One step of a proof: thread ``tid`` of ``pid`` (``name``: py-spy's thread name or the
    comm) waits on ``wait`` (decoded from ``raw``, the ``/proc/PID/task/TID/syscall`` line), and
    ``why`` that can never end. ``tid`` is ``None`` for a statement about a whole process
    (``name`` is then its role word, ``main`` or ``worker``: the loader-level proof)."""

    pid: int
    tid: Optional[int]
    name: str
    wait: str
    why: str = ""
    raw: str = ""

    def text(self, raw: bool = False) -> str:
        """The step as one line: ``pid P thread T (name): wait[ — `raw`]; why`` (the raw line
        only with ``raw``: the report's proof section keeps it, evidence lines do not)."""
        if self.tid is None:
            head = f"{self.name} pid {self.pid}: {self.wait}"
        else:
            head = f"pid {self.pid} thread {self.tid} ({self.name}): {self.wait}"
        if raw and self.raw:
            head += f" — `{self.raw}`"
        return f"{head}; {self.why}" if self.why else head


@dataclass(frozen=True)
class Proof:
    """Why the job can never move by itself (NOTE [ Deadlock proof ] in detect/proof.py).

    ``kind`` is ``kernel`` (every thread of ``pids`` waits, with no timeout, for something only
    threads of that same set could do), ``loader_idle`` (main waits inside the iterator for a
    batch while every worker, ``pids``, sits idle in PyTorch's loop and nothing moved),
    ``waits_on_dead`` (main, the workers and a Manager's server, ``pids``, wait for a lock that no
    live process can release, and a process of the job has ended) or ``manager_cycle`` (the same
    wait with no process of the job ended: the holder is one of them; NOTE [ Manager lock proof ]
    in watchdog/manager_proof.py).
    ``links`` are the argument's steps, one per thread or process; ``conclusion`` what follows.
    """

    kind: ProofKind
    pids: Tuple[int, ...]
    links: Tuple[ProofLink, ...]
    conclusion: str

    def links_of(self, pid: int) -> Tuple[ProofLink, ...]:
        """The steps about ``pid``."""
        return tuple(link for link in self.links if link.pid == pid)

    def lines(self, raw: bool = True) -> Tuple[str, ...]:
        """Every step as a line (:meth:`ProofLink.text`), the conclusion last."""
        return tuple(link.text(raw) for link in self.links) + (self.conclusion,)


class VerdictKind(TextEnum):
    """Where main's stall is (:class:`HangVerdict`)."""

    DATALOADER = "dataloader"  # the iterating thread waits inside the DataLoader iterator
    OUTSIDE_LOADER = "outside_loader"  # it is stalled elsewhere (a collective, the user's code)


@dataclass(frozen=True)
class HangVerdict:
    """The confirmation of a stall from main's stack.

    ``kind`` says where main is stalled (:class:`VerdictKind`). ``confirmed_by_stack`` is
    False when py-spy could not read main and the
    verdict rests on ``/proc`` alone. ``thread`` is the main-process thread that the verdict
    names (the iterating thread), when known.
    """

    kind: VerdictKind
    confirmed_by_stack: bool
    reason: str
    thread: Optional[ThreadStack] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", VerdictKind(self.kind))  # a plain string is checked once here

    @property
    def in_loader(self) -> bool:
        """Main is stalled inside the DataLoader iterator (``VerdictKind.DATALOADER``)."""
        return self.kind is VerdictKind.DATALOADER


@dataclass(frozen=True)
class ReportWritten:
    """One report just written, as the publisher tells the watchers and the metrics endpoint:
    its ``mode`` (hang, crash, live, exit), the first diagnosis's ``kind`` and ``severity``, the
    ``rank`` ("" outside a multi-rank job) with its torchrun variables (``rank_vars``: ``RANK``,
    ``LOCAL_RANK``, …) and the report's ``folder``."""

    mode: str
    kind: str
    rank: str = ""
    severity: str = ""
    folder: str = ""
    rank_vars: Tuple[Tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RankId:
    """Who one training rank is, made once when the rank is found
    (:func:`watchdog.collect.discovery.find_ranks`'s variables): ``vars`` are its rank variables,
    sorted by name (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, …, and ``RANK_SOURCE`` when a
    launcher other than torchrun's named it), as strings."""

    vars: Tuple[Tuple[str, str], ...] = ()

    @classmethod
    def of(cls, env: Dict[str, str]) -> "RankId":
        """The rank whose variables are ``env`` (name -> value)."""
        return cls(tuple(sorted((str(k), str(v)) for k, v in env.items())))

    @property
    def number(self) -> str:
        """Its ``RANK`` ("" when none was given)."""
        return self.as_dict().get("RANK", "")

    def as_dict(self) -> Dict[str, str]:
        """Its variables, name -> value (a report's ``job.rank``)."""
        return dict(self.vars)


@dataclass(frozen=True)
class WatcherStatus:
    """What a watcher (:class:`watchdog.watch.watcher.Watcher`) last saw, for the other ranks'
    watchers and the metrics endpoint, which read it from other threads (``Watcher.status``).

    ``rank`` is the rank's ``RANK`` ("" outside a multi-rank job) and ``root_pid`` the process it
    watches as main; ``sample`` its latest sample (``None`` before the first); ``stall_s`` the
    seconds since the loader path moved, at the last tick (``None``: no stall measured);
    ``last_hang_kind`` the first diagnosis of its last hang report ("" before any) and
    ``hang_in_loader`` whether that hang was in its DataLoader (main waiting for a batch);
    ``delivered`` the batches main's iterators delivered while watched, by loader site
    (:attr:`~watchdog.detect.ProgressTracker.delivered`)."""

    rank: str = ""
    root_pid: int = 0
    rank_vars: Tuple[Tuple[str, str], ...] = ()  # the rank's torchrun variables (RANK_VARS)
    sample: Optional[Sample] = None
    stall_s: Optional[float] = None
    last_hang_kind: str = ""
    hang_in_loader: bool = False
    delivered: Tuple[Tuple[Optional[Frame], int], ...] = ()  # ProgressTracker.delivered
    # the input-bound verdict at the last look for warnings (a watchdog.diagnose.throughput.Judgement:
    # types import no stage), and the workers' seconds by state (throughput.WorkerClock.totals)
    input_verdict: Optional[Any] = None
    worker_seconds: Tuple[Tuple[str, str, float], ...] = ()


@dataclass(frozen=True)
class Launch:
    """How the watched job was started, so that ``dlwatch verify`` can start it again.

    ``command`` is the argv dlwatch started (``dlwatch run``) or the root process's command
    line (``attach``); ``cwd`` its working directory; ``uid`` the real user id it ran as;
    ``watched_by`` is ``"run"`` or ``"attach"``; ``stdin`` what its standard input was
    (:data:`watchdog.collect.launch.STDIN_KINDS`), ``mount_ns`` its mount namespace and
    ``cgroup`` its cgroup path (each ``""`` when unknown): what a re-run may not have."""

    command: Tuple[str, ...]
    cwd: Optional[str]
    uid: Optional[int]
    watched_by: str
    stdin: str = ""
    mount_ns: str = ""
    cgroup: str = ""

    def as_dict(self, command: Tuple[str, ...]) -> Dict[str, object]:
        """The record as ``report.json`` carries it (``job.launch``), with ``command`` (the
        redacted one) in place of the command itself."""
        return {
            "command": list(command),
            "cwd": self.cwd,
            "uid": self.uid,
            "watched_by": self.watched_by,
            "stdin": self.stdin,
            "mount_ns": self.mount_ns,
            "cgroup": self.cgroup,
        }


# The DataLoader settings a Fix may change (torch.utils.data.DataLoader's own names).
FIX_LOADER_SETTINGS = (
    "multiprocessing_context",
    "num_workers",
    "timeout",
    "pin_memory",
    "prefetch_factor",
    "persistent_workers",
)


def _whole(minimum: int):
    def check(value: object) -> str:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
        return "" if ok else f"an integer >= {minimum}"

    return check


def _flag(value: object) -> str:
    return "" if isinstance(value, bool) else "true or false"


def _seconds(value: object) -> str:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 and value == value
    return "" if ok else "seconds >= 0 (0: no timeout)"


def _start_method(value: object) -> str:
    return "" if value in START_METHODS else f"one of {', '.join(START_METHODS)}"


# What each loader setting of a Fix accepts (torch/utils/data/dataloader.py, DataLoader.__init__).
START_METHODS = ("fork", "spawn", "forkserver")
SHARING_STRATEGIES = ("file_descriptor", "file_system")  # torch.multiprocessing.get_all_sharing_strategies() on Linux
_FIX_VALUES = {
    "multiprocessing_context": _start_method,
    "num_workers": _whole(0),
    "timeout": _seconds,
    "pin_memory": _flag,
    "prefetch_factor": _whole(1),
    "persistent_workers": _flag,
}


@dataclass(frozen=True)
class Fix:
    """A fix that ``dlwatch verify`` can apply to the user's job with no edit to its code
    (``watchdog.commands.verify``; the job's recorder applies the loader part, ``_dlwatch_inside.apply``).

    ``loader`` holds ``(setting, value)`` pairs of :data:`FIX_LOADER_SETTINGS` for the
    ``DataLoader`` at the report's site (``multiprocessing_context`` as a start method name:
    ``"forkserver"``, ``"spawn"``); ``sharing_strategy`` is given to
    ``torch.multiprocessing.set_sharing_strategy`` (``"file_system"``); ``env`` holds
    environment variables to set (``("OMP_NUM_THREADS", "1")``); ``nofile`` is a soft
    RLIMIT_NOFILE to set, or ``None``; ``worker_threads`` is the intra-op thread count each
    DataLoader worker of the loader at the report's site gets, set by
    ``torch.set_num_threads(n)`` after the job's own ``worker_init_fn`` (which may have raised
    it: torch/utils/data/_utils/worker.py sets 1 before calling it), or ``None``.

    Raises:
        ValueError: a loader setting outside :data:`FIX_LOADER_SETTINGS`, or a value that
            setting does not take (a start method that is not one, ``num_workers=-1``), a
            sharing strategy Linux's torch lacks, a bad ``nofile``, ``worker_threads`` or variable.
    """

    loader: Tuple[Tuple[str, object], ...] = ()
    sharing_strategy: Optional[str] = None
    env: Tuple[Tuple[str, str], ...] = ()
    nofile: Optional[int] = None
    worker_threads: Optional[int] = None

    def __post_init__(self) -> None:
        wrong = [k for k, _ in self.loader if k not in FIX_LOADER_SETTINGS]
        if wrong:
            raise ValueError(f"not a DataLoader setting a fix may change: {', '.join(wrong)}")
        for key, value in self.loader:
            why = _FIX_VALUES[key](value)
            if why:
                raise ValueError(f"{key}={value!r}: {why}")
        if self.sharing_strategy is not None and self.sharing_strategy not in SHARING_STRATEGIES:
            raise ValueError(f"sharing_strategy={self.sharing_strategy!r}: one of {', '.join(SHARING_STRATEGIES)}")
        nofile = self.nofile
        if nofile is not None and (isinstance(nofile, bool) or not isinstance(nofile, int) or not 1 <= nofile <= 2**31):
            raise ValueError(f"rlimit_nofile={nofile!r}: an integer from 1 to 2**31")
        if self.worker_threads is not None and _whole(1)(self.worker_threads):
            raise ValueError(f"worker_threads={self.worker_threads!r}: an integer >= 1")
        for name, value in self.env:
            if not name or "=" in name or "\0" in name or "\0" in value:
                raise ValueError(f"env.{name}: a variable name without '=' or NUL, and a value without NUL")

    def as_dict(self) -> Dict[str, object]:
        """The fix as ``report.json`` carries it (``remedy_apply``): only the parts it sets."""
        out: Dict[str, object] = {}
        if self.loader:
            out["loader"] = dict(self.loader)
        if self.sharing_strategy is not None:
            out["sharing_strategy"] = self.sharing_strategy
        if self.env:
            out["env"] = dict(self.env)
        if self.nofile is not None:
            out["rlimit_nofile"] = self.nofile
        if self.worker_threads is not None:
            out["worker_threads"] = self.worker_threads
        return out

    @classmethod
    def from_dict(cls, doc: Mapping[str, object]) -> "Fix":
        """The inverse of :meth:`as_dict`.

        Raises:
            ValueError: an unknown part or setting, or a value of the wrong type.
        """
        unknown = set(doc) - {"loader", "sharing_strategy", "env", "rlimit_nofile", "worker_threads"}
        if unknown:
            raise ValueError(f"unknown part of a fix: {', '.join(sorted(unknown))}")
        loader, env = doc.get("loader") or {}, doc.get("env") or {}
        nofile, strategy = doc.get("rlimit_nofile"), doc.get("sharing_strategy")
        if not isinstance(loader, Mapping) or not isinstance(env, Mapping):
            raise ValueError("a fix's loader and env parts are mappings")
        if nofile is not None and (not isinstance(nofile, int) or isinstance(nofile, bool) or nofile < 1):
            raise ValueError(f"rlimit_nofile must be a positive integer, not {nofile!r}")
        if strategy is not None and not isinstance(strategy, str):
            raise ValueError(f"sharing_strategy must be a string, not {strategy!r}")
        threads = doc.get("worker_threads")
        if threads is not None and not isinstance(threads, int):
            raise ValueError(f"worker_threads must be an integer, not {threads!r}")
        return cls(
            loader=tuple((str(k), v) for k, v in loader.items()),
            sharing_strategy=strategy,
            env=tuple((str(k), str(v)) for k, v in env.items()),
            nofile=nofile,
            worker_threads=threads,
        )

    def merged(self, other: "Fix") -> "Fix":
        """This fix with ``other``'s parts added, ``other`` winning where both set one."""
        return Fix(
            loader=tuple({**dict(self.loader), **dict(other.loader)}.items()),
            sharing_strategy=other.sharing_strategy if other.sharing_strategy is not None else self.sharing_strategy,
            env=tuple({**dict(self.env), **dict(other.env)}.items()),
            nofile=other.nofile if other.nofile is not None else self.nofile,
            worker_threads=other.worker_threads if other.worker_threads is not None else self.worker_threads,
        )

    def describe(self) -> str:
        """One phrase: ``multiprocessing_context='forkserver', sharing strategy file_system``."""
        parts = [f"{k}={v!r}" for k, v in self.loader]
        if self.sharing_strategy is not None:
            parts.append(f"sharing strategy {self.sharing_strategy}")
        parts += [f"{k}={v}" for k, v in self.env]
        if self.nofile is not None:
            parts.append(f"RLIMIT_NOFILE {self.nofile}")
        if self.worker_threads is not None:
            parts.append(f"torch.set_num_threads({self.worker_threads}) in each worker")
        return ", ".join(parts) or "nothing"


@dataclass(frozen=True)
class Finding:
    """What a diagnosis rule found (``watchdog.diagnose.engine``); the engine adds kind,
    severity and certainty and makes it a :class:`Diagnosis`.

    ``confidence`` is in [0, 1]; ``evidence`` lines each name a process, frame or figure;
    ``location`` is the ``file:line`` in the user's code, when known; ``contradiction`` names a
    measured figure that disagrees with this finding (it then ranks last, with its confidence
    cut to ``CONTRADICTED_CONFIDENCE`` of its own, and says so); ``fix`` is the remedy as
    ``dlwatch verify`` can apply it, declared by the rule beside its remedy text (``None``: the
    remedy is a change to the code).
    """

    confidence: float
    summary: str
    evidence: Tuple[str, ...]
    remedy: str
    pids: Tuple[int, ...]
    location: Optional[str] = None
    docs: Tuple[str, ...] = ()
    contradiction: Optional[str] = None
    fix: Optional[Fix] = None


# Warning kinds whose change ``dlwatch verify`` proves by a throughput A/B on the job (its
# remedy_apply run with and without, alternating), rather than by a failure that stops.
THROUGHPUT_FIX_KINDS = frozenset({"input_bound"})


@dataclass(frozen=True)
class Diagnosis:
    """One finding as the engine ranked it: the rule's :class:`Finding` with the rule's ``kind``
    and ``severity`` (``watchdog.diagnose.engine``) and the hang's ``certainty``.

    The finding's fields read through: ``confidence`` in [0, 1], ``summary``, ``evidence``
    lines that each name a process, frame or metric, ``remedy``, ``pids``, ``location`` (the
    ``file:line`` in the user's code where it applies, when known), ``docs``, and ``fix`` (the
    remedy as ``dlwatch verify`` can apply it, :class:`Fix`, ``None`` when it needs a change to
    the code). ``certainty`` is ``proven`` or ``suspected`` for a hang finding (NOTE [ Deadlock
    proof ] in detect/proof.py), empty for crashes and warnings: it is the hang's (the job cannot
    move), never the cause's; how sure the finding is of its cause is ``confidence`` alone (a
    proven hang may have a suspected cause; reports word it with ``report.cause_certainty``).
    """

    kind: str
    severity: Severity
    finding: Finding
    certainty: str = ""

    @property
    def confidence(self) -> float:
        return self.finding.confidence

    @property
    def summary(self) -> str:
        return self.finding.summary

    @property
    def evidence(self) -> Tuple[str, ...]:
        return self.finding.evidence

    @property
    def remedy(self) -> str:
        return self.finding.remedy

    @property
    def pids(self) -> Tuple[int, ...]:
        return self.finding.pids

    @property
    def location(self) -> Optional[str]:
        return self.finding.location

    @property
    def docs(self) -> Tuple[str, ...]:
        return self.finding.docs

    @property
    def fix(self) -> Optional[Fix]:
        return self.finding.fix


@dataclass(frozen=True)
class Facts:
    """Everything the diagnosis rules may read; rules never touch processes themselves.

    ``mode`` says why the facts were gathered: ``hang`` (a confirmed stall: ``stall`` and
    ``verdict`` are set, stacks were taken), ``crash`` (the job exited non-zero: ``exit_code``
    and the stderr tail are set), ``exit`` (the job exited with 0) or ``live`` (a periodic look
    at the timeline for warnings). ``shm_leftovers`` lists ``(name, bytes)`` of the files the
    job's processes left in ``/dev/shm`` after it ended (``torch_<pid>_…``).
    ``stacks`` and ``thread_details`` are keyed by pid. ``main_threads_at_fork`` maps a worker
    pid to the number of threads main had in the last sample before that worker appeared.
    ``source_lines`` maps ``(file, line)`` to the source text (indentation kept), when it could be read.
    ``pyspy_problem`` says why stacks are missing (permission, binary missing, timeout).
    ``stderr_tail`` is the last 64 KiB of the job's stderr (``dlwatch run`` only).
    ``oom_kills`` is how many OOM kills the job's cgroup counted while it was watched.
    ``mapped_file_sizes`` holds, for each data file a process of the timeline mapped
    (``ProcessSample.mapped_files``), ``(path, size, inode)`` when the report was made
    (``None``: gone).
    ``host_cpus`` is the number of online CPUs of the host. ``open_files`` maps a pid to the
    targets of its file descriptors (``/proc/PID/fd``, :class:`FdTarget`), read at report time. ``proof`` is set
    when the hang is proven (NOTE [ Deadlock proof ]); ``assessment`` says why the stall was
    judged a hang. ``fd_targets`` maps ``(pid, fd)`` to the target of a descriptor a thread
    waits on (:class:`FdTarget`; both take link text too, decoded on construction);
    ``pipe_readers``/``pipe_writers`` map a pipe (its link text) to the pids holding its read/write
    end; ``worker_start_ticks`` maps a worker pid to its start time in clock ticks since boot
    (``stat`` field 22).
    ``inside`` is the job's own record of its DataLoaders (``None``: no hook, ``dlwatch attach``
    without the opt-in, ``--no-hook``). In a multi-rank job, ``rank`` names the rank whose main
    these facts are about, and ``peer_loaders`` holds each other rank's name and the inside
    view of its main's iterators at the same time. ``polling`` lists the loader threads seen
    polling at one line (:class:`Polling`, the batch measure's examination only);
    ``file_locks`` the locks other processes hold on files that main or a worker has open
    (:class:`FileLock`, read at report time); ``chains`` one wait chain per blocked loop thread
    of a worker (:class:`WaitLink`, first link the worker's own wait, last what it ends at);
    ``opening`` ``(pid, tid, path)`` for each worker thread blocked opening a file (a FIFO with
    no writer), the path read from its system call's argument. ``earlier_stacks`` are the
    stacks taken at warnings while the job ran (:class:`EarlierStack`, oldest first).
    ``task_limits`` holds the limits on the job's processes that can end a worker without a
    kill, as ``(name, value)`` last read while main lived (``None``: unlimited): its pids
    cgroup's ``pids.max`` (named with the cgroup's folder), ``RLIMIT_NPROC`` and ``RLIMIT_CPU``
    (seconds) from ``/proc/PID/limits``.
    ``file_systems`` holds, for a file a failed write named (``disk_full``), ``(path, folder
    measured, bytes free to unprivileged users, size in bytes)`` from ``statvfs`` of its nearest
    existing folder at diagnosis time (``watchdog.watch.exit_look.file_system_figures``).
    ``lock_files`` are the lock files in the job's folders whose first line names a holder pid
    (:class:`LockFile`, read at report time by ``watchdog.collect.lockfiles``).
    """

    mode: Mode
    sample: Sample
    timeline: Tuple[Sample, ...]
    stall: Optional[Stall] = None
    verdict: Optional[HangVerdict] = None
    stacks: Tuple[Tuple[int, ProcessStack], ...] = ()
    thread_details: Tuple[Tuple[int, Tuple[ThreadSample, ...]], ...] = ()
    main_threads_at_fork: Tuple[Tuple[int, int], ...] = ()
    source_lines: Tuple[Tuple[Tuple[str, int], str], ...] = ()
    pyspy_problem: Optional[str] = None
    stderr_tail: str = ""
    exit_code: Optional[int] = None
    oom_kills: Optional[int] = None
    host_cpus: int = 1
    open_files: Tuple[Tuple[int, Tuple[FdTarget, ...]], ...] = ()
    proof: Optional[Proof] = None
    assessment: str = ""
    fd_targets: Tuple[Tuple[Tuple[int, int], FdTarget], ...] = ()
    pipe_readers: Tuple[Tuple[str, Tuple[int, ...]], ...] = ()
    pipe_writers: Tuple[Tuple[str, Tuple[int, ...]], ...] = ()
    worker_start_ticks: Tuple[Tuple[int, int], ...] = ()
    shm_leftovers: Tuple[Tuple[str, int], ...] = ()
    inside: Optional[InsideView] = None
    rank: Optional[str] = None
    peer_loaders: Tuple[Tuple[str, Tuple[LoaderView, ...]], ...] = ()
    polling: Tuple[Polling, ...] = ()
    file_locks: Tuple[FileLock, ...] = ()
    chains: Tuple[Tuple[WaitLink, ...], ...] = ()
    mapped_file_sizes: Tuple[Tuple[str, Optional[int], Optional[int]], ...] = ()
    opening: Tuple[Tuple[int, int, str], ...] = ()
    earlier_stacks: Tuple[EarlierStack, ...] = ()
    task_limits: Tuple[Tuple[str, Optional[int]], ...] = ()
    file_systems: Tuple[Tuple[str, str, int, int], ...] = ()
    lock_files: Tuple[LockFile, ...] = ()

    def __post_init__(self) -> None:
        # Descriptor targets given as link text (captured fixtures, hand-built facts) are
        # decoded here, once: consumers read FdTarget records only.
        if any(not isinstance(t, FdTarget) for _, t in self.fd_targets):
            object.__setattr__(self, "fd_targets", tuple((k, _fd_target(t)) for k, t in self.fd_targets))
        if any(not isinstance(t, FdTarget) for _, ts in self.open_files for t in ts):
            object.__setattr__(
                self, "open_files", tuple((pid, tuple(_fd_target(t) for t in ts)) for pid, ts in self.open_files)
            )

    def detail(self, pid: int, tid: int) -> Optional[ThreadSample]:
        """The ``/proc`` details of thread ``tid`` of ``pid``, or ``None``."""
        return next((d for d in self.threads_of(pid) if d.tid == tid), None)

    def stack(self, pid: int) -> Optional[ProcessStack]:
        """The py-spy result for ``pid``, or ``None`` when it was not dumped."""
        return dict(self.stacks).get(pid)

    def threads_of(self, pid: int) -> Tuple[ThreadSample, ...]:
        """The ``/proc`` thread details of ``pid`` (empty when unreadable)."""
        return dict(self.thread_details).get(pid, ())

    def source(self, file: str, line: int) -> Optional[str]:
        """The source text of ``file:line`` as read at report time, or ``None``."""
        text = dict(self.source_lines).get((file, line))
        return None if text is None else text.strip()

    def source_raw(self, file: str, line: int) -> Optional[str]:
        """The source text of ``file:line`` with its indentation, or ``None``."""
        return dict(self.source_lines).get((file, line))

    def progress_age_s(self, pid: int) -> Optional[float]:
        """Seconds since ``pid``'s watched threads last made progress, or ``None``."""
        return None if self.stall is None else dict(self.stall.progress_age_s).get(pid)

    def loader_hang(self) -> bool:
        """True for a confirmed (or presumed) DataLoader hang."""
        return self.mode == MODE_HANG and self.verdict is not None and self.verdict.in_loader

    def last_seen(self, pid: int) -> Optional[ProcessSample]:
        """The latest sample of ``pid`` in the timeline (it may be gone now), or ``None``."""
        for s in reversed(self.timeline):
            p = s.process(pid)
            if p is not None:
                return p
        return None

    def derived(self, make: Callable[[Facts], _T]) -> _T:
        """``make(self)``, computed on the first call and kept with these facts (like
        ``functools.cached_property``, in the instance's ``__dict__``, keyed by ``make``): a
        record parsed from them once (``watchdog.collect.stderr_facts``) without this module
        importing a later stage. Facts made anew (``dataclasses.replace``) start with none
        kept. Two threads asking at once may both compute it; either result is kept."""
        kept: Dict[Any, Any] = self.__dict__.setdefault("_derived", {})
        if make not in kept:
            kept[make] = make(self)
        return kept[make]


@dataclass(frozen=True)
class Report:
    """A finished report, ready to be written: the JSON document, its text summary, and raw
    py-spy outputs as ``(file name, text)`` pairs."""

    folder_name: str
    document: dict = field(hash=False)
    text: str
    raw_files: Tuple[Tuple[str, str], ...]

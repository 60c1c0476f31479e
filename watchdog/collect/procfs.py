"""Direct ``/proc`` reads that psutil does not offer: per-thread progress counters, wait
channels, system calls, the environment and source lines seen from the target's root.

Formats: ``proc(5)`` and ``Documentation/filesystems/proc.rst`` in the kernel tree. Every
function here returns ``None`` (or an empty tuple) for a process or thread that vanished or
cannot be read, except those whose docstring names the typed errors of :mod:`watchdog.errors`
they raise (:class:`~watchdog.errors.ProcessGone`, :class:`~watchdog.errors.ProcAccessDenied`,
:class:`~watchdog.errors.ProcError`), translated from ``OSError`` in one place,
:func:`proc_errors`. None raises ``OSError``.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import select
import stat
import threading
from typing import Dict, Iterator, List, Literal, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

from .. import redact
from ..errors import ProcAccessDenied, ProcError, ProcessGone
from ..types import FdCensus, FdKind, FdTarget, FileLock, KernelWait, ThreadSample, WaitKind
from . import waits

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


class proc_errors:
    """Translate an ``OSError`` raised inside (``with proc_errors(pid, path):``) into the typed
    errors of :mod:`watchdog.errors` (psutil's ``_pslinux.wrap_exceptions``): ``ENOENT``/``ESRCH``
    into :class:`~watchdog.errors.ProcessGone`, ``EACCES``/``EPERM`` into
    :class:`~watchdog.errors.ProcAccessDenied`, anything else (dlwatch out of descriptors:
    ``EMFILE``) into :class:`~watchdog.errors.ProcError`. ``path`` names the file under
    ``/proc/PID`` for the message. A class, not a ``contextlib.contextmanager``: it runs
    several times a process a tick, and a generator's set-up costs more than the read."""

    __slots__ = ("pid", "path")

    def __init__(self, pid: int, path: str) -> None:
        self.pid, self.path = pid, path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, e, tb) -> Literal[False]:
        if kind is None or not issubclass(kind, OSError):
            return False
        code = e.errno or 0
        if code in (errno.ENOENT, errno.ESRCH):
            raise ProcessGone(self.pid, self.path, code, "the process is gone") from e
        if code in (errno.EACCES, errno.EPERM):
            raise ProcAccessDenied(self.pid, self.path, code, "permission denied") from e
        raise ProcError(self.pid, self.path, code, e.strerror or str(e)) from e


def read_checked(pid: int, name: str) -> bytes:
    """The bytes of ``/proc/PID/NAME`` (``io``, ``status``).

    Raises:
        ProcessGone, ProcAccessDenied, ProcError: see :func:`proc_errors`.
    """
    with proc_errors(pid, name):
        fd = os.open(f"/proc/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.read(fd, 65536)
        finally:
            os.close(fd)


def nofile_limit(pid: int) -> Optional[int]:
    """``pid``'s soft RLIMIT_NOFILE (``prlimit(2)``), ``None`` when unlimited or where Python
    lacks ``resource.prlimit``.

    Raises:
        ProcessGone, ProcAccessDenied, ProcError: see :func:`proc_errors`.
    """
    prlimit = getattr(resource, "prlimit", None)
    if prlimit is None:
        return None
    with proc_errors(pid, "limits"):
        soft = prlimit(pid, resource.RLIMIT_NOFILE)[0]
    return None if soft < 0 else soft


def _read(path: str) -> Optional[str]:
    data = read_bytes(path)
    return None if data is None else data.decode("utf-8", "replace")


def read_text(path: str) -> Optional[str]:
    """A ``/proc`` file of many records (``mountinfo``, ``net/tcp``, ``children``, ``locks``)
    as text, read to its end, or ``None`` when it cannot be read."""
    data = read_bytes(path, records=True)
    return None if data is None else data.decode("utf-8", "replace")


def read_bytes(path: str, records: bool = False, chunk: int = 16384) -> Optional[bytes]:
    """The whole content of a ``/proc`` file, or ``None`` when it cannot be read (gone, no
    permission). ``os.open``/``os.read`` without Python's buffered file object: about half the
    cost of ``open().read()`` for the one-page files read at every tick.

    A one-record file (``stat``, ``status``, ``io``, ``syscall``) is produced whole by the
    kernel's ``seq_file`` and comes in one ``read`` when it fits ``chunk`` bytes; a file of many
    records (``children``, ``maps``) may come a page at a time, so ``records=True`` reads until
    end of file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, chunk)
        if data and (records or len(data) == chunk):
            parts = [data]
            while True:
                more = os.read(fd, chunk)
                if not more:
                    break
                parts.append(more)
            data = b"".join(parts)
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


_STATUS_HEADS: Dict[str, bytes] = {}  # key -> b"\nkey:", made once each


def status_field(status: bytes, key: str) -> Optional[bytes]:
    """The value of field ``key`` (``voluntary_ctxt_switches``, ``SigCgt``, ``Tgid``) in the
    bytes of a ``/proc/PID[/task/TID]/status`` file (proc(5): one ``Key:\tvalue`` per line),
    stripped; ``None`` when absent. The one parser of that file: the sampler reads a thread's
    context switches with it on every tick, so it finds the field without splitting lines."""
    head = _STATUS_HEADS.get(key)
    if head is None:
        head = _STATUS_HEADS.setdefault(key, ("\n" + key + ":").encode())
    at = status.rfind(head)
    if at < 0:
        if not status.startswith(head[1:]):
            return None
        at = -1
    start = at + len(head)
    end = status.find(b"\n", start)
    return status[start : end if end >= 0 else len(status)].strip()


class ProcStat(NamedTuple):
    """The fields of one ``/proc/PID/stat`` line used at every tick (proc(5) field numbers):
    ``comm`` (2, at most 15 bytes), ``state`` (3), ``ppid`` (4), ``minflt``/``majflt`` (10, 12:
    page faults), ``cpu_ticks`` (14 + 15: user + system CPU in clock ticks, ``CLK_TCK`` a
    second), ``num_threads`` (20), ``start_ticks`` (22: start time in clock ticks since boot),
    ``rss_pages`` (24: resident pages of ``PAGE_SIZE`` bytes, as ``statm``'s ``resident``),
    ``pgrp`` (5), ``tty_nr`` (7: the controlling terminal, 0 for none), ``tpgid`` (8: the
    foreground process group of that terminal, -1 for none), ``session`` (6) and ``vsize_bytes``
    (23: the virtual memory size in bytes; every new mapping grows it) and ``exit_status`` (52:
    ``exit_code``, the wait status in waitpid(2)'s form, meaningful only for a zombie and only
    to a reader with ptrace read access, 0 otherwise: see :func:`zombie_exit_status`; Linux 3.5
    and later, 0 when absent). The only parser of that file."""

    comm: str
    state: str
    ppid: int
    minflt: int
    majflt: int
    cpu_ticks: int
    num_threads: int
    start_ticks: int
    rss_pages: int
    pgrp: int
    tty_nr: int
    tpgid: int
    session: int = 0
    vsize_bytes: int = 0
    exit_status: int = 0

    @property
    def cpu_s(self) -> float:
        """``cpu_ticks`` in seconds."""
        return self.cpu_ticks / CLK_TCK

    def stopped_for_terminal(self) -> bool:
        """Stopped (state ``T``) with a controlling terminal whose foreground group is another:
        how a process stopped by SIGTTIN or SIGTTOU looks, a background process that read or
        wrote its terminal (termios(3), the job control of the tty driver)."""
        return self.state == "T" and self.tty_nr != 0 and self.tpgid not in (-1, self.pgrp)


def parse_proc_stat(data: bytes) -> ProcStat:
    """:class:`ProcStat` from the bytes of a ``stat`` file; the comm may hold spaces and
    parentheses, so the line is split at the last ``)``; it is decoded as psutil does (the file
    system encoding, undecodable bytes kept as surrogates).

    Raises:
        ValueError, IndexError: the bytes are not a ``stat`` line.
    """
    rpar = data.rindex(b")")
    rest = data[rpar + 2 :].split()
    return ProcStat(
        os.fsdecode(data[data.index(b"(") + 1 : rpar]),
        rest[0].decode("ascii"),
        int(rest[1]),
        int(rest[7]),
        int(rest[9]),
        int(rest[11]) + int(rest[12]),
        int(rest[17]),
        int(rest[19]),
        int(rest[21]),
        int(rest[2]),
        int(rest[4]),
        int(rest[5]),
        int(rest[3]),
        int(rest[20]),
        int(rest[49]) if len(rest) > 49 else 0,
    )


# CAP_SYS_PTRACE's bit in a capability mask (linux/capability.h; capabilities(7)).
_CAP_SYS_PTRACE = 1 << 19


def _ids(status: bytes, key: str) -> Optional[Tuple[int, ...]]:
    value = status_field(status, key)
    try:
        return tuple(int(x) for x in value.split()) if value is not None else None
    except ValueError:
        return None


def may_read_exit_status(pid: int) -> bool:
    """Whether ``/proc/PID/stat`` field 52 (``exit_code``) of zombie ``pid`` shows its real exit
    status to this process: the kernel prints it only when ``ptrace_may_access(task,
    PTRACE_MODE_READ_FSCREDS)`` holds, else 0 (fs/proc/array.c ``do_task_stat``; proc(5)).
    For a zombie (no memory map left) that is: our file-system uid equals its real, effective
    and saved uid and our file-system gid its gids (``Uid:``/``Gid:`` of ``status``), or we
    have ``CAP_SYS_PTRACE`` (``CapEff:``; in the initial user namespace: dlwatch in a user
    namespace of its own answers ``False`` unless the ids match). A 0 read without that access
    would claim a clean exit: never trusted."""
    mine = read_bytes("/proc/self/status")
    theirs = read_bytes(f"/proc/{pid}/status")
    if mine is None or theirs is None:
        return False
    cap = status_field(mine, "CapEff")
    try:
        uid_map = (read_bytes("/proc/self/uid_map") or b"").split()
        if cap is not None and int(cap, 16) & _CAP_SYS_PTRACE and uid_map == [b"0", b"0", b"4294967295"]:
            return True
    except ValueError:
        pass
    my_uid, my_gid = _ids(mine, "Uid"), _ids(mine, "Gid")
    uid, gid = _ids(theirs, "Uid"), _ids(theirs, "Gid")
    if not (my_uid and my_gid and uid and gid) or len(my_uid) < 4 or len(my_gid) < 4:
        return False
    return set(uid[:3]) == {my_uid[3]} and set(gid[:3]) == {my_gid[3]}


def zombie_exit_status(pid: int, start_ticks: int) -> Optional[int]:
    """The wait status (waitpid(2)'s form: ``code << 8``, or the signal number ``| 0x80`` on a
    core dump) of ``pid`` while it is a zombie (ended, not yet reaped by its parent) and still
    the process that started at ``start_ticks``; ``None`` when it is not a zombie (running,
    reaped, the pid reused), the field is absent (Linux before 3.5) or the kernel would not
    show it to us (:func:`may_read_exit_status`). Read only when the sampler finds a process
    ended (NOTE [ Exit records ] in sampler.py), never at every tick."""
    data = read_bytes(f"/proc/{pid}/stat")
    if not data:
        return None
    try:
        st = parse_proc_stat(data)
        fields = len(data[data.rindex(b")") + 2 :].split())
    except (ValueError, IndexError):
        return None
    if st.state != "Z" or st.start_ticks != start_ticks or fields < 50 or not may_read_exit_status(pid):
        return None
    return st.exit_status


def proc_stat(pid: int, tid: Optional[int] = None) -> Optional[ProcStat]:
    """``/proc/PID/stat`` (or ``/proc/PID/task/TID/stat``) parsed, or ``None`` when the task is
    gone or the line cannot be parsed. World-readable: needs no ptrace access."""
    data = read_bytes(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat")
    if not data:
        return None
    try:
        return parse_proc_stat(data)
    except (ValueError, IndexError):
        return None


def cmdline(pid: int) -> Optional[Tuple[str, ...]]:
    """The command line of ``pid`` (``/proc/PID/cmdline``), split as psutil splits it (NUL
    separators, or spaces when a process rewrote its arguments with ``setproctitle``); empty for
    a zombie or a kernel thread, ``None`` when unreadable."""
    data = read_bytes(f"/proc/{pid}/cmdline", records=True)
    if data is None:
        return None
    if not data:
        return ()
    text = os.fsdecode(data)
    sep = "\0" if text.endswith("\0") else " "
    if text.endswith(sep):
        text = text[:-1]
    args = text.split(sep)
    if sep == "\0" and len(args) == 1 and " " in text:
        args = text.split(" ")
    return tuple(args)


def ctxt_switches(status: bytes) -> Tuple[int, int]:
    """``(voluntary, nonvoluntary)`` context switches from the bytes of a ``status`` file (its
    last two lines on every kernel since 2.6.23; :func:`status_field`); 0 for a field that is
    absent.

    Raises:
        ValueError: a field holds no number.
    """
    vol = status_field(status, "voluntary_ctxt_switches")
    nonvol = status_field(status, "nonvoluntary_ctxt_switches")
    return int(vol) if vol is not None else 0, int(nonvol) if nonvol is not None else 0


def parse_io(data: bytes) -> Tuple[Optional[int], Optional[int]]:
    """``(rchar, wchar)`` of a ``/proc/PID[/task/TID]/io`` file (proc(5): bytes passed to
    read- and write-like system calls, its first two lines), ``None`` for a field that is
    absent or not a number. The one parser of that file."""
    out: List[Optional[int]] = [None, None]
    for line in data.split(b"\n", 2)[:2]:
        key, _, value = line.partition(b":")
        at = 0 if key == b"rchar" else 1 if key == b"wchar" else -1
        if at >= 0:
            try:
                out[at] = int(value)
            except ValueError:
                pass
    return out[0], out[1]


def _rchar_wchar(data: Optional[bytes]) -> Optional[int]:
    """``rchar + wchar`` (:func:`parse_io`), ``None`` when unread or incomplete."""
    if data is None:
        return None
    rchar, wchar = parse_io(data)
    return None if rchar is None or wchar is None else rchar + wchar


def children_files_supported() -> bool:
    """Whether this kernel provides ``/proc/PID/task/TID/children`` (``CONFIG_PROC_CHILDREN``,
    Documentation/filesystems/proc.rst): the children of one thread, without scanning all of
    ``/proc``. Looked up once, on dlwatch's own main thread."""
    global _CHILDREN_FILES
    if _CHILDREN_FILES is None:
        _CHILDREN_FILES = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
    return _CHILDREN_FILES


_CHILDREN_FILES: Optional[bool] = None


def thread_children(pid: int, tid: int) -> Tuple[int, ...]:
    """Pids of the processes thread ``tid`` of ``pid`` forked that are still its children
    (``/proc/PID/task/TID/children``; a child whose forking thread ended moves to another thread
    of the process). Empty when the thread is gone. The kernel documents the list as not
    race-free: a child forked or reaped while it is read may be missing or extra, and is seen at
    the next read."""
    data = read_bytes(f"/proc/{pid}/task/{tid}/children", records=True)
    return tuple(int(x) for x in data.split()) if data else ()


def last_pid() -> Optional[int]:
    """The pid (or tid) most recently allocated on the host, in dlwatch's pid namespace: the
    last field of ``/proc/loadavg`` (proc(5)). While it stays the same, no process or thread was
    created anywhere, so no process has a new child. ``None`` when unreadable."""
    data = read_bytes("/proc/loadavg")
    try:
        return int(data.split()[-1]) if data else None
    except ValueError:
        return None


def task_ids(pid: int) -> Optional[List[int]]:
    """The thread ids of ``pid`` (``/proc/PID/task``), or ``None`` when it is gone."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return None


def run_queue_wait_s(pid: int) -> Optional[float]:
    """Seconds the main thread of ``pid`` has spent runnable but waiting for a CPU since it
    started: the second field of ``/proc/PID/schedstat`` (run-queue wait in nanoseconds; the
    first is time on a CPU, the third the timeslices run), per the kernel's
    Documentation/scheduler/sched-stats.rst (``CONFIG_SCHED_INFO``). One small read. A thread in
    state R that waits for a CPU is not idle: a worker computing on an overloaded machine gets
    a small CPU share but is runnable the whole time, and this field tells it from a thread
    that sleeps. The field only grows when the waiting thread gets a CPU (the kernel adds each
    wait as it ends), so it lags by at most one wait. ``None`` when the file is missing
    (no ``CONFIG_SCHED_INFO``), unreadable or malformed, or the process is gone."""
    raw = read_bytes(f"/proc/{pid}/schedstat")
    if not raw:
        return None
    fields = raw.split()
    if len(fields) < 2:
        return None
    try:
        return int(fields[1]) / 1e9
    except ValueError:
        return None


def fd_count(pid: int) -> int:
    """The number of open file descriptors of ``pid``.

    Since Linux 6.2 the ``st_size`` of the ``/proc/PID/fd`` directory is that number (kernel
    commit "proc: report open files as size in stat() for /proc/pid/fd"): one ``stat`` call
    instead of a directory listing, which on a torch process with hundreds of descriptors costs
    tens of times more. Older kernels report 0 there; then the directory is listed.

    Raises:
        ProcAccessDenied: ``pid`` belongs to another user and dlwatch may not ptrace it.
        ProcessGone, ProcError: see :func:`proc_errors`.
    """
    folder = f"/proc/{pid}/fd"
    with proc_errors(pid, "fd"):
        size = os.stat(folder).st_size
        return size if size > 0 else len(os.listdir(folder))


def children_of(pid: int) -> Optional[Tuple[int, ...]]:
    """Pids of every child of ``pid`` (all its threads' ``children`` files; see
    :func:`thread_children`), or ``None`` when the kernel lacks those files
    (:func:`children_files_supported`): then use :func:`ppid_map`. Empty when ``pid`` is gone."""
    if not children_files_supported():
        return None
    out: List[int] = []
    for tid in task_ids(pid) or ():
        out.extend(thread_children(pid, tid))
    return tuple(out)


def group_members(pgrp: int, session: int) -> List[Tuple[int, ProcStat]]:
    """``(pid, stat)`` of every process on the host in process group ``pgrp`` of ``session``
    (``stat`` fields 5 and 6). Cost: one read per process on the host."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st is not None and st.pgrp == pgrp and st.session == session:
                out.append((int(entry), st))
    return out


def ppid_map() -> Dict[int, int]:
    """``{pid: ppid}`` of every process on the host, from every ``/proc/PID/stat``: the scan
    that :func:`children_of` avoids, for kernels without ``CONFIG_PROC_CHILDREN``. Cost: one
    read per process on the host."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st is not None:
                out[int(entry)] = st.ppid
    return out


def may_be_stuck(wait: Optional[KernelWait]) -> bool:
    """Whether a thread in ``wait`` leaves its process a candidate for NOTE [ Deadlock proof ]
    in ``watchdog/detect/proof.py``: an untimed wait on a private futex, or ``accept`` (which the
    proof sets aside as multiprocessing's resource-sharer thread)."""
    return wait is not None and (
        wait.kind is WaitKind.FUTEX_PRIVATE or (wait.kind is WaitKind.FD and wait.syscall in ("accept", "accept4"))
    )


# States whose wait the state letter alone decides (waits.decode), with that wait: no syscall
# read needed, and one shared (frozen) object per state in every sample of the timeline.
_DECIDED_BY_STATE: Dict[str, KernelWait] = {state: waits.decode(state, None) for state in "RTtZX"}
# States of a thread asleep in the kernel: if its switch counters did not move, it has not run.
_ASLEEP = frozenset("SDI")


class _Seen(NamedTuple):
    start_ticks: int
    state: str
    cpu_ticks: int
    vol: int
    nonvol: int
    judged: bool
    sample: ThreadSample
    children: Optional[Tuple[int, ...]]  # None: not read


class ThreadReader:
    """Per-thread progress counters and waits (``/proc/PID/task/TID/{stat,status,io,syscall}``),
    reading at each call only what may have changed since the previous call.

    ``stat`` and ``status`` are read for every thread at every call. A thread asleep at both
    calls (state S, D or I) whose voluntary and involuntary context switches did not move has
    not run in between: it is in the same wait, with the same I/O counters, and has forked no
    child, so its previous :class:`~watchdog.types.ThreadSample` (the same object) and children
    are kept without reading ``io``, ``syscall`` or ``children``. For a thread that ran:

    * ``io`` (``rchar + wchar``) is read for the *judged* threads only (the loader path of
      NOTE [ Hang criterion ] in ``watchdog/detect/progress.py``: main's iterating thread, every thread of
      a worker); the others get ``io_bytes=None``;
    * ``syscall`` is read when the state does not decide the wait (S, D) and either the thread
      is judged and did no I/O since the previous call (a thread whose I/O moved made progress
      whatever it waits for now: NOTE [ Hang criterion ] never asks), or every thread read so
      far may be part of a deadlock proof (:func:`may_be_stuck`; the judged thread is read
      first); otherwise ``wait`` is the one the state decides (R, T, Z), or ``None`` (not read).

    Threads that end while being read are skipped. State is kept per ``(pid, tid)`` with the
    thread's start time (``stat`` field 22), so a reused tid is a new thread; :meth:`forget`
    drops processes no longer watched.
    """

    def __init__(self) -> None:
        self._seen: Dict[Tuple[int, int], _Seen] = {}
        self._tids: Dict[int, List[int]] = {}  # pid -> its thread ids at the last read

    def forget(self, live_pids: Set[int]) -> None:
        """Drop what is remembered of threads of processes not in ``live_pids``."""
        for key in [k for k in self._seen if k[0] not in live_pids]:
            del self._seen[key]
        for pid in [p for p in self._tids if p not in live_pids]:
            del self._tids[pid]

    def read(
        self,
        pid: int,
        judged_tid: Optional[int] = None,
        children: Optional[str] = None,
        num_threads: Optional[int] = None,
    ) -> Tuple[Tuple[ThreadSample, ...], Optional[Tuple[int, ...]]]:
        """``(threads of pid by tid, children of pid)``.

        Args:
            pid: the process.
            judged_tid: the one judged thread (main's iterating thread, ``tid == pid``);
                ``None``: every thread is judged (a worker).
            children: also return the pids of its children, from ``/proc/PID/task/TID/children``:
                ``"changed"`` reads the file of each thread that ran since the previous call
                (and of new threads), ``"all"`` every thread's (a child whose forking thread
                ended moves to a thread that may not have run), ``"cached"`` only new threads'
                (no task was created on the host since the previous call: nothing forked);
                ``None``: children are not wanted. The children are ``None`` when not wanted or
                when the kernel lacks those files (:func:`children_files_supported`).
            num_threads: the process's thread count now (``stat`` field 20), with
                ``children="cached"``: when it equals the count at the previous call, the thread
                ids are those of the previous call (no task was created, none ended), and
                ``/proc/PID/task`` is not listed again.
        """
        want_children = children is not None and children_files_supported()
        cached_tids = self._tids.get(pid)
        if children == "cached" and cached_tids is not None and num_threads == len(cached_tids):
            tids: Optional[List[int]] = list(cached_tids)
        else:
            tids = task_ids(pid)
        if tids is None:
            return (), (() if want_children else None)
        if judged_tid is not None and judged_tid in tids:
            tids.remove(judged_tid)
            tids.insert(0, judged_tid)
        out: List[ThreadSample] = []
        kids: List[int] = []
        stuck_possible = True
        for tid in tids:
            base = f"/proc/{pid}/task/{tid}"
            raw_stat, raw_status = read_bytes(f"{base}/stat"), read_bytes(f"{base}/status")
            if not raw_stat or not raw_status:
                continue
            try:
                st = parse_proc_stat(raw_stat)
                vol, nonvol = ctxt_switches(raw_status)
            except (ValueError, IndexError):
                continue
            key = (pid, tid)
            prev = self._seen.get(key)
            judged = judged_tid is None or tid == judged_tid
            still = (
                prev is not None
                and prev.start_ticks == st.start_ticks
                and prev.judged == judged
                and st.state in _ASLEEP
                and prev.state == st.state
                and (prev.cpu_ticks, prev.vol, prev.nonvol) == (st.cpu_ticks, vol, nonvol)
            )
            if (
                prev is not None
                and still
                and (prev.sample.wait is not None or not stuck_possible or st.state not in "SD")
            ):
                sample = prev.sample
            else:
                if prev is not None and still:
                    io = prev.sample.io_bytes
                else:
                    io = _rchar_wchar(read_bytes(f"{base}/io")) if judged else None
                moved_io = (
                    io is not None
                    and prev is not None
                    and prev.start_ticks == st.start_ticks
                    and prev.sample.io_bytes not in (None, io)
                )
                wait: Optional[KernelWait] = _DECIDED_BY_STATE.get(st.state)
                if wait is None and ((judged and not moved_io) or stuck_possible):
                    raw = read_bytes(f"{base}/syscall")
                    text = raw.decode("ascii", "replace") if raw is not None else None
                    old = prev.sample.wait if prev is not None and prev.state == st.state else None
                    wait = (
                        old
                        if old is not None and text is not None and old.raw == text.strip()
                        else waits.decode(st.state, text)
                    )
                sample = _thread_sample(prev.sample if prev is not None else None, tid, st, vol, nonvol, io, wait)
            stuck_possible = stuck_possible and may_be_stuck(sample.wait)
            mine: Optional[Tuple[int, ...]] = None
            if want_children:
                known = prev.children if prev is not None and prev.start_ticks == st.start_ticks else None
                if known is not None and (children == "cached" or (children == "changed" and still)):
                    mine = known
                else:
                    mine = thread_children(pid, tid)
                kids.extend(mine)
            self._seen[key] = _Seen(st.start_ticks, st.state, st.cpu_ticks, vol, nonvol, judged, sample, mine)
            out.append(sample)
        out.sort(key=lambda t: t.tid)
        self._tids[pid] = [t.tid for t in out]
        return tuple(out), (tuple(kids) if want_children else None)


def _same(old, new):
    """``old`` when it equals ``new`` (and is of its type), so that one object is kept."""
    return old if old == new and type(old) is type(new) else new


def _thread_sample(
    prev: Optional[ThreadSample],
    tid: int,
    st: ProcStat,
    vol: int,
    nonvol: int,
    io: Optional[int],
    wait: Optional[KernelWait],
) -> ThreadSample:
    """A new sample of a thread, holding the previous sample's objects for every value that did
    not change (a timeline of 600 samples keeps one copy of each)."""
    cpu_s = st.cpu_ticks / CLK_TCK
    if prev is None:
        return ThreadSample(
            tid=tid,
            name=st.comm,
            state=st.state,
            cpu_s=cpu_s,
            voluntary_ctxt_switches=vol,
            nonvoluntary_ctxt_switches=nonvol,
            io_bytes=io,
            wait=wait,
        )
    return ThreadSample(
        tid=prev.tid,
        name=_same(prev.name, st.comm),
        state=st.state,
        cpu_s=_same(prev.cpu_s, cpu_s),
        voluntary_ctxt_switches=_same(prev.voluntary_ctxt_switches, vol),
        nonvoluntary_ctxt_switches=_same(prev.nonvoluntary_ctxt_switches, nonvol),
        io_bytes=_same(prev.io_bytes, io),
        wait=wait,
    )


def thread_samples(pid: int) -> Tuple[ThreadSample, ...]:
    """Progress counters and the decoded wait (:func:`watchdog.collect.waits.decode`) of every
    thread of ``pid`` (``/proc/PID/task/*``), every thread judged (see :class:`ThreadReader`,
    which the sampler uses to skip what cannot have changed); threads that end while being read
    are skipped. Cost: three or four small reads per thread."""
    return ThreadReader().read(pid)[0]


def wchan(pid: int, tid: Optional[int] = None) -> Optional[str]:
    """The kernel function the task sleeps in (``/proc/PID[/task/TID]/wchan``); ``"0"`` when
    running or when the kernel hides it (no permission)."""
    path = f"/proc/{pid}/wchan" if tid is None else f"/proc/{pid}/task/{tid}/wchan"
    text = _read(path)
    return text.strip() if text is not None else None


def thread_details(pid: int) -> Tuple[ThreadSample, ...]:
    """State, name, wait channel, system call, decoded wait and start time of every thread of
    ``pid`` (report time). Threads that end while being read are skipped."""
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return ()
    out = []
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        st = proc_stat(pid, tid)
        if st is None:
            continue
        raw = _read(f"{base}/syscall")
        try:
            vol, nonvol = ctxt_switches(read_bytes(f"{base}/status") or b"")
        except ValueError:
            vol = nonvol = 0
        out.append(
            ThreadSample(
                tid=tid,
                name=st.comm,
                state=st.state,
                cpu_s=st.cpu_ticks / CLK_TCK,
                voluntary_ctxt_switches=vol,
                nonvoluntary_ctxt_switches=nonvol,
                wait=waits.decode(st.state, raw),
                wchan=wchan(pid, tid),
                start_ticks=st.start_ticks,
            )
        )
    return tuple(out)


def start_ticks(pid: int) -> Optional[int]:
    """When ``pid`` started, in clock ticks since boot (``stat`` field 22), or ``None``."""
    st = proc_stat(pid)
    return None if st is None else st.start_ticks


def running(pid: int, start: Optional[int]) -> bool:
    """Whether ``pid`` is still the process that started at ``start`` (clock ticks since boot,
    :func:`start_ticks`) and has not ended: one ``/proc/PID/stat`` read (psutil's check reads
    it twice and ``/proc/stat`` once). False when it is gone, a zombie (a dead child its parent
    has not reaped yet), or another process under a reused pid."""
    st = proc_stat(pid)
    return st is not None and start is not None and st.start_ticks == start and st.state not in ("Z", "X", "x")


class ExitWatch:
    """Whether one process has ended, answered without reading ``/proc`` at each call: a
    pidfd (``pidfd_open(2)``, Linux 5.3) refers to the process itself, not its pid, and becomes
    readable when it exits (a zombie has exited), so :meth:`ended` is one ``poll(2)`` of it.
    The process is checked once after the pidfd is opened (``start`` against ``stat`` field 22),
    so a pid reused before the open is not mistaken for it. Without pidfds (an older kernel, a
    seccomp filter that refuses the call), each :meth:`ended` is :func:`running`'s one ``stat``
    read. Holds one descriptor until :meth:`close`, the process's end, or the object is
    collected.

    Args:
        pid: the process.
        start: when it started (clock ticks since boot, :func:`start_ticks`).
    """

    def __init__(self, pid: int, start: Optional[int]) -> None:
        self.pid, self.start = pid, start
        self._fd: Optional[int] = None
        self._ended = False
        try:
            self._fd = os.pidfd_open(pid)
        except (OSError, AttributeError):  # ESRCH: gone already; ENOSYS, EPERM: no pidfds here
            self._ended = not running(pid, start)
            return
        if not running(pid, start):  # another process under that pid, or it ended already
            self._ended = True
            self.close()

    def ended(self) -> bool:
        """True once the process has exited (or was never the one named)."""
        if self._ended:
            return True
        if self._fd is None:
            self._ended = not running(self.pid, self.start)
            return self._ended
        try:
            readable = bool(_poll_one(self._fd))
        except OSError:
            readable = not running(self.pid, self.start)
        if readable:
            self._ended = True
            self.close()
        return self._ended

    def close(self) -> None:
        """Close the pidfd (:meth:`ended` then reads ``stat``, or stays True)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        self.close()


def _poll_one(fd: int) -> list:
    """``poll(2)`` of ``fd`` for input, not waiting: the ready events (empty: none)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return poller.poll(0)


def fd_target(pid: int, fd: int) -> Optional[str]:
    """The target of ``pid``'s descriptor ``fd`` (``pipe:[123]``, ``socket:[456]``, a path), or
    ``None``."""
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None


def read_fd_target(pid: int, fd: int) -> Optional[FdTarget]:
    """The target of ``pid``'s descriptor ``fd``, decoded (:meth:`FdTarget.decode`), or
    ``None`` when the link cannot be read."""
    target = fd_target(pid, fd)
    return FdTarget.decode(target) if target else None


def _access_mode(pid: int, fd: str) -> Optional[int]:
    text = _read(f"/proc/{pid}/fdinfo/{fd}")
    for line in (text or "").splitlines():
        if line.startswith("flags:"):
            return int(line.split()[1], 8) & 3  # O_RDONLY 0, O_WRONLY 1, O_RDWR 2
    return None


def host_fds() -> Iterator[Tuple[int, Optional[List[str]]]]:
    """``(pid, descriptor numbers)`` of every process on the host (``/proc/PID/fd``), with
    ``None`` for one whose descriptors this user may not read (another user's, without
    privilege); a process that ended meanwhile is skipped. For the scans of who holds a pipe or
    an open file description; report time only."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            yield pid, os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:
            continue
        except OSError:
            yield pid, None


def pipe_holders(pipes) -> Tuple[Dict[str, Tuple[int, ...]], Dict[str, Tuple[int, ...]], bool]:
    """``(readers, writers, complete)`` for each pipe in ``pipes`` (``pipe:[N]`` targets): the
    pids of every process on the host holding its read or write end (``/proc/*/fd`` and
    ``fdinfo`` access modes). ``complete`` is False when some process's descriptors could not
    be read (another user's without privilege), so an unseen holder may exist. Cost: one
    directory listing per process, one readlink per descriptor; for report time only."""
    wanted = set(pipes)
    readers: Dict[str, set] = {p: set() for p in wanted}
    writers: Dict[str, set] = {p: set() for p in wanted}
    complete = True
    if not wanted:
        return {}, {}, True
    for pid, fds in host_fds():
        if fds is None:
            complete = False
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target in wanted:
                mode = _access_mode(pid, fd)
                if mode in (0, 2, None):
                    readers[target].add(pid)
                if mode in (1, 2, None):
                    writers[target].add(pid)
    return (
        {k: tuple(sorted(v)) for k, v in readers.items()},
        {k: tuple(sorted(v)) for k, v in writers.items()},
        complete,
    )


def environ(pid: int) -> Optional[Dict[str, str]]:
    """The redacted environment of ``pid`` (``/proc/PID/environ``), or ``None``."""
    text = _read(f"/proc/{pid}/environ")
    if text is None:
        return None
    env = {}
    for item in text.split("\0"):
        if "=" in item:
            k, v = item.split("=", 1)
            env[k] = v
    return redact.env(env)


# The most of one source file read for its lines, in characters (a job's frame may name any file).
MAX_SOURCE_BYTES = 8 << 20


def _credentials(pid: int) -> Optional[Tuple[int, Set[int]]]:
    """The real uid and the gids (real and supplementary) of ``pid`` (``Uid:``, ``Gid:``,
    ``Groups:`` of ``/proc/PID/status``), or ``None`` when unreadable."""
    status = read_bytes(f"/proc/{pid}/status")
    if not status:
        return None
    try:
        uid = int((status_field(status, "Uid") or b"").split()[0])
        gids = {int((status_field(status, "Gid") or b"").split()[0])}
        gids.update(int(g) for g in (status_field(status, "Groups") or b"").split())
    except (ValueError, IndexError):
        return None
    return uid, gids


def _may_read(st: os.stat_result, uid: int, gids: Set[int]) -> bool:
    """Whether a process of real uid ``uid`` and groups ``gids`` may read a file of ``st`` by
    its mode bits (owner, then group, then others: path_resolution(7)); root may."""
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IRUSR)
    if st.st_gid in gids:
        return bool(st.st_mode & stat.S_IRGRP)
    return bool(st.st_mode & stat.S_IROTH)


def _open_source(path: str, uid: int, gids: Set[int]) -> Optional[int]:
    """A descriptor open for reading on ``path`` when it is a regular file the job's user may
    read, else ``None``. The path is resolved once without following its last link
    (``O_PATH|O_NOFOLLOW``: no device's or FIFO's open runs), checked (fstat), and only that
    same file opened for reading (``/proc/self/fd``)."""
    try:
        path_fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(path_fd)
        if not stat.S_ISREG(st.st_mode) or not _may_read(st, uid, gids):
            return None
        return os.open(f"/proc/self/fd/{path_fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    finally:
        os.close(path_fd)


def read_as_job(pid: int, path: str, limit: int = 1 << 16) -> Optional[str]:
    """The first ``limit`` bytes of ``path`` as text (UTF-8, errors replaced) when it is a
    regular file that ``pid``'s user may read (:func:`_open_source`: its last link not
    followed, never a FIFO's or a device's open), else ``None``: for a file whose path the job
    chose."""
    creds = _credentials(pid)
    fd = _open_source(path, *creds) if creds is not None else None
    return None if fd is None else read_text_and_close(fd, limit)


def read_text_and_close(fd: int, limit: int) -> Optional[str]:
    """The first ``limit`` bytes read from the open descriptor ``fd`` (one ``read(2)``) as text
    (UTF-8, errors replaced), ``None`` when the read fails (``OSError``); ``fd`` is closed
    whatever happens."""
    try:
        return os.read(fd, limit).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def source_lines(pid: int, wanted) -> Dict[Tuple[str, int], str]:
    """The source text of each ``(file, line)`` in ``wanted`` (indentation kept, trailing
    whitespace removed), as the target sees the
    file (through ``/proc/PID/root``, so paths inside a container resolve). Each file is read
    once; unreadable ones are left out.

    The job names these files (a frame's ``co_filename`` is whatever its code was compiled
    with), so a file is read only when it is a regular file that the job's own user may read
    (its mode bits for ``pid``'s real uid and groups), opened without following its last link
    and never for a FIFO or a device (:func:`_open_source`), at most :data:`MAX_SOURCE_BYTES`
    characters of it."""
    by_file: Dict[str, set] = {}
    for file, line in wanted:
        if line > 0 and file.startswith("/"):
            by_file.setdefault(file, set()).add(line)
    out: Dict[Tuple[str, int], str] = {}
    creds = _credentials(pid) if by_file else None
    if creds is None:
        return out
    for file, lines in by_file.items():
        for path in (f"/proc/{pid}/root{file}", file):
            fd = _open_source(path, *creds)
            if fd is None:
                continue
            read = 0
            try:
                with os.fdopen(fd, encoding="utf-8", errors="replace") as f:  # lines as Python counts them
                    for i, text in enumerate(f, 1):
                        read += len(text)
                        if read > MAX_SOURCE_BYTES:
                            break
                        if i in lines:
                            out[(file, i)] = text.rstrip()
                        if i >= max(lines):
                            break
            except OSError:
                continue
            break
    return out


def open_files(pid: int, limit: int = 256) -> Tuple[str, ...]:
    """Targets of ``pid``'s file descriptors (``/proc/PID/fd/N`` links: paths, ``pipe:[…]``,
    ``socket:[…]``), at most ``limit``; empty when unreadable."""
    out = []
    for fd in _fd_names(pid, limit):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return tuple(out)


def open_targets(pid: int, limit: int = 256) -> Tuple[FdTarget, ...]:
    """:func:`open_files`, each target decoded (:meth:`FdTarget.decode`)."""
    return tuple(FdTarget.decode(t) for t in open_files(pid, limit))


# Which argument of a file-opening system call is its path (open(2), openat(2), openat2(2)).
_PATH_ARGUMENT = {"open": 0, "creat": 0, "openat": 1, "openat2": 1}
PATH_MAX = 4096


def opening_path(pid: int, wait: Optional[KernelWait]) -> Optional[str]:
    """The path a thread that waits in ``open``/``openat`` is opening: the call's path argument
    (an address in the ``syscall`` line, Documentation/filesystems/proc.rst) read from the
    process's memory (``/proc/PID/mem``, which needs the same ptrace access as py-spy: proc(5))
    up to its NUL, at most ``PATH_MAX`` bytes. A relative path is as the process sees it (its
    working directory, or the call's directory descriptor). ``None`` for any other wait, or
    when the memory cannot be read. Reads only: the path is never opened or followed."""
    if wait is None or wait.raw is None or wait.syscall not in _PATH_ARGUMENT:
        return None
    parts = wait.raw.split()
    try:
        address = int(parts[1 + _PATH_ARGUMENT[wait.syscall]], 16)
    except (IndexError, ValueError):
        return None
    if address <= 0:
        return None
    data = b""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        while len(data) < PATH_MAX and b"\0" not in data:
            at = address + len(data)
            data += os.pread(fd, min(PATH_MAX - len(data), page - at % page), at)  # one page at a time
    except OSError:
        if not data:
            return None
    finally:
        os.close(fd)
    end = data.find(b"\0")
    text = data[: end if end >= 0 else len(data)].decode("utf-8", "backslashreplace")
    # the job chose the name: a line break in it must not start a line of ours
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text) or None


def parse_locks(text: str) -> List[Tuple[str, str, Optional[int], Tuple[int, int, int]]]:
    """The held locks of a ``/proc/locks`` text: ``(kind, mode, pid, (major, minor, inode))``
    per line (``1: POSIX  ADVISORY  WRITE 3578 00:2c:1234 0 EOF``; major and minor in hex,
    Documentation/filesystems/proc.rst). Waiters (``1: -> FLOCK ...``) and lines that do not
    parse are skipped; an OFD lock's pid (-1) is ``None``."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->":
            continue
        kind, mode, pid_text, dev = parts[1], parts[3], parts[4], parts[5]
        try:
            major, minor, inode = dev.split(":")
            ident = (int(major, 16), int(minor, 16), int(inode))
            pid: Optional[int] = int(pid_text)
        except ValueError:
            continue
        out.append((kind, mode, pid if pid is not None and pid > 0 else None, ident))
    return out


def file_locks(pids: Sequence[int]) -> Tuple[FileLock, ...]:
    """The locks that other processes hold on the files ``pids`` have open (report time): one
    read of ``/proc/locks``, then each descriptor's mount and inode from ``fdinfo``
    (:func:`fd_inode`; never a ``stat``, which a hung FUSE or NFS mount would block). Empty when
    ``/proc/locks`` cannot be read or holds no lock."""
    text = read_text("/proc/locks")
    held = parse_locks(text) if text else []
    if not held:
        return ()
    by_file: Dict[Tuple[int, int, int], List[Tuple[str, str, Optional[int]]]] = {}
    for kind, mode, holder, ident in held:
        by_file.setdefault(ident, []).append((kind, mode, holder))
    out = []
    for pid in pids:
        seen = set()
        devices = mount_devices(pid)
        for fd in _fd_names(pid):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            where = fd_inode(pid, fd) if target.startswith("/") else None
            dev = devices.get(where[0]) if where is not None else None
            if where is None or dev is None:
                continue
            ident = (dev[0], dev[1], where[1])
            if ident in seen:
                continue
            seen.add(ident)
            for kind, mode, holder in by_file.get(ident, ()):
                if holder != pid:
                    out.append(FileLock(pid, target, holder, kind, mode))
    return tuple(out)


def fd_inode(pid: int, fd: str) -> Optional[Tuple[int, int]]:
    """``(mount id, inode)`` of ``pid``'s descriptor ``fd`` from ``/proc/PID/fdinfo/FD``
    (``mnt_id:`` and ``ino:``, Linux >= 5.14), or ``None``. Never a ``stat`` of the file: on a
    FUSE or NFS mount whose server does not answer that would block the sidecar for good."""
    text = _read(f"/proc/{pid}/fdinfo/{fd}")
    fields = dict(line.split(":", 1) for line in (text or "").splitlines() if ":" in line)
    try:
        return int(fields["mnt_id"]), int(fields["ino"])
    except (KeyError, ValueError):
        return None


def mount_devices(pid: int) -> Dict[int, Tuple[int, int]]:
    """``pid``'s mounts as mount id -> ``(major, minor)`` of their device (``/proc/PID/mountinfo``
    fields 1 and 3, proc(5))."""
    out = {}
    for line in (read_text(f"/proc/{pid}/mountinfo") or "").splitlines():
        fields = line.split()
        try:
            major, minor = fields[2].split(":")
            out[int(fields[0])] = (int(major), int(minor))
        except (IndexError, ValueError):
            continue
    return out


def fd_kind(target: str) -> FdKind:
    """The :class:`~watchdog.types.FdKind` of one ``/proc/PID/fd/N`` link target (proc(5)):
    ``socket:[…]``, ``pipe:[…]``, ``anon_inode:…``, ``/memfd:…`` and ``/dev/shm/…`` (PyTorch's
    shared storages: ``file_descriptor`` strategy files unlinked at once, shown ``(deleted)``),
    other ``/dev/…``, else a path (a regular file: ``/proc`` and ``/sys`` ones too). The one
    decoder is :meth:`~watchdog.types.FdTarget.decode`."""
    kind = FdTarget.decode(target).kind
    return FdKind.FILE if kind is FdKind.KERNEL else kind


def fd_census(pid: int, now: float, limit: int = 4096) -> Optional[FdCensus]:
    """Count ``pid``'s open descriptors by kind (:func:`fd_kind`), reading at most ``limit``
    links, and the folders of its regular files with the most of them; ``None`` when
    unreadable. Cost: one ``readlink`` per descriptor (a millisecond per thousand here)."""
    kinds: Dict[FdKind, int] = {}
    folders: Dict[str, int] = {}
    read = 0
    for target in open_files(pid, limit):
        read += 1
        kind = fd_kind(target)
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind is FdKind.FILE:
            path = target[: -len(" (deleted)")] if target.endswith(" (deleted)") else target
            folder = os.path.dirname(path) or "/"
            folders[folder] = folders.get(folder, 0) + 1
    if not read:
        return None
    by_count = tuple(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0].value)))
    top = tuple(sorted(folders.items(), key=lambda kv: (-kv[1], kv[0]))[:3])
    return FdCensus(now, read, by_count, top)


def shm_held(pids, folder: str = "/dev/shm", limit: int = 4096) -> int:
    """Bytes of shared memory (allocated blocks) that ``pids`` hold in ``folder``: the files
    they have open there (PyTorch's ``file_descriptor`` strategy unlinks each at once, so only
    the descriptor finds it: ``os.stat`` of ``/proc/PID/fd/N`` reaches the deleted file) and
    the ``torch_<pid>_…`` files of the ``file_system`` strategy, each inode counted once;
    anyone else's use of ``folder`` is not counted. At most ``limit`` descriptors a process."""
    seen: Set[Tuple[int, int]] = set()
    total = 0
    prefix = folder.rstrip("/") + "/"
    for pid in pids:
        for fd in _fd_names(pid, limit):
            path = f"/proc/{pid}/fd/{fd}"
            try:
                if not os.readlink(path).startswith(prefix):
                    continue
                st = os.stat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    for _name, _pid, st in _torch_shm_files(pids, folder):
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def _fd_names(pid: int, limit: int = 256) -> List[str]:
    try:
        return sorted(os.listdir(f"/proc/{pid}/fd"), key=int)[:limit]
    except (OSError, ValueError):
        return []


# The NVIDIA driver's control device: CUDA maps pinned host memory (cudaHostAlloc, PyTorch's
# CachingHostAllocator behind pin_memory) as shared mappings of it.
NVIDIA_CTL = b"/dev/nvidiactl"


def map_count(pid: int) -> Optional[int]:
    """How many memory mappings ``pid`` has (lines of ``/proc/PID/maps``), or ``None``. Cost:
    reading the whole file (about 100 bytes a mapping), hence the slow cadence."""
    return maps_summary(pid).mappings


class Rollup(NamedTuple):
    """A process's memory from ``/proc/PID/smaps_rollup`` (Documentation/filesystems/proc.rst),
    bytes: ``uss`` (Private_Clean + Private_Dirty + Private_Hugetlb: what only it holds),
    ``pss``, ``private_dirty`` (private pages it wrote: heap, copy-on-write copies, the
    copy-on-read copies of Python objects; clean file pages it merely read, as through
    ``np.memmap``, are not in it) and ``anonymous``."""

    uss: int
    pss: int
    private_dirty: int
    anonymous: int


def parse_smaps_rollup(text: str) -> Optional[Rollup]:
    """:class:`Rollup` of a ``smaps_rollup`` text (``Name:  N kB`` lines), or ``None`` when it
    holds no ``Pss`` line."""
    kb: Dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            kb[name.strip()] = int(parts[0])
    if "Pss" not in kb:
        return None
    private = kb.get("Private_Clean", 0) + kb.get("Private_Dirty", 0) + kb.get("Private_Hugetlb", 0)
    return Rollup(private * 1024, kb["Pss"] * 1024, kb.get("Private_Dirty", 0) * 1024, kb.get("Anonymous", 0) * 1024)


def smaps_rollup(pid: int) -> Optional[Rollup]:
    """``pid``'s :class:`Rollup`, or ``None`` when unreadable (no ptrace-read access, gone, a
    kernel before 4.14). Cost: the kernel walks the page tables (2–8 ms a torch process)."""
    text = read_text(f"/proc/{pid}/smaps_rollup")
    return parse_smaps_rollup(text) if text else None


class MapsSummary(NamedTuple):
    """One read of ``/proc/PID/maps``: how many mappings, whether ``/dev/nvidiactl`` is mapped
    (CUDA pinned memory), and the data files mapped (:func:`mapped_data_files`)."""

    mappings: Optional[int]
    nvidia: bool
    files: Tuple[Tuple[str, int, int], ...] = ()


def maps_summary(pid: int) -> MapsSummary:
    """:class:`MapsSummary` of ``pid``; ``(None, False, ())`` when unreadable."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            data = f.read()
    except OSError:
        return MapsSummary(None, False)
    return MapsSummary(data.count(b"\n"), NVIDIA_CTL in data, mapped_data_files(data))


# Mapped data files kept per process (the largest extents).
MAPPED_FILES_KEPT = 4
_SYSTEM_PREFIXES = ("/usr/", "/lib", "/etc/", "/dev/", "/proc/", "/sys/", "/memfd:", "/run/")
_SYSTEM_PREFIXES_B = tuple(p.encode() for p in _SYSTEM_PREFIXES)
# A mapped path ending so is never a data file: a deleted file, a library, a compiled module.
_NOT_DATA_SUFFIXES = (b" (deleted)", b".so", b".pyc")


def file_sizes(paths, timeout_s: float = 2.0) -> Tuple[Tuple[str, Optional[int], Optional[int]], ...]:
    """``(path, size in bytes, inode)`` of each of ``paths`` now (``os.stat``, which opens
    nothing; ``(path, None, None)`` when it is gone or unreadable), in the order given,
    duplicates dropped. The stats run in a daemon thread given ``timeout_s`` seconds in all: a
    path on a FUSE or NFS mount that stopped answering blocks that thread, not the caller; what
    it did not reach is left out."""
    wanted = list(dict.fromkeys(paths))
    out: List[Tuple[str, Optional[int], Optional[int]]] = []

    def run() -> None:
        for path in wanted:
            try:
                st = os.stat(path)
                out.append((path, st.st_size, st.st_ino))
            except OSError:
                out.append((path, None, None))

    worker = threading.Thread(target=run, name="dlwatch-stat", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return tuple(list(out))  # a snapshot: a stat stuck past the timeout may still append


def mapped_data_files(maps: bytes) -> Tuple[Tuple[str, int, int], ...]:
    """``(path, bytes mapped up to, inode)`` of the regular data files in a ``/proc/PID/maps`` text
    (proc(5): ``start-end perms offset dev inode path``): the furthest byte of the file any
    mapping reaches (offset + length), for files never mapped executable (not a library) outside
    the system's folders, the largest first, at most ``MAPPED_FILES_KEPT``. A numpy memmap,
    ``np.load(mmap_mode=…)``, a safetensors or Arrow file is one. A file that later is shorter
    than that extent was truncated under the mapping: touching a page past its end raises
    SIGBUS (mmap(2)).

    Cost: a torch process maps about 1,500 lines, most of them its libraries' (``.so``) or
    anonymous; each line is matched as bytes, and only a data file's line is split and parsed
    (its numbers) and its path decoded (a line of a library, a system file, a deleted file or no
    file is dropped before), the kernel's ``\\012`` (a line break in the name) undone."""
    extent: Dict[bytes, int] = {}
    inode: Dict[bytes, int] = {}
    code: Set[bytes] = set()
    for raw in maps.splitlines():
        at = raw.find(b" /")  # the path: the fields before it hold no '/'
        if at < 0:
            continue
        fields = raw[:at].split()
        path = raw[at + 1 :]
        if len(fields) != 5 or path.endswith(_NOT_DATA_SUFFIXES) or path.startswith(_SYSTEM_PREFIXES_B):
            continue
        if b"x" in fields[1]:
            code.add(path)
            continue
        try:
            start, end = (int(x, 16) for x in fields[0].split(b"-"))
            offset = int(fields[2], 16)
            inode[path] = int(fields[4])
        except ValueError:
            continue
        extent[path] = max(extent.get(path, 0), offset + end - start)
    merged: Dict[str, Tuple[int, int]] = {}
    for raw_path, n in extent.items():
        if raw_path in code:
            continue
        # The kernel writes a line break in a mapped path as the octal escape "\012" (the only
        # character /proc/PID/maps escapes: show_map_vma's seq_file_path(m, file, "\n"), which
        # mangle_path writes as a backslash and three octal digits; fs/seq_file.c). Undone
        # here, so that the path stats as the file it is (file_sizes). A backslash itself is
        # not escaped there: a name that holds "\012" literally reads as a line break.
        name = raw_path.replace(b"\\012", b"\n").decode("utf-8", "replace")
        was = merged.get(name)
        merged[name] = (n if was is None else max(n, was[0]), inode[raw_path])
    found = [(name, n, ino) for name, (n, ino) in merged.items()]
    found.sort(key=lambda x: (-x[1], x[0]))
    return tuple(found[:MAPPED_FILES_KEPT])


def pinned_bytes_from_smaps(text: str) -> int:
    """Bytes of CUDA pinned host memory in a ``/proc/PID/smaps`` text: the ``Rss`` of every
    shared mapping (``s`` in its permissions) of ``/dev/nvidiactl``. Those pages count in RSS and
    never in ``VmLck``/``VmPin`` (the driver pins them itself); proc(5) describes the format."""
    total, counting = 0, False
    for line in text.splitlines():
        head = line.split(None, 6)
        if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:  # a mapping's header line
            counting = len(head) == 6 and head[5] == NVIDIA_CTL.decode() and head[1].endswith("s")
        elif counting and line.startswith("Rss:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                total += int(parts[1]) * 1024
    return total


def pinned_bytes(pid: int) -> Optional[int]:
    """CUDA pinned host memory of ``pid`` in bytes (:func:`pinned_bytes_from_smaps`), or
    ``None`` when ``/proc/PID/smaps`` cannot be read. Cost: the kernel walks every mapping's
    pages (milliseconds on a large process): call it only for processes that map
    ``/dev/nvidiactl``, at the slow cadence."""
    text = _read(f"/proc/{pid}/smaps")
    return None if text is None else pinned_bytes_from_smaps(text)


def max_map_count() -> Optional[int]:
    """``vm.max_map_count`` (``/proc/sys/vm/max_map_count``): the most mappings one process may
    have, or ``None``."""
    text = _read("/proc/sys/vm/max_map_count")
    try:
        return int(text) if text else None
    except ValueError:
        return None


_SHM_NAME = re.compile(r"^torch_(\d+)_")


# Seconds a /dev/shm file's ctime may precede the start of the process whose pid it names and
# still be that process's: a start time computed from the boot time (whole seconds) and a clock
# stepped meanwhile.
SHM_START_SLACK_S = 2.0


def shm_leftovers(
    pids, folder: str = "/dev/shm", since: Optional[Mapping[int, float]] = None
) -> Tuple[Tuple[str, int], ...]:
    """``(name, bytes)`` of the regular files in ``folder`` that PyTorch's ``file_system``
    sharing strategy created for one of ``pids`` (``torch_<pid>_<…>``, torch/csrc/CudaIPCTypes
    and libshm naming) and nobody removed. The bytes are the memory a file holds (allocated
    blocks, ``st_blocks × 512``), not its apparent size: a sparse file that was sized with
    ``ftruncate`` and never written holds nothing. Links are not followed (another user may
    create such names in ``/dev/shm``). ``since`` maps a pid to when (Unix seconds) the first
    process of the job with that pid started: a file of that pid last changed (``st_ctime``)
    more than ``SHM_START_SLACK_S`` before was left by an earlier process the pid was reused
    from, not by the job. Empty when none or unreadable."""
    started = since or {}
    out = []
    for name, pid, st in _torch_shm_files(pids, folder):
        if st.st_ctime >= started.get(pid, float("-inf")) - SHM_START_SLACK_S:
            out.append((name, st.st_blocks * 512))
    return tuple(out)


def _torch_shm_files(pids, folder: str) -> List[Tuple[str, int, os.stat_result]]:
    """``(name, pid, lstat)`` of the regular ``torch_<pid>_…`` files in ``folder`` of one of
    ``pids``, by name; links are not followed. Empty when unreadable."""
    wanted = {str(p) for p in pids}
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    out = []
    for name in sorted(names):
        m = _SHM_NAME.match(name)
        if m and m.group(1) in wanted:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.append((name, int(m.group(1)), st))
    return out


# Signals a process's own timers deliver: SIGALRM (alarm, setitimer ITIMER_REAL), SIGVTALRM and
# SIGPROF (setitimer); signal(7), setitimer(2).
_TIMER_SIGNALS = {14: "SIGALRM", 26: "SIGVTALRM", 27: "SIGPROF"}


def timer_wakeup(pid: int) -> Optional[str]:
    """Why ``pid`` might wake itself although all its threads wait without a timeout, or
    ``None``: it catches a timer signal (``SigCgt`` in ``/proc/PID/status``; a Python handler runs
    in the main thread and can release what it waits for) or has POSIX timers
    (``/proc/PID/timers``)."""
    mask = status_field(read_bytes(f"/proc/{pid}/status") or b"", "SigCgt")
    try:
        caught = int(mask, 16) if mask is not None else 0
    except ValueError:
        caught = 0
    names = [name for sig, name in _TIMER_SIGNALS.items() if caught >> (sig - 1) & 1]
    if names:
        return f"it catches {', '.join(names)}, so a timer it armed may wake it"
    if (_read(f"/proc/{pid}/timers") or "").strip():
        return "it has POSIX timers (/proc/PID/timers), which may wake it"
    return None

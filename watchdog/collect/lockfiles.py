"""Lock files that name their holder: the soft locks a job's processes take by creating a file
(``open(O_CREAT | O_EXCL)``) and writing their pid into it, released by deleting the file.
tox-dev/filelock's ``SoftFileLock`` writes ``pid``, ``hostname`` and a start token, one a line,
and breaks a stale lock only when that pid is provably gone on the same host (filelock#476,
#660); a lock from another host, or a hand-written one, is never broken (filelock#725: a
marker from a replacement pod blocks every contender forever). A poller of such a file waits
for a delete that only its holder would make: when the holder is gone, nothing will.

:func:`find` reads them at report time, for :class:`~watchdog.types.Facts`'s ``lock_files``.
It runs as root beside processes it does not trust, so every read is bounded and no path the
job or another user controls steers it anywhere else: the folders are the job's working
directories (``/proc/PID/cwd``), its temporary folder and the folders of the files main and the
workers have open, each walked from the job's root (``/proc/MAIN/root``) one component at a
time with ``O_NOFOLLOW`` (a symbolic link is not followed: the folder is skipped); in a folder
only names ending in :data:`SUFFIXES` are looked at, at most :data:`MAX_ENTRIES` entries; a
file is read only when it is a regular file with one link, owned by the job's user, at most
:data:`MAX_BYTES` bytes, checked on an ``O_PATH | O_NOFOLLOW`` descriptor taken through the
folder's descriptor and only then that same file opened for reading (``/proc/self/fd``): a node
swapped in after the check (a FIFO, a device bind-mounted in the job's own namespace) is never
opened; and only a pid and a host name parsed from it leave this module (anything else in the
file is never shown); a file's path is shown on one line (line breaks and control characters
written as escapes, watchdog.text)."""

from __future__ import annotations

import os
import re
import socket
import stat
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ..text import one_line
from ..types import LockFile, Sample
from . import procfs

# Names a lock file ends with (filelock's ``<file>.lock``, ``.lck``, a pid file's ``.pid``).
SUFFIXES = (".lock", ".lck", ".pid")
# Entries of one folder looked at, and lock files kept in all (those whose holder is not alive
# first, then the newest: many live locks of other jobs in /tmp must not crowd out a stale one).
MAX_ENTRIES = 4096
MAX_FILES = 32
# Bytes a lock file may have to be read (filelock's marker is under 100).
MAX_BYTES = 512
# Folders looked in at most: the working directories, the temporary folder, open files' folders.
MAX_FOLDERS = 12
# The highest pid Linux allows (PID_MAX_LIMIT on 64-bit: 2**22).
PID_LIMIT = 1 << 22
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}")
# A lock file is resolved once (O_PATH: no open of the node itself), checked, then that same file
# reopened for reading through /proc/self/fd (a magic link to it: O_NOFOLLOW would refuse it).
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_REOPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def parse(data: bytes) -> Optional[Tuple[int, Optional[str]]]:
    """``(pid, host)`` from a lock file's bytes: the first line a pid (decimal, 1 to
    :data:`PID_LIMIT`), the second a host name when it looks like one (else ``None``); ``None``
    when the bytes are not ASCII or the first line is not a pid."""
    try:
        lines = data.decode("ascii").splitlines()
    except UnicodeDecodeError:
        return None
    first = lines[0].strip() if lines else ""
    if not first.isdigit() or not 0 < int(first) <= PID_LIMIT:
        return None
    host = lines[1].strip() if len(lines) > 1 else ""
    return int(first), host if _HOST.fullmatch(host) else None


def _boot_time() -> Optional[float]:
    """The boot time (``btime`` of ``/proc/stat``, seconds since the epoch), or ``None``."""
    text = procfs.read_text("/proc/stat") or ""
    for line in text.splitlines():
        if line.startswith("btime "):
            try:
                return float(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def holder_state(pid: int, written_wall: float, boot: Optional[float]) -> Tuple[str, Optional[int]]:
    """What ``pid`` is now, for a lock file written at ``written_wall`` (:class:`LockFile`'s
    ``holder``) and its start in clock ticks when there is such a process. A process that
    started after the file was written (by more than a second: the clocks' granularity) holds
    the number but did not write it: ``reused``."""
    st = procfs.proc_stat(pid)
    if st is None:
        return "gone", None
    if st.state == "Z":
        return "zombie", st.start_ticks
    if boot is not None and boot + st.start_ticks / procfs.CLK_TCK > written_wall + 1.0:
        return "reused", st.start_ticks
    return "alive", st.start_ticks


def _real_uid(pid: int) -> Optional[int]:
    """The real user id of ``pid`` (``Uid:`` of ``/proc/PID/status``, its first value), or
    ``None`` when unreadable: whose files the job's lock files are."""
    status = procfs.read_bytes(f"/proc/{pid}/status")
    value = procfs.status_field(status, "Uid") if status else None
    try:
        return int(value.split()[0]) if value else None
    except (ValueError, IndexError):
        return None


def _walk(root_fd: int, path: str) -> Optional[int]:
    """A descriptor of folder ``path`` (absolute, as the job sees it) opened from ``root_fd``
    one component at a time, never following a symbolic link; ``None`` when that fails."""
    fd = os.dup(root_fd)
    try:
        for part in [p for p in path.split("/") if p]:
            if part == "..":
                return None
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        out, fd = fd, -1
        return out
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def _read_one(dir_fd: int, name: str, uid: int) -> Optional[Tuple[bytes, float]]:
    """The bytes and modification time of lock file ``name`` in ``dir_fd`` when it passes the
    module's checks (a regular file with one link, owned by ``uid``, small), else ``None``.

    The name is resolved once, to an ``O_PATH`` descriptor (open(2): nothing is opened for
    reading, no device's open runs); the checks are made on it (fstat) and only that very file
    is then opened for reading, through ``/proc/self/fd`` (proc(5)). A node the job puts at the
    name after the check (a FIFO renamed over it, a device bind-mounted over it in a mount
    namespace of its own) is never opened by root."""
    try:
        path_fd = os.open(name, _PATH_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(path_fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_nlink != 1 or st.st_size > MAX_BYTES:
            return None
        fd = os.open(f"/proc/self/fd/{path_fd}", _REOPEN_FLAGS)
    except OSError:
        return None
    finally:
        os.close(path_fd)
    try:
        again = os.fstat(fd)
        if (again.st_ino, again.st_dev) != (st.st_ino, st.st_dev) or not stat.S_ISREG(again.st_mode):
            return None
        return os.read(fd, MAX_BYTES), again.st_mtime
    except OSError:
        return None
    finally:
        os.close(fd)


def _scan(dir_fd: int, shown: str, uid: int, boot: Optional[float]) -> List[LockFile]:
    found = []
    here = socket.gethostname()
    try:
        with os.scandir(dir_fd) as it:
            for n, entry in enumerate(it):
                if n >= MAX_ENTRIES:
                    break
                if not entry.name.endswith(SUFFIXES):
                    continue
                read = _read_one(dir_fd, entry.name, uid)
                parsed = parse(read[0]) if read is not None else None
                if read is None or parsed is None:
                    continue
                pid, host = parsed
                state, ticks = holder_state(pid, read[1], boot)
                elsewhere = host is not None and host != here
                # the job chose the names: shown on one line, a break never starts a line of the report
                path = one_line(os.path.join(shown, entry.name))
                found.append(LockFile(path, pid, host, read[1], state, ticks, elsewhere))
    except OSError:
        pass
    return found


def folders(sample: Sample, open_files: Iterable[Tuple[int, Sequence[str]]] = ()) -> List[Tuple[str, str]]:
    """``(how to open it, how to show it)`` for each folder :func:`find` looks in: the
    working directories of main and the workers (``cwd:PID``), the job's temporary folder
    (``TMPDIR`` of main, else ``/tmp``) and the folders of the regular files main and the
    workers have open (``open_files``: ``(pid, targets)``), as absolute paths under main's root;
    at most :data:`MAX_FOLDERS`, duplicates dropped."""
    main = sample.main
    if main is None:
        return []
    out: List[Tuple[str, str]] = []
    seen: Set[str] = set()
    for p in [main] + list(sample.workers):
        try:
            shown = os.readlink(f"/proc/{p.pid}/cwd")
        except OSError:
            continue
        if shown not in seen:
            seen.add(shown)
            out.append((f"cwd:{p.pid}", shown))
    env = procfs.environ(main.pid) or {}
    tmp = env.get("TMPDIR", "")
    for path in [tmp if tmp.startswith("/") else "/tmp"] + [
        os.path.dirname(t) for _pid, targets in open_files for t in targets if t.startswith("/")
    ]:
        path = os.path.normpath(path)
        if path not in seen and not path.startswith(("/proc", "/sys", "/dev")):
            seen.add(path)
            out.append((path, path))
    return out[:MAX_FOLDERS]


def find(sample: Sample, open_files: Iterable[Tuple[int, Sequence[str]]] = ()) -> Tuple[LockFile, ...]:
    """The lock files in the job's folders (:func:`folders`) whose first line is a pid, those
    whose holder is not alive first, then the newest, at most :data:`MAX_FILES`
    (:class:`~watchdog.types.LockFile`, each with what its pid is now). Empty when main is gone
    or its root cannot be opened; never raises for a file or folder that changes or vanishes
    meanwhile."""
    main = sample.main
    if main is None:
        return ()
    uid = _real_uid(main.pid)
    if uid is None:
        return ()
    try:
        root_fd = os.open(f"/proc/{main.pid}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return ()
    boot = _boot_time()
    found: Dict[str, LockFile] = {}
    try:
        for how, shown in folders(sample, open_files):
            if how.startswith("cwd:"):
                try:
                    dir_fd: Optional[int] = os.open(f"/proc/{how[4:]}/cwd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                except OSError:
                    dir_fd = None
            else:
                dir_fd = _walk(root_fd, how)
            if dir_fd is None:
                continue
            try:
                for lock in _scan(dir_fd, shown, uid, boot):
                    found.setdefault(lock.path, lock)
            finally:
                os.close(dir_fd)
    finally:
        os.close(root_fd)
    return tuple(sorted(found.values(), key=lambda x: (x.holder in ("alive", "reused"), -x.written_wall))[:MAX_FILES])

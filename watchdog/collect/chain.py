"""Follow a wait to what it waits for, across processes (report time): a thread's descriptor,
what that descriptor is (pipe, TCP or Unix socket with its peer, a file on FUSE or NFS, a FIFO,
a terminal), the process at the other end of a pipe or the child waited for, and that
process's own wait, up to ``MAX_HOPS`` links. The remedy is then chosen from the last link,
not the first (a worker reading ``pipe:curl …`` waits for curl, which waits for a store).

Sources: proc(5) for ``/proc/PID/fd``, ``/proc/PID/net/tcp``/``tcp6``/``unix`` (a socket's
inode and addresses), ``/proc/PID/mountinfo`` (file-system types) and
``/proc/PID/task/TID/children``; Documentation/filesystems/fuse.rst for the FUSE connections
under ``/sys/fs/fuse/connections`` (named after the mount's device minor number).
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from typing import Collection, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from ..types import KernelWait, LinkKind, LockHold, ThreadSample, WaitKind, WaitLink
from . import procfs
from .waits import LOCK_CALLS, READ_CALLS

MAX_HOPS = 4
_TERMINALS = ("/dev/pts/", "/dev/tty", "/dev/console")
# File systems on which a FIFO may be looked for with lstat (local: no server to wait for).
_LOCAL_FS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "f2fs", "zfs", "ramfs"})


def _hex_address(text: str) -> str:
    """``0100007F:1F90`` (``/proc/net/tcp``, IPv4 in host byte order) or the IPv6 form, as
    ``127.0.0.1:8080`` / ``[::1]:8080``."""
    addr, _, port = text.partition(":")
    number = int(port, 16)
    raw = bytes.fromhex(addr)
    if len(raw) == 4:
        return f"{socket.inet_ntop(socket.AF_INET, raw[::-1])}:{number}"
    words = struct.unpack("<4I", raw)
    return f"[{socket.inet_ntop(socket.AF_INET6, struct.pack('>4I', *words))}]:{number}"


def parse_tcp(text: str) -> Dict[int, Tuple[str, str]]:
    """``/proc/PID/net/tcp`` (or ``tcp6``) text: socket inode -> ``(local, remote)`` addresses."""
    out = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10:
            continue
        try:
            out[int(parts[9])] = (_hex_address(parts[1]), _hex_address(parts[2]))
        except ValueError:
            continue
    return out


def parse_unix(text: str) -> Dict[int, str]:
    """``/proc/PID/net/unix`` text: socket inode -> its path (empty for an unnamed socket)."""
    out = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 7:
            continue
        try:
            out[int(parts[6])] = parts[7] if len(parts) > 7 else ""
        except ValueError:
            continue
    return out


def parse_mountinfo(text: str) -> List[Tuple[str, str, int]]:
    """``/proc/PID/mountinfo`` text: ``(mount point, file-system type, device minor)``."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5:
            continue
        try:
            minor = int(fields[2].split(":")[1])
        except (IndexError, ValueError):
            minor = -1
        out.append((fields[4].replace("\\040", " "), right.split()[0] if right.split() else "", minor))
    return out


def _mount_of(pid: int, path: str) -> Optional[Tuple[str, str, int]]:
    text = procfs.read_text(f"/proc/{pid}/mountinfo")
    best = None
    for point, fstype, minor in parse_mountinfo(text or ""):
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) > len(best[0])):
            best = (point, fstype, minor)
    return best


def _tcp_table(pid: int) -> Dict[int, Tuple[str, str]]:
    """``pid``'s network namespace's TCP sockets (IPv4 and IPv6): inode -> (local, remote)."""
    table: Dict[int, Tuple[str, str]] = {}
    for name in ("tcp", "tcp6"):
        table.update(parse_tcp(procfs.read_text(f"/proc/{pid}/net/{name}") or ""))
    return table


def _socket(pid: int, inode: int) -> Tuple[LinkKind, str]:
    found = _tcp_table(pid).get(inode)
    if found:
        return LinkKind.TCP, found[1]
    unix = parse_unix(procfs.read_text(f"/proc/{pid}/net/unix") or "").get(inode)
    if unix is not None:
        return LinkKind.UNIX, unix
    return LinkKind.SOCKET, ""


def classify(pid: int, target: str) -> Tuple[LinkKind, str, Optional[int]]:
    """What ``pid``'s descriptor target is: ``(kind, peer, FUSE connection)``."""
    if target.startswith("pipe:"):
        return LinkKind.PIPE, "", None
    if target.startswith("socket:["):
        try:
            inode = int(target[len("socket:[") : -1])
        except ValueError:
            return LinkKind.SOCKET, "", None
        kind, peer = _socket(pid, inode)
        return kind, peer, None
    if target.startswith(_TERMINALS):
        return LinkKind.TERMINAL, "", None
    if not target.startswith("/"):
        return LinkKind.OTHER, "", None
    mount = _mount_of(pid, target)
    fstype = mount[1] if mount else ""
    if fstype.startswith("fuse") and mount is not None:
        return LinkKind.FUSE, f"{mount[0]} {fstype}", mount[2] if mount[2] >= 0 else None
    if fstype.startswith("nfs") and mount is not None:
        return LinkKind.NFS, f"{mount[0]} {fstype}", None
    if fstype in _LOCAL_FS:
        try:
            # lstat, on a local file system only: a stat on a network or FUSE mount whose server
            # does not answer would block, and a path the job controls must not lead elsewhere.
            if stat.S_ISFIFO(os.lstat(f"/proc/{pid}/root{target}").st_mode):
                return LinkKind.FIFO, "", None
        except OSError:
            pass
    return LinkKind.FILE, f"{mount[0]} {fstype}" if mount else "", None


def _tcp_peers(pid: int) -> List[Tuple[str, str]]:
    """``(socket:[N], remote address)`` of ``pid``'s TCP sockets that have a peer."""
    table = _tcp_table(pid)
    out = []
    for target in procfs.open_files(pid):
        if target.startswith("socket:["):
            try:
                found = table.get(int(target[len("socket:[") : -1]))
            except ValueError:
                continue
            if found and not found[1].endswith(":0"):
                out.append((target, found[1]))
    return out


def _blocked_thread(threads: Sequence[ThreadSample], pid: int) -> Optional[ThreadSample]:
    """The thread of a process that is most likely what the chain waits on: one blocked on a
    descriptor, a child or the disk, the main thread first."""
    ordered = sorted(threads, key=lambda d: d.tid != pid)
    for d in ordered:
        if d.wait is not None and d.wait.kind in (WaitKind.FD, WaitKind.CHILD, WaitKind.DISK):
            return d
    return ordered[0] if ordered else None


def _next_hop(pid: int, members: Optional[Collection[int]]) -> Optional[Tuple[int, ThreadSample]]:
    """The next process of a chain with the thread it is followed through; a process outside
    the job gets a placeholder thread (nothing of it is read)."""
    if members is not None and pid not in members:
        return pid, ThreadSample(pid, "?", "?")
    nxt = _blocked_thread(procfs.thread_details(pid), pid)
    return (pid, nxt) if nxt is not None else None


def _children(pid: int) -> List[int]:
    out: List[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        text = procfs.read_text(f"/proc/{pid}/task/{tid}/children") or ""
        out += [int(x) for x in text.split() if x.isdigit()]
    return sorted(out)


def _fd_of(wait: Optional[KernelWait]) -> Optional[int]:
    return wait.fd if wait is not None and wait.fd is not None and wait.fd >= 0 else None


def follow(pid: int, detail: ThreadSample, members: Optional[Collection[int]] = None) -> Tuple[WaitLink, ...]:
    """The wait chain that starts at thread ``detail`` of ``pid``: one :class:`WaitLink` per
    hop, at most ``MAX_HOPS``, never the same process twice. A process outside ``members`` (the
    job's processes; ``None``: no bound) ends the chain with a link that names it and reads
    nothing more of it: another user's processes are not the job's to report. Reads ``/proc``
    (report time); never raises (what cannot be read ends the chain)."""
    links: List[WaitLink] = []
    seen = set()
    here: Optional[Tuple[int, ThreadSample]] = (pid, detail)
    while here is not None and len(links) < MAX_HOPS:
        pid, d = here
        seen.add(pid)
        here = None
        if members is not None and pid not in members and links:
            st = procfs.proc_stat(pid)
            links.append(WaitLink(pid, d.tid, st.comm if st else "?", LinkKind.OTHER, "", "a process outside the job"))
            break
        wait = d.wait
        name = d.name
        text = wait.detail if wait is not None else "unknown wait"
        if wait is not None and wait.kind is WaitKind.CHILD:
            kids = [c for c in _children(pid) if c not in seen]
            links.append(WaitLink(pid, d.tid, name, LinkKind.CHILD, "", text, " ".join(map(str, kids))))
            if kids:
                here = _next_hop(kids[0], members)
            continue
        fd = _fd_of(wait)
        target = procfs.fd_target(pid, fd) if fd is not None else None
        if target is None and links:
            # A command in its own event loop (curl polls every second): its TCP connections
            # are what it waits on.
            peers = _tcp_peers(pid)
            if peers:
                links.append(WaitLink(pid, d.tid, name, LinkKind.TCP, peers[0][0], text, peers[0][1]))
                break
        if target is None:
            links.append(WaitLink(pid, d.tid, name, LinkKind.OTHER, "", text))
            break
        kind, peer, connection = classify(pid, target)
        if wait is not None and wait.syscall in ("flock", "fcntl"):
            kind = LinkKind.LOCK
        reading = wait is not None and wait.syscall in READ_CALLS
        if kind is LinkKind.PIPE:
            readers, writers, _complete = procfs.pipe_holders({target})
            others = [p for p in (writers if reading else readers).get(target, ()) if p != pid]
            peer = " ".join(map(str, others))
            links.append(WaitLink(pid, d.tid, name, kind, target, text, peer, None, fd, reading))
            fresh = [p for p in others if p not in seen]
            if fresh:
                here = _next_hop(fresh[0], members)
            continue
        links.append(WaitLink(pid, d.tid, name, kind, target, text, peer, connection, fd, reading))
    return tuple(links)


def _fd_lock_lines(pid: int, fd: str) -> Tuple[Optional[str], List[Tuple[str, Tuple[int, int, int]]]]:
    """``(target, [(kind, (major, minor, inode)), …])`` of ``pid``'s descriptor ``fd``: the locks
    its ``/proc/PID/fdinfo/FD`` lists (``lock:`` lines, the format of ``/proc/locks``: an
    ``flock`` or OFD lock is listed by every descriptor of its open file description, a POSIX
    lock by its owner's; proc(5), fs/locks.c ``show_fd_locks``). Raises ``OSError`` when the
    descriptor cannot be read for want of permission; a vanished one gives ``(None, [])``."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except FileNotFoundError:
        return None, []
    if not target.startswith("/"):
        return target, []
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return target, []
    out = []
    for line in text.splitlines():
        if line.startswith("lock:"):
            for kind, _mode, _pid, ident in procfs.parse_locks(line[len("lock:") :].strip()):
                out.append((kind, ident))
    return target, out


def _ofd_holders(
    idents: Set[Tuple[int, int, int]], since_ticks: Optional[int]
) -> Tuple[Dict[Tuple[int, int, int], Set[int]], bool]:
    """Every process on the host holding a descriptor whose ``fdinfo`` lists an ``flock`` or
    OFD lock on one of ``idents`` (device and inode, as ``/proc/locks`` names files), and
    whether every process that could hold one was read. A process whose descriptors cannot be
    read counts as unknown (``False``) unless it started before ``since_ticks`` (the job's main
    process's start, clock ticks since boot): an open file description the job made reaches
    another process only by ``fork`` (to a process started since) or by being sent on purpose
    (``SCM_RIGHTS``, unix(7); ``pidfd_getfd``, which needs ptrace access to the job). Cost: one
    listing per process, one ``readlink`` per descriptor and one ``fdinfo`` read per descriptor
    of a path; report time."""
    found: Dict[Tuple[int, int, int], Set[int]] = {i: set() for i in idents}
    complete = True

    def older(pid: int) -> bool:
        st = procfs.proc_stat(pid)
        return since_ticks is not None and st is not None and st.start_ticks < since_ticks

    for pid, fds in procfs.host_fds():
        if fds is None:
            complete = complete and older(pid)
            continue
        for fd in fds:
            try:
                _target, locks = _fd_lock_lines(pid, fd)
            except OSError:
                complete = complete and older(pid)
                break
            for kind, ident in locks:
                if kind in ("FLOCK", "OFDLCK") and ident in found:
                    found[ident].add(pid)
    return found, complete


def lock_holds(
    details: Mapping[int, Sequence[ThreadSample]], since_ticks: Optional[int] = None
) -> Dict[Tuple[int, int], LockHold]:
    """Who can release the lock each thread of ``details`` blocked in ``flock``/``fcntl`` waits
    for, by ``(pid, fd)`` (:class:`~watchdog.types.LockHold`). The waiter's descriptor names the
    file by mount and inode (``fdinfo``), ``/proc/locks`` the locks held on it; a POSIX lock is
    released only by its owning process (or its exit), an ``flock``/OFD lock by any process
    holding a descriptor of its open file description (flock(2), fcntl(2)), found on the whole
    host (:func:`_ofd_holders`; ``since_ticks`` the job's start, clock ticks since boot). Report
    time; never raises: what cannot be read leaves the entry out or ``complete`` False."""
    waits: Dict[Tuple[int, int], Tuple[str, Tuple[int, int, int]]] = {}
    for pid, threads in details.items():
        devices = None
        for d in threads:
            w = d.wait
            if w is None or w.syscall not in LOCK_CALLS or w.fd is None or w.fd < 0 or (pid, w.fd) in waits:
                continue
            target = procfs.fd_target(pid, w.fd)
            where = procfs.fd_inode(pid, str(w.fd)) if target and target.startswith("/") else None
            if devices is None:
                devices = procfs.mount_devices(pid)
            dev = devices.get(where[0]) if where is not None else None
            if target is None or where is None or dev is None:
                continue
            waits[(pid, w.fd)] = (target, (dev[0], dev[1], where[1]))
    if not waits:
        return {}
    text = procfs.read_text("/proc/locks") or ""
    held: Dict[Tuple[int, int, int], List[Tuple[str, str, Optional[int]]]] = {}
    for kind, mode, holder, ident in procfs.parse_locks(text):
        held.setdefault(ident, []).append((kind, mode, holder))
    shared = {
        ident for _t, ident in waits.values() for kind, _m, _h in held.get(ident, ()) if kind in ("FLOCK", "OFDLCK")
    }
    ofd, scanned = _ofd_holders(shared, since_ticks) if shared else ({}, True)
    out = {}
    for key, (target, ident) in waits.items():
        locks = held.get(ident, [])
        holders: Set[int] = set()
        complete = bool(locks)
        for kind, _mode, holder in locks:
            if kind == "POSIX":
                if holder is None:
                    complete = False
                else:
                    holders.add(holder)
            elif kind in ("FLOCK", "OFDLCK"):
                holders |= ofd.get(ident, set())
                complete = complete and scanned and bool(ofd.get(ident))
            else:  # a lease or a mandatory lock: not followed
                complete = False
        out[key] = LockHold(target, tuple(f"{k} {m}" for k, m, _h in locks), tuple(sorted(holders)), complete)
    return out

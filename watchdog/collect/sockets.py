"""Who is at the other end of a process's Unix sockets: the peer of each connected ``AF_UNIX``
socket, from the kernel's socket diagnostics (sock_diag(7): ``SOCK_DIAG_BY_FAMILY`` for
``AF_UNIX`` with ``UDIAG_SHOW_PEER``, the ``UNIX_DIAG_PEER`` attribute), and which process holds
it, from ``/proc/PID/fd`` (proc(5): a socket's link reads ``socket:[INODE]``).

NOTE [ Manager lock proof ] (watchdog/manager_proof.py) rests on every client of a
``multiprocessing.Manager`` being a process of the job: a process outside the job that knows the
manager's address and authkey (CPython docs, "Using a remote manager") could send the
``release()``. :func:`peer_holders` tells the proof which process holds the other end of each of
the manager's connections; one that no process of the job holds, a socket that is not a Unix
one (a TCP manager) or a table that could not be read leaves the proof unmade.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import struct
from typing import Dict, Iterable, Optional, Tuple

NETLINK_SOCK_DIAG = 4  # linux/netlink.h
SOCK_DIAG_BY_FAMILY = 20  # linux/sock_diag.h
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 0x2, 0x3
UDIAG_SHOW_PEER = 0x4  # linux/unix_diag.h
UNIX_DIAG_PEER = 2
_HEADER = struct.Struct("=IHHII")  # struct nlmsghdr
_REQUEST = struct.Struct("=BBHIIIII")  # struct unix_diag_req
_MESSAGE = struct.Struct("=BBBBIII")  # struct unix_diag_msg
_ATTR = struct.Struct("=HH")  # struct rtattr
# Bounds on one dump, whatever other users' sockets the host holds: bytes read, seconds per read.
MAX_DUMP_BYTES = 64 << 20
RECV_TIMEOUT_S = 2.0


def _align(n: int) -> int:
    return (n + 3) & ~3


def unix_peers() -> Optional[Dict[int, int]]:
    """Every ``AF_UNIX`` socket of this network namespace that has a peer: its inode to the
    peer's inode (sock_diag(7), ``UNIX_DIAG_PEER``). ``None`` when the table cannot be read
    (no netlink, an error message, a malformed or over-long answer: over ``MAX_DUMP_BYTES``,
    or a read slower than ``RECV_TIMEOUT_S`` seconds)."""
    try:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    except (OSError, AttributeError):
        return None
    peers: Dict[int, int] = {}
    with s:
        try:
            s.settimeout(RECV_TIMEOUT_S)
            request = _REQUEST.pack(socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0, UDIAG_SHOW_PEER, 0, 0)
            s.send(
                _HEADER.pack(_HEADER.size + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
                + request
            )
            total = 0
            while True:
                data = s.recv(1 << 16)
                total += len(data)
                if not data or total > MAX_DUMP_BYTES:
                    return None
                off = 0
                while off + _HEADER.size <= len(data):
                    length, kind, _flags, _seq, _port = _HEADER.unpack_from(data, off)
                    if length < _HEADER.size or off + length > len(data):
                        return None
                    if kind == NLMSG_DONE:
                        return peers
                    if kind == NLMSG_ERROR:
                        return None
                    body, end = off + _HEADER.size, off + length
                    if body + _MESSAGE.size <= end:
                        inode = _MESSAGE.unpack_from(data, body)[4]
                        at = body + _MESSAGE.size
                        while at + _ATTR.size <= end:
                            size, attr = _ATTR.unpack_from(data, at)
                            if size < _ATTR.size:
                                break
                            if attr == UNIX_DIAG_PEER and size >= _ATTR.size + 4:
                                peer = struct.unpack_from("=I", data, at + _ATTR.size)[0]
                                if peer:
                                    peers[inode] = peer
                            at += _align(size)
                    off += _align(length)
        except OSError:
            return None


def socket_inodes(pid: int) -> Optional[Tuple[int, ...]]:
    """The inodes of the sockets ``pid`` has open (``/proc/PID/fd/N`` links ``socket:[INODE]``),
    or ``None`` when its descriptors cannot be listed."""
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    out = []
    for name in names:
        try:
            target = os.readlink(os.path.join(folder, name))
        except OSError:
            continue  # closed since the listing
        if target.startswith("socket:[") and target.endswith("]"):
            try:
                out.append(int(target[8:-1]))
            except ValueError:
                continue
    return tuple(out)


def peer_holders(server: int, pids: Iterable[int]) -> Optional[Tuple[Optional[int], ...]]:
    """For each connected socket of ``server``, the process among ``pids`` (``server`` counts)
    that holds its peer (``None`` for a peer none of them holds, and for a socket that is not a
    Unix one: a TCP connection, a listener on TCP, another family); Unix sockets with no peer (a
    listener, a connection whose client closed) are left out. ``None`` when ``server``'s descriptors or
    the Unix table cannot be read."""
    table = unix_peers()
    mine = socket_inodes(server)
    if table is None or mine is None:
        return None
    owner: Dict[int, int] = {}
    for pid in pids:
        for inode in mine if pid == server else socket_inodes(pid) or ():
            owner.setdefault(inode, pid)
    listed = unix_inodes()
    out = []
    for inode in mine:
        if inode in table:
            out.append(owner.get(table[inode]))
        elif inode not in listed:
            out.append(None)  # not a Unix socket: its other end cannot be told
    return tuple(out)


def unix_inodes() -> frozenset:
    """The inodes of every Unix socket ``/proc/net/unix`` lists (proc(5): its Inode column),
    connected or not; empty when it cannot be read."""
    out = set()
    try:
        with open("/proc/net/unix", encoding="ascii", errors="replace") as f:
            next(f, None)
            for line in f:
                fields = line.split()
                if len(fields) >= 7 and fields[6].isdigit():
                    out.add(int(fields[6]))
    except OSError:
        return frozenset()
    return frozenset(out)


# multiprocessing's own address for a listener it picks (``connection.arbitrary_address``:
# ``tempfile.mktemp(prefix="listener-", dir=util.get_temp_dir())``, the folder from
# ``tempfile.mkdtemp(prefix="pymp-")``, made 0700).
_PRIVATE_PATH = re.compile(r"^/.+/pymp-[A-Za-z0-9_]+/listener-[A-Za-z0-9_]+$")
_SO_ACCEPTCON = 0x10000  # the Flags column of a listening socket in /proc/net/unix


def private_listeners(pid: int) -> Tuple[int, ...]:
    """The descriptors of ``pid``'s listening Unix sockets bound where multiprocessing puts a
    listener whose address it chose (``<tempdir>/pymp-XXXXXXXX/listener-XXXXXXXX``), in a folder
    that is a real directory of mode 0700 owned by ``pid``'s user: no other user can connect to
    it, and only the job was told the address. A chosen path, an abstract name, a folder another
    user could enter, or anything unreadable is left out (empty tuple)."""
    folder = f"/proc/{pid}/fd"
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
        names = os.listdir(folder)
    except OSError:
        return ()
    listening: Dict[int, str] = {}
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as f:
            next(f, None)
            for line in f:
                fields = line.split(None, 7)
                if len(fields) == 8 and fields[6].isdigit():
                    try:
                        flags = int(fields[3], 16)
                    except ValueError:
                        continue
                    if flags & _SO_ACCEPTCON:
                        listening[int(fields[6])] = fields[7].rstrip("\n")
    except OSError:
        return ()
    out = []
    for name in names:
        try:
            target = os.readlink(os.path.join(folder, name))
        except OSError:
            continue
        if not (target.startswith("socket:[") and target.endswith("]") and target[8:-1].isdigit()):
            continue
        path = listening.get(int(target[8:-1]))
        if path is None or not _PRIVATE_PATH.match(path):
            continue
        try:
            st = os.lstat(os.path.dirname(path))
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == uid and name.isdigit():
            out.append(int(name))
    return tuple(sorted(out))

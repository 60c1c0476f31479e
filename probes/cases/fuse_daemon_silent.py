"""Target: the dataset lives on a FUSE mount (an object-store bucket mounted with a FUSE
daemon, as gcsfuse or goofys do) whose daemon stops answering reads: every worker waits in the
kernel for the daemon's answer (``request_wait_answer``), or in D state on the page another
worker's read locked. The daemon here is a thread of main speaking the FUSE protocol on
``/dev/fuse`` (Documentation/filesystems/fuse.rst): it answers ``INIT``, ``LOOKUP``,
``GETATTR`` and ``OPEN``, and never ``READ``. The mount lives in a private mount namespace of
the job, so it goes away with the job. Modelled on kahing/goofys#153 and
GoogleCloudPlatform/gcsfuse#1844. Needs root (CAP_SYS_ADMIN): it exits 77 without.

Run: ``python -m probes.cases.fuse_daemon_silent``. The watchdog must conclude
``worker_blocked_io``, naming the FUSE mount, with the connection's abort and ``umount -l`` as
the remedy (not a FIFO's or a socket's).
"""

import ctypes
import errno
import os
import stat
import struct
import sys
import tempfile
import threading

import torch
from torch.utils.data import DataLoader, Dataset

IN_HEADER = struct.Struct("<IIQQIIIHH")  # len, opcode, unique, nodeid, uid, gid, pid, total_extlen, padding
OUT_HEADER = struct.Struct("<IiQ")  # len, error, unique
ATTR = struct.Struct(
    "<QQQQQQIIIIIIIIII"
)  # fuse_attr: ino size blocks a/m/ctime, nsecs, mode nlink uid gid rdev blksize flags
LOOKUP, GETATTR, OPEN, READ, RELEASE, FLUSH, INIT, OPENDIR, INTERRUPT = 1, 3, 14, 15, 18, 25, 26, 27, 36
ROOT, SHARD, SIZE = 1, 2, 1 << 20


def attr(node):
    mode = (stat.S_IFDIR | 0o755) if node == ROOT else (stat.S_IFREG | 0o644)
    return ATTR.pack(
        node,
        0 if node == ROOT else SIZE,
        0 if node == ROOT else SIZE // 512,
        0,
        0,
        0,
        0,
        0,
        0,
        mode,
        1,
        0,
        0,
        0,
        4096,
        0,
    )


def reply(fd, unique, body=b"", error=0):
    os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), -error, unique) + body)


def serve(fd):
    while True:
        try:
            request = os.read(fd, 1 << 20)
        except OSError:
            return  # unmounted
        _len, opcode, unique, node, *_ = IN_HEADER.unpack_from(request)
        body = request[IN_HEADER.size :]
        if opcode == INIT:
            major, minor, readahead, _flags = struct.unpack_from("<IIII", body)
            reply(
                fd,
                unique,
                struct.pack("<IIIIHHIIHHII", 7, 31, readahead, 0, 16, 12, 1 << 17, 1, 32, 0, 0, 0) + bytes(24),
            )
        elif opcode == LOOKUP:
            name = body.split(b"\0", 1)[0]
            if node == ROOT and name == b"shard-0000.bin":
                reply(fd, unique, struct.pack("<QQQQII", SHARD, 0, 60, 60, 0, 0) + attr(SHARD))
            else:
                reply(fd, unique, error=errno.ENOENT)
        elif opcode == GETATTR:
            reply(fd, unique, struct.pack("<QII", 60, 0, 0) + attr(node))
        elif opcode in (OPEN, OPENDIR):
            reply(fd, unique, struct.pack("<QIi", 1, 0, 0))
        elif opcode == READ:
            pass  # the object store never answers: neither does the daemon
        elif opcode in (RELEASE, FLUSH):
            reply(fd, unique)
        elif opcode != INTERRUPT:
            reply(fd, unique, error=errno.ENOSYS)


def mount_bucket():
    """A FUSE mount served by a thread of this process, in a private mount namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x00020000) != 0 or libc.mount(None, b"/", None, 0x4000 | 0x40000, None) != 0:  # NEWNS; REC|PRIVATE
        print("fuse_daemon_silent needs root (CAP_SYS_ADMIN) for a mount namespace:", os.strerror(ctypes.get_errno()))
        sys.exit(77)
    point = tempfile.mkdtemp(prefix="bucket-")
    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    # Forked workers must not keep the connection alive: when main goes, the kernel aborts it
    # and their reads fail, instead of waiting for an answer forever.
    os.register_at_fork(after_in_child=lambda: os.close(fd))
    options = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    if libc.mount(b"bucket", point.encode(), b"fuse.bucketfs", 0x2 | 0x4, options) != 0:  # NOSUID|NODEV
        print("fuse_daemon_silent cannot mount FUSE:", os.strerror(ctypes.get_errno()))
        sys.exit(77)
    threading.Thread(target=serve, args=(fd,), name="fuse-daemon", daemon=True).start()
    return point


class BucketShards(Dataset):
    def __init__(self, point):
        self.point = point

    def __len__(self):
        return 16

    def __getitem__(self, i):
        with open(os.path.join(self.point, "shard-0000.bin"), "rb") as f:
            f.seek(i * 4096)
            return torch.tensor(float(len(f.read(4096))))  # waits for the daemon's answer


def main():
    point = mount_bucket()
    for step, batch in enumerate(DataLoader(BucketShards(point), batch_size=4, num_workers=2)):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

"""Target: each worker writes a decoded-sample cache to a local folder whose file system fills
up (a scratch disk or an overlay: huggingface/datasets#1039, ultralytics/ultralytics#3086 "No
space left on device" while caching). The write is a plain ``file.write()``, whose ``OSError:
[Errno 28] No space left on device`` names no file; main re-raises it as "Caught OSError in
DataLoader worker process N". ``/dev/shm`` is nearly empty the whole time. The full file system
is a 1 MiB tmpfs this target mounts in a private mount namespace of its own.

Run: ``python -m probes.cases.worker_cache_disk_full`` as root (CAP_SYS_ADMIN; it exits 0 saying
why without). The watchdog must write a crash report ``disk_full`` naming the worker's write
(``f.write(blob)``), never ``shm_exhausted`` or ``--shm-size`` advice.
"""

import ctypes
import os
import sys
import tempfile

import torch
from torch.utils.data import DataLoader, Dataset


def private_tmpfs(size):
    """A tmpfs of ``size`` in a private mount namespace of this process, or ``None``."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x00020000) != 0 or libc.mount(None, b"/", None, 0x4000 | 0x40000, None) != 0:  # NEWNS; REC|PRIVATE
        return None
    point = tempfile.mkdtemp(prefix="dlwatch-case-disk-")
    if libc.mount(b"tmpfs", point.encode(), b"tmpfs", 0x2 | 0x4, f"size={size}".encode()) != 0:  # NOSUID|NODEV
        os.rmdir(point)
        return None
    return point


def release(point):
    """Unmount the tmpfs at ``point`` (its files go with it) and remove the folder."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(point.encode(), 2) != 0:  # MNT_DETACH
        print("cannot unmount", point, os.strerror(ctypes.get_errno()), file=sys.stderr)
    try:
        os.rmdir(point)
    except OSError as e:
        print("cannot remove", point, e, file=sys.stderr)


class CachedDecode(Dataset):
    def __init__(self, folder):
        self.folder = folder

    def __len__(self):
        return 512

    def __getitem__(self, i):
        blob = os.urandom(64 * 1024)  # the "decoded" sample
        with open(os.path.join(self.folder, f"{i}.bin"), "wb") as f:
            f.write(blob)  # fails once the cache's file system is full
        return torch.frombuffer(bytearray(blob[:32]), dtype=torch.uint8)


def main():
    folder = private_tmpfs("1m")
    if folder is None:
        print("worker_cache_disk_full needs root (CAP_SYS_ADMIN) for a mount namespace", file=sys.stderr)
        return
    try:
        for step, batch in enumerate(DataLoader(CachedDecode(folder), batch_size=4, num_workers=2)):
            print("step", step, tuple(batch.shape), flush=True)
    finally:
        release(folder)


if __name__ == "__main__":
    main()

"""Target: a soft lock file guards the dataset's shards. A downloader process (started by main
with ``multiprocessing``) takes it the way tox-dev/filelock's ``SoftFileLock`` does: it creates
the file with ``O_CREAT | O_EXCL`` and writes its pid and host name into it, one a line; the
release deletes the file. The downloader is killed with SIGKILL while it holds the lock (as the
OOM killer kills; here it kills itself the same way), so the file stays. The DataLoader's
workers take the same lock in ``__getitem__``, polling every 0.1 s, and never get it: only the
holder's release would delete the file, and the holder is gone. Modelled on tox-dev/filelock#725
(``SoftReadWriteLock`` blocks forever on a marker its holder left: filelock breaks a stale lock
only when it can check the holder's pid on its own host, filelock#476 and #660; this hand-written
lock, like a marker from another host, never does).

Run: ``python -m probes.cases.lock_file_holder_killed [breaks_stale]``. The watchdog must report
``worker_stuck``, suspected (a poll cannot be proven stuck from outside: the loop might give up,
and anyone may delete the file), at the polling line, naming the lock file, the pid written in
it and that this process of the job was killed by SIGKILL. With ``breaks_stale`` the poll breaks
a lock whose holder has ended (filelock's rule: the pid is gone, or a zombie nobody reaped), the
job finishes, and the watchdog must never report it.
"""

import multiprocessing as mp
import os
import signal
import socket
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

# In the working directory (the test's own folder under probes.repro: a job ended with SIGKILL
# leaves its lock file behind, as a real one does, and nowhere shared).
LOCK = os.path.abspath(f"dlwatch-case-{os.getpid()}-shards.lock")
BREAKS_STALE = sys.argv[1:] == ["breaks_stale"]
POLL_S = 0.1


def stale_inode(path: str):
    """The inode of ``path`` when the pid written in it has ended (no such process, or a zombie),
    else ``None``: a file still empty (its holder created it and has not written yet) is held."""
    try:
        with open(path) as f:
            pid = int(f.readline())
            inode = os.fstat(f.fileno()).st_ino
    except (OSError, ValueError):
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return inode if f.read().rsplit(b")", 1)[1].split()[0] == b"Z" else None
    except FileNotFoundError:
        return inode


def acquire(path: str) -> None:
    """Take the soft lock: create the file, or poll until it can be created."""
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            stale = stale_inode(path) if BREAKS_STALE else None
            if stale is not None:
                try:
                    if os.stat(path).st_ino == stale:  # the same file, not a new holder's
                        os.unlink(path)  # break the stale lock, as filelock does on its own host
                except FileNotFoundError:
                    pass
                continue
            time.sleep(POLL_S)  # the poll: only the holder's release deletes the file
            continue
        os.write(fd, f"{os.getpid()}\n{socket.gethostname()}\n".encode())
        os.close(fd)
        return


def release(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:  # a breaker took it for stale in the instant between its two checks
        pass


def download(path: str, held) -> None:
    acquire(path)
    held.set()
    time.sleep(3.0)  # fetching the shards (main has long started the workers: none reaps it)
    os.kill(os.getpid(), signal.SIGKILL)  # no release: the lock file stays


class LockedShards(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        acquire(LOCK)
        try:
            return torch.full((2,), float(i))
        finally:
            release(LOCK)


def main():
    ctx = mp.get_context("fork")
    held = ctx.Event()
    downloader = ctx.Process(target=download, args=(LOCK, held), name="shard-downloader")
    downloader.start()
    held.wait()
    try:
        batches = iter(DataLoader(LockedShards(), batch_size=4, num_workers=2))
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # ended (SIGTERM): remove the file; main only
        for step, batch in enumerate(batches):
            print("step", step, batch.shape, flush=True)
    finally:
        try:
            os.unlink(LOCK)
        except FileNotFoundError:
            pass
    downloader.join()
    print("done", flush=True)


if __name__ == "__main__":
    main()

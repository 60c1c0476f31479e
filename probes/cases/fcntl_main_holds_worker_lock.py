"""Target: main takes a POSIX ``fcntl`` lock on a cache's lock file to guard a one-time
preparation and keeps it (the file object stays open, the unlock is on a path not taken); the
DataLoader's workers take the same lock in ``__getitem__`` with ``fcntl.lockf(LOCK_EX)`` and
wait for it, while main waits in ``__next__`` for their batch. ``/proc/locks`` names main as the
holder: main waits for the workers, the workers wait for main, a cycle across processes
(fcntl(2): a POSIX lock belongs to its process and is released only by it, or at its exit;
deadlock detection covers lock waits only, and main does not wait on a lock). Modelled on
cache-preparation locks held across the training loop (pytorch/pytorch#97432-style shared
caches guarded by a file lock).

Run: ``python -m probes.cases.fcntl_main_holds_worker_lock [release_s]``. The watchdog must
conclude a proven hang: main holds the lock the workers wait for and waits for their batch.
With ``release_s`` (the healthy twin, ``healthy_main_lock_released``) a thread of main releases
the lock after that many seconds of writing the cache: no proof, every batch comes, exit 0.
"""

import fcntl
import os
import sys
import tempfile
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

RELEASE_S = float(sys.argv[1]) if len(sys.argv) > 1 else None


class CachedRows(Dataset):
    def __init__(self, lock_path):
        self.lock_path = lock_path

    def __len__(self):
        return 16

    def __getitem__(self, i):
        with open(self.lock_path, "a") as f:
            fcntl.lockf(f, fcntl.LOCK_EX)  # waits for the cache to be ready
            fcntl.lockf(f, fcntl.LOCK_UN)
        return torch.tensor(float(i))


def write_cache(lock_file, path, seconds):
    """Write the cache for ``seconds``, then release the lock main took."""
    end = time.monotonic() + seconds
    with open(path, "wb") as out:
        while time.monotonic() < end:
            out.write(b"x" * 4096)
            out.flush()
            time.sleep(0.2)
    fcntl.lockf(lock_file, fcntl.LOCK_UN)


def main():
    folder = tempfile.mkdtemp(prefix="cache-")
    lock_path = os.path.join(folder, "cache.lock")
    lock_file = open(lock_path, "a")
    fcntl.lockf(lock_file, fcntl.LOCK_EX)  # guard the preparation
    if RELEASE_S is not None:
        threading.Thread(
            target=write_cache, args=(lock_file, os.path.join(folder, "cache.bin"), RELEASE_S), daemon=True
        ).start()
    loader = DataLoader(CachedRows(lock_path), batch_size=4, num_workers=2)
    for step, batch in enumerate(loader):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

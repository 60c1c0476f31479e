"""Target: two DataLoader workers take two ``flock`` locks (a shard's index file and its data
file) in opposite orders: worker 0 holds ``a.lock`` and waits for ``b.lock``, worker 1 holds
``b.lock`` and waits for ``a.lock``. ``flock(2)`` has no deadlock detection (unlike POSIX
``fcntl`` locks, which fail one side with ``EDEADLK``), so both wait forever; ``/proc/locks``
shows each lock's holder, so the cycle is proven by the kernel's own facts. Modelled on the
lock-ordering deadlocks of file-locked dataset caches (huggingface/datasets#6068-style
``FileLock`` pairs taken per shard, tox-dev/filelock's ``UnixFileLock`` being ``flock``).

Run: ``python -m probes.cases.flock_cycle_two_workers [same]``. The watchdog must conclude a
proven hang naming the cycle: "worker … holds …a.lock and waits for …b.lock; worker … holds
…b.lock and waits for …a.lock". With ``same`` both workers take the locks in the same order
(the healthy twin, ``healthy_flock_same_order``): every batch comes and the job exits 0.
"""

import fcntl
import os
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

SAME_ORDER = len(sys.argv) > 1 and sys.argv[1] == "same"


class ShardPair(Dataset):
    def __init__(self, folder):
        self.folder = folder

    def __len__(self):
        return 16

    def _path(self, name):
        return os.path.join(self.folder, name)

    def __getitem__(self, i):
        wid = get_worker_info().id
        first, second = ("a.lock", "b.lock") if SAME_ORDER or wid == 0 else ("b.lock", "a.lock")
        with open(self._path(first), "a") as f1:
            fcntl.flock(f1, fcntl.LOCK_EX)  # the shard's index
            open(self._path(f"held-{wid}"), "w").close()
            other = self._path(f"held-{1 - wid}")
            end = time.monotonic() + 2.0
            while not SAME_ORDER and not os.path.exists(other) and time.monotonic() < end:
                time.sleep(0.05)  # both workers inside their first lock
            with open(self._path(second), "a") as f2:
                fcntl.flock(f2, fcntl.LOCK_EX)  # the shard's data: the other worker holds it
                time.sleep(0.01)
                fcntl.flock(f2, fcntl.LOCK_UN)
            fcntl.flock(f1, fcntl.LOCK_UN)
        return torch.tensor(float(i))


def main():
    folder = tempfile.mkdtemp(prefix="shards-")
    loader = DataLoader(ShardPair(folder), batch_size=2, num_workers=2)
    for step, batch in enumerate(loader):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

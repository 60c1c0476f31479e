"""Target: a ``multiprocessing.Lock`` guarding a cache in ``__getitem__`` that one path leaves
held (an early return before ``release()``): the next ``acquire()`` in any worker waits forever.
A ``multiprocessing.Lock`` is a semaphore in shared memory (CPython Modules/_multiprocessing/
semaphore.c): the kernel keeps no holder, the wait is a futex without FUTEX_PRIVATE_FLAG, and the
acquire runs in C, so no Python frame names the lock's kind (the pattern of "DataLoader hangs
with a multiprocessing lock in the dataset" reports, e.g. pytorch/pytorch#50669-style caches).

Run: ``python -m probes.cases.mp_lock_left_held``. The watchdog must report ``worker_stuck``,
suspected (a semaphore's holder cannot be read), at the ``self.lock.acquire()`` line, with a
remedy that follows the evidence (a lock shared between processes, left held: release on every
path, not re-entrant), never "another process is meant to set this event or feed this queue".
"""

import multiprocessing as mp
import time

import torch
from torch.utils.data import DataLoader, Dataset


class CacheDataset(Dataset):
    def __init__(self):
        self.lock = mp.Lock()

    def __len__(self):
        return 1000

    def __getitem__(self, i):
        self.lock.acquire()
        if i % 50 == 7:
            return torch.zeros(16)  # the bug: returns without release()
        x = torch.randn(16)
        self.lock.release()
        return x


def main():
    for step, _batch in enumerate(DataLoader(CacheDataset(), batch_size=8, num_workers=2)):
        time.sleep(0.01)
        if step % 20 == 0:
            print(f"step {step}", flush=True)


if __name__ == "__main__":
    main()

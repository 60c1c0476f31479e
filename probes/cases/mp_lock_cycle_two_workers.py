"""Target: two DataLoader workers take two ``multiprocessing.Lock`` objects (a shard index's and
a shard cache's, made by main and inherited through fork) in opposite orders: worker 0 is inside
``with self.a:`` and waits at ``with self.b:``, worker 1 inside ``with self.b:`` waits at
``with self.a:``. A multiprocessing lock is a POSIX semaphore in shared memory (CPython's
``_multiprocessing.SemLock``): the kernel records no holder, so nothing outside the two
processes can show who holds which; the cycle is read from both stacks and stays suspected.
Modelled on lock-ordering deadlocks between DataLoader workers sharing locks
(pytorch/pytorch#13246-style shared caches, CPython docs "Synchronization between processes").

Run: ``python -m probes.cases.mp_lock_cycle_two_workers [same]``. The watchdog must conclude a
suspected ``worker_deadlock`` naming the cycle ("worker 0 … holds self.a … and waits for
self.b; worker 1 … holds self.b … and waits for self.a") with both stacks. With ``same`` (the
healthy twin, ``healthy_mp_lock_same_order``) both workers take the locks in the same order:
every batch comes and the job exits 0.
"""

import multiprocessing as mp
import os
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

SAME_ORDER = len(sys.argv) > 1 and sys.argv[1] == "same"


class SharedShards(Dataset):
    def __init__(self, a, b, folder):
        self.a, self.b, self.folder = a, b, folder

    def __len__(self):
        return 16

    def _both_inside(self, wid):
        open(os.path.join(self.folder, f"held-{wid}"), "w").close()
        other = os.path.join(self.folder, f"held-{1 - wid}")
        end = time.monotonic() + 2.0
        while not SAME_ORDER and not os.path.exists(other) and time.monotonic() < end:
            time.sleep(0.05)

    def __getitem__(self, i):
        wid = get_worker_info().id
        if SAME_ORDER or wid == 0:
            with self.a:  # the shard's index
                self._both_inside(wid)
                with self.b:  # the shard's cache: worker 1 holds it
                    time.sleep(0.01)
        else:
            with self.b:  # the shard's cache
                self._both_inside(wid)
                with self.a:  # the shard's index: worker 0 holds it
                    time.sleep(0.01)
        return torch.tensor(float(i))


def main():
    ctx = mp.get_context("fork")
    data = SharedShards(ctx.Lock(), ctx.Lock(), tempfile.mkdtemp(prefix="shards-"))
    loader = DataLoader(data, batch_size=2, num_workers=2, multiprocessing_context=ctx)
    for step, batch in enumerate(loader):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

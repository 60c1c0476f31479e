"""Target: workers wait through a ``multiprocessing.Manager()`` proxy: main takes the manager's
lock to guard a one-time preparation and returns early on the "already prepared" path without
releasing it, so every worker's ``with self.lock:`` waits forever for the manager process's
answer. The wait is a read on the proxy's Unix socket to the manager (a child of main), whose
serving thread waits, in turn, for the lock (multiprocessing/managers.py: ``BaseProxy._callmethod``
sends the request and reads the reply; ``Server.serve_client`` runs the method; CPython docs,
"Managers"; the pattern of pytorch/pytorch#36016-style shared caches guarded by a Manager lock).

Run: ``python -m probes.cases.manager_lock_never_released``. The watchdog must conclude
``worker_stuck`` (suspected) at the ``with self.lock:`` line, naming the Manager proxy and the
manager process, never "a multiprocessing queue that no process feeds".
"""

import multiprocessing as mp
import os
import tempfile

import torch
from torch.utils.data import DataLoader, Dataset


class SharedCacheDataset(Dataset):
    def __init__(self, lock, cache):
        self.lock = lock
        self.cache = cache

    def __len__(self):
        return 64

    def __getitem__(self, i):
        with self.lock:  # the manager's lock: main never released it
            self.cache[i] = i
        return torch.tensor(float(i))


def prepare(lock, marker):
    lock.acquire()
    if os.path.exists(marker):
        return  # already prepared: returns still holding the lock
    with open(marker, "w") as f:
        f.write("ok")
    lock.release()


def main():
    manager = mp.get_context("fork").Manager()
    lock, cache = manager.Lock(), manager.dict()
    marker = os.path.join(tempfile.mkdtemp(prefix="prepared-"), "done")
    open(marker, "w").close()
    prepare(lock, marker)
    loader = DataLoader(SharedCacheDataset(lock, cache), batch_size=4, num_workers=2)
    for step, batch in enumerate(loader):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

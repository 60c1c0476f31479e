"""Target: a worker takes its own ``threading.Lock`` on a path that returns without releasing
it (a cache hit returned early), then takes it again for the next sample: the worker's only
thread waits forever on a lock it holds itself. Main runs a helper thread of its own that just
sleeps (like HF datasets' ``tqdm_monitor`` or Lightning's ``child-process-observer``), so main
had another thread at the fork; that thread never touches the lock, and the worker delivered
good samples through the very line that now waits (CPython docs, threading.Lock: "once a thread
has acquired it, subsequent attempts to acquire it block"; pytorch/pytorch#1355 comments on
locks in ``__getitem__``).

Run: ``python -m probes.cases.lock_taken_twice_in_worker [GOOD_SAMPLES]`` (default 25). The
watchdog must conclude ``worker_deadlock``, proven, naming the ``self.lock.acquire()`` line,
with a remedy for a lock taken twice (``threading.RLock``, release on every path), never the
fork-inherited verdict and its forkserver remedy.
"""

import sys
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

GOOD = int(sys.argv[1]) if len(sys.argv) > 1 else 25


def monitor():
    while True:  # a progress-bar monitor: wakes now and then, holds nothing
        time.sleep(0.5)


class CachedDataset(Dataset):
    def __init__(self):
        self.lock = threading.Lock()  # created in main, free at the fork
        self.cache = {}

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        self.lock.acquire()
        if i >= GOOD and i % 2 == 1:
            return torch.tensor(float(self.cache.get(i, i)))  # returns still holding the lock
        self.cache[i] = i
        self.lock.release()
        time.sleep(0.01)
        return torch.tensor(float(i))


def main():
    threading.Thread(target=monitor, name="tqdm_monitor", daemon=True).start()
    loader = DataLoader(CachedDataset(), batch_size=4, num_workers=2)
    for step, batch in enumerate(loader):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

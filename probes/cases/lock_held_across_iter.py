"""Target: the training loop keeps a statistics object's lock held for a whole epoch
(``begin_epoch()`` acquires it, ``end_epoch()`` releases it, so main's own thread holds it in
no frame of its stack), and the Dataset records each sample into the same object. The
DataLoader forks its workers inside the epoch: each worker starts with a copy of the held
lock, and its first ``record()`` waits on it forever. Main's forking thread was its only
thread, so the lock cannot have been another thread's; the worker never got through a batch,
so it cannot have taken the lock itself (pytorch/pytorch#41197 on locks copied held by fork;
CPython's ``os.fork`` docs: only the calling thread survives).

Run: ``python -m probes.cases.lock_held_across_iter``. The watchdog must conclude
``fork_inherited_lock``, proven, at the ``with self._lock:`` line of ``EpochStats.record``, and
say that main's own thread held the lock when it created the iterator.
"""

import threading

import torch
from torch.utils.data import DataLoader, Dataset


class EpochStats:
    """Per-epoch sample counts; a snapshot of an epoch is consistent because the epoch holds
    the lock from its beginning to its end."""

    def __init__(self):
        self._lock = threading.Lock()
        self.counts = {}
        self.epoch = -1

    def begin_epoch(self, epoch):
        self._lock.acquire()
        self.epoch = epoch

    def end_epoch(self):
        snapshot = dict(self.counts)
        self._lock.release()
        return snapshot

    def record(self, index):
        with self._lock:
            self.counts[index] = self.counts.get(index, 0) + 1


STATS = EpochStats()


class CountedDataset(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        STATS.record(i)
        return torch.tensor(float(i))


def main():
    loader = DataLoader(CountedDataset(), batch_size=4, num_workers=2)
    for epoch in range(2):
        STATS.begin_epoch(epoch)
        for step, batch in enumerate(loader):
            print("epoch", epoch, "step", step, batch.tolist(), flush=True)
        print("epoch", epoch, "counts", len(STATS.end_epoch()), flush=True)


if __name__ == "__main__":
    main()

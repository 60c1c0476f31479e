"""Target: a worker's ``__getitem__`` and a helper thread it started take two locks in opposite
orders (a cache refresher and a reader), so both threads of the worker wait forever, each on a
lock the other holds. Nothing is inherited through fork: the locks are created in the worker.

Run: ``python -m probes.cases.lock_order_in_worker``. The watchdog must conclude
``worker_deadlock``, proven, naming both threads and both lines.
"""

import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class CachedDataset(Dataset):
    def __init__(self):
        self.index_lock = None
        self.cache_lock = None

    def start(self):
        self.index_lock, self.cache_lock = threading.Lock(), threading.Lock()
        threading.Thread(target=self.refresh, name="cache-refresher", daemon=True).start()

    def refresh(self):
        while True:
            with self.cache_lock:
                time.sleep(0.2)
                with self.index_lock:  # cache -> index
                    pass

    def __len__(self):
        return 64

    def __getitem__(self, i):
        with self.index_lock:
            time.sleep(0.2)
            with self.cache_lock:  # index -> cache: the opposite order
                return torch.tensor(float(i))


def worker_init(_):
    get_worker_info().dataset.start()


def main():
    loader = DataLoader(CachedDataset(), batch_size=4, num_workers=2, worker_init_fn=worker_init)
    for step, batch in enumerate(loader):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

"""Target: a forked worker waits on a ``concurrent.futures`` result that only a thread of the
parent could produce: the pool was created (and its threads started) before ``iter(loader)``
forked the workers, and a child has none of the parent's threads (POSIX ``fork``; the pattern
of storage and RPC clients that start background threads at import; POSIX fork(2) and
CPython's os.fork documentation: only the calling thread exists in the child).

Run: ``python -m probes.cases.thread_pool_before_fork``. The watchdog must conclude
``fork_inherited_lock``, proven, naming the ``future.result()`` line and the thread pool.
"""

import concurrent.futures

import torch
from torch.utils.data import DataLoader, Dataset

POOL = concurrent.futures.ThreadPoolExecutor(max_workers=3)  # created at import, in the parent
POOL.submit(lambda: None).result()  # its threads exist now


def fetch(i):
    return float(i)


class RemoteDataset(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        future = POOL.submit(fetch, i)  # queued for threads that do not exist in the worker
        return torch.tensor(future.result())  # waits forever


def main():
    for step, batch in enumerate(DataLoader(RemoteDataset(), batch_size=4, num_workers=2)):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

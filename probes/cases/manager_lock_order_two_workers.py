"""Target: two DataLoader workers take two ``multiprocessing.Manager()`` locks in opposite orders:
worker 0 takes ``a`` then ``b``, worker 1 takes ``b`` then ``a``; each takes its first lock, they
meet (a ``multiprocessing.Barrier``, so the interleaving is the deadlocking one every run), and
each then waits, inside its first ``with``, for the lock the other holds. Both waits are reads
on the proxies' connections to the manager process (``BaseProxy._callmethod``), whose serving
threads wait in the locks' ``acquire`` (CPython's Lib/multiprocessing/managers.py; CPython
docs, "Managers"); main waits in the DataLoader's ``__next__`` for their batch. The classic
lock-order inversion (CPython docs, threading, "deadlock"; issue #34 of this project: "two
workers each inside ``with a:`` waiting for ``b`` and ``with b:`` waiting for ``a``"), across
processes through a Manager.

Run: ``python -m probes.cases.manager_lock_order_two_workers [same]``. The watchdog must report
the hang proven (every thread of main, the workers and the manager waits for this same set)
and name the cycle from both workers' stacks: worker 0 inside ``with self.a:`` waits for
``self.b``, worker 1 inside ``with self.b:`` waits for ``self.a``. With ``same`` (the healthy
twin) both workers take ``a`` then ``b``: they only wait for each other in turn, and the job
ends by itself with exit code 0.
"""

import multiprocessing as mp
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

SAME = len(sys.argv) > 1 and sys.argv[1] == "same"


class TwoLockDataset(Dataset):
    def __init__(self, a, b, meet):
        self.a, self.b, self.meet = a, b, meet
        self.met = False

    def __len__(self):
        return 32

    def _meet(self):
        if not self.met:  # both workers hold their first lock: now each takes the other's
            self.met = True
            self.meet.wait(60)

    def __getitem__(self, i):
        if SAME or get_worker_info().id == 0:
            with self.a:
                if not SAME:
                    self._meet()
                time.sleep(0.01)
                with self.b:  # worker 0 holds self.a and waits here for self.b
                    return torch.tensor(float(i))
        with self.b:
            self._meet()
            time.sleep(0.01)
            with self.a:  # worker 1 holds self.b and waits here for self.a
                return torch.tensor(float(i))


def main():
    ctx = mp.get_context("fork")
    manager = ctx.Manager()
    a, b = manager.Lock(), manager.Lock()
    loader = DataLoader(TwoLockDataset(a, b, ctx.Barrier(2)), batch_size=4, num_workers=2)
    for step, batch in enumerate(loader):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

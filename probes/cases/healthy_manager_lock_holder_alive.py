"""Healthy control for ``manager_lock_holder_killed``: a cache-warming process of the job takes
a ``multiprocessing.Manager()`` lock, works for ``HOLD_S`` seconds (20 by default) while it holds
it, then releases it and exits; the DataLoader's workers wait in the proxy's ``acquire`` (the
manager's serving threads wait in the lock) until it does. No batch comes for 20 s, but the
holder is alive and will release: slow, not stuck. The manager's wait graph is the same as in
the killed-holder case; only the holder's being alive tells them apart (NOTE [ Manager lock
proof ] in watchdog/detect/manager_proof.py: a live process that could release leaves it unproven).

Run: ``python -m probes.cases.healthy_manager_lock_holder_alive [HOLD_S]``. The watchdog may
report a suspected hang but must never prove it nor end it (``on_hang: terminate``): the job
exits 0.
"""

import multiprocessing as mp
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

HOLD_S = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0


class SharedCacheDataset(Dataset):
    def __init__(self, lock, cache):
        self.lock = lock
        self.cache = cache

    def __len__(self):
        return 16

    def __getitem__(self, i):
        with self.lock:  # waits for the warmer, which releases after HOLD_S s
            self.cache[i] = i
        return torch.tensor(float(i))


def warm(lock, cache, holding, hold_s):
    with lock:
        holding.set()
        cache["warm"] = True
        time.sleep(hold_s)  # warming, alive, then releases


def main():
    ctx = mp.get_context("fork")
    manager = ctx.Manager()
    lock, cache = manager.Lock(), manager.dict()
    holding = ctx.Event()
    warmer = ctx.Process(target=warm, args=(lock, cache, holding, HOLD_S), name="cache-warmer")
    warmer.start()
    holding.wait(30)
    loader = DataLoader(SharedCacheDataset(lock, cache), batch_size=4, num_workers=2)
    for step, batch in enumerate(loader):
        print("step", step, batch.tolist(), flush=True)
    warmer.join()


if __name__ == "__main__":
    main()

"""Healthy control for ``manager_lock_never_released``: main takes a ``multiprocessing.Manager()``
lock in a preparation thread of its own, works for ``HOLD_S`` seconds (20 by default) while it
holds it, then releases it; meanwhile main's iterating thread waits in the DataLoader's
``__next__`` for the workers' batch, and every worker's ``with self.lock:`` waits, through the
proxy, for the manager's answer (its serving threads wait in the lock's ``acquire``). Main, the
workers and the manager wait on each other as in the never-released case, but one live thread
(the preparation, asleep with a timeout) will release: slow, not stuck (NOTE [ Manager lock
proof ] in watchdog/detect/manager_proof.py: a live thread that could still release leaves it
unproven).

Run: ``python -m probes.cases.healthy_manager_lock_main_holds_briefly [HOLD_S]``. The watchdog may
report a suspected hang but must never prove it nor end it (``on_hang: terminate``): the job
exits 0.
"""

import multiprocessing as mp
import sys
import threading
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
        with self.lock:  # waits for main's preparation, which releases after HOLD_S s
            self.cache[i] = i
        return torch.tensor(float(i))


def prepare(lock, cache, holding, hold_s):
    with lock:
        holding.set()
        cache["prepared"] = True
        time.sleep(hold_s)  # preparing, alive, then releases


def main():
    ctx = mp.get_context("fork")
    manager = ctx.Manager()
    lock, cache = manager.Lock(), manager.dict()
    holding = threading.Event()
    preparation = threading.Thread(target=prepare, args=(lock, cache, holding, HOLD_S), name="prepare", daemon=True)
    preparation.start()
    holding.wait(30)
    loader = DataLoader(SharedCacheDataset(lock, cache), batch_size=4, num_workers=2)
    for step, batch in enumerate(loader):
        print("step", step, batch.tolist(), flush=True)
    preparation.join()


if __name__ == "__main__":
    main()

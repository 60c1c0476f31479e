"""Target: a ``multiprocessing.Manager()`` lock guards a shared cache; a cache-warming process
of the job (started by main with ``multiprocessing``, not a DataLoader worker) takes the lock
and is killed by SIGKILL while it holds it (what the OOM killer sends: no ``finally:`` runs).
The manager keeps no owner for its locks (``Server`` in CPython's
Lib/multiprocessing/managers.py runs ``threading.Lock.acquire``/``release`` for its clients
and forgets a client whose connection closes), so the lock stays held for good, and every
worker's ``with self.lock:`` waits forever in the proxy's ``_callmethod`` for the manager's
answer, while the manager's serving thread for each worker waits in the lock's ``acquire``.
The pattern of shared caches guarded by a Manager lock (CPython docs, "Managers"), with the
holder lost as in issue #34 of this project ("a ``multiprocessing.Manager()`` lock whose holder
was SIGKILLed").

Run: ``python -m probes.cases.manager_lock_holder_killed``. The watchdog must report
``worker_stuck``, proven (waits on the dead: no live process of the job can release the lock),
at the ``with self.lock:`` line, naming the killed process, how it ended (signal 9, SIGKILL)
and when.
"""

import multiprocessing as mp
import os
import signal
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SharedCacheDataset(Dataset):
    def __init__(self, lock, cache):
        self.lock = lock
        self.cache = cache

    def __len__(self):
        return 64

    def __getitem__(self, i):
        with self.lock:  # the manager's lock: its holder was killed holding it
            self.cache[i] = i
        return torch.tensor(float(i))


def warm(lock, cache, holding):
    lock.acquire()
    holding.set()
    cache["warm"] = True
    time.sleep(3.0)  # warming, as the sidecar sees
    os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer's signal: the lock is never released


def main():
    ctx = mp.get_context("fork")
    manager = ctx.Manager()
    lock, cache = manager.Lock(), manager.dict()
    holding = ctx.Event()
    warmer = ctx.Process(target=warm, args=(lock, cache, holding), name="cache-warmer")
    warmer.start()
    holding.wait(30)
    loader = DataLoader(SharedCacheDataset(lock, cache), batch_size=4, num_workers=2)
    for step, batch in enumerate(loader):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

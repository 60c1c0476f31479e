"""Target: ``multiprocessing_context="forkserver"`` with ``set_forkserver_preload([this
module])``: importing the module starts a metrics flusher thread that holds the module's lock
most of the time, so the forkserver forks every worker with the lock held (the flusher thread
does not exist in the child). Each worker counts a sample under the lock only from sample
``FROM`` on (8: after its first batch), so by then it has sent a batch and runs
multiprocessing's queue feeder thread too: the worker's main thread waits for the lock, the
feeder waits, untimed, for the main thread to ``put`` the next batch. The feeder's wait can
only be ended by the stuck thread: it is part of the cycle, not a possible releaser. Modelled
on ray-project/ray#56343 and NVIDIA/Megatron-Energon#252 (locks held in a forkserver's preloaded
modules), after the first batches.

Run: ``python -m probes.cases.forkserver_flusher_lock_after_batches``. The watchdog must
conclude ``fork_inherited_lock`` (proven), naming the forkserver and its ``metrics-flusher``
thread, never "waiting for another thread of the worker".
"""

import multiprocessing as mp
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

METRICS_LOCK = threading.Lock()
FROM = 8


def _flush_metrics():
    while True:
        with METRICS_LOCK:
            time.sleep(0.5)  # writing the metrics file
        time.sleep(0.001)


if __name__ not in ("__main__", "__mp_main__"):  # imported as a library: by main, and by the forkserver's preload
    threading.Thread(target=_flush_metrics, name="metrics-flusher", daemon=True).start()


class CountedDataset(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        if i >= FROM:
            with METRICS_LOCK:  # count the sample
                pass
        return torch.tensor(float(i))


def main():
    from . import forkserver_flusher_lock_after_batches as module  # the class by its importable name

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([module.__name__])
    loader = DataLoader(module.CountedDataset(), batch_size=4, num_workers=2, multiprocessing_context=ctx)
    for step, batch in enumerate(loader):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

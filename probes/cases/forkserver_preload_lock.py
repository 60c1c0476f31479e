"""Target: ``multiprocessing_context="forkserver"`` with ``set_forkserver_preload([this
module])``: importing the module starts a background thread (a metrics flusher) that holds
the module's lock most of the time. The forkserver imports it, so the forkserver runs that
thread, and it forks every worker with the lock held; the first worker to take it in
``__getitem__`` blocks forever (the thread that would release it does not exist in the
child). Main, which also imported the module, is not involved. Modelled on
ray-project/ray#56343 and NVIDIA/Megatron-Energon#252 (locks held in a forkserver's preloaded
modules). Python 3.14 makes forkserver the default start method on Linux.

Run: ``python -m probes.cases.forkserver_preload_lock``. The watchdog must conclude
``fork_inherited_lock`` (proven), naming the forkserver as the process that forked the workers.
"""

import multiprocessing as mp
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

METRICS_LOCK = threading.Lock()


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
        with METRICS_LOCK:  # count the sample
            pass
        return torch.tensor(float(i))


def main():
    from . import forkserver_preload_lock as module  # the class by its importable name

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([module.__name__])
    loader = DataLoader(module.CountedDataset(), batch_size=4, num_workers=2, multiprocessing_context=ctx)
    for step, batch in enumerate(loader):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

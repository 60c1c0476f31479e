"""Healthy control: ``multiprocessing_context="forkserver"`` (Python 3.14's default start method
on Linux) with non-persistent workers, several short epochs, and a worker start that costs
seconds of CPU: each worker imports the Dataset's module afresh (the forkserver preloads only
``__main__``), and that import computes for ``START_CPU_S`` CPU seconds (1.5 by default), as an
import of torch or of a large library does. A background thread of main burns CPU meanwhile (a
metrics uploader, as in the README's demo). Each epoch starts two new workers; main waits in
``__next__`` for batch 0 while they are still starting (``worker_starting``, state R). On a
loaded machine (load 9 to 17 on 2 CPUs, where a first user's ``dlwatch verify`` ran the demo's
fixed runs) such a start takes longer than a 5 s stall timeout, with little CPU per second but
runnable all along: it was reported ``hang: suspected; cause: unknown``, "nothing else in the
job moved", and verify took that run for the fix failing.

Run: ``python -m probes.cases.healthy_forkserver_slow_worker_start [EPOCHS] [START_CPU_S]``. The
watchdog must never report it; the job exits 0.
"""

import multiprocessing as mp
import sys
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 and __name__ == "__main__" else 4
START_CPU_S = float(sys.argv[2]) if len(sys.argv) > 2 and __name__ == "__main__" else 1.5


def _heavy_import(cpu_s: float) -> None:
    """Compute for ``cpu_s`` seconds of this process's CPU time (a slow import: on a loaded
    machine it takes longer by the wall clock, runnable all along)."""
    end, x = time.process_time() + cpu_s, 0
    while time.process_time() < end:
        for i in range(10_000):
            x = (x * 31 + i) % 1_000_003


if mp.parent_process() is not None and __name__ != "__mp_main__":
    # A worker unpickling the Dataset imports this module by its name: the slow import. The
    # start's CPU seconds come through the environment (a worker sees no argv of main's).
    import os

    _heavy_import(float(os.environ.get("SLOW_START_CPU_S", "1.5")))


class Squares(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return torch.tensor(float(i * i))


def _busy(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        for i in range(10_000):
            x = (x * 31 + i) % 1_000_003


def main():
    import os

    from . import healthy_forkserver_slow_worker_start as module  # the class by its importable name

    os.environ["SLOW_START_CPU_S"] = str(START_CPU_S)
    stop = threading.Event()
    threading.Thread(target=_busy, args=(stop,), name="busy", daemon=True).start()
    ctx = mp.get_context("forkserver")
    loader = DataLoader(module.Squares(), batch_size=8, num_workers=2, multiprocessing_context=ctx)
    try:
        for epoch in range(EPOCHS):
            started = time.monotonic()
            for step, batch in enumerate(loader):
                if step == 0:
                    print(f"epoch {epoch}: first batch after {time.monotonic() - started:.1f} s", flush=True)
                print("epoch", epoch, "step", step, batch.sum().item(), flush=True)
    finally:
        stop.set()
    print("done", flush=True)


if __name__ == "__main__":
    main()

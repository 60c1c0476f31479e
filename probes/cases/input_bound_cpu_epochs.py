"""Target: short epochs (``persistent_workers=False``, the default) with one DataLoader worker
whose ``__getitem__`` is pure CPU (a few small torch matrix products and a Python loop, about
40 ms of CPU a sample) returning a tiny tensor (``x.flatten()[:16]``): main waits for data most
of its time, the worker computes nearly all of its time and is started again at each epoch. The
same job with ``persistent_workers=True`` is the plain "num_workers too low" job
(``input_bound_cpu_few_workers``). The worker is never in transit: its batch is 16 floats.

Run: ``python -m probes.cases.input_bound_cpu_epochs [SECONDS] [EPOCH_BATCHES] [PERSISTENT]``
(90 s, 40 batches an epoch, 0 by default). The watchdog must warn ``input_bound``: the workers
CPU-bound, with ``num_workers=2`` on a machine with two usable CPUs or more; never "idle" or
"in transit", never blocked in the Dataset for most of its time.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Augment(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        torch.set_num_threads(1)
        x = torch.full((48, 48), float(i % 5) + 1.0)
        start = time.process_time()
        while time.process_time() - start < 0.04:  # 40 ms of CPU a sample: decode, augment
            x = torch.tanh(x @ x.T / 48.0)
        return x.flatten()[:16]


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 90.0
    per_epoch = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    persistent = len(sys.argv) > 3 and sys.argv[3] == "1"
    end = time.monotonic() + seconds
    loader = DataLoader(Augment(2 * per_epoch), batch_size=2, num_workers=1, persistent_workers=persistent)
    epoch = 0
    while time.monotonic() < end:
        for _batch in loader:
            time.sleep(0.005)  # the training step
            if time.monotonic() > end:
                break
        print("epoch", epoch, flush=True)
        epoch += 1
    print("done", flush=True)


if __name__ == "__main__":
    main()

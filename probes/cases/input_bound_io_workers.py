"""Target: a job whose workers wait on storage (``time.sleep`` in ``__getitem__`` stands for a
read from a network file system or an object store, 50 ms a sample) while main's step takes a
few milliseconds: main waits for data most of the time, the workers sleep in the Dataset and
use almost no CPU. More workers than CPUs help such a job (each waits on its own reads).

Run: ``python -m probes.cases.input_bound_io_workers [SECONDS]`` (90 by default). The watchdog
must warn ``input_bound``: the workers I/O-bound, with more workers (``num_workers=4``).
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(0.05)  # a read from slow storage
        return torch.tensor(float(i))


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 90.0
    end = time.monotonic() + seconds
    for step, _batch in enumerate(DataLoader(Remote(), batch_size=2, num_workers=2)):
        time.sleep(0.005)  # the training step
        if step % 20 == 0:
            print("step", step, flush=True)
        if time.monotonic() > end:
            break
    print("done", flush=True)


if __name__ == "__main__":
    main()

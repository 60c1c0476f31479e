"""Healthy control for ``input_bound``: the training step is the slow part (80 ms of CPU a
step in main) and the data is cheap (two workers, a tensor a sample): the workers keep their
prefetched batches ready, main almost never waits in ``__next__``. Not input-bound: no warning
of any kind, ``input_bound`` included.

Run: ``python -m probes.cases.healthy_step_bound [SECONDS]`` (40 by default). The watchdog must
never report it.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Cheap(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        return torch.tensor(float(i))


def step():
    start, acc = time.process_time(), 0
    while time.process_time() - start < 0.08:  # the model's forward and backward
        acc += 1
    return acc


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 40.0
    end = time.monotonic() + seconds
    for n, _batch in enumerate(DataLoader(Cheap(), batch_size=8, num_workers=2)):
        step()
        if n % 50 == 0:
            print("step", n, flush=True)
        if time.monotonic() > end:
            break
    print("done", flush=True)


if __name__ == "__main__":
    main()

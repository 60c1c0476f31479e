"""Healthy control: a worker computes ``SAMPLE_S`` seconds per sample (20 by default; a busy
loop, always in state R), at low priority (``os.nice(19)`` in ``worker_init_fn``, as a batch
job on a shared machine). On an idle machine it gets a whole core. On a loaded one (the test
starts busy processes beside it) it gets a tiny share of a CPU, under any "busy" threshold, but
it is runnable the whole time, waiting on a run queue (``/proc/PID/schedstat``): working on a
sample, not waiting for one. Issue #34 of this project: at load 20 such a worker was reported
``worker_stuck``, "used little CPU: they wait, poll or retry", with the socket-timeout remedy.

Run: ``python -m probes.cases.healthy_compute_low_priority [SAMPLE_S] [SAMPLES]``. The watchdog
must report nothing; the job exits 0.
"""

import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

SAMPLE_S = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
SAMPLES = int(sys.argv[2]) if len(sys.argv) > 2 else 3


class Heavy(Dataset):
    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        end, acc = time.monotonic() + SAMPLE_S, 0
        while time.monotonic() < end:  # computing: runnable all along
            acc += sum(range(1000))
        return torch.tensor([float(i), float(acc % 7)])


def low_priority(_worker_id):
    os.nice(19)


def main():
    loader = DataLoader(Heavy(), batch_size=1, num_workers=1, worker_init_fn=low_priority)
    for step, batch in enumerate(loader):
        print("step", step, batch.flatten().tolist(), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()

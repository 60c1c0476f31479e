"""Target: each worker keeps every decoded sample in a per-worker cache (a dict of numpy
arrays that is never bounded: ultralytics/yolov3#642, images cached in RAM per worker), under a
memory cgroup limit of 640 MiB; the workers grow until the cgroup's OOM killer ends one, and
main raises "DataLoader worker (pid N) is killed by signal: Killed". The host has far more
memory than the limit: the limit in force is the cgroup's.

Run: ``python -m probes.cases.worker_cache_oom_in_cgroup`` under a memory limit (``dlwatch
probe repro worker_cache_oom_in_cgroup`` makes the cgroup). The watchdog must conclude
``worker_killed`` by the OOM killer, naming the cgroup's limit and its OOM count, and, from the
stack taken at the memory warning, the Dataset's line the worker was in (``self.cache[i] =
decode(i)``).
"""

import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


def decode(i):
    time.sleep(0.1)  # the "decoder"
    return np.full((1024, 1024), i, dtype=np.float32)  # 4 MiB "decoded image"


class CachedImages(Dataset):
    def __init__(self):
        self.cache = {}

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        if i not in self.cache:
            self.cache[i] = decode(i)  # kept forever
        return torch.from_numpy(self.cache[i][:4, :4].copy())


def main():
    for step, batch in enumerate(DataLoader(CachedImages(), batch_size=4, num_workers=2)):
        if step % 10 == 0:
            print("step", step, tuple(batch.shape), flush=True)


if __name__ == "__main__":
    main()

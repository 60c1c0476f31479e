"""Healthy control, the twin of ``worker_cache_oom_in_cgroup``: each worker keeps decoded
samples in a per-worker cache, but the cache is bounded (an LRU of 24 entries of 4 MiB, as
``functools.lru_cache(maxsize=…)`` or a bounded dict would be). Each worker's memory grows by
about 96 MiB while the cache fills, in its first seconds, then stays flat for the rest of the
run: no memory-growth warning (ultralytics/yolov3#642 is the unbounded case).

Run: ``python -m probes.cases.healthy_bounded_worker_cache``. The watchdog must never report it.
"""

import collections
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

CACHED = 24  # entries per worker: 96 MiB of 4 MiB "decoded images"


class CachedImages(Dataset):
    def __init__(self):
        self.cache = collections.OrderedDict()

    def __len__(self):
        return 512

    def __getitem__(self, i):
        image = self.cache.get(i)
        if image is None:
            image = np.full((1024, 1024), i, dtype=np.float32)
            self.cache[i] = image
            if len(self.cache) > CACHED:
                self.cache.popitem(last=False)  # the oldest goes: the cache never holds more than CACHED
        else:
            self.cache.move_to_end(i)
        time.sleep(0.02)
        return torch.from_numpy(image[:4, :4].copy())


def main():
    loader = DataLoader(CachedImages(), batch_size=8, num_workers=2, persistent_workers=True)
    for epoch in range(5):
        for step, batch in enumerate(loader):
            if step % 16 == 0:
                print("epoch", epoch, "step", step, float(batch.sum()), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()

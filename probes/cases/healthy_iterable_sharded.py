"""Healthy control for ``iterable_not_sharded``: the same stream, sharded by
``get_worker_info()`` as PyTorch's IterableDataset documentation shows, so each worker yields
its own records and the first batches differ.

Run: ``python -m probes.cases.healthy_iterable_sharded``. The watchdog must never report it.
"""

import time

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class RecordStream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in range(start, self.n, step):
            t = time.time()
            while time.time() - t < 0.01:  # some decoding work
                pass
            yield torch.tensor(i)


def main():
    seen = []
    for batch in DataLoader(RecordStream(600), batch_size=16, num_workers=2):
        seen.extend(batch.tolist())
    print(f"records in source: 600, delivered: {len(seen)}, unique: {len(set(seen))}")


if __name__ == "__main__":
    main()

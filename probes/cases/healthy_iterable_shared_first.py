"""Healthy control for ``iterable_not_sharded``: an ``IterableDataset`` sharded per worker whose
workers' streams begin with the same record. Two shapes of it:

* ``sizes`` (the default): PyTorch's own ``WorkerSpecificIterableDataset``
  (pytorch/pytorch test/test_dataloader.py, ``test_iterable_style_dataset``): with 3 workers and
  ``batch_size=None``, worker ``k`` yields ``range(sizes[k])`` for sizes ``(0, 4, 20)``: worker 0
  yields nothing, workers 1 and 2 both begin with 0, 1, 2, 3, and worker 1 ends there;
* ``header``: 2 workers, ``batch_size=1``, each worker yields a shared header record first, then
  its own share (``index % num_workers == id``): 400 records delivered, 399 distinct.

Run: ``python -m probes.cases.healthy_iterable_shared_first [sizes|header]``. Every worker yields
its own records: the watchdog must never report it (no ``iterable_replicated``: the first
records coincide, the streams do not), and never name worker 0, which yielded nothing.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


def work(seconds):
    start = time.time()
    while time.time() - start < seconds:  # some decoding work
        pass


class WorkerSpecificIterableDataset(IterableDataset):
    def __init__(self, sizes_for_all_workers):
        self.sizes_for_all_workers = sizes_for_all_workers

    def __iter__(self):
        info = get_worker_info()
        assert info is not None
        for i in range(self.sizes_for_all_workers[info.id]):
            work(0.05)
            yield i

    def __len__(self):
        return sum(self.sizes_for_all_workers)


class HeaderThenShard(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if info is not None else (0, 1)
        yield torch.tensor(0)  # the header every shard begins with
        for i in range(1 + start, self.n, step):
            work(0.01)
            yield torch.tensor(i)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "sizes"
    if mode == "sizes":
        sizes = [0, 4, 20]
        loader = DataLoader(WorkerSpecificIterableDataset(sizes), batch_size=None, num_workers=3)
        expected = sorted(i for s in sizes for i in range(s))
    elif mode == "header":
        loader = DataLoader(HeaderThenShard(399), batch_size=1, num_workers=2)
        expected = sorted([0, *range(399)])
    else:
        sys.exit(f"healthy_iterable_shared_first: unknown mode {mode!r} (sizes or header)")
    seen = []
    for batch in loader:
        seen.extend(torch.as_tensor(batch).reshape(-1).tolist())
    assert sorted(seen) == expected, (len(seen), len(expected))
    print(f"records delivered: {len(seen)}, distinct: {len(set(seen))}", flush=True)


if __name__ == "__main__":
    main()

"""Target: main keeps every received batch alive under the ``file_system`` sharing strategy, so
each shared tensor stays one memory mapping, until ``vm.max_map_count`` is reached and ``mmap``
fails: "unable to mmap … Cannot allocate memory (12)" (pytorch/pytorch#92134, #60626, #112470).
About 60 s at the default limit of 65530. Memory and ``/dev/shm`` stay far from full.

Run: ``python -m probes.cases.map_count_exhausted``. The watchdog must warn ``map_count_pressure``
while the map count climbs, then write a crash report ``map_count_exhausted``.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

torch.multiprocessing.set_sharing_strategy("file_system")


class Tiny(Dataset):
    def __len__(self):
        return 400_000

    def __getitem__(self, i):
        return torch.tensor([float(i)])


def main():
    kept = []
    start = time.time()
    for i, batch in enumerate(DataLoader(Tiny(), batch_size=1, num_workers=2, prefetch_factor=16)):
        kept.append(batch)  # cached per-sample outputs: each keeps its mapping alive
        if i % 10000 == 0:
            print(f"batch {i} t={time.time() - start:.1f}s", file=sys.stderr, flush=True)
    print("finished without error", flush=True)


if __name__ == "__main__":
    main()

"""Healthy control for ``rng_copied_into_workers``: the generator is created in each worker
from ``get_worker_info().seed`` (PyTorch's recommendation in "Randomness in multi-process data
loading"), so the workers' augmentations differ. A generator left in the same state in each
worker but never drawn from must not be reported either (``unused_rng``).

Run: ``python -m probes.cases.healthy_rng_per_worker``. The watchdog must never report it.
"""

import random

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Crops(Dataset):
    def __init__(self, n):
        self.n = n
        self.rng = None
        self.unused_rng = random.Random(0)  # copied into every worker, never drawn from there

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.rng is None:
            info = get_worker_info()
            self.rng = np.random.default_rng(info.seed if info is not None else 0)
        return torch.tensor([i, int(self.rng.integers(0, 32))])


def main():
    n = sum(len(b) for b in DataLoader(Crops(512), batch_size=8, num_workers=2))
    print(f"samples: {n}")


if __name__ == "__main__":
    main()

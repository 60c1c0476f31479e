"""Target: silent wrong data, modelled on pytorch/pytorch#5059 ("numpy random numbers are
identical across DataLoader workers") and its follow-ups: the Dataset creates its random
generator in ``__init__``, so every forked worker starts from a copy of the same state and the
random augmentations repeat across workers. (PyTorch has seeded numpy's *global* generator per
worker since 1.9; a generator object the Dataset holds is still copied as it is.)

Run: ``python -m probes.cases.rng_copied_into_workers``. No hang, no crash, exit code 0. The
watchdog must warn ``rng_duplicated`` naming ``Crops.rng``.
"""

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Crops(Dataset):
    def __init__(self, n):
        self.n = n
        self.rng = np.random.default_rng(0)  # created once, copied into every worker

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        offset = self.rng.integers(0, 32)  # a random crop offset
        return torch.tensor([i, offset])


def main():
    offsets = {}
    for batch in DataLoader(Crops(512), batch_size=8, num_workers=2):
        for i, off in batch.tolist():
            offsets[i] = off
    first = [offsets[i] for i in range(8)]
    second = [offsets[i] for i in range(8, 16)]
    print(f"crop offsets of worker 0's first batch: {first}; worker 1's: {second}")


if __name__ == "__main__":
    main()

"""Target: ``persistent_workers=True``, and main extends the Dataset's sample list after the
first epoch (new files found, a curriculum adding samples; pytorch/pytorch#60688 and the forum's
"persistent_workers do not see changes to the dataset"). The workers hold the Dataset as it was
when they started (a fork copy), but main's sampler now counts the longer ``len``: in epoch 1 a
worker gets index 600 of a 600-item list and raises IndexError, re-raised in main as "Caught
IndexError in DataLoader worker process N". ``dataset[600]`` works in main.

Run: ``python -m probes.cases.dataset_extended_after_persistent_workers``. The watchdog must
conclude ``dataset_error`` naming the stale copy (the persistent workers' Dataset is as it was
when they started) and the remedy of recreating the loader after changing the dataset, never
only "reproduce with dataset[600]".
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Items(Dataset):
    def __init__(self, n):
        self.items = list(range(n))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        time.sleep(0.001)
        return torch.tensor([self.items[i]])


def main():
    dataset = Items(600)
    loader = DataLoader(dataset, batch_size=8, num_workers=2, persistent_workers=True)
    for epoch in range(3):
        for _batch in loader:
            pass
        print("epoch", epoch, "samples", len(dataset), flush=True)
        dataset.items.extend(range(600, 640))  # more samples found: main's copy only


if __name__ == "__main__":
    main()

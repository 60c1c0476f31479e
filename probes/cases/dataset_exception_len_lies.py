"""Target: ``__len__`` reports more samples than ``__getitem__`` can serve (alterzero/STARnet#7,
pytorch/pytorch#63566): the sampler asks for indices past the end and the worker raises
IndexError, which main re-raises as "Caught IndexError in DataLoader worker process N" with the
"Original Traceback". Exit code 1.

Run: ``python -m probes.cases.dataset_exception_len_lies``. The watchdog must write a crash
report ``dataset_error`` naming IndexError and the ``self.frames[i]`` line.
"""

import torch
from torch.utils.data import DataLoader, Dataset


class FrameDataset(Dataset):
    def __init__(self, n):
        self.n_listed = n
        self.frames = [f"frame_{k:05d}" for k in range(n) if k % 50 != 7]  # unreadable entries dropped

    def __len__(self):
        return self.n_listed  # stale: still counts the dropped entries

    def __getitem__(self, i):
        name = self.frames[i]  # IndexError for the last indices
        return torch.tensor(float(len(name) + i))


def main():
    total = 0
    for batch in DataLoader(FrameDataset(800), batch_size=8, num_workers=2):
        total += batch.numel()
    print("samples", total)


if __name__ == "__main__":
    main()

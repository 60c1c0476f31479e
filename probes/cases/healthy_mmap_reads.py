"""Healthy control: each worker reads its samples from a 384 MiB ``.npy`` file through
``np.load(mmap_mode="r")``, touching every page of it over the epoch. Each worker's USS grows
by the file pages it read, but they are clean, file-backed and reclaimable (the kernel drops
them under pressure; they are not copies of main's objects): no memory-growth warning.

Run: ``python -m probes.cases.healthy_mmap_reads``. The watchdog must never report it.
"""

import os
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

ROWS, COLS = 6144, 16384  # 384 MiB of float32


class Features(Dataset):
    def __init__(self, path):
        self.path = path
        self.array = None

    def __len__(self):
        return ROWS

    def __getitem__(self, i):
        if self.array is None:
            self.array = np.load(self.path, mmap_mode="r")
        time.sleep(0.002)
        return torch.tensor(float(self.array[i, :: COLS // 8].sum()))  # touches the row's pages


def main():
    path = os.path.join(tempfile.mkdtemp(prefix="features-"), "features.npy")
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(ROWS, COLS))
    for start in range(0, ROWS, 512):
        out[start : start + 512] = 1.0
    out.flush()
    del out
    for step, batch in enumerate(DataLoader(Features(path), batch_size=32, num_workers=2)):
        if step % 20 == 0:
            print("step", step, float(batch.sum()), flush=True)
    os.remove(path)
    print("done", flush=True)


if __name__ == "__main__":
    main()

"""Target: workers read samples from a ``.npy`` file through ``np.load(mmap_mode="r")``; after
a few batches main writes a smaller version of the file in place (``np.save`` to the same
path truncates it), so the next page a worker touches past the file's new end raises SIGBUS:
"DataLoader worker (pid N) is killed by signal: Bus error" (numpy/numpy#21964: a memmap whose
file is truncated). ``/dev/shm`` is nearly empty: raising ``--shm-size`` would change nothing.

Run: ``python -m probes.cases.memmap_truncated_under_workers``. The watchdog must conclude
``worker_killed`` by SIGBUS naming the ``.npy`` file that shrank under the mapping, with the
advice to write a new file and rename it into place, and never ``shm_exhausted`` first.
"""

import os
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

ROWS, COLS = 4096, 1024  # 16 MiB of float32


class Features(Dataset):
    def __init__(self, path):
        self.path = path
        self.array = None

    def __len__(self):
        return ROWS

    def __getitem__(self, i):
        if self.array is None:
            self.array = np.load(self.path, mmap_mode="r")  # mapped once per worker
        time.sleep(0.01)
        return torch.from_numpy(np.array(self.array[(i * 37) % ROWS]))


def main():
    path = os.path.join(tempfile.mkdtemp(prefix="features-"), "features.npy")
    np.save(path, np.random.rand(ROWS, COLS).astype(np.float32))
    for step, batch in enumerate(DataLoader(Features(path), batch_size=16, num_workers=2)):
        print("step", step, tuple(batch.shape), flush=True)
        if step == 40:
            np.save(path, np.zeros((16, COLS), dtype=np.float32))  # "refresh" the features in place


if __name__ == "__main__":
    main()

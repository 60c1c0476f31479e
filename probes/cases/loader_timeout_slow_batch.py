"""Target: ``DataLoader(timeout=5)`` expires while healthy workers compute 12 s batches
(MPI-Dortmund/tomotwin-cryoet#57, pytorch/pytorch#33296). Nothing is deadlocked: the timeout is
too short. Main raises "DataLoader timed out after 5 seconds"; exit code 1.

Run: ``python -m probes.cases.loader_timeout_slow_batch``. The watchdog must write a crash
report ``loader_timeout`` saying the workers were busy, so the timeout is too short.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        start, acc = time.time(), 0.0
        while time.time() - start < 3.0:  # ~3 s of CPU per sample
            acc += sum(range(1000))
        return torch.tensor([float(i), acc])


def main():
    for step, batch in enumerate(DataLoader(SlowDataset(), batch_size=4, num_workers=2, timeout=5)):
        print("step", step, batch.shape, flush=True)


if __name__ == "__main__":
    main()

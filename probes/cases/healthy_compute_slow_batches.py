"""Healthy control: each sample costs its worker about 7 s of CPU (a heavy decode or
augmentation), so no batch comes for longer than a 5 s stall timeout while the workers work.
Under the batch measure the workers' CPU says a sample is being worked on: slow, not stuck.

Run: ``python -m probes.cases.healthy_compute_slow_batches``. The watchdog must never report it.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class HeavyDataset(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        end = time.process_time() + 7.0
        x = 0.0
        while time.process_time() < end:
            x += sum(k * k for k in range(10_000)) * 1e-12
        return torch.tensor(float(i) + x * 0)


def main():
    for step, batch in enumerate(DataLoader(HeavyDataset(), batch_size=1, num_workers=2)):
        print("step", step, batch.tolist(), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()

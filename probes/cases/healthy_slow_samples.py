"""Healthy control: samples that each wait 2–4 s in a timed wait (remote object storage,
emulated with ``time.sleep``), in batches of 4, so each batch takes 8–16 s: longer than a 5 s
stall timeout. The workers' threads wake every 2–4 s in the Dataset's own code.

Run: ``python -m probes.cases.healthy_slow_samples``. The watchdog must never report it.
"""

import random
import time

import torch
from torch.utils.data import DataLoader, Dataset


class RemoteObjects(Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        time.sleep(random.Random(i).uniform(2.0, 4.0))  # one object fetch
        return torch.tensor(float(i))


def main():
    for step, batch in enumerate(DataLoader(RemoteObjects(), batch_size=4, num_workers=2)):
        print("step", step, batch.tolist(), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()

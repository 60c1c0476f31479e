"""Healthy control: the workers poll (every 10 ms) for a ready-file that main's preparation
thread writes after 20 s (a dataset index being built); then batches flow. The polling looks
exactly like a poller that never finishes, until it finishes: with a stall timeout longer than
the preparation (the case runs with 30 s) it must never be reported, and no clock may count the
wait before main asked for a batch.

Run: ``python -m probes.cases.healthy_poll_until_ready``. The watchdog must never report it.
"""

import os
import tempfile
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset


class IndexedDataset(Dataset):
    def __init__(self, ready):
        self.ready = ready

    def __len__(self):
        return 32

    def __getitem__(self, i):
        while not os.path.exists(self.ready):
            time.sleep(0.01)  # the index is still being built
        return torch.tensor(float(i))


def build_index(ready):
    time.sleep(20)
    with open(ready, "w") as f:
        f.write("ok")


def main():
    ready = os.path.join(tempfile.mkdtemp(prefix="index-"), "ready")
    threading.Thread(target=build_index, args=(ready,), daemon=True).start()
    for step, batch in enumerate(DataLoader(IndexedDataset(ready), batch_size=4, num_workers=2)):
        print("step", step, batch.tolist(), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()

"""Healthy control: between epochs main starts two threads that compute for about 8 s (an
evaluation, a checkpoint) and joins them, while the persistent workers sit idle: main's
iterating thread waits in ``Thread.join`` on threads that finish.

Run: ``python -m probes.cases.healthy_main_joins_threads``. The watchdog must never report it.
"""

import threading
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def evaluate(seconds):
    end = time.time() + seconds
    while time.time() < end:
        sum(range(10_000))


def main():
    loader = DataLoader(TensorDataset(torch.randn(256, 8)), batch_size=32, num_workers=2, persistent_workers=True)
    for epoch in range(2):
        for (_x,) in loader:
            pass
        threads = [threading.Thread(target=evaluate, args=(8.0,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("epoch", epoch, "evaluated", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()

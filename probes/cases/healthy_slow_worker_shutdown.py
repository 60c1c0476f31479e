"""Healthy control: each worker starts a non-daemon thread in ``worker_init_fn`` that waits
forever, so a worker cannot exit by itself at the end of an epoch: PyTorch's
``_shutdown_workers`` joins each worker for 5 s (``MP_STATUS_CHECK_INTERVAL``) and then
terminates it (pytorch/pytorch#39869). Each epoch end stalls about 5 s per worker, bounded.

Run: ``python -m probes.cases.healthy_slow_worker_shutdown [NUM_WORKERS]`` (2 by default). The
watchdog must never report or end it, although each stuck worker is provably unable to exit by
itself, whatever the number of workers and however short the stall timeout.
"""

import sys
import threading

import torch
from torch.utils.data import DataLoader, TensorDataset


def worker_init(_):
    threading.Thread(target=threading.Event().wait, name="never-ends").start()  # non-daemon


def main():
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    loader = DataLoader(
        TensorDataset(torch.randn(64, 4)), batch_size=8, num_workers=workers, worker_init_fn=worker_init
    )
    for epoch in range(3):
        for (_x,) in loader:
            pass
        print("epoch", epoch, "done", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()

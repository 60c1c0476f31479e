"""Target: short epochs (16 cheap batches) with ``persistent_workers=False``, whose
``worker_init_fn`` opens the dataset's store for 1.5 s (a connection, an LMDB environment, an
index read): each epoch starts its workers again and main waits for them before its first
batch, most of its waiting time. ``persistent_workers=True`` keeps them across epochs.

Run: ``python -m probes.cases.input_bound_epoch_starts [SECONDS]`` (90 by default). The
watchdog must warn ``input_bound``: epoch starts dominate, ``persistent_workers=True``.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor(float(i))


def open_store(_worker_id):
    time.sleep(1.5)  # connect to the store, read its index


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 90.0
    end = time.monotonic() + seconds
    loader = DataLoader(Records(), batch_size=4, num_workers=2, worker_init_fn=open_store)
    epoch = 0
    while time.monotonic() < end:
        for _batch in loader:
            time.sleep(0.02)  # the training step
        print("epoch", epoch, flush=True)
        epoch += 1
    print("done", flush=True)


if __name__ == "__main__":
    main()

"""Target: a Dataset that calls ``sys.exit("corrupt sample …")`` on a bad record instead of
raising (a pattern in decoding scripts: pytorch/pytorch#17199, pytorch/vision#4167 "DataLoader
worker exited unexpectedly"). ``SystemExit`` is not an ``Exception``: PyTorch's worker loop does
not wrap it, multiprocessing prints the message and the worker exits with code 1; main raises
"DataLoader worker (pid N) exited unexpectedly with exit code 1". No signal is involved.

Run: ``python -m probes.cases.worker_sys_exit_corrupt_sample``. The watchdog must write a crash
report ``worker_exited`` naming exit code 1 (not a kill), quoting the worker's last words
("corrupt sample 1337"), with no OOM-killer advice.
"""

import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        if i == 1337:
            sys.exit(f"corrupt sample {i}: header length 0")  # ends the worker, not the sample
        return torch.full((8,), float(i))


def main():
    for step, batch in enumerate(DataLoader(Records(), batch_size=16, num_workers=2)):
        if step % 20 == 0:
            print("step", step, tuple(batch.shape), flush=True)


if __name__ == "__main__":
    main()

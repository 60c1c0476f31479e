"""Target: every worker ends itself with ``os._exit(0)`` partway through the epoch (a native
library's ``exit()`` on a condition it considers final, or a Dataset that "stops" by exiting:
pytorch/pytorch#8976, Lightning-AI/pytorch-lightning#4641). Exit code 0 is no error to
PyTorch's SIGCHLD handler; main notices only at its next status check and raises "DataLoader
worker (pid(s) N, M) exited unexpectedly". The inside view records exit code 0 for each.

Run: ``python -m probes.cases.worker_os_exit_zero``. The watchdog must write a crash report
``worker_exited`` naming exit code 0 (no signal, nothing killed), with no OOM-killer advice.
"""

import os

import torch
from torch.utils.data import DataLoader, Dataset


class Stream(Dataset):
    def __len__(self):
        return 1024

    def __getitem__(self, i):
        if i >= 96:
            os._exit(0)  # ends the whole worker process, no exception, no output
        return torch.full((8,), float(i))


def main():
    for step, batch in enumerate(DataLoader(Stream(), batch_size=8, num_workers=2)):
        print("step", step, tuple(batch.shape), flush=True)


if __name__ == "__main__":
    main()

"""Target: workers wait on a ``multiprocessing.Event`` ("data ready") that the process meant to
set it never does: a wait on a shared futex, which another process could end.

Run: ``python -m probes.cases.mp_event_never_set``. The watchdog must conclude
``worker_stuck`` (suspected), naming the ``ready.wait()`` line and a shared wait.
"""

import multiprocessing as mp

import torch
from torch.utils.data import DataLoader, Dataset


class GatedDataset(Dataset):
    def __init__(self, ready):
        self.ready = ready

    def __len__(self):
        return 32

    def __getitem__(self, i):
        self.ready.wait()  # never set
        return torch.tensor(float(i))


def main():
    ready = mp.get_context("fork").Event()
    for step, batch in enumerate(DataLoader(GatedDataset(ready), batch_size=4, num_workers=2)):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

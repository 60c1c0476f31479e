"""Healthy control: ``multiprocessing_context="forkserver"`` with ``torch`` and this module
preloaded (the forkserver imports them once, so each worker starts in milliseconds), two
epochs of a small Dataset. The forkserver is the workers' parent, not a rank and not their
owner: the job must be watched as one process with its workers, and never reported.

Run: ``python -m probes.cases.healthy_forkserver_preload``. The watchdog must never report it.
"""

import multiprocessing as mp

import torch
from torch.utils.data import DataLoader, Dataset


class SquaresDataset(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor(float(i * i))


def main():
    from . import healthy_forkserver_preload as module  # the class by its importable name

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", module.__name__])
    loader = DataLoader(module.SquaresDataset(), batch_size=8, num_workers=2, multiprocessing_context=ctx)
    for epoch in range(2):
        for step, batch in enumerate(loader):
            print("epoch", epoch, "step", step, batch.sum().item(), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()

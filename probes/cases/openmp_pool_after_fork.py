"""Target: an OpenMP thread pool inherited through fork (pytorch/pytorch#41197, #17199).

Main runs a parallel op (GNU OpenMP starts its pool), then the forked workers' ``worker_init_fn``
asks for two intra-op threads (as pytorch/pytorch#82219 discusses) and ``__getitem__`` runs a
parallel op: libgomp in the child waits forever for pool threads that exist only in the parent
(native frames in ``libgomp.so``, an untimed private futex wait).

Run: ``python -m probes.cases.openmp_pool_after_fork``. The watchdog must conclude
``fork_inherited_lock``, proven, naming OpenMP and the ``torch.exp`` line, with the remedy
"no intra-op threads in forked workers, or forkserver/spawn".
"""

import torch
from torch.utils.data import DataLoader, Dataset


class AugDataset(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        x = torch.randn(4_000_000)
        return torch.exp(x).sum()  # a parallel (OpenMP) region in the worker: hangs here


def worker_init(_):
    torch.set_num_threads(2)


def main():
    warm = torch.randn(4_000_000)
    print("warm-up in the parent:", float(torch.exp(warm).sum()), flush=True)  # starts the libgomp pool
    loader = DataLoader(AugDataset(), batch_size=4, num_workers=2, worker_init_fn=worker_init)
    for step, batch in enumerate(loader):
        print("step", step, float(batch.sum()), flush=True)


if __name__ == "__main__":
    main()

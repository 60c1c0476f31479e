"""Target: a new ``DataLoader(persistent_workers=True)`` each epoch, every one kept in a list
(a validation helper that rebuilds its loader; Lightning-AI/pytorch-lightning#10389 and
pytorch/pytorch#62987: persistent workers that are never shut down pile up). Each loader's
iterator keeps its two workers alive, each holding a bounded 128 MiB scratch buffer, so every
epoch adds two workers; under a memory cgroup limit of 2 GiB the OOM killer ends one of them
after about six loaders, and main raises "DataLoader worker (pid N) is killed by signal:
Killed".

Run: ``python -m probes.cases.persistent_loaders_kept_alive`` under a memory limit (``dlwatch
probe repro persistent_loaders_kept_alive`` makes the cgroup). The watchdog must conclude
``worker_killed`` by the OOM killer and count the iterators with persistent workers alive at
once and their workers ("keep one loader, or `del` the old ones"), never copy-on-read advice.
"""

import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Frames(Dataset):
    def __init__(self):
        self.scratch = None

    def __len__(self):
        return 16

    def __getitem__(self, i):
        if self.scratch is None:
            self.scratch = np.ones(128 << 20, dtype=np.uint8)  # one bounded buffer per worker
        time.sleep(0.01)
        return torch.from_numpy(self.scratch[i : i + 8].astype(np.float32))


def main():
    loaders = []  # kept "for later": every loader keeps its workers
    dataset = Frames()
    for epoch in range(12):
        loader = DataLoader(dataset, batch_size=4, num_workers=2, persistent_workers=True)
        loaders.append(loader)
        for _batch in loader:
            pass
        print("epoch", epoch, "loaders alive", len(loaders), flush=True)
        time.sleep(1.0)


if __name__ == "__main__":
    main()

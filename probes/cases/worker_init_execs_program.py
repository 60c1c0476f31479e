"""Target: a ``worker_init_fn`` that replaces worker 1 with another program (``os.execv``, as
code that "re-launches" a helper at start-up does), before the worker reads any sample: the pid
lives on as ``sleep``, so the batches it owns never come and the DataLoader's own checks see a
live pid. The same exec in ``__getitem__`` is ``worker_execs_program``.

Run: ``python -m probes.cases.worker_init_execs_program``. The watchdog must conclude
``worker_exec``, located at the ``os.execv`` line, not "unknown".
"""

import os

import torch
from torch.utils.data import DataLoader, Dataset


class Ones(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.ones(2)


def start(worker_id):
    if worker_id == 1:
        os.execv("/bin/sleep", ["sleep", "600"])  # the worker becomes another program


def main():
    for step, _batch in enumerate(DataLoader(Ones(), batch_size=4, num_workers=2, worker_init_fn=start)):
        print("step", step, flush=True)


if __name__ == "__main__":
    main()

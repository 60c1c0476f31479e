"""Target: a Dataset that, for one sample, replaces its worker process with another program
(``os.execv``, as code that "re-launches" a helper or a library that execs does): the worker
pid lives on as ``sleep``, no longer a Python process, so the batch it owned never comes and the
DataLoader's own checks see a live pid. Batches from the other worker keep coming until main
needs that one.

Run: ``python -m probes.cases.worker_execs_program``. The watchdog must conclude
``worker_exec`` (the worker became another program), not a lost batch with advice about
pickling, located at the ``os.execv`` line.
"""

import os

import torch
from torch.utils.data import DataLoader, Dataset


class Frames(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 8:
            os.execv("/bin/sleep", ["sleep", "600"])  # the worker becomes another program
        return torch.ones(2)


def main():
    for step, _batch in enumerate(DataLoader(Frames(), batch_size=4, num_workers=2)):
        print("step", step, flush=True)


if __name__ == "__main__":
    main()

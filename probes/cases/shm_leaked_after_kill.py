"""Target: a job killed with SIGKILL under the ``file_system`` sharing strategy leaves its
``/dev/shm/torch_<pid>_…`` files behind (field notes B16): nothing runs to unlink them. The job
keeps some batches alive, then its whole process group is killed, as an operator or the OOM
killer would. Exit code 137.

Run: ``python -m probes.cases.shm_leaked_after_kill`` (in a process group of its own). The
watchdog must report ``shm_leaked`` after the exit: how many files, how much memory, and the
``rm`` command for the job's pids.
"""

import os
import signal
import time

import torch
from torch.utils.data import DataLoader, Dataset

torch.multiprocessing.set_sharing_strategy("file_system")


class Samples(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        return torch.randn(1024)


def main():
    kept = []
    for step, batch in enumerate(DataLoader(Samples(), batch_size=4, num_workers=2)):
        kept.append(batch)
        time.sleep(0.01)  # some training
        if step == 400:
            print("killing the job's process group", flush=True)
            os.killpg(os.getpgrp(), signal.SIGKILL)


if __name__ == "__main__":
    main()

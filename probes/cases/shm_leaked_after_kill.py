"""Target: a job killed with SIGKILL under the ``file_system`` sharing strategy leaves its
``/dev/shm/torch_<pid>_…`` files behind: nothing runs to unlink them. The job
keeps some batches alive, then all its processes are killed at once, as ``docker kill`` or a
cgroup-wide OOM kill would: its process group and the ``torch_shm_manager`` daemons (which run
in sessions of their own and would otherwise remove the files). Exit code 137.

Run: ``python -m probes.cases.shm_leaked_after_kill`` (in a process group of its own). The
watchdog must report ``main_killed`` (SIGKILL from outside, no OOM kill counted) and, in the
same report, ``shm_leaked``: how many files, how much memory, and the ``rm`` command for the
job's pids.
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


def _children(pid):
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out += [int(c) for c in f.read().split()]
    return out


def _shm_managers():
    found = []
    for worker in _children(os.getpid()):
        for child in _children(worker):
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"torch_shm_manager" in f.read():
                    found.append(child)
    return found


def main():
    kept = []
    for step, batch in enumerate(DataLoader(Samples(), batch_size=4, num_workers=2)):
        kept.append(batch)
        time.sleep(0.01)  # some training
        if step == 400:
            print("killing every process of the job", flush=True)
            for pid in _shm_managers():
                os.kill(pid, signal.SIGKILL)
            os.killpg(os.getpgrp(), signal.SIGKILL)


if __name__ == "__main__":
    main()

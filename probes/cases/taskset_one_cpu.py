"""Target: a job narrowed to one CPU (``taskset -c 0``, a Slurm or container CPU set) running
four CPU-bound workers with one intra-op thread each, as PyTorch sets in workers (a child inherits the
parent's CPU affinity, sched_setaffinity(2)). Healthy but slow; the job never calls ``torch.set_num_threads``.

Run: ``python -m probes.cases.taskset_one_cpu``. The watchdog must warn
``cpu_affinity_narrowed``; any oversubscription warning must point at the affinity and the
number of workers, never at ``set_num_threads``.
"""

import os
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Busy(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        start, acc = time.process_time(), 0
        while time.process_time() - start < 0.02:  # 20 ms of CPU per sample
            acc += 1
        return torch.tensor(float(acc))


def main():
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # as `taskset -c 0` would
    for _step, _batch in enumerate(DataLoader(Busy(), batch_size=4, num_workers=4)):
        pass
    print("done", flush=True)


if __name__ == "__main__":
    main()

"""Target: workers run out of file descriptors (pytorch/pytorch#11201, #973). The job lowers its
own RLIMIT_NOFILE to 200 (inherited by the workers) and each sample is a list of 300 small
tensors: under the default ``file_descriptor`` sharing strategy each storage travels as one
descriptor, so the worker's queue feeder thread fails with "Too many open
files" and the batch is lost; main waits forever. ``/dev/shm`` stays nearly empty.

Run: ``python -m probes.cases.fd_exhausted_in_workers``. The watchdog must conclude
``fd_exhausted`` first, blaming the workers at their limit (200), with the header saying the job
hung, and never ``shm_exhausted``.
"""

import resource

import torch
from torch.utils.data import DataLoader, Dataset


class ManySmallTensors(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return [torch.full((4,), float(i + k)) for k in range(300)]


def first(batch):
    return batch[0]  # no collation: the tensors are moved to shared memory when the feeder pickles them


def main():
    resource.setrlimit(resource.RLIMIT_NOFILE, (200, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    for step, batch in enumerate(DataLoader(ManySmallTensors(), batch_size=1, num_workers=2, collate_fn=first)):
        print("step", step, len(batch), flush=True)


if __name__ == "__main__":
    main()

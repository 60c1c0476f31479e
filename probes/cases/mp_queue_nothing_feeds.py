"""Target: workers block in ``multiprocessing.Queue.get()`` on a queue of jobs that nothing
feeds (the producer process was never started), a cross-process wait with no timeout.

Run: ``python -m probes.cases.mp_queue_nothing_feeds``. The watchdog must conclude
``worker_stuck`` (suspected: another process could still feed the queue), with ``where:``
naming the ``self.jobs.get()`` line.
"""

import multiprocessing as mp

import torch
from torch.utils.data import DataLoader, Dataset


class JobDataset(Dataset):
    def __init__(self, jobs):
        self.jobs = jobs

    def __len__(self):
        return 32

    def __getitem__(self, i):
        job = self.jobs.get()  # nothing ever puts: waits forever
        return torch.tensor(float(job))


def main():
    jobs = mp.get_context("fork").Queue()
    for step, batch in enumerate(DataLoader(JobDataset(jobs), batch_size=4, num_workers=2)):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

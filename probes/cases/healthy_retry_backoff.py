"""Healthy control: a worker's ``__getitem__`` fetches its first sample from a service that is
not ready yet, and retries with capped exponential back-off (0.1 s, x1.5, at most 0.4 s between
tries) until it answers, ``SUCCEED_S`` seconds (45 by default) after the job began; then its
40 samples come in 0.2 s each. No batch comes for that long and the worker only sleeps and
retries, as a retry that never succeeds would: the watchdog may report a suspected hang, but
when the retry succeeds the report must say it resolved, and the job's success (exit 0) must
stay one: ``dlwatch attach`` exits 0 (issue #34 of this project: a 45 s retry that then
succeeded made ``attach`` exit 3). Modelled on the retry loops with back-off that Datasets
wrap around object stores and HTTP APIs in ``__getitem__``.

Run: ``python -m probes.cases.healthy_retry_backoff [SUCCEED_S]``. Exits 0.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

SUCCEED_S = float(sys.argv[1]) if len(sys.argv) > 1 else 45.0


class NotReady(Exception):
    pass


class RemoteDataset(Dataset):
    def __init__(self, ready_at):
        self.ready_at = ready_at  # time.time() when the service answers

    def __len__(self):
        return 40

    def fetch(self, i):
        if time.time() < self.ready_at:
            raise NotReady("service unavailable (503)")
        return torch.tensor([float(i)])

    def __getitem__(self, i):
        delay = 0.1
        while True:
            try:
                sample = self.fetch(i)
                time.sleep(0.2)  # the transfer and decoding: the job goes on for seconds once it succeeds
                return sample
            except NotReady:
                time.sleep(delay)
                delay = min(delay * 1.5, 0.4)


def main():
    loader = DataLoader(RemoteDataset(time.time() + SUCCEED_S), batch_size=2, num_workers=1)
    for step, batch in enumerate(loader):
        print("step", step, batch.flatten().tolist(), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()

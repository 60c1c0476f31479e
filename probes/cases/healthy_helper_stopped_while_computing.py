"""Healthy control: main starts a prefetch helper (a ``multiprocessing.Process`` that warms a
cache) and stops it on purpose with ``terminate()`` (SIGTERM) once the loader runs, while the
DataLoader's workers compute for 8 s per sample. No batch comes for longer than the stall
timeout, and a process of the job has just ended by a signal: but one the job sent itself, to a
helper it no longer needs, and the workers compute. The counterpart of
``decoder_killed_get_nowait`` (a decoder killed with SIGKILL while the workers spin): an ended
helper makes a busy stall a suspected hang only when it ended badly (issue #34, section 2).

Run: ``python -m probes.cases.healthy_helper_stopped_while_computing``. The watchdog must never
report it.
"""

import multiprocessing as mp
import time

import torch
from torch.utils.data import DataLoader, Dataset


def prefetch() -> None:
    while True:
        time.sleep(0.2)  # warming the page cache, as far as this toy goes


class Heavy(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        start = time.monotonic()
        while time.monotonic() - start < 8.0:
            sum(range(10_000))  # a costly transform
        return torch.tensor(float(i))


def main():
    ctx = mp.get_context("fork")
    helper = ctx.Process(target=prefetch, name="prefetch")
    helper.start()
    batches = iter(DataLoader(Heavy(), batch_size=1, num_workers=2))
    time.sleep(1.0)
    helper.terminate()  # on purpose: SIGTERM; not joined until the end, so it stays a zombie meanwhile
    for step, batch in enumerate(batches):
        print("step", step, batch.tolist(), flush=True)
    helper.join()
    print("done", flush=True)


if __name__ == "__main__":
    main()

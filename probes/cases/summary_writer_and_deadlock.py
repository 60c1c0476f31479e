"""Target: a plain ``multiprocessing.Process`` that main forked (a summary-writer consumer,
busy with its backlog) beside DataLoader workers that deadlock on a lock inherited through
fork. The writer is not a DataLoader worker: its CPU must not pass for the loader's progress.

Run: ``python -m probes.cases.summary_writer_and_deadlock``. The watchdog must conclude
``fork_inherited_lock`` (proven) within the stall timeout, with the writer listed as ``other``.
"""

import multiprocessing as mp
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

LOCK = threading.Lock()


def summary_writer(stop):
    total = 0
    while not stop.is_set():  # busy flushing summaries
        total += sum(range(10_000))


class LockedDataset(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        with LOCK:  # held by main's background thread at fork time: never released in the child
            return torch.tensor(float(i))


def hold_lock_during_fork(started):
    with LOCK:
        started.set()
        time.sleep(2.0)


def main():
    stop = mp.get_context("fork").Event()
    writer = mp.get_context("fork").Process(target=summary_writer, args=(stop,), daemon=True)
    writer.start()
    started = threading.Event()
    threading.Thread(target=hold_lock_during_fork, args=(started,), daemon=True).start()
    started.wait()
    for step, _batch in enumerate(DataLoader(LockedDataset(), batch_size=4, num_workers=2)):
        print("step", step, flush=True)


if __name__ == "__main__":
    main()

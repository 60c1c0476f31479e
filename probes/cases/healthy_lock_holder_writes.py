"""Healthy control: a downloader process of the job holds a ``multiprocessing.Lock`` while it
writes the dataset's archive steadily (64 KiB every 0.5 s) for ``HOLD_S`` seconds (330 by
default), then releases it; the DataLoader's workers sleep on that lock in ``__getitem__`` (an
untimed wait on a shared futex) until it does, then read. The workers are blocked and no batch
comes for minutes, but the holder is alive and writing: slow, not stuck, and no proof exists.
Modelled on the downloader-holds-the-dataset-lock pattern of meta-pytorch/data#409 and
huggingface/datasets#1672, and on issue #34 of this project, where ``on_hang: terminate``
ended such a job at ``busy_stall_timeout_s`` (304 s).

Run: ``python -m probes.cases.healthy_lock_holder_writes [HOLD_S]``. The watchdog may report
a suspected hang but must never end it, with ``on_hang: terminate`` (and the opt-in
``terminate_unproven_after_s`` neither, while the holder writes): it exits 0.
"""

import multiprocessing
import os
import shutil
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset

HOLD_S = float(sys.argv[1]) if len(sys.argv) > 1 else 330.0
CHUNK = 64 << 10


def download(lock, path, hold_s, held):
    """Hold ``lock`` while the archive arrives: ``CHUNK`` bytes every 0.5 s for ``hold_s`` s."""
    with lock:
        held.set()
        end = time.monotonic() + hold_s
        with open(path, "wb") as f:
            while time.monotonic() < end:
                f.write(b"x" * CHUNK)
                f.flush()
                time.sleep(0.5)


class GuardedArchive(Dataset):
    def __init__(self, lock, path):
        self.lock, self.path = lock, path

    def __len__(self):
        return 16

    def __getitem__(self, i):
        with self.lock:  # waits for the download, untimed
            pass
        with open(self.path, "rb") as f:
            f.seek(i * 16)
            return torch.tensor(float(len(f.read(16))))


def main():
    ctx = multiprocessing.get_context("fork")
    folder = tempfile.mkdtemp(prefix="archive-")
    path = os.path.join(folder, "data.bin")
    lock, held = ctx.Lock(), ctx.Event()
    downloader = ctx.Process(target=download, args=(lock, path, HOLD_S, held), name="downloader")
    downloader.start()
    held.wait()
    try:
        loader = DataLoader(GuardedArchive(lock, path), batch_size=4, num_workers=2)
        for step, batch in enumerate(loader):
            print("step", step, batch.tolist(), flush=True)
        downloader.join()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print("done", flush=True)
    sys.exit(downloader.exitcode)


if __name__ == "__main__":
    main()

"""Target: workers block writing to a stdout pipe whose reader stopped reading (a `| tee` or log
shipper that died while another process keeps the pipe's read end open, as launchers often do).
The job pipes its own stdout into a reader process, keeps a copy of the read end, kills the
reader, and its workers print a log line per sample: once the 64 KiB pipe is full every
worker sleeps in ``pipe_write`` forever.

Run: ``python -m probes.cases.stdout_reader_gone``. The watchdog must conclude
``worker_blocked_io`` on the pipe, naming the process that holds its read end, with a remedy
about the reader, not about storage.
"""

import os
import subprocess
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Chatty(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        print(f"sample {i}: " + "x" * 200, flush=True)  # a log line per sample
        return torch.tensor(float(i))


def main():
    read_end, write_end = os.pipe()
    reader = subprocess.Popen(["cat"], stdin=read_end, stdout=subprocess.DEVNULL)
    os.dup2(write_end, 1)  # the job's stdout now goes to the reader
    time.sleep(0.5)
    reader.kill()  # the reader dies; this process still holds read_end, and never reads it
    reader.wait()
    print("reader gone", file=sys.stderr, flush=True)
    for _step, _batch in enumerate(DataLoader(Chatty(), batch_size=8, num_workers=2)):
        pass


if __name__ == "__main__":
    main()

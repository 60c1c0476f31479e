"""Healthy control for ``main_memory_growth``: main loads a lookup table once at start-up (a
1.5 GiB label/feature table read in chunks over about 15 s, before any DataLoader iterator
exists), then trains with a loader whose workers read it; main's memory stays flat from the
loader's first batch on. Modelled on a job warned "runs out in about 4 min" during its start-up
load (issue #35); a start-up (``import torch, lightning``) growth is the same class.

Run: ``python -m probes.cases.healthy_main_table_load [MiB]`` (the table's size, 1536 by
default; the tests load 320). The watchdog must never report it: growth is judged from the
loader's first batch on, and a load that stopped foretells no exhaustion.
"""

import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

CHUNKS = 24
LOAD_S = 15.0


class Lookup(Dataset):
    def __init__(self, table):
        self.table = table  # a few large arrays: workers read them, no Python object per row

    def __len__(self):
        return 480

    def __getitem__(self, i):
        time.sleep(0.05)
        chunk = self.table[i % len(self.table)]
        return torch.tensor(float(chunk[i * 4099 % len(chunk)]))


def load_table(mib):
    table = []
    for k in range(CHUNKS):
        table.append(np.full(mib * 2**20 // CHUNKS, k, dtype=np.uint8))  # written: private memory
        time.sleep(LOAD_S / CHUNKS)
    return table


def main():
    try:
        mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1536
    except ValueError:
        sys.exit(f"healthy_main_table_load: the table's size must be a whole number of MiB, not {sys.argv[1]!r}")
    table = load_table(mib)
    print(f"table loaded: {sum(c.nbytes for c in table) >> 20} MiB", flush=True)
    total = 0.0
    for step, batch in enumerate(DataLoader(Lookup(table), batch_size=8, num_workers=2)):
        total += float(batch.sum())
        if step % 20 == 0:
            print("step", step, total, flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()

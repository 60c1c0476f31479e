"""Target: the workers cache each sample in a SQLite database that main holds an open write
transaction on (it commits only at the end of the epoch). Each worker's ``INSERT`` retries
inside ``sqlite3``'s busy handler (``timeout=3600``): short sleeps, ``fcntl`` lock attempts and
page reads, for an hour. The workers never stop moving, and no batch ever comes. Modelled on
pyg-team/pytorch_geometric#8661 (a SQLite-backed dataset whose writers wait on each other).

Run: ``python -m probes.cases.sqlite_busy_retry``. The watchdog must conclude ``worker_stuck``
(suspected) at the stall timeout, naming the ``INSERT`` line and that the worker polls there.
"""

import os
import sqlite3
import tempfile

import torch
from torch.utils.data import DataLoader, Dataset


class CachedDataset(Dataset):
    def __init__(self, path):
        self.path = path
        self.db = None

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if self.db is None:
            self.db = sqlite3.connect(self.path, timeout=3600)
        value = float(i) * 2
        self.db.execute("INSERT OR REPLACE INTO cache VALUES (?, ?)", (i, value))  # waits for main's commit
        self.db.commit()
        return torch.tensor(value)


def main():
    folder = tempfile.mkdtemp(prefix="sqlite-cache-")
    path = os.path.join(folder, "cache.db")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE cache (i INTEGER PRIMARY KEY, value REAL)")
    db.execute("BEGIN IMMEDIATE")  # the epoch's bookkeeping, committed at its end
    db.execute("INSERT INTO cache VALUES (-1, 0.0)")
    for step, batch in enumerate(DataLoader(CachedDataset(path), batch_size=4, num_workers=2)):
        print("step", step, batch.tolist(), flush=True)
    db.execute("COMMIT")


if __name__ == "__main__":
    main()

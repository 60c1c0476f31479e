"""Target: a barrier across a node's DataLoader workers, in a shared file (an ``flock`` to
register, a shared counter polled every 7 ms), expects ``LOCAL_WORLD_SIZE x num_workers``
parties; ``LOCAL_WORLD_SIZE`` is a stale 2 left in the environment by an earlier launch, this
job is one process, so only its 2 workers arrive and each polls forever: about 140 reads a
second at a few percent of a core. Modelled on mosaicml/streaming#145 and #617 (the shared
memory barrier of a streaming dataset waiting for ranks that never come).

Run: ``python -m probes.cases.node_barrier_stale_world``. The watchdog must conclude
``worker_stuck`` (suspected) at the stall timeout, naming the polling line in ``wait``.
"""

import fcntl
import os
import struct
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset


class NodeBarrier:
    def __init__(self, path, parties):
        self.path, self.parties = path, parties

    def wait(self):
        with open(self.path, "r+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            (arrived,) = struct.unpack("<Q", f.read(8))
            f.seek(0)
            f.write(struct.pack("<Q", arrived + 1))
            f.flush()
            fcntl.flock(f, fcntl.LOCK_UN)
        with open(self.path, "rb") as f:
            while True:
                f.seek(0)
                if struct.unpack("<Q", f.read(8))[0] >= self.parties:
                    return
                time.sleep(0.007)  # the poll: every worker of every rank of the node must arrive


class ShardedDataset(Dataset):
    def __init__(self, barrier):
        self.barrier = barrier
        self.joined = False

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if not self.joined:
            self.barrier.wait()  # once per worker, before its first sample
            self.joined = True
        return torch.tensor(float(i))


def main():
    os.environ.setdefault("LOCAL_WORLD_SIZE", "2")  # stale, from an earlier two-rank launch
    num_workers = 2
    path = os.path.join(tempfile.mkdtemp(prefix="node-barrier-"), "barrier")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", 0))
    barrier = NodeBarrier(path, int(os.environ["LOCAL_WORLD_SIZE"]) * num_workers)
    for step, batch in enumerate(DataLoader(ShardedDataset(barrier), batch_size=4, num_workers=num_workers)):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

"""Healthy control: the first batch takes ``BUILD_S`` seconds (330 by default) because the
worker builds the dataset's index on its first ``__getitem__`` in a ``ThreadPoolExecutor``: the
worker's main thread waits, untimed, in ``pool.map`` while four pool threads compute (pure
CPU, no I/O); then every batch is fast. pytorch/pytorch#8371 shows real first batches of
264-276 s; issue #34 of this project saw ``on_hang: terminate`` end such a job at
``busy_stall_timeout_s`` (304 s), its report calling the worker's waiting main thread a poller.

Run: ``python -m probes.cases.healthy_long_first_batch [BUILD_S]``. The watchdog may report a
suspected hang at ``busy_stall_timeout_s`` but must never end it, with ``on_hang: terminate``
(and the opt-in ``terminate_unproven_after_s`` neither, while the worker computes): it exits 0.
"""

import hashlib
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.utils.data import DataLoader, Dataset

BUILD_S = float(sys.argv[1]) if len(sys.argv) > 1 else 330.0
SHARDS = 4


def index_shard(k, deadline):
    """Hash shard ``k``'s keys until ``deadline`` (``time.monotonic()``): the index's CPU work."""
    digest, n = hashlib.sha256(str(k).encode()), 0
    while time.monotonic() < deadline:
        for _ in range(2000):
            digest = hashlib.sha256(digest.digest() + n.to_bytes(8, "little"))
            n += 1
    return n


class Indexed(Dataset):
    def __init__(self):
        self.index = None

    def __len__(self):
        return 32

    def __getitem__(self, i):
        if self.index is None:  # the first sample of this worker builds the index
            deadline = time.monotonic() + BUILD_S
            with ThreadPoolExecutor(SHARDS) as pool:
                self.index = list(pool.map(index_shard, range(SHARDS), [deadline] * SHARDS))
        return torch.tensor(float(i))


def main():
    for step, batch in enumerate(DataLoader(Indexed(), batch_size=8, num_workers=1)):
        print("step", step, batch.tolist(), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()

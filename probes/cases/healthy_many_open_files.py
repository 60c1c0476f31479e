"""Healthy control: each worker keeps 120 shard files open (opened once, in
``worker_init_fn``) and reads its samples from them, with RLIMIT_NOFILE at 256: many
descriptors, well under the limit, none leaked. The twin of ``fd_exhausted_by_open_files``.

Run: ``python -m probes.cases.healthy_many_open_files``. The watchdog must never report it.
"""

import os
import resource
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

SHARDS = 120


class Shards(Dataset):
    def __init__(self, folder):
        self.folder = folder
        self.handles = None

    def open_all(self):
        self.handles = [open(os.path.join(self.folder, f"{k:03d}.bin"), "rb") for k in range(SHARDS)]

    def __len__(self):
        return 480

    def __getitem__(self, i):
        f = self.handles[i % SHARDS]
        f.seek(0)
        time.sleep(0.005)
        return torch.tensor(float(len(f.read(16))))


def init(worker_id):
    get_worker_info().dataset.open_all()


def main():
    folder = tempfile.mkdtemp(prefix="shards-")
    for k in range(SHARDS):
        with open(os.path.join(folder, f"{k:03d}.bin"), "wb") as f:
            f.write(os.urandom(64))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    for step, batch in enumerate(DataLoader(Shards(folder), batch_size=8, num_workers=2, worker_init_fn=init)):
        print("step", step, batch.tolist()[:2], flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()

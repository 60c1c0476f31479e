"""Target: the Dataset opens one file per sample and keeps the handle (a cache of open files
that is never closed), so each worker's descriptor table fills with regular files until
``open`` fails with EMFILE ("Too many open files") in ``__getitem__`` (pytorch/vision#539,
where image files were opened and never closed). The job lowers its own RLIMIT_NOFILE to 256
(inherited by the workers). Switching the sharing strategy to ``file_system`` would not help:
the descriptors are the Dataset's own files, not shared tensors.

Run: ``python -m probes.cases.fd_exhausted_by_open_files``. The watchdog must conclude
``fd_exhausted``, naming the regular files and their folder, with the remedy to close them,
not to change the sharing strategy.
"""

import os
import resource
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __init__(self, folder, n):
        self.paths = [os.path.join(folder, f"{i:05d}.bin") for i in range(n)]
        self.handles = {}

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        f = open(self.paths[i], "rb")  # never closed: kept for "faster" re-reads
        self.handles[i] = f
        time.sleep(0.02)  # decoding
        return f.read(16)  # the raw record; decoded in main


def as_list(batch):
    return batch  # records travel as bytes: no shared tensor (and no descriptor) per batch


def main():
    folder = tempfile.mkdtemp(prefix="images-")
    n = 1200
    for i in range(n):
        with open(os.path.join(folder, f"{i:05d}.bin"), "wb") as f:
            f.write(os.urandom(64))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    for step, batch in enumerate(DataLoader(Images(folder, n), batch_size=8, num_workers=2, collate_fn=as_list)):
        x = torch.tensor([float(len(r)) for r in batch])
        print("step", step, x.tolist()[:2], flush=True)


if __name__ == "__main__":
    main()

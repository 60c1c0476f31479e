"""Healthy control for ``worker_memory_growth``: each worker's private memory climbs by about
160 MiB over its first 10 s of samples, then stays flat for the rest of the run, as when glibc
keeps the chunks of freed sample tensors for reuse instead of returning them (its heap grows to
the high-water mark of the samples decoded at once, then is reused; the issue #35 control grew
by 130 MiB, then flat, and was warned "runs out in about 188 min"). Modelled: what the
allocator keeps is a free list of the freed buffers that stops growing at 160 MiB, so the
figures do not depend on the allocator's thresholds.

Run: ``python -m probes.cases.healthy_worker_allocator_plateau``. The watchdog must never
report it: a growth that levelled off foretells no exhaustion.
"""

import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

HIGH_WATER = 160 * 2**20  # what the "allocator" ends up keeping, per worker
SAMPLE_BYTES = 2**20  # one decoded sample


class Decoded(Dataset):
    def __init__(self):
        self.kept = []  # freed buffers the "allocator" keeps for reuse

    def __len__(self):
        return 1600

    def __getitem__(self, i):
        time.sleep(0.05)
        if len(self.kept) * SAMPLE_BYTES < HIGH_WATER:
            buf = np.full(SAMPLE_BYTES, i % 251, dtype=np.uint8)  # a fresh chunk: written, private
        else:
            buf = self.kept.pop()  # reused: no new memory
            buf[:16] = i % 251
        sample = torch.from_numpy(buf[:16].astype(np.float32))
        self.kept.append(buf)  # "freed", and kept
        return sample


def main():
    for step, batch in enumerate(DataLoader(Decoded(), batch_size=8, num_workers=2)):
        if step % 25 == 0:
            print("step", step, float(batch.sum()), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()

"""Target: one sample's corrupt header declares a 2.5 GiB payload, and the decoder allocates
and fills a buffer of that size (a length field read from the file, trusted: python-pillow's
decompression-bomb reports, pytorch/vision#4991 a corrupt image asking for gigabytes), under a
memory cgroup limit of 1 GiB. Every other sample is small and freed: each worker's memory stays
flat until that sample, then rises by hundreds of MiB within one batch until the cgroup's OOM
killer ends it; main raises "DataLoader worker (pid N) is killed by signal: Killed".

Run: ``python -m probes.cases.worker_huge_sample_oom_in_cgroup`` under a memory limit (``dlwatch
probe repro worker_huge_sample_oom_in_cgroup`` makes the cgroup). The watchdog must conclude
``worker_killed`` by the OOM killer and say that one sample asked for hundreds of MiB at once (a
step, not a slope), with the batch main waited for (samples 300-303), never "a per-worker cache".
"""

import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

CORRUPT = 300  # the sample whose header lies
CHUNK = 8 << 20  # bytes the "decoder" writes per step


def read_header(i):
    """The payload length the sample's header declares, in bytes."""
    return (5 << 29) if i == CORRUPT else 64 * 1024  # 2.5 GiB: a corrupt length field


def decode(i):
    length = read_header(i)
    out = np.empty(length, dtype=np.uint8)  # trusts the header
    for start in range(0, length, CHUNK):
        out[start : start + CHUNK] = i % 251  # "decompressing" into it
        time.sleep(0.005)
    return out


class Records(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.02)
        payload = decode(i)
        return torch.from_numpy(payload[:16].copy())


def main():
    loader = DataLoader(Records(), batch_size=4, num_workers=2)
    for step, batch in enumerate(loader):
        if step % 20 == 0:
            print("step", step, tuple(batch.shape), flush=True)


if __name__ == "__main__":
    main()

"""Target: a native bug in a worker (huggingface/pytorch-image-models#1269,
facebookresearch/SlowFast#443, pytorch/pytorch#53894): decoding one record dereferences NULL
and the worker dies of SIGSEGV. Whether main's "killed by signal: Segmentation fault" line
reaches stderr is a race; the worker's own "Unexpected segmentation fault encountered in worker"
always does. Exit code 1.

Run: ``python -m probes.cases.worker_segfault_mid_epoch``. The watchdog must write a crash
report ``worker_killed`` naming the segmentation fault, with a native-bug remedy (not memory).
"""

import ctypes

import torch
from torch.utils.data import DataLoader, Dataset


class Decoder(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 37:  # a corrupt record
            ctypes.string_at(0)  # NULL dereference: SIGSEGV
        return torch.full((3, 32, 32), float(i))


def main():
    for step, batch in enumerate(DataLoader(Decoder(), batch_size=4, num_workers=2)):
        print("step", step, batch.shape, flush=True)


if __name__ == "__main__":
    main()

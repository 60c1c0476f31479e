"""GPU target: the pin-memory thread blocks while pinning a batch.

Run on a machine with CUDA::

    dlwatch run --stall-timeout 10 --on-hang terminate -- python -m probes.gpu.pin_memory_stall

The batch type's ``pin_memory()`` (which PyTorch's ``pin_memory`` in
torch/utils/data/_utils/pin_memory.py calls for custom types) blocks forever, as a
``cudaHostAlloc`` stuck in the driver would; main waits on the pin thread's queue. Expected
diagnosis: ``pin_memory_stall``. Without CUDA, ``DataLoader(pin_memory=True)`` starts no pin
thread (torch 2.13 CPU build warns instead), so this script exits 2 there. Never imports
:mod:`watchdog`.
"""

import sys
import threading

import torch
from torch.utils.data import DataLoader, Dataset


class StuckPinBatch:
    """A batch whose pinning never finishes."""

    def __init__(self, samples):
        self.x = torch.stack([s for s in samples])

    def pin_memory(self):
        threading.Event().wait()  # a page-locked allocation that never returns
        return self


class Numbers(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((1024,), float(i))


def main() -> int:
    if not torch.cuda.is_available():
        print("pin_memory_stall: needs CUDA (no pin-memory thread without it)", file=sys.stderr)
        return 2
    loader = DataLoader(Numbers(), batch_size=8, num_workers=2, pin_memory=True, collate_fn=StuckPinBatch)
    for batch in loader:
        batch.x.cuda(non_blocking=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GPU target: CUDA initialised in the parent, then touched in a forked DataLoader worker.

Run on a machine with CUDA::

    dlwatch run -- python -m probes.gpu.cuda_in_forked_worker

PyTorch raises "Cannot re-initialize CUDA in forked subprocess" in the worker, and the job
exits with that error. Expected diagnosis (crash report): ``cuda_in_forked_worker``. Exits 2
without CUDA. Never imports :mod:`watchdog`.
"""

import sys

import torch
from torch.utils.data import DataLoader, Dataset


class CudaInGetitem(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.zeros(4, device="cuda") + i  # CUDA in a forked worker


def main() -> int:
    if not torch.cuda.is_available():
        print("cuda_in_forked_worker: needs CUDA", file=sys.stderr)
        return 2
    torch.zeros(1, device="cuda")  # initialise CUDA in the parent
    for _ in DataLoader(CudaInGetitem(), batch_size=4, num_workers=2, multiprocessing_context="fork"):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

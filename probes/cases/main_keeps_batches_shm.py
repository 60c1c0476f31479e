"""Target: the training loop keeps every batch it received in a list ("for a replay buffer");
each batch's tensors live in shared memory (PyTorch moves a worker's tensors to ``/dev/shm``
to hand them to main), so ``/dev/shm`` fills steadily until a worker cannot allocate the next
batch (PaddlePaddle/Paddle#49840: batches kept by the consumer fill shared memory). More
``--shm-size`` only delays the crash. The case runs with a private 64 MiB ``/dev/shm``.

Run: ``python -m probes.cases.main_keeps_batches_shm`` (``dlwatch probe repro
main_keeps_batches_shm`` mounts the small ``/dev/shm``). The watchdog must conclude
``shm_exhausted`` with the advice to stop keeping the batches (copy what is kept), not to raise
``--shm-size``.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Frames(Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        return torch.full((64, 1024), float(i))  # 256 KiB a sample


def main():
    replay = []
    for step, batch in enumerate(DataLoader(Frames(), batch_size=4, num_workers=2)):
        replay.append(batch)  # keeps the batch, and its shared memory, forever
        if step % 10 == 0:
            print("step", step, len(replay), flush=True)
        time.sleep(0.1)


if __name__ == "__main__":
    main()

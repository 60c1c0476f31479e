"""Target: a distributed hang from uneven shards (allenai/allennlp#5088, microsoft/PyMarlin#80,
NVIDIA-Merlin/NVTabular#1320). Two ranks started by ``torch.multiprocessing.spawn`` (no
torchrun, so no ``RANK`` variable), gloo on CPU, DDP; each rank reads its own shard through a
DataLoader with one worker. Rank 0 has 6 batches, rank 1 has 4: rank 1 leaves its loop and waits
in the end-of-epoch ``barrier()``, rank 0's 5th ``backward()`` waits in DDP's gradient
all-reduce for a rank that never joins it. The gloo timeout (60 s) ends the run.

Run: ``python -m probes.cases.uneven_shards_mp_spawn``. The watchdog must find both ranks and
report ``uneven_batches`` with each rank's batch count, before the collective timeout.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

BATCHES = {0: 6, 1: 4}  # per rank, batches of 8


class Shard(Dataset):
    def __init__(self, rank):
        self.n = 8 * BATCHES[rank]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.randn(16), torch.randn(1)


def train(rank, world, port):
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    model = DistributedDataParallel(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 0
    for x, y in DataLoader(Shard(rank), batch_size=8, num_workers=1):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()  # DDP's gradient all-reduce
        opt.step()
        steps += 1
    print(f"rank {rank}: shard done after {steps} steps; end-of-epoch barrier", file=sys.stderr, flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    port = 20000 + os.getpid() % 20000
    mp.spawn(train, args=(2, port), nprocs=2, join=True)


if __name__ == "__main__":
    main()

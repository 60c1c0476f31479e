"""Target: four workers (the common ``num_workers=4``) on a small machine, each raising its
intra-op threads to 4 in ``worker_init_fn`` (``torch.set_num_threads(4)``: PyTorch sets 1 in
each worker, a copied snippet raises it again) and running many small parallel tensor ops on
each sample (60 element-wise passes over 40,000 floats, as augmentations of small images do):
sixteen threads and main share the usable CPUs, so each worker waits runnable for a CPU much
of its time, and each small op waits at the intra-op pool's barrier for threads that are not
running (pytorch/pytorch#101850-style reports of loaders that get slower with more threads).
With one thread per worker the same job ran about 2x the batches a second on 2 CPUs
(docs/performance.md). On 2 CPUs, 4 to 6 of the job's own threads want a CPU at once on average (intra-op threads
that finished their chunk sleep at the pool's barrier), whatever else the machine runs
(docs/performance.md, "Input-bound verdicts under load").

Run: ``python -m probes.cases.input_bound_oversubscribed [SECONDS]`` (90 by default). The
watchdog must warn ``input_bound``: CPU oversubscribed, one intra-op thread per worker; its fix
(``worker_threads=1``: ``torch.set_num_threads(1)`` after this ``worker_init_fn``) is proven by
``dlwatch verify`` in tests/real/test_verify_throughput_cases.py.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Augment(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        x = torch.rand(40_000)  # above at::internal::GRAIN_SIZE (32,768): each op goes to the pool
        for _ in range(60):
            x = (x * 1.0001).exp().log()  # element-wise ops parallelised over the intra-op threads
        return x[:4].clone()


def threads(_worker_id):
    torch.set_num_threads(4)


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 90.0
    end = time.monotonic() + seconds
    loader = DataLoader(Augment(), batch_size=2, num_workers=4, worker_init_fn=threads)
    for step, _batch in enumerate(loader):
        time.sleep(0.005)  # the training step
        if step % 20 == 0:
            print("step", step, flush=True)
        if time.monotonic() > end:
            break
    print("done", flush=True)


if __name__ == "__main__":
    main()

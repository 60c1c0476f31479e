"""Target: four workers on a small machine, each running a NumPy matrix product on its samples
(an augmentation, a feature transform): NumPy's OpenBLAS starts one thread per CPU in each
worker (``torch.set_num_threads(1)``, which PyTorch calls in every worker, does not reach it),
and OpenBLAS threads spin while they wait for work. Four workers' threads and main share the
usable CPUs, each product waits for its threads to get a CPU, and the loader delivers a small
fraction of what one thread per worker would, to a main whose step is short (5 ms: with a 20 ms
step, other processes' load slowed the workers' spinning threads less than the step and main
waited 11 %, no longer input-bound). ``OMP_NUM_THREADS=1`` (read by OpenBLAS at NumPy's import, like
``OPENBLAS_NUM_THREADS``) leaves one thread per worker.

Run: ``python -m probes.cases.input_bound_oversubscribed_blas [SECONDS]`` (90 by default). The
watchdog must warn ``input_bound``: CPU oversubscribed, one thread per worker, and its fix
sets ``OMP_NUM_THREADS=1`` (``dlwatch verify`` proves it by throughput).
"""

import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Features(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        a = np.random.default_rng(i).random((128, 128))
        a = a @ a.T  # an OpenBLAS product, threaded over its pool
        return torch.from_numpy(a[0, :4] / np.abs(a).max())


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 90.0
    end = time.monotonic() + seconds
    loader = DataLoader(Features(), batch_size=2, num_workers=4)
    for step, _batch in enumerate(loader):
        time.sleep(0.005)  # the training step
        if step % 20 == 0:
            print("step", step, flush=True)
        if time.monotonic() > end:
            break
    print("done", flush=True)


if __name__ == "__main__":
    main()

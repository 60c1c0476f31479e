"""Target: a ``multiprocessing.Pool`` inside a worker (pytorch/pytorch#15950,
huggingface/datasets#6089): workers are daemonic and may not have children, so the worker
raises "daemonic processes are not allowed to have children". Exit code 1.

Run: ``python -m probes.cases.nested_pool_in_worker``. The watchdog must write a crash report
``worker_start_failed``.
"""

import multiprocessing as mp

import torch
from torch.utils.data import DataLoader, Dataset


def featurize(x):
    return x * x


class Features(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        with mp.Pool(2) as pool:  # not allowed in a daemonic worker
            feats = pool.map(featurize, range(i, i + 4))
        return torch.tensor(feats)


def main():
    for step, batch in enumerate(DataLoader(Features(), batch_size=4, num_workers=2)):
        print("step", step, batch.shape, flush=True)


if __name__ == "__main__":
    main()

"""Target: ``worker_init_fn`` seeds each worker from an environment variable that the launcher
sets and this shell does not: every worker raises ``KeyError`` in it before fetching anything,
and main re-raises it. With ``num_workers=0`` the function never runs (``_worker_loop`` in
torch/utils/data/_utils/worker.py calls it), so advice to reproduce with ``num_workers=0`` or
``dataset[i]`` would not reproduce it.

Run: ``python -m probes.cases.worker_init_fn_raises``. The watchdog must conclude
``worker_init_error`` (``worker_init_fn`` raised), at the
``os.environ["SHARD_ID"]`` line (not the standard library's ``os`` frame under it), with a
reproduction that calls ``worker_init_fn`` directly.
"""

import os

import torch
from torch.utils.data import DataLoader, Dataset


class Numbers(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return torch.tensor(float(i))


def seed_worker(worker_id):
    shard = int(os.environ["SHARD_ID"])  # set by the cluster launcher, not by this shell
    torch.manual_seed(shard * 100 + worker_id)


def main():
    os.environ.pop("SHARD_ID", None)
    loader = DataLoader(Numbers(), batch_size=4, num_workers=2, worker_init_fn=seed_worker)
    for step, batch in enumerate(loader):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()

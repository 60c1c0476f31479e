"""Target: copy-on-read (pytorch/pytorch#13246). The Dataset holds an index of 1.5 M Python
dicts built in main; each worker walks it once when it starts (reference counting writes to
every object it touches), so every worker's private memory (USS) jumps to several hundred MiB
within seconds and then stays flat. The job then runs healthily for about a minute.

Run: ``python -m probes.cases.copy_on_read_index``. The watchdog must warn
``worker_memory_growth`` from the level (each worker's USS against main's RSS, the total the
workers duplicate and the cost of one more worker), though the slope is flat.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class IndexedDataset(Dataset):
    def __init__(self, n):
        self.index = [{"path": f"/data/{k:08d}.jpg", "label": k % 1000, "w": 640, "h": 480} for k in range(n)]

    def __len__(self):
        return 2000

    def __getitem__(self, i):
        time.sleep(0.05)
        return torch.tensor(float(self.index[i]["label"]))


def worker_init(_):
    dataset = get_worker_info().dataset
    sum(entry["label"] for entry in dataset.index)  # touches every dict once: their pages are copied


def main():
    dataset = IndexedDataset(1_500_000)
    for _step, _batch in enumerate(
        DataLoader(dataset, batch_size=16, num_workers=2, worker_init_fn=worker_init, persistent_workers=True)
    ):
        pass
    print("done", flush=True)


if __name__ == "__main__":
    main()

"""Target: each sample is a dict whose ``meta`` field is a numpy object array (a row of a
pandas object column); every sample loads fine, and PyTorch's ``default_collate`` fails to
batch that field in the worker: "TypeError: default_collate: batch must contain tensors, numpy
arrays, numbers, dicts or lists; found object" (dreamquark-ai/tabnet#440). ``dataset[i]``
works, so advice to reproduce with ``dataset[i]`` would not reproduce it.

Run: ``python -m probes.cases.collate_object_field``. The watchdog must conclude
``collate_error`` (``collate_fn`` raised, not the Dataset), with a reproduction that
collates a batch, located at the loop over the loader (no frame of the job's own is in the
worker's traceback).
"""

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Rows(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return {"x": torch.tensor(float(i)), "meta": np.array([{"id": i, "source": "csv"}], dtype=object)}


def main():
    for step, batch in enumerate(DataLoader(Rows(), batch_size=4, num_workers=2)):
        print("step", step, batch["x"].tolist(), flush=True)


if __name__ == "__main__":
    main()

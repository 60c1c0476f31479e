"""Target: silent wrong data (pytorch/pytorch#30599, huggingface/datasets#3423): an
``IterableDataset`` that does not shard by ``get_worker_info()`` is replayed in full by every
worker. No hang, no crash; exit code 0.

Run: ``python -m probes.cases.iterable_not_sharded``. Nothing a ``/proc`` sampler sees is wrong;
the inside view compares the workers' first batches: the watchdog must warn
``iterable_replicated`` (in the report written when the job ends), and never call it a hang or
a crash.
"""

import time

import torch
from torch.utils.data import DataLoader, IterableDataset


class RecordStream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):  # no get_worker_info() sharding
        for i in range(self.n):
            start = time.time()
            while time.time() - start < 0.01:  # some decoding work
                pass
            yield torch.tensor(i)


def main():
    seen = []
    for batch in DataLoader(RecordStream(600), batch_size=16, num_workers=2):
        seen.extend(batch.tolist())
    print(f"records in source: 600, delivered: {len(seen)}, unique: {len(set(seen))}")


if __name__ == "__main__":
    main()

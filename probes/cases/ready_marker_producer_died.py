"""Target: workers poll every 0.1 s for a ``.ready`` marker that a producer process (started by
main with ``multiprocessing``, not a DataLoader worker) was to write once it had prepared the
data; the producer dies first (an uncaught error, its traceback on stderr), so the marker never
comes and the workers poll forever (a pattern of data-preparation jobs; tox-dev/filelock#725 is
its lock-file cousin).

Run: ``python -m probes.cases.ready_marker_producer_died``. The watchdog must report
``worker_stuck``, suspected (a poll cannot be proven stuck from outside: the loop might give up),
at the polling line, and name the producer that ended and how: exit code 1 (its exit status,
read while it was a zombie: main never joins it) and the last line of the traceback it printed
on stderr (``RuntimeError: could not prepare the shards: …``).
"""

import multiprocessing as mp
import os
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset

MARKER = os.path.join(tempfile.gettempdir(), f"dlwatch-case-{os.getpid()}.ready")


def produce(marker: str) -> None:
    time.sleep(3.0)  # preparing, as the sidecar sees
    raise RuntimeError("could not prepare the shards: /data/shards is empty")  # dies before the marker


class WaitsForShards(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        while not os.path.exists(MARKER):
            time.sleep(0.1)  # the poll: only the producer could end it
        return torch.ones(2)


def main():
    producer = mp.get_context("fork").Process(target=produce, args=(MARKER,), name="shard-producer")
    producer.start()
    for step, _batch in enumerate(DataLoader(WaitsForShards(), batch_size=4, num_workers=2)):
        print("step", step, flush=True)


if __name__ == "__main__":
    main()

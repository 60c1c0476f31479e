"""Target: the training loop appends every step's metrics to a log file whose file system fills
up, while the DataLoader delivers batches normally (huggingface/transformers#8123, a full
``/`` under a container's overlay: "OSError: [Errno 28] No space left on device" from a log
write). The error is main's own, raised from a plain ``file.write()`` with no path in the
message; no worker is involved and ``/dev/shm`` is nearly empty. The full file system is a
1 MiB tmpfs this target mounts in a private mount namespace of its own.

Run: ``python -m probes.cases.main_log_disk_full`` as root (CAP_SYS_ADMIN; it exits 0 saying
why without). The watchdog must write a crash report ``disk_full`` saying that the main process
could not write (its own error, not a DataLoader failure), never ``shm_exhausted``.
"""

import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset

from probes.cases.worker_cache_disk_full import private_tmpfs, release


class Rows(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        return torch.full((16,), float(i))


def main():
    folder = private_tmpfs("1m")
    if folder is None:
        print("main_log_disk_full needs root (CAP_SYS_ADMIN) for a mount namespace", file=sys.stderr)
        return
    try:
        with open(os.path.join(folder, "metrics.log"), "w", buffering=1) as log:
            for step, batch in enumerate(DataLoader(Rows(), batch_size=8, num_workers=2)):
                log.write(f"step {step} loss {float(batch.mean()):.4f} " + "x" * 4000 + "\n")  # fills the disk
                if step % 50 == 0:
                    print("step", step, flush=True)
    finally:
        release(folder)


if __name__ == "__main__":
    main()
